r"""Run metadata, last: model, text and token hashes, seeds, stage times, package versions.

Read from ``run.json``, which the pipeline writes beside the other records.
"""

from __future__ import annotations

from ropesplit.report.document import Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec


def build(inputs: ReportInputs) -> list[Section]:
    header = inputs.records["run"]
    rows = [[key, fmt(value)] for key, value in header.items() if key != "versions"]
    rows += [[f"version of {name}", str(v)] for name, v in header.get("versions", {}).items()]
    return [Section("Run", ["What was run, on what, and how long each stage took."],
                    [Table(["run", "value"], rows)], anchor=SECTION.anchor)]  # fmt: skip


SECTION = SectionSpec("run", ("run",), build)
