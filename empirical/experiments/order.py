"""Experiment 2, word order (being rewritten for issue 9; wraps the old module)."""

from __future__ import annotations

from ropesplit.empirical.experiments.base import Context, Experiment, Row, Verdict, combine
from ropesplit.empirical.experiments_order import ORDER_RATES, order_experiment
from ropesplit.empirical.perturb import ORDER_SCHEMES


def _run(context: Context) -> list[Row]:
    s = context.settings
    return order_experiment(context.loaded, context.ids, seeds=s.seeds, seed=s.seed,
                            batch_size=s.batch_size, on_forward=context.forwarded)  # fmt: skip


def _judge(row: Row) -> Verdict:
    return Verdict("inconclusive", "no confidence interval yet (issue 9, finding 4)")


EXPERIMENT = Experiment(
    name="order", title="Word-order perturbation",
    prediction="ratio ~ 1 up to about 5% of the context's tokens; clearly > 1 past 10% (paper)",
    needs="one forward pass per scheme, rate and seed, plus the unperturbed text",
    run=_run, judge=_judge, verdict=lambda rows: combine([_judge(r) for r in rows], "rows"),
    forward_count=lambda s: 1 + len(ORDER_SCHEMES) * sum(r > 0 for r in ORDER_RATES) * s.seeds,
)  # fmt: skip
