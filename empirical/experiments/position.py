r"""Position ids (docs/theory.md section 4): move only the positions, beside the bound per pair.

The tokens stay in order; the context's position ids are jittered by up to
``t`` or swapped between tokens at most ``t`` apart (the first token and
special tokens keep theirs; :mod:`ropesplit.numerics.schemes`), ``draws``
draws each, and the continuation loss is measured as in the word-order
experiment. Two views of the logits, per layer on ``PAIR_BUDGET`` seeded
causal pairs (``numerics.perturbation``):

1. **Rotation only** (the text's own ``q``, ``k``): pair ``(i, j)``'s distance
   changes by its actual ``tau_ij`` (up to ``2t``), and

   .. math:: |\Delta X_{ij}| \le s\sum_l |h^X_{ijl}|\,2|\sin(\theta_l\tau_{ij}/2)|,
             \quad X = W, f, E,\qquad \Delta g = 0

   ``bound_W``, ``bound_f``, ``bound_E`` (mean over pairs and heads),
   ``measured_W`` and ``tightness`` (largest ``|Delta X| / bound`` over
   ``X``, pairs and heads; the bound holds when it is at most 1).
2. **The perturbed run's own capture** (seed 0 of each setting; its loss
   comes from the same pass): ``q``, ``k`` of layers >= 1 change with the
   positions of earlier layers, so ``g`` moves there (in layer 0 it cannot).
   ``W_change`` and ``g_change`` are the mean ``|W' - W|`` and ``|g' - g|``
   over layers >= 1, ``g_share = g_change / W_change``.

Rows per scheme and ``t``: ``ratio`` with its 95% bootstrap interval over
draws, ``moved`` (share of context ids changed), ``tau_mean``, ``tau_max``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError
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
from ropesplit.empirical.model.capture import Capture
from ropesplit.empirical.model.inputs import special_positions
from ropesplit.empirical.model.passes import continuation_losses, logits_loss
from ropesplit.numerics.schemes import (
    POSITION_SCHEMES,
    all_draws,
    movable_positions,
    perturbed_positions,
)

__all__ = ["EXPERIMENT", "PAIR_BUDGET", "SHIFTS", "judge", "position_inputs", "verdict"]

SHIFTS = (1, 4, 16)  # t: how far a position id may move
PAIR_BUDGET = 4096  # causal pairs per layer for the bound and the measured changes
SLACK = 1e-9  # rounding allowed on tightness <= 1
G_SHARE = 0.5  # g_share below it: the positional terms carry most of the change (claim 5)
LAYER0_TOL = 1e-4  # largest |g' - g| in layer 0 (logit units) still read as float32 rounding

PREDICTION = (
    f"In the perturbed run's own capture the semantic term g carries under {G_SHARE:g} of the "
    "logit change of layers >= 1 (g_share; only the positional terms move); the continuation "
    "loss grows with t as the bound does (the ratio's 95% t interval over draws at the largest "
    "t lies above the one at the smallest t). Checked as theorems, not as evidence: every logit "
    "moves by at most its bound (tightness <= 1) and g of layer 0 not at all"
)


def position_inputs(
    n_tokens: int,
    *,
    schemes: Sequence[str] = tuple(POSITION_SCHEMES),
    shifts: Sequence[int] = SHIFTS,
    draws: int = 5,
    seed: int = 0,
    fixed: Sequence[int] = (),
) -> tuple[list[dict[str, Any]], np.ndarray]:
    r"""Every perturbed set of position ids: (one label per row, positions ``(B, N)``).

    .. math:: p = (\pi_{t,s}(0..c{-}1),\ c..N{-}1) + t

    The context's ids come from the scheme (``rng = default_rng([seed,
    scheme, t, s])``, the first token and ``fixed`` positions kept); the
    continuation keeps its own; the common offset ``t`` keeps every id
    non-negative and is invisible to RoPE.
    """
    if not shifts or not schemes or any(s not in POSITION_SCHEMES for s in schemes):
        raise RopesplitError(
            f"position schemes must be among {', '.join(POSITION_SCHEMES)} with at least one "
            f"shift, got {list(schemes)} and {list(shifts)}"
        )
    context = context_tokens(n_tokens)
    movable = movable_positions(context, [f for f in fixed if f < context])  # (c,)
    labels: list[dict[str, Any]] = []
    rows: list[np.ndarray] = []
    for scheme, t, s, rng in all_draws(schemes, shifts, draws, seed):
        ids = perturbed_positions(scheme, context, t, rng, movable)  # (c,)
        rows.append(np.concatenate([ids, np.arange(context, n_tokens)]) + t)  # (N,)
        moved = float(np.mean(ids != np.arange(context)))
        labels.append({"scheme": scheme, "t": int(t), "seed": s, "moved": moved})
    return labels, np.stack(rows)  # (B, N)


def _layer_pairs(n: int, budget: int, seed: int, layer: int) -> tuple[np.ndarray, np.ndarray]:
    from ropesplit.numerics.perturbation import causal_pairs

    return causal_pairs(n, budget, np.random.default_rng([seed, layer]))


def rotation_view(
    text: Capture, after: np.ndarray, *, budget: int = PAIR_BUDGET, seed: int = 0
) -> dict[str, float]:
    """Bounds, measured change and tightness with the text's own ``q``, ``k`` (view 1)."""
    from ropesplit.numerics.perturbation import shift_change

    before = text.positions.numpy().astype(np.float64)  # (N,)
    sums: dict[str, list[np.ndarray]] = {}
    worst = 0.0
    for layer in text.layers:
        pairs = _layer_pairs(text.n_tokens, budget, seed, layer.layer)
        view = layer.pairs()
        qc, kc = view.qc, view.kc  # (H, N, P) each
        out = shift_change(qc, kc, layer.theta, layer.scale, before, after, pairs)
        for name in ("W", "f", "E"):
            measured, bound = out[f"measured_{name}"], out[f"bound_{name}"]  # (H, M) each
            ratio = np.divide(measured, bound, out=np.zeros_like(bound), where=bound > 0)
            worst = max(worst, float(ratio.max()))
            if np.any((bound == 0) & (measured > SLACK)):
                worst = float("inf")  # a change where the bound allows none
            sums.setdefault(f"bound_{name}", []).append(bound.mean(axis=1))
        sums.setdefault("measured_W", []).append(out["measured_W"].mean(axis=1))
    row = {key: float(np.concatenate(v).mean()) for key, v in sums.items()}
    i, j = np.tril_indices(text.n_tokens)
    tau = np.abs((after[i] - after[j]) - (before[i] - before[j]))  # (pairs,): every causal pair
    return row | {"tightness": worst, "tau_mean": float(tau.mean()), "tau_max": float(tau.max())}


