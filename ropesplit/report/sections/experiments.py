r"""One section per experiment of the ``perturb`` record (then the ``length`` record), in order.

Each shows the experiment's prediction (stated before it ran), its verdict
and reason (computed from its numbers), and its rows (per-layer and overall
means; per-head rows stay in ``perturb.json``). Titles, predictions and
verdicts come from the record that ``empirical.experiments.run_experiments``
wrote, so a new experiment of the registry appears here with no change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ropesplit.report.document import Details, FigureBlock, Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec, need

# the figure shown in each experiment's section (registry names; figure 6 shows order and
# position, and sits with order, the first of the two)
FIGURES = {"order": "perturbation", "distance": "distance", "length": "length",
           "remainder": "remainder", "keys": "keys", "terms": "terms", "shuffle": "shuffle"}


def anchor(name: str) -> str:
    """The HTML id of experiment ``name``'s section."""
    return f"experiment-{name}"


def rows_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """A table whose columns are the union of the rows' keys, in first-seen order."""
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    return Table(columns, [[fmt(r.get(c)) for c in columns] for r in rows])


def experiment_records(records: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(stage, record)`` of every record made by ``run_experiments``: ``perturb``, then the
    report's ``length`` (the length experiment on the model the report trains), the
    ``interventions`` and ``terms`` (edits inside the forward pass), when present."""
    return [(stage, records[stage]) for stage in ("perturb", "length", "interventions", "terms")
            if stage in records]  # fmt: skip


def build(inputs: ReportInputs) -> list[Section]:
    sections = []
    for stage, record in experiment_records(inputs.records):
        sections += _sections(stage, record, inputs)
    return sections


def _sections(stage: str, perturb: Mapping[str, Any], inputs: ReportInputs) -> list[Section]:
    experiments = need(perturb, "experiments", stage)
    sections = []
    for name, about in experiments.items():
        all_rows = need(perturb, name, stage)
        rows = [r for r in all_rows if r.get("scope", "all") != "head"]  # means only
        table = rows_table(rows)
        table.caption = f"{name}: measured, one verdict per row" + (
            f" (per-layer and overall means; per-head rows in {stage}.json)"
            if len(rows) < len(all_rows) else "")  # fmt: skip
        subject = perturb.get("header", {}).get("subject")
        kind = ("its paired t test over corpus passages" if stage in ("interventions", "terms")
                else "descriptive, on one text: the claims' verdicts are their primary tests "
                "above")  # fmt: skip
        text = ([f"Subject: {subject}."] if subject else []) + [
                f"Prediction (stated before the run): {about['prediction']}.",
                f"Verdict ({kind}): {about['verdict']}. {about['reason']}"]  # fmt: skip
        detail = Details(f"{len(rows)} rows measured, each with its verdict",
                         [f"Needs: {about['needs']}; captured from their own forward pass: "
                          f"{', '.join(about.get('own_capture') or []) or 'none'}."],
                         [table])  # fmt: skip
        figures: list[FigureBlock] = inputs.figure(FIGURES[name]) if name in FIGURES else []
        sections.append(Section(f"Experiment: {about['title']}", text, figures=figures,
                                anchor=anchor(name), details=[detail]))  # fmt: skip
    return sections


SECTION = SectionSpec("experiments", ("perturb",), build, tuple(FIGURES.values()))
