r"""A partial-rotary head's logits in two parts: the rotating slice's share (docs/theory.md
section 7).

With ``r = rotary_dim`` of ``d`` coordinates rotating (Phi, GPT-NeoX's ``rotary_pct``,
and multi-head latent attention reordered ``[pe | nope]``), the first ``r/2`` pairs form
the rotating slice and the rest the remainder of the head; the logit is their sum,

.. math::
    W_{ij} = W^\mathrm{rot}_{ij} + W^\mathrm{rest}_{ij},\qquad
    W^\mathrm{rot}_{ij} = s\,\mathrm{Re}\sum_{l < r/2}\tilde q_{il}\overline{\tilde k_{jl}}
                          e^{i\theta_l\Delta_{ij}},\qquad
    W^\mathrm{rest}_{ij} = s\,\mathrm{Re}\sum_{l \ge r/2}\tilde q_{il}\overline{\tilde k_{jl}}
                          e^{i\theta_l\Delta_{ij}}

(:math:`\theta_l = 0` on the rest for every spec built from a base, so there
:math:`W^\mathrm{rest} = s\,q^\mathrm{rest}_i\cdot k^\mathrm{rest}_j`). Over the attended
pairs :math:`\mathcal M_i` of row ``i`` (``j <= i`` and ``i - j < window``, by index) the
row-centred part is :math:`\mathrm{rc}(X)_{ij} = X_{ij} - |\mathcal M_i|^{-1}
\sum_{j' \in \mathcal M_i} X_{ij'}`, what softmax can see (docs/theory.md section 4), and

.. math::
    \mathrm{rotary\ share} = \frac{\|\mathrm{rc}(W^\mathrm{rot})\|_F^2}
        {\|\mathrm{rc}(W^\mathrm{rot})\|_F^2 + \|\mathrm{rc}(W^\mathrm{rest})\|_F^2}
        \in [0, 1]

(norms over the attended pairs; the scale ``s`` cancels). Since
:math:`\|\mathrm{rc}(W)\|_F^2 = \|\mathrm{rc}(W^\mathrm{rot})\|_F^2 +
\|\mathrm{rc}(W^\mathrm{rest})\|_F^2 + 2\langle\mathrm{rc}(W^\mathrm{rot}),
\mathrm{rc}(W^\mathrm{rest})\rangle`, this is exactly
:math:`\|\mathrm{rc}(W^\mathrm{rot})\|_F^2 / \|\mathrm{rc}(W)\|_F^2` when the two parts are
uncorrelated after row-centring; the cross term belongs to neither part, and leaving
it out keeps the share in ``[0, 1]``, the two parts' shares summing to 1, and the
share defined when the parts cancel (``rc(W) = 0``), where the ratio to
:math:`\|\mathrm{rc}(W)\|_F^2` would exceed 1 without limit. A query-only term
(a constant added to a row of either part) changes nothing.

Computed in float64 by blocks of rows: per block, two ``(H, rows, N)`` matrix products of
the rotated real features; no ``(N, N)`` matrix per head is formed.

Shapes::

    q       (H, N, d)     pre-RoPE queries of the layer's query heads
    k       (Hkv, N, d)   pre-RoPE keys; query head h reads k[kv_map[h]]
    share   (H,)          float64, NaN for a head with no row-centred logit variance
"""

from __future__ import annotations

import numpy as np

from ropesplit.numerics import _inputs
from ropesplit.numerics.rope import to_pairs
from ropesplit.numerics.spec import RopeSpec, layer_inputs
from ropesplit.numerics.types import LayerKeys, LayerQueries, Positions

__all__ = ["rotary_share"]

_BLOCK_BYTES = 2**26  # working memory of one block of rows: the two parts' logits


