"""Experiment 3, position ids (being rewritten for issue 9; wraps the old module)."""

from __future__ import annotations

from ropesplit.empirical.experiments.base import Context, Experiment, Row, Verdict, combine
from ropesplit.empirical.experiments_position import SHIFTS, position_experiment
from ropesplit.empirical.perturb import POSITION_SCHEMES


def _run(context: Context) -> list[Row]:
    s = context.settings
    return position_experiment(context.loaded, context.ids, context.capture(), seeds=s.seeds,
                               seed=s.seed, batch_size=s.batch_size,
                               on_forward=context.forwarded)  # fmt: skip


def _judge(row: Row) -> Verdict:
    return Verdict("inconclusive", "g's change is not measured yet (issue 9, finding 3)")


EXPERIMENT = Experiment(
    name="position", title="Position-id perturbation",
    prediction="g moves by exactly 0; |dW| <= bound_W for a key moved by t; the loss ratio grows "
    "with t as the bound does",
    needs="the text's capture and one forward pass per scheme, shift and seed",
    run=_run, judge=_judge, verdict=lambda rows: combine([_judge(r) for r in rows], "rows"),
    forward_count=lambda s: 1 + len(POSITION_SCHEMES) * sum(t > 0 for t in SHIFTS) * s.seeds,
)  # fmt: skip
