r"""Experiment 1: controlled distance. The same query/key pairs re-evaluated at dummy distances.

The paper's third claim: setting every pair's distance to a dummy value ``D``
shifts the distance (query) component of the logits and leaves the key
component put. For each head, every causal pair ``j <= i`` of the captured
pre-RoPE queries and keys is evaluated at distance ``D`` (``positions_q =
D``, ``positions_k = 0``) and fitted model-free, least squares over the
causal pairs:

.. math::
    W^D_{ij} = s\,\langle R(D) q_i, k_j \rangle \approx u^D_i + v^D_j,
    \qquad
    W_{ij} = s\,\langle R(i) q_i, R(j) k_j \rangle \approx a_{i-j} + b_i + c_j

(the true distances by the three-axis fit of ``numerics.fit``, here batched:
one factorisation serves every head and distance).
The key components ``v^D`` and ``c`` are compared modulo the three-axis
fit's gauge freedom (a constant and a linear trend in ``j``: ``a_Delta +
alpha Delta``, ``b_i - alpha i``, ``c_j + alpha j`` fit alike), i.e. after
projecting both off ``span{1, j}``. Reported per head and ``D``:

- ``key_corr``: Pearson correlation of the two key components (claim: ~1);
- ``key_corr_d0``: the same between ``v^D`` and ``v`` at the first dummy
  distance (exactly 1 when ``E = 0``: then ``W^D - W^{D'}`` is query-only);
- ``key_shift``: RMS of their difference over keys, over the std of ``W``;
- ``distance_shift``: mean over causal pairs of ``|U^D_ij - U_ij|`` with
  ``U`` = fitted logit minus key component, over the std of ``W``.

Under the split (THEORY.md section 3) ``v^D_j ~ g(q, k_j)`` at every ``D``
when ``E`` is small: only ``f(q_i, D)`` moves with ``D``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from ropesplit.empirical.capture import Capture, LayerCapture
from ropesplit.empirical.experiments_pairs import layer_pairs

from ropesplit.errors import RopesplitError

__all__ = [
    "DISTANCES",
    "additive_fit",
    "check_layers",
    "default_layers",
    "detrend",
    "distance_experiment",
    "layer_distance",
]

DISTANCES = (0, 16, 64, 256, 1024)  # the dummy distances D
MEASURES = ("key_corr", "key_corr_d0", "key_shift", "distance_shift")
DEFAULT_LAYER_COUNT = 6  # layers analysed by default, evenly spaced


def default_layers(n_layers: int, count: int = DEFAULT_LAYER_COUNT) -> list[int]:
    """``count`` evenly spaced layer indices from first to last (all when fewer)."""
    return sorted({int(round(x)) for x in np.linspace(0, n_layers - 1, min(count, n_layers))})


def check_layers(layers: Sequence[int], n_layers: int) -> list[int]:
    """The layer indices, checked to lie in ``[0, n_layers)``."""
    bad = [layer for layer in layers if not 0 <= layer < n_layers]
    if bad or not layers:
        raise RopesplitError(f"layers must lie in [0, {n_layers}), got {list(layers)}")
    return list(layers)


def additive_fit(w: np.ndarray, *, distance: bool) -> dict[str, np.ndarray]:
    r"""Least squares on the causal pairs of ``K`` logit matrices ``w (N, N, K)`` at once.

    .. math:: \min \sum_{j \le i} (a_{i-j} + b_i + c_j - W_{ij})^2 \quad (\text{three-axis}),
              \qquad \min \sum_{j \le i} (b_i + c_j - W_{ij})^2 \quad (\text{two-axis})

    The normal equations depend on the causal mask only, so one bordered
    solve serves all ``K`` right-hand sides. Gauge (the null space of the
    normal matrix): two-axis ``sum_j c_j = 0``; three-axis ``sum_i b_i = 0``
    and ``c`` orthogonal to ``1`` and ``j`` (the linear trend ``a_Delta + alpha
    Delta, b_i - alpha i, c_j + alpha j`` fits alike). Returns ``b``, ``c``
    and, three-axis, ``a`` (index ``Delta = 0..N-1``), each ``(N, K)``.
    """
    (n_tokens, _, k) = w.shape
    n = n_tokens
    idx = np.arange(n)
    mask = (idx[None, :] <= idx[:, None]).astype(np.float64)  # (N, N): M_ij = [j <= i]
    w = w * mask[:, :, None]  # (N, N, K), acausal entries zeroed
    blocks = [np.diag(mask.sum(axis=1)), mask, mask.T, np.diag(mask.sum(axis=0))]  # bb, bc, cb, cc
    rhs = [w.sum(axis=1), w.sum(axis=0)]  # row sums (b), column sums (c): (N, K) each
    gauge = [np.concatenate([np.zeros(n), np.ones(n)])]  # sum_j c_j = 0
    if distance:
        reach = (idx[:, None] <= idx[None, :]).astype(np.float64)  # (Delta, i): [Delta <= i]
        span = (idx[:, None] + idx[None, :] < n).astype(np.float64)  # (Delta, j): [Delta + j < N]
        normal = np.block([
            [np.diag(n - idx.astype(np.float64)), reach, span],
            [reach.T, blocks[0], blocks[1]],
            [span.T, blocks[2], blocks[3]],
        ])  # fmt: skip
        diagonals = np.stack([np.einsum("iik->k", w[d:, : n - d]) for d in range(n)])  # (N, K)
        rhs = [diagonals, *rhs]
        gauge = [
            np.concatenate([np.zeros(n), np.ones(n), np.zeros(n)]),  # sum_i b_i = 0
            np.concatenate([np.zeros(2 * n), np.ones(n)]),  # sum_j c_j = 0
            np.concatenate([np.zeros(2 * n), idx.astype(np.float64)]),  # sum_j j c_j = 0
        ]
    else:
        normal = np.block([[blocks[0], blocks[1]], [blocks[2], blocks[3]]])
    size, extra = normal.shape[0], len(gauge)
    system = np.zeros((size + extra, size + extra))
    system[:size, :size] = normal
    for row, g in enumerate(gauge):
        system[size + row, :size] = system[:size, size + row] = g
    right = np.concatenate([*rhs, np.zeros((extra, k))])  # (size + extra, K)
    x = np.linalg.solve(system, right)[:size]  # (size, K)
    parts = x.reshape(size // n, n, k)  # (2 or 3, N, K)
    names = ("a", "b", "c") if distance else ("b", "c")
    return dict(zip(names, parts, strict=True))


def detrend(c: np.ndarray) -> np.ndarray:
    """Project ``c (N, K)`` off ``span{1, j}`` along axis 0 (the three-axis fit's gauge)."""
    (n_tokens, _) = c.shape
    basis = np.stack([np.ones(n_tokens), np.arange(n_tokens, dtype=np.float64)], axis=1)  # (N, 2)
    coef, *_ = np.linalg.lstsq(basis, c, rcond=None)  # (2, K)
    return c - basis @ coef


def layer_distance(
    layer: LayerCapture, positions: np.ndarray, distances: Sequence[int]
) -> list[dict[str, Any]]:
    r"""Every head's ``key_corr``, ``key_shift``, ``distance_shift`` at each dummy distance.

    .. math:: W^D = s\,\mathrm{Re}\big((\tilde q\, e^{i\theta D})\,\tilde k^{H}\big),\quad
              W = s\,\mathrm{Re}\big((\tilde q\, e^{i\theta p})(\tilde k\, e^{i\theta p})^{H}\big)
    """
    qc, kc = layer_pairs(layer)  # (H, N, P) each
    (n_heads, n_tokens, _) = qc.shape
    theta, s = layer.theta, layer.scale
    turn = np.exp(1j * np.outer(positions, theta))  # (N, P): R(p_n)
    w_true = s * np.real(np.einsum("hip,hjp->ijh", qc * turn, np.conj(kc * turn)))  # (N, N, H)
    w_dummy = np.stack(
        [
            s * np.real(np.einsum("hip,hjp->ijh", qc * np.exp(1j * theta * d), np.conj(kc)))
            for d in distances
        ],
        axis=-1,
    ).reshape(n_tokens, n_tokens, -1)  # (N, N, H K), column h K + index
    three = additive_fit(w_true, distance=True)  # c already off span{1, j}
    two = additive_fit(w_dummy, distance=False)
    key_dummy = detrend(two["c"])  # (N, H K)
    causal = np.tril(np.ones((n_tokens, n_tokens), dtype=bool))  # (N, N)
    gap = np.subtract.outer(np.arange(n_tokens), np.arange(n_tokens)).clip(min=0)  # (N, N): i - j
    out = []
    for head in range(n_heads):
        key_true = three["c"][:, head]  # (N,)
        u_true = three["a"][gap, head] + three["b"][:, head, None]  # (N, N): a_{i-j} + b_i
        scale = float(np.std(w_true[:, :, head][causal]))
        for index, d in enumerate(distances):
            col = head * len(distances) + index
            trend = two["c"][:, col] - key_dummy[:, col]  # (N,): the part of v in span{1, j}
            u_dummy = two["b"][:, col, None] + trend[None, :]  # (N, N)
            first = key_dummy[:, head * len(distances)]  # (N,): v at the first dummy distance
            out.append({
                "head": head,
                "distance": int(d),
                "key_corr": float(np.corrcoef(key_dummy[:, col], key_true)[0, 1]),
                "key_corr_d0": float(np.corrcoef(key_dummy[:, col], first)[0, 1]),
                "key_shift": float(np.sqrt(np.mean((key_dummy[:, col] - key_true) ** 2)) / scale),
                "distance_shift": float(np.mean(np.abs(u_dummy - u_true)[causal]) / scale),
            })  # fmt: skip
    return out


def distance_experiment(
    cache: Capture, *, layers: Sequence[int], distances: Sequence[int] = DISTANCES
) -> list[dict[str, Any]]:
    r"""Rows per head and dummy distance, then per-layer and overall means.

    Row keys: ``scope`` (``"head"``, ``"layer"`` or ``"all"``), ``layer``,
    ``head`` (``None`` where averaged over), ``distance`` and the three
    measurements of :func:`layer_distance`.
    """
    layers = check_layers(layers, len(cache))
    if not distances or min(distances) < 0:
        raise RopesplitError(f"distances must be non-negative, got {list(distances)}")
    if cache.n_tokens < 4:
        raise RopesplitError(f"the distance fits need at least 4 tokens, got {cache.n_tokens}")
    positions = cache.positions.numpy().astype(np.float64)  # (N,)
    heads: list[dict[str, Any]] = []
    for index in layers:
        for row in layer_distance(cache.layers[index], positions, distances):
            heads.append({"scope": "head", "layer": index, **row})
    means = [
        _mean(heads, "layer", layer, d, {"layer": layer}) for layer in layers for d in distances
    ]
    overall = [_mean(heads, "all", None, d, {}) for d in distances]
    return heads + means + overall


def _mean(
    rows: list[dict[str, Any]], scope: str, layer: int | None, distance: int, where: dict[str, int]
) -> dict[str, Any]:
    chosen = [
        r for r in rows if r["distance"] == distance and all(r[k] == v for k, v in where.items())
    ]
    values = {key: float(np.mean([r[key] for r in chosen])) for key in MEASURES}
    return {"scope": scope, "layer": layer, "head": None, "distance": int(distance), **values}