def rotary_share(
    q: LayerQueries,
    k: LayerKeys,
    spec: RopeSpec,
    *,
    positions: Positions = None,
) -> np.ndarray:
    r"""The rotating slice's share of the row-centred logit variance, per query head, ``(H,)``.

    .. math:: \frac{\|\mathrm{rc}(W^\mathrm{rot})\|_F^2}
                   {\|\mathrm{rc}(W^\mathrm{rot})\|_F^2 + \|\mathrm{rc}(W^\mathrm{rest})\|_F^2}

    (the module docstring). ``q (H, N, d)``, ``k (Hkv, N, d)`` pre-RoPE, as
    :func:`.stats.layer_statistics` takes them; ``spec`` gives the frequencies, the
    layout, ``rotary_dim`` (None: every pair rotates, the share is 1), the window and
    the KV map; ``positions`` ``(N,)`` or ``(positions_q, positions_k)`` (default
    ``0..N-1``). NaN for a head whose two parts are both constant on every row.

    >>> import numpy as np
    >>> q, k = np.random.default_rng(0).normal(size=(2, 4, 256, 8))  # iid: about r/d = 1/2
    >>> spec = RopeSpec.from_base(8, 10000.0, rotary_dim=4)
    >>> rotary_share(q, k, spec).round(2).tolist()
    [0.49, 0.48, 0.51, 0.5]
    >>> q[..., 4:] = 0.0  # the non-rotating coordinates carry nothing
    >>> rotary_share(q, k, spec).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    q, k, spec, kv = layer_inputs(q, k, spec)
    h, n, d = q.shape
    pq, pk = _inputs.check_positions(positions, n)
    theta = spec.frequencies
    rot = (d if spec.rotary_dim is None else spec.rotary_dim) // 2  # pairs of the rotating slice
    a = _features(to_pairs(q, spec.layout, spec.rotary_dim) * np.exp(1j * pq[:, None] * theta),
                  rot)  # fmt: skip  # two (H, N, c): R(p_i) q_i, rotating slice and rest
    y = _features(to_pairs(k, spec.layout, spec.rotary_dim) * np.exp(1j * pk[:, None] * theta),
                  rot)  # fmt: skip  # two (Hkv, N, c): R(p'_j) k_j
    groups = [(g, np.flatnonzero(kv == g)) for g in np.unique(kv)]  # the heads reading KV head g
    energy = np.zeros((2, h))  # ||rc(W^rot)||^2, ||rc(W^rest)||^2 (in units of s^2)
    rows = max(1, _BLOCK_BYTES // (32 * max(len(heads) for _, heads in groups) * n))
    for i0 in range(0, n, rows):
        i1 = min(n, i0 + rows)
        j0 = 0 if spec.window is None else max(0, i0 - spec.window + 1)
        ii, jj = np.arange(i0, i1)[:, None], np.arange(j0, i1)[None, :]
        mask = jj <= ii  # (rows, cols): the attended pairs of these rows
        if spec.window is not None:
            mask &= ii - jj < spec.window
        count = mask.sum(axis=1)[:, None]  # (rows, 1) >= 1: the diagonal is attended
        for part in range(2):
            for g, heads in groups:
                logits = np.where(mask, a[part][heads, i0:i1] @ y[part][g, j0:i1].T, 0.0)
                centred = np.where(mask, logits - logits.sum(-1, keepdims=True) / count, 0.0)
                energy[part, heads] += np.einsum("hij,hij->h", centred, centred)
    total = energy.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, energy[0] / total, np.nan)


def _features(z: np.ndarray, rot: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Complex pairs ``(X, N, P)`` -> the real features ``[Re, Im]`` of pairs ``< rot``
    ``(X, N, 2 rot)`` and of the rest ``(X, N, 2 (P - rot))``, so that
    :math:`\mathrm{Re}\sum_l \tilde a_l\overline{\tilde y_l}` over a part is a dot product."""
    return (np.concatenate([z[..., :rot].real, z[..., :rot].imag], axis=-1),
            np.concatenate([z[..., rot:].real, z[..., rot:].imag], axis=-1))  # fmt: skip
