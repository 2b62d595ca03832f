r"""Word order (the paper's claim 1): perturb the context, measure the loss on the continuation.

The paper: shuffling up to about 5% of the tokens barely moves the loss,
more than about 10% hurts. docs/theory.md section 4 explains it: moving a token
moves ``f`` and ``E`` of its logits, never ``g``.

The first 75% of the tokens (the context) are perturbed by a scheme of
:mod:`ropesplit.numerics.schemes` at each rate (the target share of context
tokens moved; the first token and special tokens never move), ``draws``
draws each; the loss is the model's mean next-token loss on the last 25%
(the continuation), whose tokens and positions never change:

.. math:: \mathrm{ratio}(r) = \frac{1}{S}\sum_{s=1}^{S}
          \frac{L(\pi_{r,s}(x_{<c}),\, x_{\ge c})}{L(x)}

with a 95% t interval over the draws (:func:`.forward.draw_summary`). Descriptive: claim
1's verdict is the nested, per-passage test of ``ropesplit.claims.registry``
(:mod:`.order_passages`). ``moved`` is measured: the share of context
positions whose token id changed, mean over draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.core.paper import PAPER_ORDER_HARMFUL, PAPER_ORDER_HARMLESS
from ropesplit.empirical.experiments.base import (
    Context,
    Experiment,
    ExperimentSettings,
    Outcome,
    Row,
    interval_rise,
    rows_then_schemes,
)
from ropesplit.empirical.experiments.continuation import context_tokens, draw_summary
from ropesplit.empirical.model.inputs import special_positions
from ropesplit.empirical.model.passes import continuation_losses
from ropesplit.numerics.schemes import (
    ORDER_SCHEMES,
    all_draws,
    movable_positions,
    order_permutation,
)

__all__ = ["EXPERIMENT", "ORDER_RATES", "TOLERANCE", "judge", "order_inputs", "verdict"]

ORDER_RATES = (0.02, PAPER_ORDER_HARMLESS, PAPER_ORDER_HARMFUL, 0.20)  # target shares moved
# "barely moves": the loss ratio stays within 1 +- 5%; the toolkit's reading of "barely", not a
# number from the paper (the claim's verdict is the nested test of ropesplit.claims.registry)
TOLERANCE = 0.05

PREDICTION = (
    f"Moving up to {PAPER_ORDER_HARMLESS:.0%} of the context's tokens barely moves the "
    f"continuation loss (the ratio's 95% t interval over draws stays below {1 + TOLERANCE:g}, "
    "the toolkit's line for 'barely', not the paper's); "
    f"moving {PAPER_ORDER_HARMFUL:.0%} or more hurts (the interval lies above {1 + TOLERANCE:g}), "
    f"and the {PAPER_ORDER_HARMLESS:.0%} and {PAPER_ORDER_HARMFUL:.0%} intervals do not overlap "
    "(claim 1)"
)


def order_inputs(
    input_ids: Any,
    *,
    schemes: Sequence[str] = tuple(ORDER_SCHEMES),
    rates: Sequence[float] = ORDER_RATES,
    draws: int = 5,
    seed: int = 0,
    fixed: Sequence[int] = (),
) -> tuple[list[dict[str, Any]], np.ndarray]:
    r"""Every perturbed input: (one label per row, token ids ``(B, N)``).

    Row ``(scheme, rate, s)`` reads ``ids[perm] ++ ids[c:]`` with ``perm``
    drawn from ``numpy.random.default_rng([seed, scheme, rate, s])``, so each
    row is the same whatever else is asked for; the first token and the
    ``fixed`` positions never move. Labels carry ``moved``, the share of
    context positions whose token id changed.
    """
    unknown = [s for s in schemes if s not in ORDER_SCHEMES]
    if unknown or not schemes or not rates:
        raise RopesplitError(
            f"order schemes must be among {', '.join(ORDER_SCHEMES)} with at least one rate, "
            f"got {list(schemes)} and {list(rates)}"
        )
    ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)  # (N,)
    context = context_tokens(ids.size)
    movable = movable_positions(context, [f for f in fixed if f < context])  # (c,)
    labels: list[dict[str, Any]] = []
    rows: list[np.ndarray] = []
    for scheme, rate, s, rng in all_draws(schemes, rates, draws, seed):
        perm = order_permutation(scheme, context, float(rate), rng, movable)  # (c,)
        rows.append(np.concatenate([ids[:context][perm], ids[context:]]))  # (N,)
        moved = float(np.mean(rows[-1][:context] != ids[:context]))
        labels.append({"scheme": scheme, "rate": float(rate), "seed": s, "moved": moved})
    return labels, np.stack(rows)  # (B, N)


def _run(context: Context) -> list[Row]:
    settings = context.settings
    ids = context.ids.numpy()  # (N,)
    labels, batch = order_inputs(ids, draws=settings.draws, seed=settings.seed,
                                 fixed=special_positions(context.loaded, ids).tolist())  # fmt: skip
    n = ids.size
    positions = np.broadcast_to(np.arange(n), (len(batch) + 1, n))  # (B + 1, N)
    losses = continuation_losses(
        context.loaded, np.concatenate([ids[None], batch]), positions, context_tokens(n),
        batch_size=settings.batch_size, on_forward=context.forwarded,
    )  # fmt: skip  # (B + 1,): the baseline first
    rows = []
    for scheme in ORDER_SCHEMES:
        for rate in ORDER_RATES:
            chosen = [k for k, lab in enumerate(labels)
                      if lab["scheme"] == scheme and lab["rate"] == rate]  # fmt: skip
            moved = float(np.mean([labels[k]["moved"] for k in chosen]))
            summary = draw_summary(losses[1:][chosen], float(losses[0]), settings.seed)
            rows.append({"scheme": scheme, "rate": float(rate), "moved": moved,
                         "baseline_loss": float(losses[0]), **summary})  # fmt: skip
    return rows


def judge(row: Row) -> Outcome:
    """One rate: below or at the harmless share the interval must stay under ``1 + TOLERANCE``,
    at or above the harmful share it must lie over it; in between nothing is predicted."""
    low, high, rate = row["ci_low"], row["ci_high"], row["rate"]
    edge = 1 + TOLERANCE
    numbers = (f"{row['scheme']} at {rate:.0%} (moved {row['moved']:.1%}): ratio "
               f"{row['ratio']:.3f} [{low:.3f}, {high:.3f}]")  # fmt: skip
    if rate <= PAPER_ORDER_HARMLESS:
        if high < edge:
            return Outcome("agrees", f"{numbers} stays below {edge:g}")
        if low >= edge:
            return Outcome("disagrees", f"{numbers} lies above {edge:g} (predicted harmless)")
        return Outcome("inconclusive", f"{numbers} straddles {edge:g}")
    if rate >= PAPER_ORDER_HARMFUL:
        if low > edge:
            return Outcome("agrees", f"{numbers} lies above {edge:g}")
        if high <= edge:
            return Outcome("disagrees", f"{numbers} stays below {edge:g} (predicted harmful)")
        return Outcome("inconclusive", f"{numbers} straddles {edge:g}")
    return Outcome("inconclusive", f"{numbers}: the paper predicts nothing between "
                   f"{PAPER_ORDER_HARMLESS:.0%} and {PAPER_ORDER_HARMFUL:.0%}")  # fmt: skip


def separation(rows: list[Row], scheme: str) -> Outcome:
    """Whether the harmless and harmful shares' intervals are apart, for one scheme."""
    by_rate = {r["rate"]: r for r in rows if r["scheme"] == scheme}
    low, high = by_rate.get(PAPER_ORDER_HARMLESS), by_rate.get(PAPER_ORDER_HARMFUL)
    if low is None or high is None:
        return Outcome("inconclusive", f"{scheme}: no rows at both 5% and 10%")
    what = f"{scheme} at {PAPER_ORDER_HARMLESS:.0%} vs {PAPER_ORDER_HARMFUL:.0%}"
    return interval_rise(low, high, what, "separated", "separated, the larger share hurts less")


def verdict(rows: list[Row]) -> Outcome:
    """Every row's verdict and, per scheme, whether 5% and 10% are separated."""
    return rows_then_schemes(rows, judge, separation,
                             "checks (rates, then the 5%/10% separation per scheme)")


def _forward_count(settings: ExperimentSettings) -> int:
    return 1 + len(ORDER_SCHEMES) * len(ORDER_RATES) * settings.draws


EXPERIMENT = Experiment(
    name="order",
    title="Word-order perturbation",
    prediction=PREDICTION,
    needs="one forward pass of the text and one per scheme, rate and seed (no capture)",
    run=_run,
    judge=judge,
    verdict=verdict,
    forward_count=_forward_count,
)
