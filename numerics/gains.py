r"""Learned per-channel gains after RoPE: a relative logit plus an exact term in ``i + j``.

A norm with learned weights applied after RoPE (Hunyuan's query and key
layernorms, nGPT's ``s_qk`` in Dory) scales rotated coordinate ``c`` of every
query by ``g^q_c`` and of every key by ``g^k_c``. On pair ``l`` the logit then
weighs its two coordinates by ``D = diag(u_l, v_l)``, ``u, v`` the products
``g^q g^k`` there, and ``D = m_l I + n_l \mathrm{diag}(1, -1)`` with
``m = (u + v)/2``, ``n = (u - v)/2``. With ``z = x_a + i x_b`` the pair as a
complex number (docs/theory.md section 1),

.. math::
    W_{ij} = s\sum_l m_l\,\mathrm{Re}\big(e^{i\theta_l p_i} z^q_{il}\,
             \overline{e^{i\theta_l p'_j} z^k_{jl}}\big)
           + s\sum_l n_l\,\mathrm{Re}\big(e^{i\theta_l (p_i + p'_j)} z^q_{il} z^k_{jl}\big)
           + s\sum_{c\ \mathrm{rest}} D_c\, q_{ic} k_{jc}.

The first and last sums are a RoPE logit (docs/theory.md section 2) of the
features :func:`relative_features` ``q'_c = \sqrt{|m_c|}\,q_c``, ``k'_c =
\mathrm{sign}(m_c)\sqrt{|m_c|}\,k_c`` (``m_c = D_c`` off the pairs): its split
is the paper's. The middle sum, :func:`absolute_logits`, turns with ``p_i +
p'_j``: absolute position, not relative. It vanishes exactly when the gains
are equal within each pair (``u_l = v_l``; at initialisation every gain is 1).
:func:`absolute_share` is its share of the row-centred logit variance.

Shapes::

    q       (H, N, d)    pre-RoPE queries, pairs in the spec's layout (RMS-normalised)
    k       (Hkv, N, d)  pre-RoPE keys; query head h reads k[kv_map[h]]
    gain    (d,)         g^q * g^k, coordinate by coordinate, in the same order
    W_abs   (H, N, N)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import _inputs
from ropesplit.numerics.spec import RopeSpec, layer_inputs

__all__ = ["absolute_logits", "absolute_share", "gain_parts", "relative_features"]


def _pairs(spec: RopeSpec, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The two coordinates ``(a_l, b_l)`` of each rotating pair in the spec's layout."""
    r = spec.rotary_dim or d
    half = np.arange(r // 2)
    return (half, half + r // 2) if spec.layout == "half" else (2 * half, 2 * half + 1)


def gain_parts(gain: Any, spec: RopeSpec) -> tuple[np.ndarray, np.ndarray]:
    r"""``(m (d,), n (P_r,))``: the gains' relative weight per coordinate (``m_l`` on both
    coordinates of pair ``l``, ``D_c`` off the pairs) and their absolute weight per
    rotating pair, ``n_l = (u_l - v_l)/2``."""
    D = np.asarray(gain, dtype=np.float64)
    if D.ndim != 1 or D.shape[0] != spec.head_dim:
        raise RopesplitError(f"gain must have shape ({spec.head_dim},), got {D.shape}")
    a, b = _pairs(spec, D.shape[0])
    m = D.copy()
    m[a] = m[b] = (D[a] + D[b]) / 2.0
    return m, (D[a] - D[b]) / 2.0


def relative_features(q: Any, k: Any, m: Any) -> tuple[np.ndarray, np.ndarray]:
    r"""``q' = \sqrt{|m|}\,q``, ``k' = \mathrm{sign}(m)\sqrt{|m|}\,k``: the features whose
    RoPE logit is the gains' relative part (``q' \cdot k' = \sum_c m_c q_c k_c``)."""
    m = np.asarray(m, dtype=np.float64)
    root = np.sqrt(np.abs(m))
    return np.asarray(q, dtype=np.float64) * root, np.asarray(k, dtype=np.float64) * (
        np.sign(m) * root)


def absolute_logits(q: Any, k: Any, spec: RopeSpec, n: Any, *, positions: Any = None
                    ) -> np.ndarray:  # fmt: skip
    r"""``W^abs (H, N, N)``, every pair (causal or not):

    .. math:: W^\mathrm{abs}_{ij} = s\sum_l n_l\,\mathrm{Re}\big(e^{i\theta_l (p_i + p'_j)}
              z^q_{il} z^k_{jl}\big)
    """
    q, k, spec, kv = layer_inputs(q, k, spec)
    n_l = np.asarray(n, dtype=np.float64)
    a, b = _pairs(spec, q.shape[-1])
    if n_l.shape != a.shape:
        raise RopesplitError(f"n must have shape ({a.size},), got {n_l.shape}")
    pq, pk = _inputs.check_positions(positions, q.shape[1])
    theta = spec.frequencies[: a.size]
    turn_q = np.exp(1j * np.outer(pq, theta))  # (N, P)
    turn_k = np.exp(1j * np.outer(pk, theta))
    zq = (q[..., a] + 1j * q[..., b]) * turn_q * n_l  # (H, N, P)
    zk = (k[..., a] + 1j * k[..., b]) * turn_k  # (Hkv, N, P)
    return spec.scale * np.real(np.einsum("hil,hjl->hij", zq, zk[kv]))


def absolute_share(q: Any, k: Any, spec: RopeSpec, gain: Any, *, positions: Any = None
                   ) -> np.ndarray:  # fmt: skip
    r"""``(H,)``: the absolute term's share of the row-centred logit variance,

    .. math:: \frac{\|\mathrm{rc}(W^\mathrm{abs})\|_F^2}
                   {\|\mathrm{rc}(W^\mathrm{rel})\|_F^2 + \|\mathrm{rc}(W^\mathrm{abs})\|_F^2}

    over the attended pairs (``j <= i``, ``i - j < window``), rows centred over their
    attended pairs (what softmax sees; the cross term left out, as in
    :func:`~ropesplit.numerics.partial_rotary.rotary_share`). 0 when the gains are equal
    within every pair; NaN for a head whose two parts are both constant on every row.
    ``q``, ``k`` the RMS-normalised pre-RoPE features, ``gain = g^q * g^k``."""
    from ropesplit.numerics.rope import rotate

    q, k, spec, kv = layer_inputs(q, k, spec)
    m, n = gain_parts(gain, spec)
    h, N, _ = q.shape
    pq, pk = _inputs.check_positions(positions, N)
    qr, kr = relative_features(q, k, m)
    theta = spec.frequencies
    qr = rotate(qr, pq, theta, layout=spec.layout, rotary_dim=spec.rotary_dim)
    kr = rotate(kr, pk, theta, layout=spec.layout, rotary_dim=spec.rotary_dim)
    relative = spec.scale * np.einsum("hid,hjd->hij", qr, kr[kv])
    absolute = absolute_logits(q, k, spec, n, positions=positions)
    attended = _inputs.causal_mask(N, spec.window)  # (N, N) bool
    count = attended.sum(-1, keepdims=True)
    out = np.empty(h)
    energies = []
    for part in (relative, absolute):
        x = np.where(attended, part, 0.0)
        centred = np.where(attended, x - x.sum(-1, keepdims=True) / count, 0.0)
        energies.append(np.einsum("hij,hij->h", centred, centred))
    total = energies[0] + energies[1]
    out[:] = np.where(total > 0, energies[1] / np.where(total > 0, total, 1.0), np.nan)
    return out
