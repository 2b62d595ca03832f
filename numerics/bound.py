r"""The remainder of the split and its bound, pair by pair (docs/theory.md section 3).

For a query pair :math:`\tilde q_l`, a key-deviation pair :math:`\tilde\delta_l`
(the key minus the reference key) and the distance :math:`\Delta`:

.. math::
    E &= s\,\mathrm{Re}\sum_l \tilde q_l\,\overline{\tilde\delta_l}\,(e^{i\theta_l\Delta} - 1) \\
    |E| &\le s\sum_l |\tilde q_l|\,|\tilde\delta_l|\,2|\sin(\theta_l\Delta/2)|
       \le s\sum_l |\tilde q_l|\,|\tilde\delta_l|\,\min(2, \theta_l|\Delta|)

Under a reference rotation :math:`m_l` (docs/theory.md section 6, :mod:`.reference`)
:math:`e^{i\theta_l\Delta} - 1` becomes :math:`e^{i\theta_l\Delta} - m_l
= (e^{i\theta_l\Delta} - 1) + (1 - m_l)`, with ``1 - m`` supplied without
cancellation, and the bound :math:`s\sum_l |\tilde q_l||\tilde\delta_l|
|e^{i\theta_l\Delta} - m_l|`; the loose bound becomes
:math:`\min(1 + |m_l|, \theta_l|\Delta| + |1 - m_l|)` (triangle inequality).

``E`` is evaluated here term by term, with :math:`\cos x - 1 = -2\sin^2(x/2)`,
so every term carries its own small relative rounding error: the computed
``|E|`` exceeds the computed bound by at most about ``(P + 10) eps`` times the
bound, never by an absolute amount.  :data:`RTOL` (1e-12, safe for ``P`` up to
about 4000) and :data:`ATOL` (1e-300, the underflow floor) are the tolerance
of :func:`violations`; at ``Delta = 0`` both sides are exactly 0.

:func:`causal_ratios` evaluates the same terms on every causal pair of a
sequence whose distances are whole numbers (of a step), compiled with numba:
the angles then come from one table over the distances, and each pair's
:math:`|E|/B` is one fused loop over the frequencies, with no ``(N, N, P)``
temporaries.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ropesplit.numerics.mask import Mask, causal_window
from ropesplit.numerics.workers import serial

__all__ = ["ATOL", "RTOL", "CausalPairs", "causal_ratios", "pair_ratios", "remainder_and_bound",
           "rotation_gap", "violations"]

RTOL = 1e-12  # relative rounding allowance of |E| over the bound (float64)
ATOL = 1e-300  # absolute allowance: below this everything is underflow


def remainder_and_bound(
    q: Any,
    dev: Any,
    theta: Any,
    delta: Any,
    scale: float,
    *,
    loose: bool = False,
    one_minus_m: Any = None,
) -> tuple[torch.Tensor, ...]:
    r"""``(E, bound)`` (and ``bound_loose`` when ``loose``) for broadcast pairs of vectors.

    ``q`` and ``dev`` are complex pairs ``(..., P)`` (numpy or torch, or
    ``(real, imag)`` pairs of float64 tensors; they broadcast against each
    other), ``theta`` is ``(P,)`` and ``delta`` the distances ``(...)``; the
    results are float64 tensors of the broadcast shape ``(...)``.

    .. math::
        E = s\sum_l \big[(a\,\delta_c + b\,\delta_e)(-2\sin^2\tfrac{x_l}{2})
            + (a\,\delta_e - b\,\delta_c)\sin x_l\big],\quad x_l = \theta_l\Delta

    with :math:`\tilde q_l = a + ib`, :math:`\tilde\delta_l = \delta_c + i\delta_e`.
    ``one_minus_m`` ``(P,)`` complex (:attr:`.reference.Reference.one_minus`)
    switches to the reference :math:`m_l`: with :math:`u_l = e^{ix_l} - m_l`,

    .. math::
        E = s\sum_l \big[(a\,\delta_c + b\,\delta_e)\,\mathrm{Re}\,u_l
            + (a\,\delta_e - b\,\delta_c)\,\mathrm{Im}\,u_l\big],\qquad
        B = s\sum_l |\tilde q_l||\tilde\delta_l||u_l|
    """
    a, b = _parts(q)
    dc, de = _parts(dev)
    th = torch.as_tensor(theta, dtype=torch.float64)
    x = torch.as_tensor(delta, dtype=torch.float64).unsqueeze(-1) * th  # (..., P)
    half_sin, half_cos = torch.sin(0.5 * x), torch.cos(0.5 * x)  # (..., P)
    along = a * dc + b * de  # Re q conj(delta)
    across = a * de - b * dc  # -Im q conj(delta)
    mag = torch.hypot(a, b) * torch.hypot(dc, de)  # (..., P) after broadcasting
    if one_minus_m is None:
        # (e^{ix} - 1) = 2 sin(x/2) (-sin(x/2) + i cos(x/2)): no cancellation near x = 0
        e = (2.0 * half_sin * (across * half_cos - along * half_sin)).sum(-1)
        out = [scale * e, scale * (mag * (2.0 * half_sin.abs())).sum(-1)]
        if loose:
            out.append(scale * (mag * torch.clamp(x.abs(), max=2.0)).sum(-1))
        return tuple(out)
    gap = np.asarray(one_minus_m, dtype=np.complex128)  # (P,) 1 - m_l
    u_re, u_im = rotation_gap(half_sin, half_cos, gap)  # e^{ix} - m
    e = (along * u_re + across * u_im).sum(-1)
    out = [scale * e, scale * (mag * torch.hypot(u_re, u_im)).sum(-1)]
    if loose:
        m_abs = torch.from_numpy(np.abs(1.0 - gap))  # |m_l|
        cap = torch.minimum(1.0 + m_abs, x.abs() + torch.from_numpy(np.abs(gap)))
        out.append(scale * (mag * cap).sum(-1))
    return tuple(out)


def rotation_gap(
    half_sin: torch.Tensor, half_cos: torch.Tensor, one_minus_m: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(Re u, Im u)`` of :math:`u = e^{ix} - m = 2\sin\tfrac x2(-\sin\tfrac x2 + i\cos\tfrac x2)
    + (1 - m)` from the half angles: no cancellation near ``x = 0`` (``m = 1`` when None)."""
    u_re, u_im = -2.0 * half_sin * half_sin, 2.0 * half_sin * half_cos  # e^{ix} - 1
    if one_minus_m is None:
        return u_re, u_im
    gap = np.asarray(one_minus_m, dtype=np.complex128)  # (P,) 1 - m_l
    return torch.from_numpy(gap.real.copy()) + u_re, torch.from_numpy(gap.imag.copy()) + u_im


