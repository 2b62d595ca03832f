r"""The figures drawn from this run (PNG embedded; PDF and PNG files written beside)."""

from __future__ import annotations

from ropesplit.report.document import Section
from ropesplit.report.sections.base import ReportInputs, SectionSpec


def build(inputs: ReportInputs) -> list[Section]:
    if not inputs.figures:
        return []
    return [Section("Figures", figures=list(inputs.figures), anchor=SECTION.anchor)]


SECTION = SectionSpec("figures", (), build)
