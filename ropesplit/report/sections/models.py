r"""Many models, one table: every claim's headline verdict and robustness per model.

Reads the ``compare`` stage's record (``compare.json``: the run's own claims
record and any given with ``--claims-record``; ``empirical.claims_run.compare_records``):
one row per model and claim with the verdict, the estimate (the claim's first
primary condition) and its 95% interval, whose threshold it is read against,
and the robustness over the grid; figure 20 draws the same rows as a forest plot.
"""

from __future__ import annotations

from ropesplit.report.document import Section, Table
from ropesplit.report.sections.base import ReportInputs, SectionSpec
from ropesplit.report.sections.summary import interval_text

__all__ = ["SECTION"]


def build(inputs: ReportInputs) -> list[Section]:
    record = inputs.records["compare"]
    rows = [[row["model"], str(row["claim"]), row["verdict"],
             f"{row['measure']} {interval_text(row['estimate'])}",
             f"{row['threshold']:g} ({row['origin']}'s)", row["robust_statement"] or "n/a"]
            for row in record["rows"]]  # fmt: skip
    table = Table(["model", "claim", "verdict", "estimate (95% interval)", "threshold",
                   "over the grid"], rows,
                  "each model's headline cell; the run's own model first")  # fmt: skip
    models = record["models"]
    text = (f"{len(models)} model{'s' if len(models) != 1 else ''}: {', '.join(models)}. "
            "Each judged by the same pre-registered tests; add models with "
            "ropesplit report --claims-record FILE (a ropesplit claims --json record).")
    return [Section("Models x claims", [text], [table], figures=inputs.figure("forest"),
                    anchor=SECTION.anchor)]


SECTION = SectionSpec("models", ("compare",), build, figures=("forest",))
