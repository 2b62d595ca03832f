r"""Experiment 4: distances beyond the training length, with and without LM-Infinite's cap.

THEORY.md section 4 (length extrapolation): beyond the training length ``L``
only ``f`` (and ``E``) meet unseen angles, ``g`` is position-free; capping the
distance, ``Delta -> min(Delta, L)``, keeps ``f`` inside its trained range.

No long sequence is run: the same ``N`` tokens get position ids ``n *
stride`` with ``stride = ceil(2 L / (N - 1))``, so distances reach about
``2L``. Three settings, each evaluated on the pre-RoPE ``q``/``k`` captured
at the original spacing (so ``g`` is the same array in all three):

.. math::
    \text{original: } \Delta_{ij} = i - j,\quad
    \text{spaced: } \Delta_{ij} = \mathrm{stride}\,(i - j),\quad
    \text{capped: } \Delta_{ij} = \min(\mathrm{stride}\,(i - j), L)

and ``f(q_i, Delta) = s <q_i, R(-Delta) kbar>``, ``g = s <q_i, delta_j>``,
``E = W - f - g``. The trained range of ``f`` for query ``i`` is
``[min, max]`` of ``f(q_i, Delta)`` over ``Delta = 0..L``; ``f_outside`` is the
share of causal pairs whose ``f`` falls outside it. The continuation loss of
each setting comes from a real forward pass (the capped one through
:func:`ropesplit.empirical.experiments_cap.distance_cap`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from ropesplit.empirical.capture import Capture
from ropesplit.empirical.experiments_cap import distance_cap
from ropesplit.empirical.experiments_forward import (
    context_length,
    continuation_losses,
    model_context,
)
from ropesplit.empirical.experiments_pairs import layer_pairs
from ropesplit.empirical.models import LoadedModel, as_input_ids

from ropesplit.errors import RopesplitError

__all__ = ["EXTRAPOLATION", "SETTINGS", "length_components", "length_experiment", "spacing"]

EXTRAPOLATION = 2.0  # spaced distances reach about this multiple of the training length
SETTINGS = ("original", "spaced", "capped")
QUANTILES = (0.01, 0.99)  # the central range reported beside min and max
COMPONENTS = ("f", "g", "E")


def spacing(n_tokens: int, context: int, factor: float = EXTRAPOLATION) -> int:
    r"""The stride that spreads ``N`` tokens over about ``factor`` training lengths.

    .. math:: \mathrm{stride} = \lceil \mathrm{factor}\, L / (N - 1) \rceil
    """
    if n_tokens < 2:
        raise RopesplitError(f"tokens must be at least 2, got {n_tokens}")
    if n_tokens - 1 > context:
        raise RopesplitError(
            f"{n_tokens} tokens already exceed the training length {context}; use fewer tokens"
        )
    return max(2, math.ceil(factor * context / (n_tokens - 1)))


def length_components(
    qc: np.ndarray, kc: np.ndarray, theta: np.ndarray, scale: float, stride: int, cap: int
) -> dict[str, dict[str, np.ndarray]]:
    r"""``f``, ``g``, ``E`` on the causal pairs ``(N(N+1)/2,)`` per setting, and ``f``'s range.

    .. math:: f_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\,\overline{\bar{\tilde k}_l}\,
              e^{i\theta_l\Delta_{ij}},\quad g_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\,
              \overline{\tilde\delta_{jl}},\quad E = W - f - g

    Returns ``{setting: {"f", "g", "E"}}`` plus ``"trained": {"lo", "hi"}``,
    the per-pair bounds of the query's trained range of ``f`` (``Delta = 0..cap``).
    """
    (n_tokens, _) = qc.shape  # q~, k~ (N, P) complex pairs of one head
    s = scale
    kbar = kc.mean(axis=0)  # (P,)
    i, j = np.tril_indices(n_tokens)  # causal pairs, row-major
    hf = qc * np.conj(kbar)  # (N, P): f's coefficients per query
    trained = s * np.real(hf @ np.exp(1j * np.outer(theta, np.arange(cap + 1))))  # (N, cap + 1)
    g = (s * np.real(qc @ np.conj(kc - kbar).T))[i, j]  # (M,)
    out: dict[str, dict[str, np.ndarray]] = {
        "trained": {"lo": trained.min(axis=1)[i], "hi": trained.max(axis=1)[i]}
    }
    gap = i - j  # (M,) index distance
    for setting in SETTINGS:
        step = 1 if setting == "original" else stride
        dist = step * gap  # (M,)
        if setting == "capped":
            dist = np.minimum(dist, cap)
        if setting == "spaced":
            table = s * np.real(hf @ np.exp(1j * np.outer(theta, step * np.arange(n_tokens))))
            f = table[i, gap]  # (M,): f at stride * (i - j)
        else:
            f = trained[i, dist]  # (M,): distances within 0..cap
        turn = np.exp(1j * np.outer(step * np.arange(n_tokens), theta))  # (N, P): R(p_n)
        w = (s * np.real((qc * turn) @ np.conj(kc * turn).T))[i, j]  # (M,): <R q_i, R k_j>
        if setting == "capped":
            at_cap = s * np.real((qc * np.exp(1j * theta * cap)) @ np.conj(kc).T)  # (N, N)
            w = np.where(step * gap > cap, at_cap[i, j], w)  # R(L) q_i against k_j
        out[setting] = {"f": f, "g": g, "E": w - f - g}
    return out


def _ranges(values: np.ndarray) -> dict[str, float]:
    low, high = np.quantile(values, QUANTILES)
    return {"min": float(values.min()), "max": float(values.max()), "q01": low, "q99": high}


def length_experiment(
    loaded: LoadedModel,
    input_ids: Any,
    cache: Capture,
    *,
    layers: Sequence[int],
    stride: int | None = None,
    cap: int | None = None,
    batch_size: int = 8,
    on_forward: Callable[[int], Any] | None = None,
) -> list[dict[str, Any]]:
    r"""One row per setting (original, spaced, capped): loss, ratio and the ranges of f, g, E.

    Row keys: ``setting, stride, max_distance, cap, loss, ratio`` and, as the
    mean over the analysed heads (``layers``, every head), ``X_min, X_max,
    X_q01, X_q99`` for ``X = f, g, E``, then ``f_outside``: the share of causal
    pairs whose ``f`` leaves its query's trained range. ``cap`` defaults to
    the training length ``L``; ``stride`` to :func:`spacing`.
    """
    ids = as_input_ids(loaded, input_ids)[0]  # (N,)
    (n_tokens,) = ids.shape
    if cache.n_tokens != n_tokens or not torch.equal(cache.input_ids, ids.cpu()):
        raise RopesplitError("the capture must be of the same input_ids as the experiment")
    context = model_context(loaded)
    if context is None:
        raise RopesplitError(f"{loaded.name} states no training length (max_position_embeddings)")
    cap = context if cap is None else cap
    stride = spacing(n_tokens, context) if stride is None else stride
    losses = _setting_losses(loaded, ids, stride, cap, batch_size, on_forward)
    stats: dict[str, list[dict[str, float]]] = {s: [] for s in SETTINGS}
    for index in layers:
        layer = cache.layers[index]
        qc, kc = layer_pairs(layer)  # (H, N, P) each
        for head in range(qc.shape[0]):
            parts = length_components(qc[head], kc[head], layer.theta, layer.scale, stride, cap)
            lo, hi = parts["trained"]["lo"], parts["trained"]["hi"]
            tol = 1e-9 * max(float(np.abs(lo).max()), float(np.abs(hi).max()), 1.0)
            for setting in SETTINGS:
                comp = parts[setting]
                row = {f"{x}_{k}": v for x in COMPONENTS for k, v in _ranges(comp[x]).items()}
                row["f_outside"] = float(np.mean((comp["f"] < lo - tol) | (comp["f"] > hi + tol)))
                stats[setting].append(row)
    rows = []
    for setting in SETTINGS:
        step = 1 if setting == "original" else stride
        rows.append({
            "setting": setting,
            "stride": step,
            "max_distance": step * (n_tokens - 1) if setting != "capped" else min(
                stride * (n_tokens - 1), cap),
            "cap": cap if setting == "capped" else None,
            "loss": losses[setting],
            "ratio": losses[setting] / losses["original"],
            **{key: float(np.mean([r[key] for r in stats[setting]])) for key in stats[setting][0]},
        })  # fmt: skip
    return rows


def _setting_losses(
    loaded: LoadedModel,
    ids: torch.Tensor,
    stride: int,
    cap: int,
    batch_size: int,
    on_forward: Callable[[int], Any] | None,
) -> dict[str, float]:
    """Continuation loss at the original spacing, spaced, and spaced with the distance cap."""
    (n_tokens,) = ids.shape
    start = context_length(n_tokens)
    arange = np.arange(n_tokens)
    both = continuation_losses(
        loaded, np.stack([ids.cpu().numpy()] * 2), np.stack([arange, stride * arange]), start,
        batch_size=batch_size, on_forward=on_forward,
    )  # fmt: skip
    spaced = torch.as_tensor(stride * arange, device=ids.device)[None]  # (1, N)
    with distance_cap(loaded, spaced, cap):
        capped = continuation_losses(
            loaded, ids.cpu().numpy()[None], spaced.cpu().numpy(), start,
            batch_size=1, on_forward=on_forward,
        )  # fmt: skip
    return {"original": float(both[0]), "spaced": float(both[1]), "capped": float(capped[0])}
