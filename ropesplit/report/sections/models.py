r"""Many models, one table: every claim's headline verdict and robustness per model.

Reads the ``compare`` stage's record (``compare.json``: the run's own claims
record and any given with ``--claims-record``; ``claims.records.compare_records``):
one row per model and claim with the verdict, every primary condition's estimate
and its 95% interval, whose threshold each is read against, and the robustness
over the grid in one line (the detail folded under it); figure 20 draws the same
conditions as a forest plot.
"""

from __future__ import annotations

from ropesplit.claims.text import condition_label
from ropesplit.report.document import Section, Table
from ropesplit.report.sections.base import ReportInputs, SectionSpec
from ropesplit.report.sections.summary import grid_line, interval_text

__all__ = ["SECTION"]


def build(inputs: ReportInputs) -> list[Section]:
    record = inputs.records["compare"]
    rows = [[row["model"], str(row["claim"]), row["verdict"],
             "; ".join(f"{condition_label(c)} {interval_text(c['estimate'])}"
                       for c in row["conditions"]),
             "; ".join(f"{c['threshold']:g} ({c['origin']}'s)" for c in row["conditions"]),
             grid_line(row)]
            for row in record["rows"]]  # fmt: skip
    table = Table(["model", "claim", "verdict", "every primary condition (95% interval)",
                   "thresholds", "over the grid"], rows,
                  "each model's headline cell; the run's own model first")  # fmt: skip
    models = record["models"]
    text = (f"{len(models)} model{'s' if len(models) != 1 else ''}: {', '.join(models)}. "
            "Each judged by the same pre-registered tests; add models with "
            "ropesplit report --claims-record FILE (a ropesplit claims --json record).")
    return [Section("Models x claims", [text], [table], figures=inputs.figure("forest"),
                    anchor=SECTION.anchor)]


SECTION = SectionSpec("models", ("compare",), build, figures=("forest",))