def _parts(z: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Real and imaginary parts of complex pairs as contiguous float64 tensors.

    ``z`` is complex (numpy or torch), or already a ``(real, imag)`` pair of
    float64 tensors (as gathered by the batched statistics).
    """
    if isinstance(z, tuple):
        return z
    z = np.asarray(z.numpy() if isinstance(z, torch.Tensor) else z, dtype=np.complex128)
    real, imag = np.ascontiguousarray(z.real), np.ascontiguousarray(z.imag)
    return torch.from_numpy(real), torch.from_numpy(imag)


def violations(e: torch.Tensor, bound: torch.Tensor) -> int:
    r"""Number of pairs with :math:`|E| > \mathrm{bound}(1 + \mathrm{RTOL}) + \mathrm{ATOL}`."""
    return int((e.abs() > bound * (1.0 + RTOL) + ATOL).sum())


def pair_ratios(
    qc: np.ndarray, dc: np.ndarray, theta: np.ndarray, pairs: tuple[np.ndarray, np.ndarray],
    delta: np.ndarray, scale: float, one_minus_m: Any = None, chunk: int = 512,
) -> tuple[list[torch.Tensor], list[int]]:  # fmt: skip
    r"""Per head the ratios :math:`|E_{ij}| / B_{ij}` at the listed pairs (those with
    :math:`B > 0`) and the count of violations (:func:`violations`).

    ``qc``, ``dc`` ``(H, N, P)`` are the query pairs and the key-deviation pairs each head
    reads, ``pairs = (i, j)`` ``(S,)`` the query and key index of each pair and ``delta``
    ``(S,)`` their distance :math:`\Delta_{ij}`; :func:`remainder_and_bound` runs on
    ``chunk`` pairs at a time, every head at once. The sampled tightness check and the
    check on any mask (:mod:`.masked`) are this one loop.
    """
    h = qc.shape[0]
    q_parts = [torch.from_numpy(np.ascontiguousarray(z)) for z in (qc.real, qc.imag)]
    d_parts = [torch.from_numpy(np.ascontiguousarray(z)) for z in (dc.real, dc.imag)]
    i, j = pairs
    ratios: list[list[torch.Tensor]] = [[] for _ in range(h)]
    bad = [0] * h
    for c0 in range(0, i.size, chunk):
        ti, tj = (torch.from_numpy(v[c0 : c0 + chunk]) for v in (i, j))
        e, bound = remainder_and_bound(
            (q_parts[0][:, ti], q_parts[1][:, ti]), (d_parts[0][:, tj], d_parts[1][:, tj]),
            theta, delta[c0 : c0 + chunk], scale, one_minus_m=one_minus_m,
        )  # (H, chunk)  # fmt: skip
        for x in range(h):
            pos = bound[x] > 0
            ratios[x].append(e[x][pos].abs() / bound[x][pos])
            bad[x] += violations(e[x], bound[x])
    return [torch.cat(r) if r else torch.zeros(0, dtype=torch.float64) for r in ratios], bad


def causal_ratios(
    q: np.ndarray,
    dev: np.ndarray,
    theta: np.ndarray,
    positions_q: np.ndarray,
    positions_k: np.ndarray,
    scale: float,
    *,
    window: int | Mask | None = None,
    one_minus_m: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""``|E| / B`` on every causal pair, and the violation count per head, term by term.

    ``q (H, N, P)`` and ``dev (H, N, P)`` are complex pairs (head ``h``'s
    queries and the key deviations it reads), ``positions_q`` and
    ``positions_k`` ``(N,)`` whole numbers (distances in units of the step
    ``theta`` is given in), ``window`` keeps ``i - j < window``.  For each pair
    ``j <= i`` (diagonal by diagonal, ``i - j = 0, 1, ...``; ``j`` ascending):

    .. math:: E = s\sum_l \big[(a\,\delta_c + b\,\delta_e)\,\mathrm{Re}\,u_l
                  + (a\,\delta_e - b\,\delta_c)\,\mathrm{Im}\,u_l\big],\quad
              B = s\sum_l |\tilde q_l||\tilde\delta_l||u_l|,\quad
              u_l = e^{i\theta_l\Delta} - m_l

    with ``u`` from half angles as in :func:`remainder_and_bound` (one table
    over the distances that occur).  Returns ``ratio (H, pairs)`` float64
    (``-inf`` where ``B = 0``: such pairs have no ratio) and ``violations (H,)``
    (pairs with :math:`|E| > B(1 + \mathrm{RTOL}) + \mathrm{ATOL}`, as
    :func:`violations`).  The sums run in any order the compiler picks
    (vectorised), which keeps the rounding argument above.
    """
    window = causal_window(window, "causal_ratios (diagonal by diagonal, j <= i)")
    pairs = CausalPairs(q, dev, theta, positions_q, positions_k, scale, window=window,
                        one_minus_m=one_minus_m)  # fmt: skip
    return pairs.ratios()


class CausalPairs:
    r"""The causal pairs of :func:`causal_ratios`, prepared once: ``|E|/B`` of all of them
    (:meth:`ratios`), a float32 screen of all of them (:meth:`screen`), or exactly those
    asked for (:meth:`exact`), each pair's float64 value the same expression in both
    (its sum's terms may be added in another order: a few ulps apart).

    The screen is what makes the exact check cheap (:func:`.stats.tightness`): a float32
    pass over every pair (twice the float64 lanes per vector register) locates the largest
    ratio, the median and any violation to within :meth:`eps`, and only the pairs that
    could be any of them are evaluated again in float64.  Pairs are numbered as
    :func:`causal_ratios` lays them out: diagonal by diagonal, ``j`` ascending.
    """

    def __init__(self, q: np.ndarray, dev: np.ndarray, theta: np.ndarray,
                 positions_q: np.ndarray, positions_k: np.ndarray, scale: float, *,
                 window: int | None = None, one_minus_m: Any = None) -> None:  # fmt: skip
        qc = np.asarray(q, dtype=np.complex128)
        dc = np.asarray(dev, dtype=np.complex128)
        self.heads, n, self.p = qc.shape
        iq = np.asarray(positions_q, dtype=np.int64)
        self.ik = np.asarray(positions_k, dtype=np.int64)
        span = n if window is None else min(n, int(window))
        low = int(iq.min() - self.ik.max()) if n else 0
        dist = np.arange(low, int(iq.max() - self.ik.min()) + 1 if n else 1, dtype=np.float64)
        x = torch.from_numpy(dist[:, None] * np.asarray(theta, dtype=np.float64))  # (dist, P)
        u = rotation_gap(torch.sin(0.5 * x), torch.cos(0.5 * x), one_minus_m)  # e^{ix} - m
        u_re, u_im = (np.ascontiguousarray(v.numpy()) for v in u)
        self.tables = (u_re, u_im, np.hypot(u_re, u_im))
        self.starts = np.concatenate([[0], np.cumsum(n - np.arange(span))]).astype(np.int64)
        self.parts = [np.ascontiguousarray(z) for z in (qc.real, qc.imag, np.abs(qc),
                                                        dc.real, dc.imag, np.abs(dc))]  # fmt: skip
        self.iq, self.scale = iq - low, float(scale)  # iq - ik: the row of the table
        # consecutive positions: one distance per diagonal, its table row read once
        self.diagonal = bool((np.diff(iq) == 1).all() and (np.diff(self.ik) == 1).all())
        self.width = self.p if self.p in _WIDTHS else 0

    @property
    def count(self) -> int:
        """Causal pairs per head."""
        return int(self.starts[-1])

    def ratios(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ratio (H, pairs), violations (H,))`` in float64: :func:`causal_ratios`."""
        ratio = np.empty((self.heads, self.count), dtype=np.float64)
        bad = np.zeros((self.heads, self.starts.size - 1), dtype=np.int64)
        kernel = _causal_kernel(not serial(), self.width, self.diagonal)
        kernel(*self.parts, *self.tables, self.iq, self.ik, self.scale, self.starts, RTOL, ATOL,
               ratio, bad)  # fmt: skip
        return ratio, bad.sum(-1)

    def screen(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r"""``|E|/B`` of every pair evaluated in float32, ``(H, pairs)`` float64: within
        :meth:`eps` of the float64 ratio, or NaN where float32 cannot say (``B`` below
        ``1e-30`` or above ``1e30``, ``|E|`` above ``1e30``: ``B = 0``, underflow,
        overflow); with each head's largest screened ratio ``(H,)`` (``-inf`` when none)
        and its count of NaN ``(H,)``."""
        ratio = np.empty((self.heads, self.count), dtype=np.float64)
        span = self.starts.size - 1
        top = np.empty((self.heads, span), dtype=np.float64)  # per diagonal, then per head
        unsure = np.empty((self.heads, span), dtype=np.int64)
        parts = [z.astype(np.float32) for z in self.parts]
        tables = [t.astype(np.float32) for t in self.tables]
        kernel = _screen_kernel(not serial(), self.width, self.diagonal)
        kernel(*parts, *tables, self.iq, self.ik, self.starts, ratio, top, unsure)
        return ratio, top.max(-1, initial=-math.inf), unsure.sum(-1)

    def eps(self, top: float) -> float:
        r"""How far a screened ratio may lie from the float64 one, for ratios up to ``top``.

        Each input rounded to float32 (relative error :math:`u = 2^{-24}`) and each of
        the ``P`` terms formed from them: :math:`|E_{32} - E| \le (15 + 1.5P)\,u\,B` (the
        terms' magnitudes are at most :math:`\sqrt2\,|\tilde q_l||\tilde\delta_l||u_l|`),
        :math:`|B_{32} - B| \le (5 + P)\,u\,B`, so :math:`|r_{32} - r| \le (15 + 1.5P +
        (6 + P)\max(r, 1))\,u` to first order; four times that is returned.
        """
        return 4.0 * (16.0 + 2.0 * self.p + (7.0 + self.p) * max(float(top), 1.0)) * 2.0**-24

    def exact(self, head: int, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ratio, violates)`` in float64 of head ``head``'s pairs ``index`` (numbered as
        :meth:`ratios`), each the expression evaluated there (to the order of its sum)."""
        index = np.ascontiguousarray(index, dtype=np.int64)
        back = np.searchsorted(self.starts, index, side="right") - 1  # the diagonal i - j
        j = index - self.starts[back]
        ratio = np.empty(index.size, dtype=np.float64)
        bad = np.zeros(index.size, dtype=np.bool_)
        _pair_kernel(self.width)(*(z[head] for z in self.parts), *self.tables, self.iq, self.ik,
                                 self.scale, j + back, j, RTOL, ATOL, ratio, bad)  # fmt: skip
        return ratio, bad


_WIDTHS = (8, 16, 32, 64)  # frequency pairs of the usual head dims: a build with the width fixed


@functools.cache
def _causal_kernel(parallel: bool = True, width: int = 0, diagonal: bool = False
                   ) -> Callable[..., None]:  # fmt: skip
    """The compiled loop of :func:`causal_ratios` (numba imported and compiled on first use).

    ``parallel=False``: the single-threaded build a worker of :mod:`.workers`
    runs; ``width``: the number of frequency pairs fixed at compile time (0:
    read from the arrays), so the frequency loop is laid out in whole vector
    registers; ``diagonal``: both position sequences are consecutive, so a
    diagonal has one distance and its row of the table stays in registers.
    Both save time over the general build (``benchmarks/bench_numerics.py``).
    Each is a closure constant, and numba keys its disk cache on
    those: every build has its own entry.
    """
    import numba

    loop = numba.prange if parallel else range

    @numba.njit(parallel=parallel, cache=True, nogil=True, fastmath={"reassoc", "contract"})
    def kernel(qr, qi, q_abs, dr, di, d_abs, u_re, u_im, u_abs, iq, ik, s, starts, rtol, atol,
               ratio, bad):  # type: ignore[no-untyped-def]  # fmt: skip
        heads, n, p = qr.shape
        if width:
            p = width  # a compile-time constant: the loop below unrolled into vector registers
        span = starts.size - 1
        for task in loop(heads * span):  # one diagonal i - j = back of one head per task
            h = task // span
            back = task - h * span
            count = 0
            along = iq[back] - ik[0]  # the diagonal's distance, when the positions run on by one
            for j in range(n - back):
                i = j + back
                t = along if diagonal else iq[i] - ik[j]  # row of the distance table
                e = 0.0
                b = 0.0
                for l in range(p):
                    a, c, dc, de = qr[h, i, l], qi[h, i, l], dr[h, j, l], di[h, j, l]
                    e += (a * dc + c * de) * u_re[t, l] + (a * de - c * dc) * u_im[t, l]
                    b += q_abs[h, i, l] * d_abs[h, j, l] * u_abs[t, l]
                e = abs(e) * s
                b = b * s
                if e > b * (1.0 + rtol) + atol:
                    count += 1
                ratio[h, starts[back] + j] = e / b if b > 0.0 else -math.inf
            bad[h, back] = count

    return kernel  # type: ignore[no-any-return]


@functools.cache
def _screen_kernel(parallel: bool = True, width: int = 0, diagonal: bool = False
                   ) -> Callable[..., None]:  # fmt: skip
    """:func:`_causal_kernel`'s loop in float32 (:meth:`CausalPairs.screen`): no scale (the
    ratio does not depend on it), NaN where float32 cannot say."""
    import numba

    loop = numba.prange if parallel else range

    @numba.njit(parallel=parallel, cache=True, nogil=True, fastmath={"reassoc", "contract"})
    def kernel(qr, qi, q_abs, dr, di, d_abs, u_re, u_im, u_abs, iq, ik, starts, ratio, top,
               unsure):  # type: ignore[no-untyped-def]  # fmt: skip
        heads, n, p = qr.shape
        if width:
            p = width
        span = starts.size - 1
        for task in loop(heads * span):
            h = task // span
            back = task - h * span
            along = iq[back] - ik[0]
            largest, count = -math.inf, 0
            for j in range(n - back):
                i = j + back
                t = along if diagonal else iq[i] - ik[j]
                e = np.float32(0.0)
                b = np.float32(0.0)
                for l in range(p):
                    a, c, dc, de = qr[h, i, l], qi[h, i, l], dr[h, j, l], di[h, j, l]
                    e += (a * dc + c * de) * u_re[t, l] + (a * de - c * dc) * u_im[t, l]
                    b += q_abs[h, i, l] * d_abs[h, j, l] * u_abs[t, l]
                e = abs(e)
                if b > 1e-30 and b < 1e30 and e < 1e30:  # False for NaN and inf too
                    r = e / b
                    ratio[h, starts[back] + j] = r
                    largest = max(largest, r)  # type: ignore[assignment]
                else:
                    ratio[h, starts[back] + j] = np.nan
                    count += 1
            top[h, back] = largest
            unsure[h, back] = count

    return kernel  # type: ignore[no-any-return]


@functools.cache
def _pair_kernel(width: int = 0) -> Callable[..., None]:
    """:func:`_causal_kernel`'s float64 loop for a list of one head's pairs ``(i, j)``
    (:meth:`CausalPairs.exact`): the same expression, its sum compiled apart (a few ulps
    from :func:`_causal_kernel`'s)."""
    import numba

    @numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
    def kernel(qr, qi, q_abs, dr, di, d_abs, u_re, u_im, u_abs, iq, ik, s, rows, cols, rtol,
               atol, ratio, bad):  # type: ignore[no-untyped-def]  # fmt: skip
        p = qr.shape[1]
        if width:
            p = width
        for x in range(rows.size):
            i, j = rows[x], cols[x]
            t = iq[i] - ik[j]
            e = 0.0
            b = 0.0
            for l in range(p):
                a, c, dc, de = qr[i, l], qi[i, l], dr[j, l], di[j, l]
                e += (a * dc + c * de) * u_re[t, l] + (a * de - c * dc) * u_im[t, l]
                b += q_abs[i, l] * d_abs[j, l] * u_abs[t, l]
            e = abs(e) * s
            b = b * s
            bad[x] = e > b * (1.0 + rtol) + atol
            ratio[x] = e / b if b > 0.0 else -math.inf

    return kernel  # type: ignore[no-any-return]