def run_view(
    text: Capture, own: Capture, *, budget: int = PAIR_BUDGET, seed: int = 0
) -> dict[str, float]:
    """``W`` and ``g`` of the perturbed run's own capture against the text's (view 2).

    Means of ``|W' - W|`` and ``|g' - g|`` over heads and sampled pairs of
    layers >= 1, and ``g_change_layer0``, the largest ``|g' - g|`` of layer 0.
    """
    from ropesplit.numerics.perturbation import pair_logits

    w_change, g_change = [], []
    layer0 = 0.0
    for before, after in zip(text.layers, own.layers, strict=True):
        pairs = _layer_pairs(text.n_tokens, budget, seed, before.layer)
        parts = []
        for layer, cache in ((before, text), (after, own)):
            view = layer.pairs()
            qc, kc = view.qc, view.kc  # (H, N, P) each
            parts.append(pair_logits(qc, kc, layer.theta, layer.scale,
                                     cache.positions.numpy(), pairs))  # fmt: skip
        dw = np.abs(parts[1]["W"] - parts[0]["W"])  # (H, M)
        dg = np.abs(parts[1]["g"] - parts[0]["g"])  # (H, M)
        if before.layer == 0:
            layer0 = float(dg.max())
            continue
        w_change.append(dw.mean(axis=1))
        g_change.append(dg.mean(axis=1))
    w_mean = float(np.concatenate(w_change).mean()) if w_change else float("nan")
    g_mean = float(np.concatenate(g_change).mean()) if g_change else float("nan")
    return {"W_change": w_mean, "g_change": g_mean,
            "g_share": g_mean / w_mean if w_mean > 0 else float("nan"),
            "g_change_layer0": layer0}  # fmt: skip


