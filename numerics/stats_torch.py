r"""The two ``O(N^2)`` parts of :mod:`.stats` in torch on any device (CUDA, CPU).

Over the causal band :math:`\mathcal M_i = \{j : j \le i,\ i - j < \mathrm{window}\}`
(no window: every ``j <= i``), with the real features of :class:`.pairing.Factors`:

.. math::
    W_{ij} = a_i\cdot y_j,\qquad E^m_{ij} = a_i\cdot b_j - u^m_i\cdot\delta_j,\qquad
    S^{WW}_i = \sum_{j\in\mathcal M_i} W_{ij}^2,\quad
    S^{WE}_{mi} = \sum_{j\in\mathcal M_i} W_{ij}E^m_{ij},\quad
    S^{EE}_{mi} = \sum_{j\in\mathcal M_i} (E^m_{ij})^2

(:func:`row_moments`), and per causal pair, term by term (:mod:`.bound`),

.. math::
    E_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\,\overline{\tilde\delta_{jl}}\,u_{ijl},\qquad
    B_{ij} = s\sum_l |\tilde q_{il}|\,|\tilde\delta_{jl}|\,|u_{ijl}|,\qquad
    u_{ijl} = e^{i\theta_l\Delta_{ij}} - m_l,\quad \Delta_{ij} = p_i - p'_j

with :math:`m_l = 1` unless a reference gap :math:`1 - m_l` is given; the
tightness is :math:`|E_{ij}|/B_{ij}` over the pairs with :math:`B_{ij} > 0`
(its max and median, the mean of the order statistics of ranks
:math:`\lfloor (n-1)/2\rfloor` and :math:`\lfloor n/2\rfloor`), and a violation is
:math:`|E| > B(1 + \mathrm{RTOL}) + \mathrm{ATOL}` (:func:`.bound.violations`)
(:func:`tightness`).

How: with no window the moments are those of :func:`.stats.row_moments`' split, prefix
sums of the keys' outer products for the columns before each block of
:data:`.pairing.BLOCK_ROWS` rows and dense products for the block's own triangle; with a window,
blocks of query rows ``i0 .. i1`` against the columns ``j0 .. i1`` they see, masked to
the band. The bound is summed one pair ``l`` at a time over such a block's
``(H, rows, cols)``, so no pair axis is held. One block's temporaries stay within
:data:`_BLOCK_BYTES`.  The numbers are those of :func:`.stats.row_moments` and
:func:`.stats.tightness` (the numba path) up to the order of the sums (1e-12 relative on
the golden fixture): the same pair sample, the same angles (whole-number positions
counted in steps as :func:`.stats.whole_steps` says), the same :math:`u`
(:func:`.bound.rotation_gap`).  The moments stay on the device; the bound check's
per-head summaries come to the host once per group of heads (the median's ranks once
before its selection): no synchronisation inside the block loops.

Shapes::

    a, u^m      (H, N, c)      query features (u^m per reference, stacked (M, H, N, c))
    y, b, delta (Hkv, N, c)    key features; query head h reads kv[h]
    qc, dc      (H, N, P)      complex query pairs, the key-deviation pairs each head reads
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ropesplit.numerics import pairing
from ropesplit.numerics.bound import ATOL, RTOL, rotation_gap
from ropesplit.numerics.pairing import BoundCheck, Factors, Moments, pair_indices, pair_plan

__all__ = ["row_moments", "tightness"]

_BLOCK_BYTES = 2**28  # temporaries of one block of query rows
_STORE_BYTES = 2**32  # one group of heads' ratios, with their sort (about 3 copies)

_Parts = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # real, imaginary, modulus


def row_moments(f: Factors, window: int | None, device: torch.device | str) -> Moments:
    r"""The moments of the band's pairs (:class:`.pairing.Moments`) as
    :func:`.stats.row_moments`, computed on ``device`` and left there (float64).

    With no window, as the compiled path splits them: the columns before each block of
    :data:`.pairing.BLOCK_ROWS` rows from prefix sums of the keys' outer products
    (:func:`.pairing.prefix_moments`, ``O(N c^2)``, batched matrix products), and each
    block's own triangle per row as dense ``(rows, rows)`` products (:func:`_triangles`). With a
    window, blocks of query rows against the columns of their band: :math:`W = A Y^\top`,
    :math:`E^m = A B^\top - U^m \Delta^\top`, zero outside the band, and their row sums of
    :math:`W^2`, :math:`WE^m`, :math:`(E^m)^2`.
    """
    f = f.to(torch.device(device))
    moments = Moments.zeros(f.a.shape[0], f.a.shape[1], len(f.m), f.a.device)
    if window is None:
        pairing.prefix_moments(f, pairing.BLOCK_ROWS, moments)
        _triangles(f, moments.ww, moments.we, moments.ee)
    else:
        _band_moments(f, window, moments.ww, moments.we, moments.ee)
    return moments


def _triangles(f: Factors, s_ww: torch.Tensor, s_we: torch.Tensor, s_ee: torch.Tensor) -> None:
    """Add each row's pairs inside its own block of :data:`.pairing.BLOCK_ROWS` rows (``j`` from the
    block's first row to ``i``) into the moments, in place: spans of blocks at once."""
    h, n, c = f.a.shape
    dev, block = f.a.device, pairing.BLOCK_ROWS
    heads = torch.from_numpy(np.asarray(f.kv, dtype=np.int64)).to(dev)
    lower = torch.ones(block, block, dtype=torch.bool, device=dev).tril_()  # j <= i in a block
    refs = len(f.us)
    span = max(1, _BLOCK_BYTES // (8 * h * block * block * (3 + 2 * refs)))  # blocks at once
    for t0 in range(0, n, span * block):
        t1 = min(n, t0 + span * block)
        a = pairing.row_blocks(f.a, t0, t1, block)  # (H, nb, B, c)
        y, b, dp = (pairing.row_blocks(x, t0, t1, block)[heads] for x in (f.y, f.b, f.dp))
        w = (a @ y.mT).masked_fill_(~lower, 0.0)  # (H, nb, B, B)
        e = torch.stack([pairing.row_blocks(u, t0, t1, block) for u in f.us]) @ dp.mT
        e = e.neg_().add_(a @ b.mT).masked_fill_(~lower, 0.0)  # (M, H, nb, B, B)
        s_ww[:, t0:t1] += torch.linalg.vecdot(w, w).flatten(1)[:, : t1 - t0]
        s_we[:, :, t0:t1] += torch.linalg.vecdot(w, e).flatten(2)[..., : t1 - t0]
        s_ee[:, :, t0:t1] += torch.linalg.vecdot(e, e).flatten(2)[..., : t1 - t0]


def _band_moments(
    f: Factors, window: int, s_ww: torch.Tensor, s_we: torch.Tensor, s_ee: torch.Tensor
) -> None:
    """The moments of every pair of a window's band, per row, into ``s_ww, s_we, s_ee``:
    blocks of query rows against the columns they see, as dense products masked to the
    band."""
    (h, n, _), dev = f.a.shape, f.a.device
    heads = torch.from_numpy(np.asarray(f.kv, dtype=np.int64)).to(dev)
    a, u, y, b, dp = f.a, f.us, f.y, f.b, f.dp
    cells = _BLOCK_BYTES // (8 * h * (3 + 2 * len(u)))  # W, A B^T, E^m and one product of them
    for i0, i1, j0 in _query_blocks(n, window, cells):
        keep = _band(i0, i1, j0, window, dev)  # (rows, cols)
        w = (a[:, i0:i1] @ y[heads, j0:i1].mT).masked_fill_(~keep, 0.0)  # (H, rows, cols)
        e = torch.matmul(u[:, :, i0:i1], dp[heads, j0:i1].mT).neg_()  # (M, H, rows, cols)
        e.add_(a[:, i0:i1] @ b[heads, j0:i1].mT).masked_fill_(~keep, 0.0)
        s_ww[:, i0:i1] = torch.linalg.vecdot(w, w)
        s_we[:, :, i0:i1] = torch.linalg.vecdot(w, e)
        s_ee[:, :, i0:i1] = torch.linalg.vecdot(e, e)


def tightness(
    check: BoundCheck, pair_budget: int | None, seed: int, device: torch.device | str
) -> list[tuple[float, float, int | None, int]]:
    r"""Per head ``(max, median, sampled_pairs, violations)`` of :math:`|E_{ij}|/B_{ij}`,
    as :func:`.stats.tightness`, evaluated on ``device``.

    ``check`` (:class:`~.pairing.BoundCheck`): ``qc, dc (H, N, P)`` complex (numpy, or
    tensors already on ``device``), ``theta (P,)``, positions ``pq, pk (N,)``, the scale
    and window, ``gap`` :math:`1 - m_l` ``(P,)`` complex (None: :math:`m_l = 1`).  Exact
    over every causal pair (blocks of query rows) unless ``pair_budget`` is below their
    number: then the seeded sample :func:`.stats.tightness` draws (the same pairs).  Pairs
    with :math:`B = 0` have no ratio (they count as violations only when
    :math:`|E| > \mathrm{ATOL}`).

    Fused: a block's :math:`E` and :math:`B` are summed one pair ``l`` at a time
    (:func:`_remainder_terms`), so no ``(heads, rows, cols, P)`` tensor is formed; the
    median is selected (``torch.kthvalue``), not sorted.
    """
    qc, dc, theta, pq, pk = check.qc, check.dc, check.theta, check.pq, check.pk
    s, window, gap = check.scale, check.window, check.gap
    dev = torch.device(device)
    h, n, p = qc.shape
    n_pairs, flat, whole = pair_plan(n, window, pair_budget, seed, pq, pk)
    sampling = flat is not None
    if whole is not None:  # Delta counted in steps, as the compiled path's distance table
        iq, ik, step = whole
        pq, pk, theta = iq.astype(np.float64), ik.astype(np.float64), theta * step
    th = torch.from_numpy(np.ascontiguousarray(theta, dtype=np.float64)).to(dev)
    u_gap = None if gap is None else _gap(gap, dev)
    q_all, d_all = _complex_parts(qc, dev), _complex_parts(dc, dev)  # (H, N, P) each
    sampled = None
    if flat is not None:
        sampled = flat.size
        i, j = (torch.from_numpy(v).to(dev) for v in pair_indices(n, window, flat))  # (S,) each
        dist = torch.from_numpy(pq).to(dev)[i] - torch.from_numpy(pk).to(dev)[j]  # (S,)
        size = sampled
    else:
        pos_q, pos_k = (torch.from_numpy(np.ascontiguousarray(v)).to(dev) for v in (pq, pk))
        size = 2 * n_pairs  # the row blocks' rectangles hold at most twice the pairs
    groups: list[tuple[torch.Tensor, ...]] = []  # per group of heads: max, median, valid, bad
    group = max(1, min(h, _STORE_BYTES // (8 * size)))
    for h0 in range(0, h, group):
        hs = slice(h0, min(h, h0 + group))
        q, d = tuple(x[hs] for x in q_all), tuple(x[hs] for x in d_all)
        hg = q[0].shape[0]
        cells = _BLOCK_BYTES // (8 * (5 * hg + 6))  # E, B and 3 products a head; 6 angle terms
        ratios, bad = [], torch.zeros(hg, dtype=torch.int64, device=dev)
        if sampling:
            for c0 in range(0, size, max(1, cells)):
                at = slice(c0, c0 + max(1, cells))
                e, bound = _remainder_terms(tuple(x[:, i[at]] for x in q),
                                            tuple(x[:, j[at]] for x in d),
                                            dist[at], th, u_gap, s)  # fmt: skip  # (Hg, S)
                ratios.append(_ratios(e, bound, None))
                bad += _violations(e, bound, None)
        else:
            for i0, i1, j0 in _query_blocks(n, window, cells):
                keep = _band(i0, i1, j0, window, dev)  # (rows, cols)
                e, bound = _remainder_terms(tuple(v[:, i0:i1, None] for v in q),
                                            tuple(v[:, None, j0:i1] for v in d),
                                            pos_q[i0:i1, None] - pos_k[None, j0:i1], th,
                                            u_gap, s)  # (Hg, rows, cols)  # fmt: skip
                ratios.append(_ratios(e, bound, keep).flatten(1))
                bad += _violations(e, bound, keep)
        groups.append((*_summaries(torch.cat(ratios, 1)), bad))
    summary = torch.stack([torch.cat(x).to(torch.float64) for x in zip(*groups, strict=True)])
    out: list[tuple[float, float, int | None, int]] = []
    for t, m, v, k in summary.T.tolist():  # the one copy back to the host
        out.append((t, m, sampled, int(k)) if v else (math.nan, math.nan, sampled, int(k)))
    return out


def _query_blocks(n: int, window: int | None, cells: int) -> list[tuple[int, int, int]]:
    """``(i0, i1, j0)``: rows ``i0 .. i1-1`` see columns ``j0 .. i1-1``; ``rows x cols <= cells``.

    A block's rectangle is its rows times ``rows + lag`` columns (``lag = i0 - j0``,
    the columns before its first row); with a window the rows stay within one
    window, so a rectangle never holds more than twice its band's pairs.
    """
    blocks, i0 = [], 0
    while i0 < n:
        lag = i0 if window is None else min(i0, window - 1)
        rows = max(1, (math.isqrt(lag * lag + 4 * max(cells, 1)) - lag) // 2)  # rows(rows+lag)
        if window is not None:
            rows = min(rows, window)
        i1 = min(n, i0 + rows)
        blocks.append((i0, i1, i0 - lag))
        i0 = i1
    return blocks


def _band(i0: int, i1: int, j0: int, window: int | None, device: torch.device) -> torch.Tensor:
    """``(i1 - i0, i1 - j0)`` bool: the block's pairs ``j <= i`` with ``i - j < window``."""
    back = (torch.arange(i0, i1, device=device)[:, None]
            - torch.arange(j0, i1, device=device)[None, :])  # i - j  # fmt: skip
    return (back >= 0) & (back < (i1 if window is None else window))


def _complex_parts(z: Any, device: torch.device) -> _Parts:
    """``(Re z, Im z, |z|)`` of complex pairs (numpy, or a tensor) as float64 tensors on
    ``device``."""
    if isinstance(z, torch.Tensor):
        z = z.to(device)
        re, im = z.real.to(torch.float64), z.imag.to(torch.float64)
    else:
        re, im = (torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64)).to(device)
                  for v in (z.real, z.imag))  # fmt: skip
    return re, im, torch.hypot(re, im)


def _gap(gap: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Re, Im)`` of :math:`1 - m_l` ``(P,)`` on ``device``."""
    g = np.asarray(gap, dtype=np.complex128)
    return (torch.from_numpy(g.real.copy()).to(device),
            torch.from_numpy(g.imag.copy()).to(device))  # fmt: skip


def _remainder_terms(
    q: tuple[torch.Tensor, ...],
    dev: tuple[torch.Tensor, ...],
    dist: torch.Tensor,
    theta: torch.Tensor,
    gap: tuple[torch.Tensor, torch.Tensor] | None,
    s: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(E, B)`` term by term for broadcast query and key-deviation pairs at distances
    ``dist``, summed one pair ``l`` at a time (no pair axis in memory).

    ``q, dev``: ``(Re, Im, |.|)`` ``(..., P)`` broadcasting against each other,
    ``dist`` broadcasting to their shape without the pair axis, the angles
    :math:`x_l = \theta_l\Delta`; with :math:`\tilde q = a + ib`,
    :math:`\tilde\delta = \delta_c + i\delta_e` and :math:`u = e^{ix} - m` from half
    angles (no cancellation near ``x = 0``):

    .. math:: E = s\sum_l\big[(a\delta_c + b\delta_e)\,\mathrm{Re}\,u_l
              + (a\delta_e - b\delta_c)\,\mathrm{Im}\,u_l\big],\qquad
              B = s\sum_l |\tilde q_l||\tilde\delta_l||u_l|
    """
    a, b, q_abs = q
    d_re, d_im, d_abs = dev
    shape = torch.broadcast_shapes(a.shape[:-1], d_re.shape[:-1], dist.shape)
    real, modulus = torch.zeros(2, *shape, dtype=torch.float64, device=dist.device)
    for pair in range(theta.shape[0]):
        half = (0.5 * theta[pair]) * dist
        u_re, u_im = rotation_gap(torch.sin(half), torch.cos(half))  # e^{ix} - 1
        if gap is not None:
            u_re, u_im = gap[0][pair] + u_re, gap[1][pair] + u_im  # e^{ix} - m
        al, bl, dr, di = a[..., pair], b[..., pair], d_re[..., pair], d_im[..., pair]
        term = (al * dr).addcmul_(bl, di).mul_(u_re)  # Re(q conj delta) Re u
        term.addcmul_((al * di).addcmul_(bl, dr, value=-1.0), u_im)  # + (-Im q conj delta) Im u
        real.add_(term)
        modulus.addcmul_(q_abs[..., pair] * d_abs[..., pair], torch.hypot(u_re, u_im))
    return s * real, s * modulus


def _ratios(e: torch.Tensor, bound: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """``|E| / B`` where ``B > 0`` (and inside ``keep``), ``-inf`` elsewhere: no ratio."""
    has = bound > 0 if keep is None else (bound > 0) & keep
    return torch.where(has, e.abs() / bound, -math.inf)


def _violations(e: torch.Tensor, bound: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Per head ``(Hg,)``: pairs (inside ``keep``) past :func:`.bound.violations`' tolerance."""
    past = e.abs() > bound * (1.0 + RTOL) + ATOL
    return (past if keep is None else past & keep).flatten(1).sum(-1)


def _summaries(ratio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(max, median, valid)`` per head of ``ratio (Hg, L)`` (``-inf``: no ratio), on its device.

    The median is the mean of the order statistics of ranks ``(v-1)//2`` and
    ``v//2`` among the ``v`` valid values (:func:`.stats._summary`), each selected
    (``torch.kthvalue``: no sort); max and median are meaningless where ``v = 0``.
    """
    length = ratio.shape[1]
    left_out = (ratio == -math.inf).sum(-1)  # (Hg,)
    valid = length - left_out
    top = ratio.amax(-1) if length else torch.full_like(valid, -math.inf, dtype=ratio.dtype)
    ranks = torch.stack([left_out + (valid - 1) // 2, left_out + valid // 2], -1)
    ranks = ranks.clamp_(0, max(length - 1, 0))
    median = torch.zeros(ratio.shape[0], dtype=ratio.dtype, device=ratio.device)
    for x, (low, high) in enumerate(ranks.tolist() if length else []):  # heads of this group
        pick = [torch.kthvalue(ratio[x], k + 1).values for k in dict.fromkeys((low, high))]
        median[x] = 0.5 * (pick[0] + pick[-1])
    return top, median, valid
