r"""Experiment 3: perturb only the position ids; the loss beside the bound of THEORY.md section 4.

The tokens stay in order; the context's position ids are jittered by up to
``t`` or swapped between tokens at most ``t`` apart
(:mod:`ropesplit.empirical.perturb`), and the continuation loss is measured
as in the word-order experiment. Beside it, from the captured pre-RoPE
queries and keys of the unperturbed text, the bound on how far a logit can
move when a key moves by ``t`` positions, split as ``W = f + g + E``:

.. math::
    |\Delta_t W_{ij}| &\le s \sum_l |\tilde q_{il}| |\tilde k_{jl}|\, 2|\sin(\theta_l t/2)| \\
    |\Delta_t f_{ij}| &\le s \sum_l |\tilde q_{il}| |\bar{\tilde k}_l|\, 2|\sin(\theta_l t/2)|,
    \qquad \Delta_t g_{ij} = 0 \\
    |\Delta_t E_{ij}| &\le s \sum_l |\tilde q_{il}| |\tilde\delta_{jl}|\, 2|\sin(\theta_l t/2)|

with ``Delta_t X_ij = X at distance (p_i - p_j + t) minus X at (p_i - p_j)``
and ``g`` position-free by construction (exactly 0). Bounds and the measured
changes are averaged over the same causal pairs (all of them, or a seeded
sample of :data:`PAIR_BUDGET` per layer), per head, then over heads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from ropesplit.empirical.capture import Capture, LayerCapture
from ropesplit.empirical.experiments_forward import (
    context_length,
    continuation_losses,
    seed_groups,
)
from ropesplit.empirical.experiments_pairs import layer_pairs
from ropesplit.empirical.models import LoadedModel, as_input_ids
from ropesplit.empirical.perturb import POSITION_SCHEMES, perturbed_positions

from ropesplit.errors import RopesplitError

__all__ = [
    "PAIR_BUDGET",
    "SHIFTS",
    "causal_pairs",
    "position_experiment",
    "position_inputs",
    "shift_bounds",
]

SHIFTS = (0, 1, 2, 4, 8, 16)  # t: how far a position id may move
PAIR_BUDGET = 4096  # causal pairs per layer for the bound and the measured change
BOUND_KEYS = ("measured_W", "measured_f", "measured_E", "bound_W", "bound_f", "bound_E")


def position_inputs(
    n_tokens: int,
    *,
    schemes: Sequence[str] = tuple(POSITION_SCHEMES),
    shifts: Sequence[int] = SHIFTS,
    seeds: int = 3,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], np.ndarray]:
    r"""Every perturbed set of position ids: (one label per row, positions ``(B, N)``).

    .. math:: p = (\pi_{t,s}(0..c{-}1),\ c..N{-}1) + t

    The context's ids come from the scheme (``rng = default_rng([seed,
    scheme, t, s])``); the continuation keeps its own; the common offset
    ``t`` keeps every id non-negative and is invisible to RoPE. ``t = 0`` is
    ``0..N-1``, the baseline.
    """
    if seeds < 1:
        raise RopesplitError(f"seeds must be at least 1, got {seeds}")
    if not shifts or not schemes or any(s not in POSITION_SCHEMES for s in schemes):
        raise RopesplitError(
            f"position schemes must be among {', '.join(POSITION_SCHEMES)} with at least one "
            f"shift, got {list(schemes)} and {list(shifts)}"
        )
    context = context_length(n_tokens)
    labels: list[dict[str, Any]] = []
    rows: list[np.ndarray] = []
    for a, scheme in enumerate(schemes):
        for b, t in enumerate(shifts):
            for s in range(seeds):
                rng = np.random.default_rng([seed, a, b, s])
                ids = perturbed_positions(scheme, context, t, rng)  # (c,)
                rows.append(np.concatenate([ids, np.arange(context, n_tokens)]) + t)  # (N,)
                moved = float(np.mean(ids != np.arange(context)))
                labels.append({"scheme": scheme, "t": int(t), "seed": s, "moved": moved})
    return labels, np.stack(rows)  # (B, N)


def causal_pairs(
    n_tokens: int, budget: int | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    r"""Query/key indices ``(i, j)``, ``j <= i``: all of them, or ``budget`` drawn uniformly.

    Pair number ``m`` in row-major order is ``i = floor((sqrt(8m + 1) - 1)/2)``,
    ``j = m - i(i + 1)/2``.
    """
    total = n_tokens * (n_tokens + 1) // 2
    if budget is None or budget >= total:
        i, j = np.tril_indices(n_tokens)
        return i, j
    m = np.sort(rng.choice(total, size=budget, replace=False))
    i = ((np.sqrt(8.0 * m + 1.0) - 1.0) / 2.0).astype(np.int64)
    i -= (i * (i + 1) // 2 > m).astype(np.int64)  # float rounding guard, both directions
    i += ((i + 1) * (i + 2) // 2 <= m).astype(np.int64)
    return i, m - i * (i + 1) // 2


def shift_bounds(
    layer: LayerCapture, positions: np.ndarray, shifts: Sequence[int], pairs: tuple[Any, Any]
) -> dict[str, np.ndarray]:
    r"""Per head and shift: mean measured ``|Delta_t X|`` and mean bound, ``X = W, f, E``.

    .. math:: \Delta_t X_{ij} = s\,\mathrm{Re}\sum_l h^X_{ijl}\, e^{i\theta_l\Delta_{ij}}
              (e^{i\theta_l t} - 1),\qquad \text{bound} = s\sum_l |h^X_{ijl}|\,
              2|\sin(\theta_l t/2)|

    with ``h^W = q~_i conj(k~_j)``, ``h^f = q~_i conj(kbar~)``, ``h^E = q~_i
    conj(delta~_j)``, ``kbar`` the mean key of the context per KV head.
    Returns arrays ``(T, H)`` under :data:`BOUND_KEYS` and ``tightness``, the
    largest ``|Delta_t X| / bound`` over pairs and ``X`` (0 where the bound is 0).
    """
    i, j = pairs
    qc, kc = layer_pairs(layer)  # (H, N, P) each
    kbar = kc.mean(axis=1, keepdims=True)  # (H, 1, P)
    q_i = qc[:, i]  # (H, M, P)
    parts = {
        "W": q_i * np.conj(kc[:, j]),
        "f": q_i * np.conj(kbar),
        "E": q_i * np.conj(kc[:, j] - kbar),
    }  # each (H, M, P)
    delta = (positions[i] - positions[j]).astype(np.float64)  # (M,)
    phase = np.exp(1j * delta[:, None] * layer.theta[None, :])  # (M, P)
    s = layer.scale
    out: dict[str, list[Any]] = {key: [] for key in (*BOUND_KEYS, "tightness")}
    for t in shifts:
        turn = np.exp(1j * layer.theta * t) - 1.0  # (P,)
        worst = np.zeros(qc.shape[0])  # (H,)
        for name, h in parts.items():
            change = np.abs(s * np.real((h * phase * turn).sum(axis=-1)))  # (H, M)
            bound = s * (np.abs(h) * np.abs(turn)).sum(axis=-1)  # (H, M)
            out[f"measured_{name}"].append(change.mean(axis=1))
            out[f"bound_{name}"].append(bound.mean(axis=1))
            ratio = np.divide(change, bound, out=np.zeros_like(change), where=bound > 0)
            worst = np.maximum(worst, ratio.max(axis=1))
        out["tightness"].append(worst)
    return {key: np.array(value) for key, value in out.items()}  # each (T, H)


def position_experiment(
    loaded: LoadedModel,
    input_ids: Any,
    cache: Capture,
    *,
    schemes: Sequence[str] = tuple(POSITION_SCHEMES),
    shifts: Sequence[int] = SHIFTS,
    seeds: int = 3,
    seed: int = 0,
    pair_budget: int | None = PAIR_BUDGET,
    batch_size: int = 8,
    on_forward: Callable[[int], Any] | None = None,
) -> list[dict[str, Any]]:
    r"""One row per (scheme, t): the loss ratio beside the bound's ``f``, ``g``, ``E`` parts.

    Row keys: ``scheme, t, loss, ratio, spread, moved`` (as in the word-order
    experiment), then the mean over all heads of ``bound_W, bound_f, bound_g
    (= 0), bound_E`` and of the measured ``measured_W, measured_f, measured_g
    (= 0), measured_E`` for a key moved by ``t``, and ``tightness`` (largest
    measured/bound over heads and pairs; at most 1 when the bound holds).
    ``cache`` is the capture of ``input_ids`` at positions ``0..N-1``.
    """
    ids = as_input_ids(loaded, input_ids)[0].cpu().numpy()  # (N,)
    (n_tokens,) = ids.shape
    if cache.n_tokens != n_tokens or not np.array_equal(cache.input_ids.numpy(), ids):
        raise RopesplitError("the capture must be of the same input_ids as the experiment")
    labels, positions = position_inputs(
        n_tokens, schemes=schemes, shifts=shifts, seeds=seeds, seed=seed
    )
    base = np.arange(n_tokens)[None]  # (1, N)
    losses = continuation_losses(
        loaded, np.broadcast_to(ids, (len(positions) + 1, n_tokens)),
        np.concatenate([base, positions]), context_length(n_tokens),
        batch_size=batch_size, on_forward=on_forward,
    )  # fmt: skip
    bounds = _all_heads(cache, shifts, pair_budget, seed)  # key -> (T, heads)
    rows = seed_groups(labels, losses[1:], float(losses[0]), ("scheme", "t"))
    for row in rows:
        b = list(shifts).index(row["t"])
        for name in ("W", "f", "g", "E"):
            for kind in ("bound", "measured"):
                key = f"{kind}_{name}"
                row[key] = 0.0 if name == "g" else float(bounds[key][b].mean())  # g: exactly 0
        row["tightness"] = float(bounds["tightness"][b].max())
        row["heads"] = int(bounds["tightness"].shape[1])
    return rows


def _all_heads(
    cache: Capture, shifts: Sequence[int], budget: int | None, seed: int
) -> dict[str, np.ndarray]:
    """:func:`shift_bounds` of every layer, heads side by side: key -> ``(T, L H)``."""
    positions = cache.positions.numpy().astype(np.int64)  # (N,)
    per_layer = []
    for layer in cache.layers:
        pairs = causal_pairs(cache.n_tokens, budget, np.random.default_rng([seed, layer.layer]))
        per_layer.append(shift_bounds(layer, positions, shifts, pairs))
    return {key: np.concatenate([d[key] for d in per_layer], axis=1) for key in per_layer[0]}
