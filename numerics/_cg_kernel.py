r"""Compiled preconditioned CG for the three-axis fit's band Gram (:meth:`.fit.BandGram._cg`).

Kept apart from :mod:`.fit` so both kernels are module-level functions:
numba caches a function on disk only when what it calls is a global it can
name. As closures inside one factory, ``solve`` read ``apply`` from a cell,
missed its disk cache in every new process and compiled again before the
first statistic of every run. Imported on first use: ``import
ropesplit.numerics`` does not load numba.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["apply", "solve"]


@numba.njit(cache=True, nogil=True)
def apply(x, count_a, count_b, count_c, first_col, last_row, a_to, a_to_c, out):  # type: ignore[no-untyped-def]  # noqa: E501
    """``out = G x`` for ``x (K, H)``: :meth:`.fit.BandGram.apply` as one loop (prefix sums)."""
    n_a, n, h = count_a.size, count_b.size, x.shape[1]
    ca = np.zeros((n_a + 1, h))  # prefix sums of a, b, c
    cb = np.zeros((n + 1, h))
    cc = np.zeros((n + 1, h))
    for c in range(h):
        for t in range(n_a):
            ca[t + 1, c] = ca[t, c] + x[t, c]
        for i in range(n):
            cb[i + 1, c] = cb[i, c] + x[n_a + i, c]
            cc[i + 1, c] = cc[i, c] + x[n_a + n + i, c]
    for i in range(n):
        for c in range(h):
            row = count_b[i] * x[n_a + i, c] + (cc[i + 1, c] - cc[first_col[i], c])
            col = count_c[i] * x[n_a + n + i, c] + (cb[last_row[i] + 1, c] - cb[i, c])
            if n_a > 0:
                row += ca[a_to[i], c]
                col += ca[a_to_c[i], c]
            out[n_a + i, c] = row
            out[n_a + n + i, c] = col
    for t in range(n_a):
        for c in range(h):
            out[t, c] = count_a[t] * x[t, c] + (cb[n, c] - cb[t, c]) + cc[n - t, c]


@numba.njit(cache=True, nogil=True)
def solve(count_a, count_b, count_c, first_col, last_row, a_to, a_to_c, inv_diag, rhs,
          tol, x):  # type: ignore[no-untyped-def]  # fmt: skip
    """Preconditioned CG on ``G x = rhs``, ``x (K, H)`` zeros on entry, solved in place.

    :meth:`.fit._Gram._cg` step for step; returns the iterations, 0 when
    stalled at the rounding floor, -1 when not converged. Each column stops
    at the iteration it converges (the columns are independent systems:
    iterating a converged one on rounding noise can blow it up), so a column
    solved beside others is the column solved alone.
    """
    k, h = rhs.shape
    res = rhs.copy()
    target = np.sqrt((rhs * rhs).sum(0))  # (H,) ||r||
    floor = np.sqrt(tol) * target
    target = tol * target
    z = inv_diag[:, None] * res
    p = z.copy()
    rz = (res * z).sum(0)
    gp = np.empty((k, h))
    pgp, norm, rz_new = np.empty(h), np.empty(h), np.empty(h)
    done = np.zeros(h, dtype=np.bool_)  # a column stops where it converged: its own CG
    for it in range(1, 10 * k + 1):
        apply(p, count_a, count_b, count_c, first_col, last_row, a_to, a_to_c, gp)
        pgp[:] = 0.0
        for r in range(k):
            for c in range(h):
                pgp[c] += p[r, c] * gp[r, c]
        norm[:] = 0.0
        for r in range(k):
            for c in range(h):
                if done[c]:
                    continue
                alpha = rz[c] / pgp[c] if pgp[c] > 0 else 0.0
                x[r, c] += alpha * p[r, c]
                res[r, c] -= alpha * gp[r, c]
                norm[c] += res[r, c] * res[r, c]
        for c in range(h):
            if not done[c] and np.sqrt(norm[c]) <= target[c]:
                done[c] = True
        if done.all():
            return it
        rz_new[:] = 0.0
        for r in range(k):
            for c in range(h):
                z[r, c] = inv_diag[r] * res[r, c]
                rz_new[c] += res[r, c] * z[r, c]
        for r in range(k):
            for c in range(h):
                p[r, c] = 0.0 if done[c] else (
                    z[r, c] + (rz_new[c] / rz[c] if rz[c] > 0 else 0.0) * p[r, c])
        rz[:] = rz_new
    return 0 if (np.sqrt((res * res).sum(0)) <= floor).all() else -1
