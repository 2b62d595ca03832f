r"""Numerics: the remainder bound and the statistics on synthetic heads (the ``bound`` record)."""

from __future__ import annotations

from ropesplit.report.document import Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec, need

COLUMNS = (
    "pattern", "d", "base", "tokens", "r_split", "r_split_rowcentred", "r_3axis",
    "remainder_share", "tightness_max", "tightness_median", "lowfreq_share_k",
)  # fmt: skip


def build(inputs: ReportInputs) -> list[Section]:
    bound = inputs.records["bound"]
    cases = need(bound, "cases", "bound")
    violations = need(bound, "violations", "bound")
    return [Section(
        "Numerics: the bound on synthetic queries and keys",
        ["Synthetic heads whose key deviation sits in low-frequency pairs (structured), "
         "is spread evenly (random) or sits in the fastest pairs (adversarial). "
         f"Bound violations: {violations}. That count checks the implementation, not the "
         "model: |E| <= bound holds for every input by the triangle inequality, so a violation "
         "would be a bug (ropesplit bound and analyze exit 1 on one). The finding is the "
         "tightness, |E| / bound: how much of its bound the remainder uses, low where the key "
         "deviations sit in slow pairs."],
        [Table(list(COLUMNS), [[fmt(case.get(c)) for c in COLUMNS] for case in cases])],
        figures=inputs.figures_named(SECTION.figures), anchor=SECTION.anchor,
    )]  # fmt: skip


SECTION = SectionSpec("numerics", ("bound",), build, ("bound", "sweep"))