def _run(context: Context) -> list[Row]:
    settings = context.settings
    ids = context.ids.numpy()  # (N,)
    n = ids.size
    start = context_tokens(n)
    labels, positions = position_inputs(
        n, draws=settings.draws, seed=settings.seed,
        fixed=special_positions(context.loaded, ids).tolist(),
    )  # fmt: skip
    first = [k for k, lab in enumerate(labels) if lab["seed"] == 0]  # captured: own pass
    rest = [k for k, lab in enumerate(labels) if lab["seed"] != 0]
    text = context.capture()
    batch = np.concatenate([np.arange(n)[None], positions[rest]])  # (1 + B', N): baseline first
    losses = continuation_losses(context.loaded, np.broadcast_to(ids, batch.shape), batch, start,
                                 batch_size=settings.batch_size,
                                 on_forward=context.forwarded)  # fmt: skip
    loss = np.empty(len(labels))
    loss[rest] = losses[1:]
    views: dict[int, dict[str, float]] = {}
    target = torch.as_tensor(ids[start:])  # (N - c,)
    for k in first:
        lab = labels[k]
        own = context.capture(torch.as_tensor(positions[k]), keep_logits=True,
                              label=f"{lab['scheme']} t={lab['t']} seed 0")  # fmt: skip
        context.forwarded(1)
        assert own.logits is not None
        loss[k] = logits_loss(own.logits[start - 1 : n - 1], target)
        after = positions[k].astype(np.float64)
        views[k] = rotation_view(text, after, seed=settings.seed) | run_view(
            text, own, seed=settings.seed
        )
    rows = []
    for k in first:
        lab = labels[k]
        chosen = [m for m, other in enumerate(labels)
                  if (other["scheme"], other["t"]) == (lab["scheme"], lab["t"])]  # fmt: skip
        rows.append({"scheme": lab["scheme"], "t": lab["t"],
                     "moved": float(np.mean([labels[m]["moved"] for m in chosen])),
                     "baseline_loss": float(losses[0]),
                     **draw_summary(loss[chosen], float(losses[0]), settings.seed),
                     **views[k]})  # fmt: skip
    return rows


def judge(row: Row) -> Outcome:
    """Whether the semantic term carries less than :data:`G_SHARE` of the logit change in the
    perturbed run (``g_share``: a statistic a model can fail). The bound per pair
    (tightness <= 1) and layer 0's unmoved g are theorems: a failure there is a bug in the
    code or the capture, and the row disagrees with a reason saying so."""
    numbers = (f"{row['scheme']} t={row['t']}: g_share {row['g_share']:.3f}, tightness "
               f"{row['tightness']:.3f} (|tau| up to {row['tau_max']:.0f}), ratio "
               f"{row['ratio']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]")  # fmt: skip
    if row.get("g_change_layer0", 0.0) > LAYER0_TOL:
        return Outcome("disagrees", f"{numbers}: g moved by {row['g_change_layer0']:.2e} in "
                       "layer 0, whose q and k cannot see positions (a capture bug)")
    if not row["tightness"] <= 1 + SLACK:
        return Outcome("disagrees", f"{numbers}: a logit moved beyond its bound (a code bug)")
    share = row["g_share"]
    if not np.isfinite(share):
        return Outcome("inconclusive", f"{numbers}: g_share undefined (no layer >= 1)")
    if share < G_SHARE:
        return Outcome("agrees", f"{numbers}: g carries under {G_SHARE:g} of the change")
    return Outcome("disagrees", f"{numbers}: g carries {share:.2f} of the change "
                   f"(predicted under {G_SHARE:g})")  # fmt: skip


def growth(rows: list[Row], scheme: str) -> Outcome:
    """Whether the loss ratio at the largest ``t`` lies above the one at the smallest."""
    mine = sorted((r for r in rows if r["scheme"] == scheme), key=lambda r: r["t"])
    if len(mine) < 2:
        return Outcome("inconclusive", f"{scheme}: fewer than two shifts")
    what = f"{scheme} ratio at t={mine[0]['t']} vs t={mine[-1]['t']}"
    return interval_rise(mine[0], mine[-1], what, "the loss grows with t",
                         "the loss falls as t grows")  # fmt: skip


def verdict(rows: list[Row]) -> Outcome:
    """Every row's bound check and, per scheme, whether the loss grows with ``t``."""
    return rows_then_schemes(rows, judge, growth,
                             "checks (the bound per shift, then the loss's growth per scheme)")


def _forward_count(settings: ExperimentSettings) -> int:
    return 1 + len(POSITION_SCHEMES) * len(SHIFTS) * settings.draws


EXPERIMENT = Experiment(
    name="position",
    title="Position-id perturbation",
    prediction=PREDICTION,
    needs="the text's capture, one captured pass per scheme and shift (seed 0: loss, q and k "
    "from its own forward pass) and one forward pass per further seed",
    run=_run,
    judge=judge,
    verdict=verdict,
    forward_count=_forward_count,
)
