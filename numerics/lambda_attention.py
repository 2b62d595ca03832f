r"""LM-Infinite's Lambda-shaped attention with the distance cap (docs/theory.md section 4).

docs/theory.md section 4, length extrapolation: beyond the training length ``L``
only ``f`` (and ``E``) meet unseen angles; capping the distance,
``Delta -> min(Delta, L)``, keeps ``f`` inside its trained range. LM-Infinite
(Han et al., NAACL 2024) adds a Lambda-shaped mask. This module follows the
authors' public reference implementation (repository ``Glaciohound/LM-Infinite``,
``models/lambda_attention.py`` and the ``limited_distance_forward`` of
``models/llama.py``):

- **mask** (by index): query ``i`` attends to key ``j`` iff ``j <= i`` and
  (``i - j < n_local`` or ``j < n_global``); everything in between is masked.
  The reference's local branch is the band ``0 <= i - j <= n_local - 1``
  (``triu(1).tril(local_branch)`` of a ``(L, 2L)`` block pair), its global
  branch the first ``n_global`` keys further away.
- **cap** (by distance ``Delta_ij = p_i - p_j``): a pair farther than ``cap``
  takes the logit at distance ``cap``, :math:`s\,(R(L) q_i)^\top k_j`, the
  reference's "stationary" query (rotated by ``L``) against unrotated keys
  (``limit_distance``; ``convert_llama_model`` sets it to ``local_branch``):

.. math::
    W^{\Lambda}_{ij} = \begin{cases}
        s\,\langle R(p_i) q_i, R(p_j) k_j\rangle & \Delta_{ij} \le L \\
        s\,\langle R(L) q_i, k_j\rangle = f(q_i, L) + g(q_i, k_j) + E_{ij}(L)
          & \Delta_{ij} > L \end{cases},
    \qquad A = \mathrm{softmax}_{j \in \Lambda(i)} W^{\Lambda}_{ij}

One softmax spans the local band and the global keys together, as in the
reference (the two logit blocks are concatenated before the softmax).
:func:`lambda_attention` computes it blockwise: blocks of ``n_local`` queries
against their own and the previous block of keys (``(L, 2L)`` logits per
block) plus a ``(N, n_global)`` product, so memory grows as
``N (2 n_local + n_global)`` instead of ``N^2``. Without a local limit it
is the dense causal attention (with the cap where one is given).

The split under the cap is :func:`ropesplit.numerics.split.split_head` with ``cap=``;
the length experiment's statistics (the loss per position bucket, the trained ranges
and the shares outside them) are :mod:`ropesplit.numerics.length`.

Shapes::

    query, query_far  (B, H, N, d)     rotated queries; R(L) q (the cap's)
    key, key_far      (B, Hkv, N, d)   rotated keys; unrotated k (the cap's)
    value             (B, Hkv, N, dv)  H a multiple of Hkv (grouped-query attention)
    positions         (B, N) or (N,)   position ids p_n (distances p_i - p_j)
    out               (B, H, N, dv)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.rope import check_rotary_dim, pair_coordinates

__all__ = [
    "N_GLOBAL",
    "LambdaSpec",
    "VANILLA",
    "far_query_key",
    "lambda_attention",
    "lambda_mask",
    "logit_elements",
]

N_GLOBAL = 10  # starting tokens every query keeps (LM-Infinite's global branch in the paper)


def _check_sizes(n_local: int | None, n_global: int, cap: int | None) -> None:
    if n_local is not None and n_local < 1:
        raise RopesplitError(f"n_local must be at least 1 or None, got {n_local}")
    if n_global < 0:
        raise RopesplitError(f"n_global must be >= 0, got {n_global}")
    if cap is not None and cap < 0:
        raise RopesplitError(f"distance cap must be >= 0, got {cap}")


@dataclass(frozen=True)
class LambdaSpec:
    """What the attention does: ``n_local`` window (None: all), ``n_global`` starts, ``cap``."""

    n_local: int | None = None  # previous tokens each query sees (i - j < n_local); None: all
    n_global: int = N_GLOBAL  # starting tokens every query sees beyond the window
    cap: int | None = None  # distances above it are evaluated at it; None: true distances

    def __post_init__(self) -> None:
        _check_sizes(self.n_local, self.n_global, self.cap)

    @property
    def is_vanilla(self) -> bool:
        """Dense causal attention at the true distances: the unmodified model."""
        return self.n_local is None and self.cap is None


VANILLA = LambdaSpec()  # dense causal attention, true distances


def lambda_mask(n_tokens: int, n_local: int | None = None, n_global: int = N_GLOBAL) -> np.ndarray:
    r"""The Lambda-shaped mask ``(N, N)`` bool, by index.

    .. math:: \Lambda_{ij} = [j \le i]\,\big([i - j < n_{local}] \lor [j < n_{global}]\big)

    ``n_local=None`` is the plain causal mask.

    >>> lambda_mask(5, 2, 1).astype(int).tolist()
    [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [1, 0, 0, 1, 1]]
    """
    _check_sizes(n_local, n_global, None)
    i, j = np.indices((n_tokens, n_tokens))
    mask = j <= i
    if n_local is not None:
        mask &= (i - j < n_local) | (j < n_global)
    return mask


def far_query_key(
    q: torch.Tensor,
    k: torch.Tensor,
    theta: Any,
    cap: int,
    *,
    amplitude: float = 1.0,
    layout: str = "half",
    rotary_dim: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The cap's query and key from pre-RoPE ``q (..., N, d)``, ``k (..., N, d)``.

    .. math:: \tilde q^{\mathrm{far}}_l = a\,\tilde q_l\, e^{i L \theta_l},\qquad
              \tilde k^{\mathrm{far}}_l = a\,\tilde k_l \qquad (\text{rotating pairs; } a = 1,
              \ \theta = 0 \text{ for the rest})

    so that :math:`\langle q^{\mathrm{far}}, k^{\mathrm{far}}\rangle = a^2 \langle R(L) q,
    k\rangle` is the logit at distance ``L`` of a model whose RoPE table is
    ``a cos(p theta)``, ``a sin(p theta)`` (``a`` the attention factor, 1 for
    plain RoPE).
    """
    (d,) = q.shape[-1:]
    r = check_rotary_dim(d, rotary_dim)
    th = np.asarray(theta, dtype=np.float64)
    if th.shape != (d // 2,):
        raise RopesplitError(f"theta must have shape ({d // 2},) for head_dim {d}, got {th.shape}")
    re, im = (torch.as_tensor(x, device=q.device) for x in pair_coordinates(d, r, layout))
    rotating = np.arange(d // 2) < r // 2  # (P,)
    gain = np.where(rotating, amplitude, 1.0)  # (P,)
    cos = torch.as_tensor(gain * np.cos(cap * th), dtype=q.dtype, device=q.device)  # (P,)
    sin = torch.as_tensor(gain * np.where(rotating, np.sin(cap * th), 0.0), dtype=q.dtype,
                          device=q.device)  # fmt: skip
    q_far = torch.empty_like(q)
    q_far[..., re] = q[..., re] * cos - q[..., im] * sin
    q_far[..., im] = q[..., re] * sin + q[..., im] * cos
    k_gain = torch.ones(d, dtype=k.dtype, device=k.device)  # (d,)
    k_gain[re[: r // 2]] = amplitude
    k_gain[im[: r // 2]] = amplitude
    return q_far, k * k_gain


def _distances(positions: Any, batch: int, n_tokens: int, device: torch.device) -> torch.Tensor:
    """Position ids as a ``(B, N)`` int64 tensor (default ``0..N-1``)."""
    if positions is None:
        return torch.arange(n_tokens, device=device).expand(batch, n_tokens)
    p = torch.as_tensor(positions, device=device).long()
    if p.ndim == 1:
        p = p.expand(batch, n_tokens)
    if p.shape != (batch, n_tokens):
        raise RopesplitError(
            f"positions must be (N,) or ({batch}, {n_tokens}), got {tuple(p.shape)}"
        )
    return p


def _grouped(x: torch.Tensor, n_kv: int) -> torch.Tensor:
    """``(B, H, N, e)`` -> ``(B, Hkv, H/Hkv, N, e)``; keys stay ``(B, Hkv, 1, N, e)``."""
    (batch, heads, n_tokens, e) = x.shape
    return x.reshape(batch, n_kv, heads // n_kv, n_tokens, e)


def lambda_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scaling: float,
    spec: LambdaSpec = VANILLA,
    *,
    far: tuple[torch.Tensor, torch.Tensor] | None = None,
    positions: Any = None,
) -> torch.Tensor:
    r"""Attention under the Lambda mask and the distance cap, ``(B, H, N, dv)``.

    .. math:: \mathrm{out}_i = \sum_{j \in \Lambda(i)}
              \mathrm{softmax}_{j \in \Lambda(i)}\big(W^{\Lambda}_{ij}\big)\, v_j,\qquad
              W^{\Lambda}_{ij} = s\,q_i^\top k_j\ [\Delta_{ij} \le L],\quad
              s\,(q^{\mathrm{far}}_i)^\top k^{\mathrm{far}}_j\ [\Delta_{ij} > L]

    ``query``/``key`` are rotated (as the model's attention receives them);
    ``spec`` (:class:`LambdaSpec`) holds ``n_local``, ``n_global`` and the cap
    ``L``; ``far`` is the cap's ``(query_far, key_far)`` (:func:`far_query_key`),
    needed only with a cap.  ``n_local=None`` (or ``>= N``) is dense causal
    attention; otherwise blockwise (module docstring).  The softmax runs in at
    least float32, as transformers' eager attention does.
    """
    n_local, n_global, cap = spec.n_local, spec.n_global, spec.cap
    (batch, heads, n_tokens, d), (n_kv,) = query.shape, key.shape[1:2]
    if key.shape != (batch, n_kv, n_tokens, d) or value.shape[:3] != (batch, n_kv, n_tokens):
        raise RopesplitError(
            f"key/value must be (B, Hkv, N, .) with query {tuple(query.shape)}, got "
            f"{tuple(key.shape)} and {tuple(value.shape)}"
        )
    if heads % n_kv:
        raise RopesplitError(f"{heads} query heads do not divide into {n_kv} KV heads")
    grouped_far = None
    if cap is not None:
        if far is None:
            raise RopesplitError("a distance cap needs far=(query_far, key_far) (far_query_key)")
        query_far, key_far = far
        if query_far.shape != query.shape or key_far.shape != key.shape:
            raise RopesplitError("query_far/key_far must have the shapes of query/key")
        grouped_far = (_grouped(query_far, n_kv), key_far[:, :, None])
    pos = _distances(positions, batch, n_tokens, query.device)  # (B, N)
    q, k, v = _grouped(query, n_kv), key[:, :, None], value[:, :, None]  # (B, Hkv, g|1, N, .)
    if n_local is None or n_local >= n_tokens:
        out = _dense(q, k, v, scaling, cap, grouped_far, pos)
    else:
        banded = replace(spec, n_global=min(n_global, n_tokens))
        out = _banded(q, k, v, scaling, banded, grouped_far, pos)
    return out.reshape(batch, heads, n_tokens, -1)  # (B, H, N, dv)


def _softmax_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least float32, as transformers' eager attention takes its softmax."""
    return torch.promote_types(dtype, torch.float32)


def _softmax(logits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Softmax over the last axis in at least float32, back in ``dtype``."""
    return torch.softmax(logits, dim=-1, dtype=_softmax_dtype(dtype)).to(dtype)


def _capped(
    near: torch.Tensor, far_logits: Any, distance: torch.Tensor, cap: int | None
) -> torch.Tensor:
    """``near`` where ``distance <= cap``, ``far_logits()`` elsewhere (computed only if needed).

    ``distance`` is ``(B, ...)`` without the head axes of ``near`` ``(B, Hkv, g, ...)``.
    """
    if cap is None:
        return near
    beyond = (distance > cap)[:, None, None]  # (B, 1, 1, ...)
    if not bool(beyond.any()):
        return near
    return torch.where(beyond, far_logits(), near)


def _dense(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scaling: float,
    cap: int | None,
    far: Any,
    pos: torch.Tensor,
) -> torch.Tensor:
    """Dense causal attention ``(B, Hkv, g, N, dv)``, distances above ``cap`` at ``cap``."""
    (n_tokens,) = q.shape[-2:-1]
    logits = torch.matmul(q, k.transpose(-1, -2)) * scaling  # (B, Hkv, g, N, N)
    logits = _capped(
        logits, lambda: torch.matmul(far[0], far[1].transpose(-1, -2)) * scaling,
        pos[:, :, None] - pos[:, None, :], cap,
    )  # fmt: skip
    idx = torch.arange(n_tokens, device=q.device)
    causal = idx[None, :] <= idx[:, None]  # (N, N)
    probs = _softmax(logits.masked_fill(~causal, -math.inf), q.dtype)  # (B, Hkv, g, N, N)
    return torch.matmul(probs, v)


def _blocks(x: torch.Tensor, size: int, n_blocks: int) -> torch.Tensor:
    """``(..., N, e)`` zero-padded to ``n_blocks * size`` rows -> ``(..., n_blocks, size, e)``."""
    (n_tokens, e) = x.shape[-2:]
    pad = torch.zeros(*x.shape[:-2], n_blocks * size - n_tokens, e, dtype=x.dtype, device=x.device)
    return torch.cat((x, pad), dim=-2).reshape(*x.shape[:-2], n_blocks, size, e)


def _pair(blocks: torch.Tensor) -> torch.Tensor:
    """Each block preceded by the previous one: ``(..., nb, L, e)`` -> ``(..., nb, 2L, e)``.

    Block 0's predecessor is zeros (masked).
    """
    previous = torch.cat((torch.zeros_like(blocks[..., :1, :, :]), blocks[..., :-1, :, :]), dim=-3)
    return torch.cat((previous, blocks), dim=-2)


def _banded(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scaling: float,
    spec: LambdaSpec,
    far: Any,
    pos: torch.Tensor,
) -> torch.Tensor:
    """Local band blockwise plus the global keys, one softmax: ``(B, Hkv, g, N, dv)``.

    ``spec.n_local`` is set and below ``N``; ``spec.n_global`` is at most ``N``.
    """
    (batch, n_kv, group, n_tokens, _) = q.shape
    n_local, n_global, cap = spec.n_local, spec.n_global, spec.cap
    assert n_local is not None  # the dense branch takes n_local=None
    size, n_blocks = n_local, -(-n_tokens // n_local)
    rows = n_blocks * size  # padded length
    # local band: queries of block b against keys of blocks b-1 and b
    qb = _blocks(q, size, n_blocks)  # (B, Hkv, g, nb, L, d)
    kp = _pair(_blocks(k, size, n_blocks))  # (B, Hkv, 1, nb, 2L, d)
    band = torch.matmul(qb, kp.transpose(-1, -2)).mul_(scaling)  # (B, Hkv, g, nb, L, 2L)
    r = torch.arange(size, device=q.device)[:, None]  # (L, 1) query row in its block
    c = torch.arange(2 * size, device=q.device)[None, :]  # (1, 2L) key column in the pair
    b = torch.arange(n_blocks, device=q.device)[:, None, None]  # (nb, 1, 1)
    i, j = b * size + r, (b - 1) * size + c  # (nb, L, 2L) each: query and key index
    gap = i - j
    allowed = (gap >= 0) & (gap < n_local) & (j >= 0) & (j < n_tokens)  # (nb, L, 2L)
    allowed |= (i >= n_tokens) & (gap == 0)  # padded rows: a finite dummy entry (dropped)
    if cap is not None:
        pad_pos = torch.cat((pos, pos.new_zeros(batch, rows - n_tokens)), dim=1)  # (B, rows)
        qpos = pad_pos.reshape(batch, n_blocks, size, 1)  # (B, nb, L, 1)
        kpos = _pair(pad_pos.reshape(batch, n_blocks, size, 1)).transpose(-1, -2)  # (B, nb, 1, 2L)
        band_dist = torch.where(allowed, qpos - kpos, torch.zeros_like(qpos - kpos))
        band = _capped(
            band, lambda: torch.matmul(_blocks(far[0], size, n_blocks),
                                       _pair(_blocks(far[1], size, n_blocks)).transpose(-1, -2))
            * scaling, band_dist, cap,
        )  # fmt: skip
    band = band.masked_fill_(~allowed, -math.inf).to(_softmax_dtype(q.dtype))
    band = band.reshape(batch, n_kv, group, rows, 2 * size)  # (B, Hkv, g, rows, 2L)
    # global branch: the first n_global keys, only where they lie outside the band
    kg = k[..., :n_global, :]  # (B, Hkv, 1, G, d)
    glob = torch.matmul(q, kg.transpose(-1, -2)).mul_(scaling)  # (B, Hkv, g, N, G)
    idx = torch.arange(n_tokens, device=q.device)
    outside = idx[:, None] - idx[None, :n_global] >= n_local  # (N, G)
    if cap is not None:
        glob = _capped(
            glob, lambda: torch.matmul(far[0], far[1][..., :n_global, :].transpose(-1, -2))
            * scaling, pos[:, :, None] - pos[:, None, :n_global], cap,
        )  # fmt: skip
    glob = glob.masked_fill_(~outside, -math.inf).to(band.dtype)
    pad = glob.new_full((*glob.shape[:-2], rows - n_tokens, n_global), -math.inf)
    glob = torch.cat((glob, pad), dim=-2)  # (B, Hkv, g, rows, G): small
    # one softmax over both pieces, in place (no (rows, G + 2L) copy)
    top = band.amax(-1, keepdim=True)  # (..., rows, 1): every row has a finite band entry
    if n_global:
        top = torch.maximum(top, glob.amax(-1, keepdim=True))
    glob, band = glob.sub_(top).exp_(), band.sub_(top).exp_()
    total = glob.sum(-1, keepdim=True).add_(band.sum(-1, keepdim=True))  # (..., rows, 1)
    glob, band = glob.div_(total).to(q.dtype), band.div_(total).to(q.dtype)
    out = torch.matmul(glob[..., :n_tokens, :], v[..., :n_global, :])  # (B, Hkv, g, N, dv)
    pb = band.reshape(batch, n_kv, group, n_blocks, size, 2 * size)  # (B, Hkv, g, nb, L, 2L)
    vp = _pair(_blocks(v, size, n_blocks))  # (B, Hkv, 1, nb, 2L, dv)
    local = torch.matmul(pb, vp).reshape(batch, n_kv, group, rows, -1)  # (B, Hkv, g, rows, dv)
    return out.add_(local[..., :n_tokens, :])


def logit_elements(n_tokens: int, n_local: int | None, n_global: int = N_GLOBAL) -> int:
    r"""Logits held per head: ``N^2`` dense, ``N' (2 n_local) + N n_global`` blockwise.

    .. math:: N' = \lceil N / n_{local} \rceil\, n_{local}

    >>> logit_elements(1024, None), logit_elements(1024, 128, 10)
    (1048576, 272384)
    """
    _check_sizes(n_local, n_global, None)
    if n_local is None or n_local >= n_tokens:
        return n_tokens * n_tokens
    rows = -(-n_tokens // n_local) * n_local
    return rows * 2 * n_local + n_tokens * min(n_global, n_tokens)
