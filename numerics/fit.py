r"""Additive least-squares fits on the masked pairs (docs/theory.md sections 4-5).

The three-axis fit :math:`W_{ij} \approx a_{i-j} + b_i + c_j` and the
two-axis fit :math:`W_{ij} \approx u_i + v_j` (a query effect plus a key
effect: the controlled-distance experiment), least squares over the masked
pairs :math:`\mathcal M`:

.. math::
    \min_{a,b,c} \sum_{(i,j)\in\mathcal M} (W_{ij} - a_{i-j} - b_i - c_j)^2
    \quad\Longleftrightarrow\quad G x = A^\top w

with :math:`x = (a, b, c)` (or :math:`(b, c)`) and :math:`A` the 0/1 design
matrix of the pairs.
The Gram matrix :math:`G = A^\top A` depends on the mask only (pairs per
distance, row and column, and their cross counts) and the right-hand side
:math:`A^\top w` is the masked diagonal, row and column sums of ``W``.  For a
causal (banded) mask :math:`G x` costs ``O(N)`` with cumulative sums, so the
normal equations are solved to convergence (relative residual
:data:`TOL`) by conjugate gradients with a diagonal preconditioner, all
heads (or matrices: :func:`additive_fits`) at once, and the solver is cached
per ``(N, window, axes)``.

:math:`G` is singular: the gauge directions (a constant moved between ``a``
and ``b``, or ``b`` and ``c``, and, three-axis, the trend :math:`b_i = \alpha i`,
:math:`c_j = -\alpha j`, :math:`a_D = -\alpha D`) change no fitted value.
CG started at 0 stays orthogonal to them; the returned solution is then
normalised (``c`` without mean, and three-axis without trend and ``b`` without mean).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import _inputs
from ropesplit.numerics.mask import Mask, causal_window

__all__ = [
    "TOL",
    "AdditiveFits",
    "BandGram",
    "SpanGram",
    "ThreeAxisFit",
    "additive_fits",
    "band_gram",
    "mask_gram",
    "span_gram",
    "three_axis_fit",
]

TOL = 1e-12  # relative residual ||G x - r|| / ||r|| at which CG stops


@dataclass(frozen=True)
class ThreeAxisFit:
    """The fit of one matrix: ``fitted = a[i - j - d_min] + b[i] + c[j]`` on the mask."""

    a: np.ndarray  # (n_distances,) a_D for D = d_min .. d_max
    b: np.ndarray  # (N,) per row (query)
    c: np.ndarray  # (N,) per column (key)
    d_min: int  # smallest masked distance i - j
    fitted: np.ndarray  # (N, N), 0 off the mask
    r: float  # Pearson corr(W, fitted) over the mask
    iterations: int  # CG iterations to convergence


class _Gram:
    """A Gram operator ``G (K, K)`` over unknowns ``(a, b, c)``, applied to ``(K, H)``."""

    n_a: int
    n: int
    diag: np.ndarray  # (K,)
    d_min: int = 0  # unknown a[t] is a_D for D = d_min + t

    def apply(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def solve(self, rhs: np.ndarray, tol: float = TOL) -> tuple[np.ndarray, int]:
        r"""Solve :math:`G x = r` for each column of ``rhs (K, H)`` by preconditioned CG.

        Returns ``(x (K, H), iterations)``; raises if not converged in ``10 K``
        iterations (never seen: ``G`` is well conditioned on its range).
        """
        k = rhs.shape[0]
        gauge = self.gauge()  # A^T w is orthogonal to these; rounding in the sums is not
        for _ in range(2):  # twice: the first pass's own rounding leaves a trace along them
            rhs = rhs - gauge @ (gauge.T @ rhs)
        inv_diag = np.where(self.diag > 0, 1.0 / np.maximum(self.diag, 1e-300), 0.0)  # (K,)
        x, it = self._cg(np.ascontiguousarray(rhs), inv_diag, tol)
        if it > 0:
            return x, it
        if it == 0:
            return x, 10 * k  # stalled at the rounding floor, still far below any use
        raise RopesplitError(f"additive fit did not converge in {10 * k} iterations")

    def _cg(self, rhs: np.ndarray, inv_diag: np.ndarray, tol: float) -> tuple[np.ndarray, int]:
        """CG from 0 with the diagonal preconditioner ``inv_diag (K,)``: ``(x, iterations)``,
        iterations 0 when stalled at the rounding floor (``sqrt(tol)``), -1 when not converged.
        Each column stops at the iteration it converges: the columns are independent
        systems, and iterating a converged one on its rounding noise can blow it up (a
        column solved beside others is then the column solved alone).
        """
        k, h = rhs.shape
        inv_diag = inv_diag[:, None]
        x = np.zeros((k, h))
        res = rhs.copy()
        target = tol * np.linalg.norm(rhs, axis=0)  # (H,)
        z = inv_diag * res
        p = z.copy()
        rz = (res * z).sum(0)  # (H,)
        done = np.zeros(h, dtype=bool)  # each column stops where it converged: its own CG
        for it in range(1, 10 * k + 1):
            gp = self.apply(p)  # (K, H)
            pgp = (p * gp).sum(0)
            alpha = np.where(pgp > 0, rz / np.where(pgp > 0, pgp, 1.0), 0.0)
            alpha = np.where(done, 0.0, alpha)
            x += alpha * p
            res -= alpha * gp
            done |= np.linalg.norm(res, axis=0) <= target
            if done.all():
                return x, it
            z = inv_diag * res
            rz_new = (res * z).sum(0)
            p = z + np.where(rz > 0, rz_new / np.where(rz > 0, rz, 1.0), 0.0) * p
            p = np.where(done, 0.0, p)
            rz = rz_new
        stalled = (np.linalg.norm(res, axis=0) <= np.sqrt(tol) * np.linalg.norm(rhs, axis=0)).all()
        return x, 0 if stalled else -1

    def gauge(self) -> np.ndarray:
        """An orthonormal basis ``(K, g)`` of the gauge directions (no fitted value changes).

        A constant moved from ``b`` to ``c``; three axes: also from ``a`` to
        ``b``, and the trend ``a_D = -D``, ``b_i = i``, ``c_j = -j``.
        """
        n, n_a = self.n, self.n_a
        index = np.arange(n, dtype=np.float64)
        zero_a, one_a, one = np.zeros(n_a), np.ones(n_a), np.ones(n)
        dirs = [np.concatenate([zero_a, one, -one])]
        if n_a > 0:
            dirs.append(np.concatenate([one_a, -one, 0 * one]))
            dirs.append(np.concatenate([-(np.arange(n_a) + self.d_min), index, -index]))
        basis, diag = np.linalg.qr(np.stack(dirs, axis=1))
        return basis[:, np.abs(np.diag(diag)) > 1e-9 * np.sqrt(n)]  # independent ones only

    def normalise(self, x: np.ndarray) -> np.ndarray:
        """Move ``x (K, H)`` along the gauge directions: ``c`` no mean, no trend; ``b`` no mean."""
        a, b, c = x[: self.n_a], x[self.n_a : self.n_a + self.n], x[self.n_a + self.n :]
        j = np.arange(self.n, dtype=np.float64)[:, None] - (self.n - 1) / 2
        dist = np.arange(self.n_a, dtype=np.float64)[:, None] + self.d_min
        if self.n > 1 and self.n_a > 0:  # trend: a_D -= t D, b_i += t i, c_j -= t j: same fit
            t = (j * c).sum(0) / (j * j).sum()  # (H,): c - t j has no trend left
            a, b, c = a - t * dist, b + t * (j + (self.n - 1) / 2), c - t * (j + (self.n - 1) / 2)
        shift = c.mean(0)
        b, c = b + shift, c - shift
        if self.n_a > 0:  # three axes: b's mean goes into a
            shift = b.mean(0)
            a, b = a + shift, b - shift
        return np.concatenate([a, b, c])


class BandGram(_Gram):
    """``G`` for the causal mask ``0 <= i - j < window`` on ``N`` tokens: ``O(N)`` per product.

    ``axes=3``: unknowns ``(a, b, c)``; ``axes=2``: ``(b, c)`` only (``n_a = 0``).
    """

    def __init__(self, n: int, window: int | None, axes: int = 3) -> None:
        if axes not in (2, 3):
            raise RopesplitError(f"axes must be 2 or 3, got {axes}")
        self.n = n
        self.axes = axes
        reach = n if window is None else min(n, window)  # distances 0 .. reach - 1
        self.n_a = n_a = reach if axes == 3 else 0
        i = np.arange(n)
        self.count_a = (n - np.arange(n_a)).astype(np.float64)  # pairs per distance
        self.count_b = np.minimum(i + 1, reach).astype(np.float64)  # pairs per row
        self.count_c = np.minimum(n - i, reach).astype(np.float64)  # pairs per column
        self.diag = np.concatenate([self.count_a, self.count_b, self.count_c])
        self._a_to = np.minimum(i, n_a - 1) + 1  # row i sees distances 0 .. min(i, n_a-1)
        self._a_to_c = np.minimum(n - 1 - i, n_a - 1) + 1  # column j: 0 .. min(n-1-j, n_a-1)
        self.first_col = np.maximum(0, i - reach + 1)  # row i sees columns first_col .. i
        self.last_row = np.minimum(n - 1, i + reach - 1)  # column j sees rows j .. last_row
        self.reach = reach
        self.pairs = int(self.count_b.sum())

    def apply(self, x: np.ndarray) -> np.ndarray:
        r"""``G x`` for ``x (K, H)``: the fit summed per distance, row and column."""
        n, n_a = self.n, self.n_a
        a, b, c = x[:n_a], x[n_a : n_a + n], x[n_a + n :]
        zero = np.zeros((1, x.shape[1]))
        ca = np.concatenate([zero, np.cumsum(a, 0)])  # (n_a + 1, H) prefix sums
        cb = np.concatenate([zero, np.cumsum(b, 0)])  # (N + 1, H)
        cc = np.concatenate([zero, np.cumsum(c, 0)])  # (N + 1, H)
        dist = np.arange(n_a)
        i = np.arange(n)
        yb = self.count_b[:, None] * b + (cc[i + 1] - cc[self.first_col])
        yc = self.count_c[:, None] * c + (cb[self.last_row + 1] - cb[i])
        if n_a == 0:  # two axes
            return np.concatenate([yb, yc])
        ya = self.count_a[:, None] * a + (cb[n] - cb[dist]) + cc[n - dist]
        return np.concatenate([ya, yb + ca[self._a_to], yc + ca[self._a_to_c]])

    def _cg(self, rhs: np.ndarray, inv_diag: np.ndarray, tol: float) -> tuple[np.ndarray, int]:
        """:meth:`_Gram._cg`, step for step, as one compiled loop (:func:`._cg_kernel.solve`).

        The same preconditioned CG and stopping rule, in place of some thirty
        numpy calls per iteration on ``(K, H)`` arrays. The numpy iteration
        stays the float64 twin (``tests/numerics/test_numerics_fit.py``).
        """
        from ropesplit.numerics._cg_kernel import solve  # numba loads on first use

        x = np.zeros(rhs.shape)
        it = solve(self.count_a, self.count_b, self.count_c, self.first_col, self.last_row,
                   self._a_to, self._a_to_c, inv_diag, rhs, float(tol), x)  # fmt: skip
        return x, int(it)

    def sums(self, w: np.ndarray) -> np.ndarray:
        r"""``A^T w`` for ``K`` matrices ``w (K, N, N)``: ``(rows, K)``.

        The masked distance (three axes), row and column sums; entries off
        the mask are ignored.
        """
        n, reach = self.n, self.reach
        band = np.tril(np.triu(np.ones((n, n), dtype=bool), -(reach - 1)))  # (N, N): the mask
        masked = np.where(band, w, 0.0)  # (K, N, N)
        parts = [masked.sum(axis=2).T, masked.sum(axis=1).T]  # rows (N, K), columns (N, K)
        if self.n_a:
            diagonals = [np.diagonal(masked, offset=-dd, axis1=1, axis2=2).sum(axis=1)
                         for dd in range(self.n_a)]  # fmt: skip  # n_a x (K,)
            parts.insert(0, np.stack(diagonals))  # (n_a, K)
        return np.concatenate(parts)


def band_gram(n: int, window: int | Mask | None = None, axes: int = 3) -> BandGram:
    """The cached :class:`BandGram` for ``N`` tokens, a sliding window (None: none; or a
    causal band's :class:`.mask.Mask`, any other mask refused) and ``axes``."""
    return _band_gram(n, causal_window(window, "the causal band's Gram (band_gram)"), axes)


@functools.lru_cache(maxsize=8)
def _band_gram(n: int, window: int | None, axes: int) -> BandGram:
    return BandGram(n, window, axes)


class SpanGram(_Gram):
    r"""``G`` for the two-sided band ``-after <= i - j <= before`` on ``N`` tokens (attention
    both ways, docs/theory.md section 9): ``O(N)`` per product, by prefix sums.

    The offsets :math:`D = i - j` run from ``-after`` to ``before`` (clipped to
    :math:`\pm(N-1)`); unknown ``a[t]`` is :math:`a_D` for :math:`D = t - \mathrm{after}`.
    Row ``i`` sees the columns ``lo_i .. hi_i`` and the offsets ``i - hi_i .. i - lo_i``;
    column ``j`` the rows ``j - after .. j + before`` (clipped), every range contiguous.
    """

    def __init__(self, n: int, before: int | None, after: int | None) -> None:
        self.n = n
        back = n - 1 if before is None else min(before, n - 1)
        ahead = n - 1 if after is None else min(after, n - 1)
        self.d_min, self.n_a = -ahead, back + ahead + 1
        i = np.arange(n)
        dist = np.arange(self.n_a) + self.d_min  # (n_a,) the offsets D
        self.count_a = (n - np.abs(dist)).astype(np.float64)
        self._cols = np.maximum(0, i - back), np.minimum(n - 1, i + ahead)  # row i: lo .. hi
        self._rows = np.maximum(0, i - ahead), np.minimum(n - 1, i + back)  # column j
        self.count_b = (self._cols[1] - self._cols[0] + 1).astype(np.float64)
        self.count_c = (self._rows[1] - self._rows[0] + 1).astype(np.float64)
        self._a_rows = np.maximum(0, dist), np.minimum(n - 1, n - 1 + dist)  # offset D: rows
        self.diag = np.concatenate([self.count_a, self.count_b, self.count_c])
        self.pairs = int(self.count_b.sum())

    def apply(self, x: np.ndarray) -> np.ndarray:
        r"""``G x`` for ``x (K, H)``: the fit summed per offset, row and column."""
        n, n_a, at = self.n, self.n_a, -self.d_min  # a[t] with t = D + after
        a, b, c = x[:n_a], x[n_a : n_a + n], x[n_a + n :]
        zero = np.zeros((1, x.shape[1]))
        ca, cb, cc = (np.concatenate([zero, np.cumsum(v, 0)]) for v in (a, b, c))

        def span(prefix: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
            return prefix[hi + 1] - prefix[lo]  # sum over lo .. hi inclusive

        i = np.arange(n)
        (lo, hi), (r_lo, r_hi), (d_lo, d_hi) = self._cols, self._rows, self._a_rows
        dist = np.arange(n_a) - at
        ya = self.count_a[:, None] * a + span(cb, d_lo, d_hi) + span(cc, d_lo - dist, d_hi - dist)
        yb = self.count_b[:, None] * b + span(cc, lo, hi) + span(ca, i - hi + at, i - lo + at)
        yc = self.count_c[:, None] * c + span(cb, r_lo, r_hi) + span(ca, r_lo - i + at,
                                                                       r_hi - i + at)
        return np.concatenate([ya, yb, yc])


@functools.lru_cache(maxsize=8)
def span_gram(n: int, before: int | None, after: int | None) -> SpanGram:
    """The cached :class:`SpanGram` for ``N`` tokens and a two-sided band."""
    return SpanGram(n, before, after)


class _MaskGram(_Gram):
    """``G`` for an arbitrary mask, applied through its pair list (``O(pairs)`` per product);
    ``axes=3``: unknowns ``(a, b, c)``; ``axes=2``: ``(b, c)`` only (``n_a = 0``)."""

    def __init__(self, mask: np.ndarray, axes: int = 3) -> None:
        if axes not in (2, 3):
            raise RopesplitError(f"axes must be 2 or 3, got {axes}")
        self.n = mask.shape[0]
        self.rows, self.cols = np.nonzero(mask)  # (pairs,) each
        self.pairs = self.rows.size
        dist = self.rows - self.cols
        self.d_min = int(dist.min())
        self.dist = dist - self.d_min
        self.n_a = int(self.dist.max()) + 1 if axes == 3 else 0
        self._axes = ((self.dist, self.n_a),) * (axes == 3) + ((self.rows, self.n),
                                                               (self.cols, self.n))  # fmt: skip
        self.diag = np.concatenate([np.bincount(v, minlength=m).astype(np.float64)
                                    for v, m in self._axes])  # fmt: skip

    def sums(self, v: np.ndarray) -> np.ndarray:
        """``A^T v`` for pair values ``v (pairs,)``: distance, row and column sums, ``(K,)``."""
        return np.concatenate([np.bincount(idx, weights=v, minlength=m)
                               for idx, m in self._axes])  # fmt: skip

    def matrix_sums(self, w: np.ndarray) -> np.ndarray:
        """``A^T w`` for ``K`` matrices ``w (K, N, N)``: ``(rows, K)``; entries off the mask
        are ignored."""
        return np.stack([self.sums(x[self.rows, self.cols]) for x in w], axis=1)

    def fit_values(self, x: np.ndarray) -> np.ndarray:
        """``A x`` for ``x (K,)``: the fit at each pair, ``(pairs,)``."""
        b, c = x[self.n_a : self.n_a + self.n], x[self.n_a + self.n :]
        fit = b[self.rows] + c[self.cols]
        return fit + x[: self.n_a][self.dist] if self.n_a else fit

    def apply(self, x: np.ndarray) -> np.ndarray:
        return np.stack([self.sums(self.fit_values(col)) for col in x.T], axis=1)


@functools.lru_cache(maxsize=8)
def _pair_gram(n: int, mask: Mask, axes: int) -> _MaskGram:
    return _MaskGram(mask.allowed(n), axes)


@functools.lru_cache(maxsize=8)
def mask_gram(n: int, mask: Mask) -> _Gram:
    """The Gram of the three-axis fit over a :class:`.mask.Mask`'s pairs on ``N`` tokens:
    the causal band's :class:`BandGram`, a two-sided band's :class:`SpanGram` (both
    ``O(N)`` per product), else the pair list's (blocks, padding: ``O(pairs)``)."""
    if mask.is_causal_band:
        return band_gram(n, mask.window)
    if mask.segments is None and mask.keep is None:
        return span_gram(n, mask.before, mask.after)
    return _MaskGram(mask.allowed(n))


def three_axis_fit(W: Any, mask: Any = None) -> ThreeAxisFit:
    r"""Least-squares :math:`a_{i-j} + b_i + c_j` to ``W (N, N)`` over ``mask`` (default causal).

    .. math:: \min \sum_{(i,j)\in\mathcal M}(W_{ij} - a_{i-j} - b_i - c_j)^2

    >>> import numpy as np
    >>> i, j = np.indices((6, 6))
    >>> fit = three_axis_fit(np.cos(i - j) + i**2 + np.sqrt(j))
    >>> round(fit.r, 12), float(np.abs(fit.fitted - (np.cos(i - j) + i**2 + np.sqrt(j)))[i >= j].max()) < 1e-9
    (1.0, True)
    """  # noqa: E501
    w = _inputs.as_float64("W", W, 2)
    n = w.shape[0]
    if w.shape != (n, n):
        raise RopesplitError(f"W must be square (N, N), got {w.shape}")
    m = _inputs.causal_mask(n, None) if mask is None else np.asarray(mask, dtype=bool)
    if m.shape != w.shape:
        raise RopesplitError(f"mask must have the shape of W {w.shape}, got {m.shape}")
    if not m.any():
        raise RopesplitError("mask selects no pairs")
    gram = _MaskGram(m)
    values = w[gram.rows, gram.cols]  # (pairs,)
    centred = values - values.mean()  # the constant is in the span: fit the centred values
    x, iterations = gram.solve(gram.sums(centred)[:, None])
    x = gram.normalise(x)[:, 0] + np.concatenate([np.full(gram.n_a, values.mean()),
                                                  np.zeros(2 * n)])  # fmt: skip
    fit_values = gram.fit_values(x)
    fitted = np.zeros_like(w)
    fitted[gram.rows, gram.cols] = fit_values
    spread = np.linalg.norm(centred) * np.linalg.norm(fit_values - values.mean())
    r = float(centred @ (fit_values - values.mean()) / spread) if spread > 0 else float("nan")
    return ThreeAxisFit(a=x[: gram.n_a], b=x[gram.n_a : gram.n_a + n], c=x[gram.n_a + n :],
                        d_min=gram.d_min, fitted=fitted, r=r, iterations=iterations)  # fmt: skip


@dataclass(frozen=True)
class AdditiveFits:
    """Fits of ``K`` matrices on the masked pairs: ``a[i - j] + b[i] + c[j]`` (or ``b + c``)."""

    a: np.ndarray | None  # (K, n_a) distance effect a_D, D = d_min .. d_min + n_a - 1; None: 2
    b: np.ndarray  # (K, N) query (row) effect
    c: np.ndarray  # (K, N) key (column) effect: mean 0 (three axes: no linear trend either)
    iterations: int  # CG iterations to convergence
    d_min: int = 0  # the smallest masked distance i - j (0 on the causal band)

    def fitted(self) -> np.ndarray:
        """The fitted values ``(K, N, N)`` (every entry, masked or not)."""
        out = self.b[:, :, None] + self.c[:, None, :]  # (K, N, N)
        if self.a is not None:
            n = self.b.shape[1]
            gap = np.clip(np.subtract.outer(np.arange(n), np.arange(n)) - self.d_min, 0,
                          self.a.shape[1] - 1)  # fmt: skip
            out = out + self.a[:, gap]  # a[i - j] (clipped off the mask)
        return out


def additive_fits(w: Any, *, axes: int, window: int | Mask | None = None) -> AdditiveFits:
    r"""Least squares of ``K`` matrices ``w (K, N, N)`` at once over the masked pairs.

    .. math:: \min \sum_{(i,j)\in\mathcal M} (W_{ij} - u_i - v_j)^2
              \quad (\text{axes}=2),\qquad
              \min \sum_{(i,j)\in\mathcal M} (W_{ij} - a_{i-j} - b_i - c_j)^2
              \quad (\text{axes}=3)

    :math:`\mathcal M`: the causal band ``0 <= i - j < window`` (None: every causal pair),
    or ``window`` a :class:`.mask.Mask` (attention both ways, blocks, padding). One cached
    Gram serves every matrix: the causal band's ``O(N)`` one (:func:`band_gram`), any
    other mask's through its pair list. Each matrix is centred on its masked mean
    first (the constant is in every fit's span) and the mean goes back into ``b`` (two
    axes) or ``a``.

    >>> import numpy as np
    >>> i, j = np.indices((5, 5))
    >>> fits = additive_fits((i**2 + np.sqrt(j))[None], axes=2)
    >>> bool(np.allclose(fits.fitted()[0, i >= j], (i**2 + np.sqrt(j))[i >= j]))
    True
    """
    x = _inputs.as_float64("w", w, 3)
    k, n, n2 = x.shape
    if n != n2 or n < 1:
        raise RopesplitError(f"w must be (K, N, N) with N >= 1, got {x.shape}")
    gram: BandGram | _MaskGram
    if isinstance(window, Mask) and not window.is_causal_band:
        gram = _pair_gram(n, window, axes)
        sums = gram.matrix_sums(x)  # (rows, K)
    else:
        gram = band_gram(n, window, axes)
        sums = gram.sums(x)  # (rows, K)
    mean = sums[gram.n_a : gram.n_a + n].sum(axis=0) / gram.pairs  # (K,) masked mean
    rhs = sums - gram.diag[:, None] * mean  # A^T (w - mean)
    # a constant matrix leaves only rounding in rhs: nothing to fit (CG would chase the noise)
    rhs[:, np.linalg.norm(rhs, axis=0) <= 1e-13 * np.linalg.norm(sums, axis=0)] = 0.0
    live = np.linalg.norm(rhs, axis=0) > 0  # (K,)
    solution = np.zeros_like(rhs)
    iterations = 0
    if live.any():
        solution[:, live], iterations = gram.solve(rhs[:, live])
    solution = gram.normalise(solution)  # (rows, K)
    a = solution[: gram.n_a].T + mean[:, None] if axes == 3 else None  # (K, n_a)
    b = solution[gram.n_a : gram.n_a + n].T + (mean[:, None] if axes == 2 else 0.0)  # (K, N)
    return AdditiveFits(a=a, b=b, c=solution[gram.n_a + n :].T, iterations=iterations,
                        d_min=gram.d_min)  # fmt: skip
