r"""One section per experiment of the ``perturb`` record, in the registry's order.

Each shows the experiment's prediction (stated before it ran), its verdict
and reason (computed from its numbers), and its rows (per-layer and overall
means; per-head rows stay in ``perturb.json``). Titles, predictions and
verdicts come from the record that ``empirical.experiments.run_experiments``
wrote, so a new experiment of the registry appears here with no change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ropesplit.report.document import Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec, need


def anchor(name: str) -> str:
    """The HTML id of experiment ``name``'s section."""
    return f"experiment-{name}"


def rows_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """A table whose columns are the union of the rows' keys, in first-seen order."""
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    return Table(columns, [[fmt(r.get(c)) for c in columns] for r in rows])


def build(inputs: ReportInputs) -> list[Section]:
    perturb = inputs.records["perturb"]
    experiments = need(perturb, "experiments", "perturb")
    sections = []
    for name, about in experiments.items():
        all_rows = need(perturb, name, "perturb")
        rows = [r for r in all_rows if r.get("scope", "all") != "head"]  # means only
        table = rows_table(rows)
        table.caption = f"{name}: measured, one verdict per row" + (
            " (per-layer and overall means; per-head rows in perturb.json)"
            if len(rows) < len(all_rows) else "")  # fmt: skip
        text = [f"Prediction (stated before the run): {about['prediction']}.",
                f"Verdict: {about['verdict']}. {about['reason']}",
                f"Needs: {about['needs']}; captured from their own forward pass: "
                f"{', '.join(about.get('own_capture') or []) or 'none'}."]  # fmt: skip
        sections.append(Section(f"Experiment: {about['title']}", text, [table],
                                anchor=anchor(name)))  # fmt: skip
    return sections


SECTION = SectionSpec("experiments", ("perturb",), build)
