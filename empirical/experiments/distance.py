"""Experiment 1, controlled distance (being rewritten for issue 9; wraps the old module)."""

from __future__ import annotations

from ropesplit.empirical.experiments.base import Context, Experiment, Row, Verdict, combine
from ropesplit.empirical.experiments_distance import DISTANCES, distance_experiment


def _run(context: Context) -> list[Row]:
    return distance_experiment(context.capture(), layers=context.layers, distances=DISTANCES)


def _judge(row: Row) -> Verdict:
    return Verdict("inconclusive", "key_corr compares a two-axis fit with a three-axis fit "
                   "(issue 9, finding 1)")  # fmt: skip


EXPERIMENT = Experiment(
    name="distance", title="Controlled distance",
    prediction="key_corr ~ 1 at every D; the key component moves far less than the distance "
    "component",
    needs="the text's capture (dummy distances are evaluated on its queries and keys)",
    run=_run, judge=_judge, verdict=lambda rows: combine([_judge(r) for r in rows], "rows"),
    forward_count=lambda settings: 0,
)  # fmt: skip
