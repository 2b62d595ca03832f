r"""The two ``O(N^2)`` parts of :mod:`.stats` as dense torch blocks on any device (CUDA, CPU).

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

How: blocks of query rows ``i0 .. i1`` against the columns ``j0 .. i1`` they
can see, as ``(H, rows, cols)`` matrix products (the moments) or
``(H, rows, cols, P)`` terms (the bound), masked to the band; one block's
temporaries stay within :data:`_BLOCK_BYTES`.  The numbers are those of
:func:`.stats.row_moments` and :func:`.stats.tightness` (the numba path) up
to the order of the sums: the same pair sample, the same angles (whole-number
positions counted in steps as :func:`.stats.whole_steps` says), the same
:math:`u` (:func:`.bound.rotation_gap`).  Every result is gathered to the
host once per group of heads: no synchronisation inside the block loops.

Shapes::

    a, u^m      (H, N, c)      query features (u^m per reference, stacked (M, H, N, c))
    y, b, delta (Hkv, N, c)    key features; query head h reads kv[h]
    qc, dc      (H, N, P)      complex query pairs, the key-deviation pairs each head reads
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ropesplit.numerics.bound import ATOL, RTOL, rotation_gap
from ropesplit.numerics.pairing import BoundCheck, Factors, Moments, pair_indices, pair_plan

__all__ = ["row_moments", "tightness"]

_BLOCK_BYTES = 2**28  # temporaries of one block of query rows
_STORE_BYTES = 2**32  # one group of heads' ratios, with their sort (about 3 copies)

_Parts = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # real, imaginary, modulus


def row_moments(f: Factors, window: int | None, device: torch.device | str) -> Moments:
    r""":math:`S^{WW} (H, N)`, :math:`S^{WE}, S^{EE} (M, H, N)` over the band, as
    :func:`.stats.row_moments`, computed on ``device`` (returned on the CPU, float64).

    Per block of query rows: :math:`W = A Y^\top`, :math:`E^m = A B^\top - U^m \Delta^\top`
    (``Y, B, Delta`` the columns of the KV head each query head reads), zero
    outside the band, and their row sums of :math:`W^2`, :math:`WE^m`, :math:`(E^m)^2`.
    """
    dev = torch.device(device)
    h, n, _ = f.a.shape
    refs = len(f.us)
    heads = torch.from_numpy(np.asarray(f.kv, dtype=np.int64)).to(dev)
    a = f.a.to(dev, torch.float64)
    u = f.us.to(dev, torch.float64)  # (M, H, N, c)
    y, b, dp = (x.to(dev, torch.float64) for x in (f.y, f.b, f.dp))  # (Hkv, N, c)
    s_ww = torch.zeros(h, n, dtype=torch.float64, device=dev)
    s_we, s_ee = torch.zeros(2, refs, h, n, dtype=torch.float64, device=dev)
    cells = _BLOCK_BYTES // (8 * h * (3 + 2 * refs))  # W, A B^T, E^m and one product of them
    for i0, i1, j0 in _query_blocks(n, window, cells):
        keep = _band(i0, i1, j0, window, dev)  # (rows, cols)
        w = (a[:, i0:i1] @ y[heads, j0:i1].mT).masked_fill_(~keep, 0.0)  # (H, rows, cols)
        e = torch.matmul(u[:, :, i0:i1], dp[heads, j0:i1].mT).neg_()  # (M, H, rows, cols)
        e.add_(a[:, i0:i1] @ b[heads, j0:i1].mT).masked_fill_(~keep, 0.0)
        s_ww[:, i0:i1] = torch.linalg.vecdot(w, w)
        s_we[:, :, i0:i1] = torch.linalg.vecdot(w, e)
        s_ee[:, :, i0:i1] = torch.linalg.vecdot(e, e)
    # sums of squares: >= 0 but for rounding, as the compiled path returns them
    return s_ww.clamp_(min=0.0).cpu(), s_we.cpu(), s_ee.clamp_(min=0.0).cpu()


def tightness(
    check: BoundCheck, pair_budget: int | None, seed: int, device: torch.device | str
) -> list[tuple[float, float, int | None, int]]:
    r"""Per head ``(max, median, sampled_pairs, violations)`` of :math:`|E_{ij}|/B_{ij}`,
    as :func:`.stats.tightness`, evaluated on ``device``.

    ``check`` (:class:`~.pairing.BoundCheck`): ``qc, dc (H, N, P)`` complex,
    ``theta (P,)``, positions ``pq, pk (N,)``, the scale and window, ``gap``
    :math:`1 - m_l` ``(P,)`` complex (None: :math:`m_l = 1`).  Exact
    over every causal pair (blocks of query rows) unless ``pair_budget`` is
    below their number: then the seeded sample :func:`.stats.tightness`
    draws (the same pairs).  Pairs with :math:`B = 0` have no ratio (they
    count as violations only when :math:`|E| > \mathrm{ATOL}`).
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
    out: list[tuple[float, float, int | None, int]] = []
    group = max(1, min(h, _STORE_BYTES // (3 * 8 * size)))
    for h0 in range(0, h, group):
        hs = slice(h0, min(h, h0 + group))
        q, d = tuple(x[hs] for x in q_all), tuple(x[hs] for x in d_all)
        hg = q[0].shape[0]
        cells = _BLOCK_BYTES // (8 * max(p, 1) * (3 * hg + 8))  # 3 terms per head, 8 shared
        ratios, bad = [], torch.zeros(hg, dtype=torch.int64, device=dev)
        if sampling:
            for c0 in range(0, size, max(1, cells)):
                at = slice(c0, c0 + max(1, cells))
                e, bound = _remainder_terms(tuple(x[:, i[at]] for x in q),
                                            tuple(x[:, j[at]] for x in d),
                                            dist[at, None] * th, u_gap, s)  # fmt: skip  # (Hg, S)
                ratios.append(_ratios(e, bound, None))
                bad += _violations(e, bound, None)
        else:
            for i0, i1, j0 in _query_blocks(n, window, cells):
                keep = _band(i0, i1, j0, window, dev)  # (rows, cols)
                x = (pos_q[i0:i1, None] - pos_k[None, j0:i1])[..., None] * th  # (rows, cols, P)
                e, bound = _remainder_terms(tuple(v[:, i0:i1, None] for v in q),
                                            tuple(v[:, None, j0:i1] for v in d),
                                            x, u_gap, s)  # (Hg, rows, cols)  # fmt: skip
                ratios.append(_ratios(e, bound, keep).flatten(1))
                bad += _violations(e, bound, keep)
        top, median, valid = _summaries(torch.cat(ratios, 1))
        for t, m, v, k in zip(top.tolist(), median.tolist(), valid.tolist(), bad.tolist(),
                              strict=True):  # fmt: skip
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


def _complex_parts(z: np.ndarray, device: torch.device) -> _Parts:
    """``(Re z, Im z, |z|)`` of complex pairs as float64 tensors on ``device``."""
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
    x: torch.Tensor,
    gap: tuple[torch.Tensor, torch.Tensor] | None,
    s: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(E, B)`` term by term for broadcast query and key-deviation pairs at angles ``x``.

    ``q, dev``: ``(Re, Im, |.|)`` broadcasting to ``(..., P)``, ``x (..., P)``
    the angles :math:`\theta_l\Delta`; with :math:`\tilde q = a + ib`,
    :math:`\tilde\delta = \delta_c + i\delta_e` and :math:`u = e^{ix} - m`
    from half angles (no cancellation near ``x = 0``):

    .. math:: E = s\sum_l\big[(a\delta_c + b\delta_e)\,\mathrm{Re}\,u_l
              + (a\delta_e - b\delta_c)\,\mathrm{Im}\,u_l\big],\qquad
              B = s\sum_l |\tilde q_l||\tilde\delta_l||u_l|
    """
    a, b, q_abs = q
    d_re, d_im, d_abs = dev
    u_re, u_im = rotation_gap(torch.sin(0.5 * x), torch.cos(0.5 * x))  # e^{ix} - 1
    if gap is not None:
        u_re, u_im = gap[0] + u_re, gap[1] + u_im  # e^{ix} - m
    real = (a * d_re).addcmul_(b, d_im).mul_(u_re)  # Re(q conj delta) Re u
    real.addcmul_((a * d_im).addcmul_(b, d_re, value=-1.0), u_im)  # + (-Im q conj delta) Im u
    modulus = (q_abs * d_abs).mul_(torch.hypot(u_re, u_im))
    return s * real.sum(-1), s * modulus.sum(-1)


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
    ``v//2`` among the ``v`` valid values (:func:`.stats._summary`); max and
    median are meaningless where ``v = 0``.
    """
    length = ratio.shape[1]
    left_out = (ratio == -math.inf).sum(-1, keepdim=True)  # (Hg, 1)
    valid = length - left_out
    ordered = torch.sort(ratio, -1).values  # the left-out first
    ranks = torch.cat([left_out + (valid - 1) // 2, left_out + valid // 2], -1)
    low, high = ordered.gather(-1, ranks.clamp_(max=length - 1)).unbind(-1)
    return ordered[:, -1], 0.5 * (low + high), valid[:, 0]
