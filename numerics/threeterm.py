r"""The protein paper's three-term fit of an attention matrix, its r, log Var(a)/Var(b) and CVs.

Hart, Han, Kim, Zhao and Ji, "Protein Language Models Diverge from Natural
Language" (arXiv 2602.20449), fit each head's attention matrix ``A (N, N)``
(one input, one layer) by least squares over every pair, both ways:

.. math::
    A_{ij} \approx a_{i-j} + b_j + c_i,\qquad
    \min_{a,b,c} \sum_{(i,j)\in\mathcal M} (A_{ij} - a_{i-j} - b_j - c_i)^2

``a`` by offset ``i - j`` ("positional", ``2N - 1`` values on the full mask),
``b`` per **key** (column ``j``, "semantic"), ``c`` per **query** (row ``i``).
:mod:`ropesplit.numerics.fit` names the two the other way round (its ``b`` per row,
``c`` per column); this module solves through its
:func:`~ropesplit.numerics.fit.three_axis_fit` and swaps the names. The head's
numbers are the Pearson ``r`` of the fit over the mask and
:math:`\log\mathrm{Var}(a)/\mathrm{Var}(b)` (ddof 1, as ``torch.var``); across
inputs, layers or heads, the coefficient of variation of that log ratio with a
chi-square interval (:func:`cv_interval`).

**Against the split** (docs/theory.md sections 3-5): ``a`` holds no query,
where the paper's positional term :math:`f(q_i, i-j)` does; the two agree only
when :math:`f(q, \Delta) = a_\Delta + c(q)` and :math:`g(q_i, k_j) = b_j`. The query
term ``c`` is the one softmax ignores (section 4) when the fit is on logits;
their code fits the probabilities, where it has no such meaning. On a causal
mask the fit is section 5's ``r_3axis``.

**The gauge.** A constant moved between ``a``, ``b`` and ``c``, and the trend
:math:`a_D \mathrel{+}= \alpha D`, :math:`b_j \mathrel{+}= \alpha j`,
:math:`c_i \mathrel{-}= \alpha i`, change no fitted value. The constants leave
both variances alone; the trend moves Var(a)/Var(b). Their code solves the
normal equations with a ridge ``1e-6 I``, whose limit is the minimum-norm
solution; that is the gauge here: :math:`(a, b, c)` orthogonal to the three
directions, so :math:`\sum a = \sum b = \sum c` and
:math:`\sum_D D a_D + \sum_j j b_j - \sum_i i c_i = 0` (``np.linalg.lstsq``
returns the same). On a mask with more gauge directions than these three
(blocks of tokens that read only each other, a single offset) the fit refuses.

**Their released code** (github.com/ahart34/protein, HEAD 9715e5e,
``attention_analysis/scripts``):

- ``compute_attention_components.py``: ``disentangle_matrix`` sums the offset
  diagonals, columns and rows of the matrix (the right side ``X^T y``), builds
  the ``(4N-1)^2`` normal matrix in ``_prefactor_A`` and solves
  ``(A + 1e-6 I) x = y`` by a cached LU; ``a`` is stored in numpy's wrap order
  (``a[i - j]``, negative offsets at the end). The Pearson r is
  ``pearsonr(head.ravel(), reconstructed.ravel())``. The matrices are the
  ``output_attentions`` probabilities.
- **Their normal matrix is not** :math:`X^\top X`: the slices of the ``b`` and
  ``c`` rows are off by one (``5N - 5`` of its entries differ; its null space
  is one direction, not three). Its solution is no least-squares fit: a planted
  ``a[i-j] + b[j] + c[i]`` (standard normal terms) comes back with ``r = 0.96``
  at ``N = 6`` and ``0.9998`` at ``N = 64``, and the ridge turns the
  inconsistency into a large constant moved between ``b`` and ``c``.
  :func:`released_three_term_fit` reproduces it, to rounding.
- ``process_results.py``: ``ratio = torch.var(a) / torch.var(b)`` in float32
  (ddof 1; here float64), then ``np.log``; an ``(inputs, layers, heads)`` array;
  ``compute_ratio_statistics`` and ``variance_confidence_interval`` give the CVs
  (:func:`cv_interval`, ``convention="released"``).

>>> i, j = np.indices((6, 6))
>>> fit = three_term_fit(np.cos(i - j) + np.sqrt(j) + i**2)
>>> fit.a.shape, fit.b.shape, round(fit.r, 12)
((11,), (6,), 1.0)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import _inputs
from ropesplit.numerics.fit import three_axis_fit
from ropesplit.numerics.rope import rotate
from ropesplit.numerics.spec import RopeSpec

__all__ = [
    "CVInterval",
    "ThreeTermFit",
    "ThreeTermFits",
    "chi2_cdf",
    "chi2_quantile",
    "cv_interval",
    "masked_softmax",
    "released_three_term_fit",
    "three_term_fit",
    "three_term_fits",
    "three_term_heads",
]

RIDGE = 1e-6  # their ``A_reg = A + 1e-6 I`` (compute_attention_components._prefactor_A)
CONVENTIONS = ("released", "unbiased", "pooled")  # cv_interval's variance and degrees of freedom


@dataclass(frozen=True)
class ThreeTermFit:
    """One matrix's fit ``a[i - j] + b[j] + c[i]`` in the minimum-norm gauge."""

    a: np.ndarray  # (n_offsets,) a_D for D in offsets
    offsets: np.ndarray  # (n_offsets,) int: the offsets i - j of the mask, ascending
    b: np.ndarray  # (N,) per key (column j); NaN for a column with no pair
    c: np.ndarray  # (N,) per query (row i); NaN for a row with no pair
    fitted: np.ndarray  # (N, N) the fit on the mask, 0 off it
    r: float  # Pearson corr(A, fitted) over the mask
    log_var_ratio: float  # log(Var(a) / Var(b)), ddof 1, over the defined entries


def _log_var_ratio(a: np.ndarray, b: np.ndarray) -> float:
    """``log(var(a, ddof=1) / var(b, ddof=1))`` over the finite entries: inf or nan where a
    variance is 0, nan where either has fewer than two entries."""
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if min(a.size, b.size) < 2:
        return math.nan
    va, vb = np.var(a, ddof=1), np.var(b, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.log(va / vb))


def _min_norm(a: np.ndarray, offsets: np.ndarray, b: np.ndarray, c: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Move ``(a, b, c)`` along the three gauge directions to the minimum-norm solution.

    The directions on the defined entries: ``(1, -1, 0)`` (a constant from ``a``
    to ``b``), ``(0, 1, -1)`` and the trend ``(D, j, -i)``; ``x`` minus its
    least-squares projection on them is orthogonal to all three.
    """
    key, query = np.flatnonzero(np.isfinite(b)), np.flatnonzero(np.isfinite(c))
    x = np.concatenate([a, b[key], c[query]])  # (K,)
    one_a, one_b, one_c = np.ones(a.size), np.ones(key.size), np.ones(query.size)
    trend = np.concatenate([offsets, key, -query]).astype(np.float64)  # (K,)
    gauge = np.stack([np.concatenate([one_a, -one_b, 0 * one_c]),
                      np.concatenate([0 * one_a, one_b, -one_c]), trend], axis=1)  # fmt: skip
    x = x - gauge @ np.linalg.lstsq(gauge, x, rcond=None)[0]  # (K,)
    b, c = b.copy(), c.copy()
    b[key], c[query] = x[a.size : a.size + key.size], x[a.size + key.size :]
    return x[: a.size], b, c


@functools.lru_cache(maxsize=16)
def _extra_gauge(n: int, packed: bytes) -> int:
    """Gauge directions of the mask ``np.unpackbits(packed)[:n*n]`` beyond the three generic ones.

    The null space of the design on its used unknowns (offsets, columns and
    rows with a pair), from the rank of its dense Gram matrix.
    """
    mask = np.unpackbits(np.frombuffer(packed, dtype=np.uint8))[: n * n].reshape(n, n) > 0
    rows, cols = np.nonzero(mask)
    used = [np.unique(v, return_inverse=True) for v in (rows - cols, cols, rows)]
    sizes = [u.size for u, _ in used]  # offsets, keys, queries with a pair
    start = np.cumsum([0, *sizes[:2]])
    idx = [start[t] + inverse for t, (_, inverse) in enumerate(used)]  # 3 x (pairs,)
    size = sum(sizes)
    gram = sum(np.bincount(u * size + v, minlength=size * size) for u in idx for v in idx)
    null = size - np.linalg.matrix_rank(np.reshape(gram, (size, size)).astype(np.float64),
                                        hermitian=True)  # fmt: skip
    ones = [np.ones(s) for s in sizes]
    trend = np.concatenate([used[0][0], used[1][0], -used[2][0]]).astype(np.float64)
    basis = np.stack([np.concatenate([ones[0], -ones[1], 0 * ones[2]]),
                      np.concatenate([0 * ones[0], ones[1], -ones[2]]), trend], axis=1)  # fmt: skip
    return int(null - np.linalg.matrix_rank(basis))


def _check_identified(mask: np.ndarray) -> None:
    """Raise unless the mask's only gauge directions are the three generic ones.

    A band ``lo <= i - j <= hi`` with ``hi > lo`` (every pair, causal, sliding
    windows on one side or both) has exactly those three; any other mask is
    checked once through the rank of its Gram matrix (cached per mask).
    """
    n = mask.shape[0]
    i, j = np.indices(mask.shape)
    rows, cols = np.nonzero(mask)
    lo, hi = int((rows - cols).min()), int((rows - cols).max())
    if hi > lo and np.array_equal(mask, (i - j >= lo) & (i - j <= hi)):
        return
    extra = _extra_gauge(n, np.packbits(mask.ravel()).tobytes())
    if extra:
        raise RopesplitError(
            f"the three-term fit is not identified on this mask: {extra} gauge directions "
            "beyond the three of every mask (blocks of tokens that read only each other, or "
            "a single offset); fit each block on its own")


def _as_mask(mask: Any, n: int) -> np.ndarray:
    """``(N, N)`` bool: every pair for None, ``mask.allowed(N)`` for a
    :class:`~ropesplit.numerics.mask.Mask`, else the array itself."""
    if mask is None:
        return np.ones((n, n), dtype=bool)
    return np.asarray(mask.allowed(n) if hasattr(mask, "allowed") else mask, dtype=bool)


def three_term_fit(A: Any, mask: Any = None) -> ThreeTermFit:
    r"""Least squares :math:`A_{ij} \approx a_{i-j} + b_j + c_i` over ``mask`` (default: all pairs).

    .. math::
        \min_{a,b,c} \sum_{(i,j)\in\mathcal M} (A_{ij} - a_{i-j} - b_j - c_i)^2,\qquad
        \rho = \log\frac{\mathrm{Var}(a)}{\mathrm{Var}(b)}\ \text{(ddof 1)}

    ``A (N, N)``: logits or probabilities of one head; ``mask (N, N)`` bool or a
    :class:`~ropesplit.numerics.mask.Mask`, ``None`` for all pairs both ways
    (arXiv 2602.20449's choice). ``b`` is per
    key (column), ``c`` per query (row), the reverse of
    :func:`~ropesplit.numerics.fit.three_axis_fit`'s names. ``(a, b, c)`` are the
    minimum-norm solution (module docstring: the gauge); ``a`` is over the
    offsets the mask holds. docs/theory.md sections 4-5.

    >>> i, j = np.indices((5, 5))
    >>> fit = three_term_fit(np.abs(i - j) + 2.0 * j, mask=i >= j)
    >>> fit.offsets.tolist(), round(fit.r, 12)
    ([0, 1, 2, 3, 4], 1.0)
    """
    w = _inputs.as_float64("A", A, 2)
    n = w.shape[0]
    if w.shape != (n, n) or n < 2:
        raise RopesplitError(f"A must be square (N, N) with N >= 2, got {w.shape}")
    m = _as_mask(mask, n)
    if m.shape != w.shape:
        raise RopesplitError(f"mask must have the shape of A {w.shape}, got {m.shape}")
    if not m.any():
        raise RopesplitError("mask selects no pairs")
    _check_identified(m)
    fit = three_axis_fit(w, m)  # its b per row (our c), its c per column (our b)
    rows, cols = np.nonzero(m)
    present = np.bincount(rows - cols - fit.d_min, minlength=fit.a.size) > 0
    offsets = np.flatnonzero(present) + fit.d_min
    key = np.where(np.bincount(cols, minlength=n) > 0, fit.c, np.nan)  # (N,)
    query = np.where(np.bincount(rows, minlength=n) > 0, fit.b, np.nan)  # (N,)
    a, b, c = _min_norm(fit.a[present], offsets, key, query)
    return ThreeTermFit(a=a, offsets=offsets, b=b, c=c, fitted=fit.fitted, r=fit.r,
                        log_var_ratio=_log_var_ratio(a, b))  # fmt: skip


@functools.lru_cache(maxsize=4)
def _released_inverse(n: int) -> np.ndarray:
    """``(A + 1e-6 I)^-1`` of their ``_prefactor_A(n)``, transcribed line for line."""
    A = np.zeros((4 * n - 1, 4 * n - 1), dtype=np.float64)

    def index_a(i: int) -> int:
        return (2 * n + i - 1) if i < 0 else i

    def index_b(i: int) -> int:
        return 2 * n + i - 1

    def index_c(i: int) -> int:
        return 3 * n + i - 1

    for i in range(-n + 1, n):
        A[index_a(i), index_a(i)] = n - abs(i)
        if i >= 0:
            A[index_a(i), index_b(0) : index_b(n - i)] = 1
            A[index_a(i), index_c(i) : index_c(n)] = 1
        else:
            A[index_a(i), index_b(-i) : index_b(n)] = 1
            A[index_a(i), index_c(0) : index_c(n + i)] = 1
    for i in range(n):
        A[index_b(i), index_a(-i) : index_a(-1)] = 1  # off by one: their slices, as released
        A[index_b(i), index_a(0) : index_a(n - i)] = 1
        A[index_b(i), index_b(i)] = n
        A[index_b(i), index_c(0) : index_c(n)] = 1
        A[index_c(i), index_a(i - n) : index_a(-1)] = 1
        A[index_c(i), index_a(0) : index_a(i)] = 1
        A[index_c(i), index_b(0) : index_b(n)] = 1
        A[index_c(i), index_c(i)] = n
    return np.linalg.inv(A + RIDGE * np.eye(A.shape[0]))


def released_three_term_fit(A: Any) -> ThreeTermFit:
    r"""Their ``disentangle_matrix`` on ``A (N, N)``, every pair: :math:`x = (M + 10^{-6} I)^{-1} X^\top A`.

    ``M`` is their normal matrix, which differs from :math:`X^\top X` (module
    docstring), so this is not a least-squares fit: kept to reproduce their
    numbers (to rounding: a cached inverse for their cached LU). ``a`` is put
    in ascending offset order, ``r`` and the log ratio computed as theirs.

    >>> i, j = np.indices((6, 6))
    >>> planted = np.cos(i - j) + np.sqrt(j) + i**2
    >>> round(released_three_term_fit(planted).r, 3) < 1.0
    True
    """  # noqa: E501
    w = _inputs.as_float64("A", A, 2)
    n = w.shape[0]
    if w.shape != (n, n) or n < 2:
        raise RopesplitError(f"A must be square (N, N) with N >= 2, got {w.shape}")
    wrap = (np.subtract.outer(np.arange(n), np.arange(n))) % (2 * n - 1)  # (N, N) their a index
    y = np.concatenate([np.bincount(wrap.ravel(), weights=w.ravel(), minlength=2 * n - 1),
                        w.sum(axis=0), w.sum(axis=1)])  # fmt: skip  # diagonals, columns, rows
    x = _released_inverse(n) @ y  # (4N - 1,)
    a_wrap, b, c = x[: 2 * n - 1], x[2 * n - 1 : 3 * n - 1], x[3 * n - 1 :]
    fitted = a_wrap[wrap] + b[None, :] + c[:, None]  # their get_low_rank_attention
    offsets = np.arange(-(n - 1), n)
    spread = np.std(w) * np.std(fitted)  # scipy's pearsonr over all N^2 entries
    moment = np.mean((w - w.mean()) * (fitted - fitted.mean()))
    r = math.nan if spread == 0 else float(moment / spread)
    return ThreeTermFit(a=a_wrap[offsets % (2 * n - 1)], offsets=offsets, b=b, c=c, fitted=fitted,
                        r=r, log_var_ratio=_log_var_ratio(a_wrap, b))  # fmt: skip


@dataclass(frozen=True)
class ThreeTermFits:
    """Fits of a stack of matrices ``(..., N, N)``: the leading shape ``S`` kept."""

    a: np.ndarray  # S + (n_offsets,)
    offsets: np.ndarray  # (n_offsets,)
    b: np.ndarray  # S + (N,) per key
    c: np.ndarray  # S + (N,) per query
    r: np.ndarray  # S
    log_var_ratio: np.ndarray  # S


def three_term_fits(A: Any, mask: Any = None, *, convention: str = "least_squares"
                    ) -> ThreeTermFits:  # fmt: skip
    r""":func:`three_term_fit` (or, ``convention="released"``, :func:`released_three_term_fit`)
    of every matrix of ``A (..., N, N)``: inputs, layers, heads in any leading order.

    .. math:: \rho_{s} = \log\frac{\mathrm{Var}(a_s)}{\mathrm{Var}(b_s)},\quad
              r_s = \mathrm{corr}_{\mathcal M}(A_s, \hat A_s)\quad\text{for each index } s

    >>> fits = three_term_fits(np.random.default_rng(0).random((2, 3, 5, 5)))
    >>> fits.r.shape, fits.a.shape
    ((2, 3), (2, 3, 9))
    """
    if convention not in ("least_squares", "released"):
        raise RopesplitError(
            f"convention must be 'least_squares' or 'released', got {convention!r}")
    w = _inputs.as_float64("A", A, max(len(np.shape(A)), 2))
    *lead, n, n2 = w.shape
    if convention == "released" and mask is not None:
        raise RopesplitError("the released fit takes every pair: mask must be None")
    fits = [three_term_fit(w[s], mask) if convention == "least_squares"
            else released_three_term_fit(w[s]) for s in np.ndindex(*lead)]  # fmt: skip
    shape = tuple(lead)
    return ThreeTermFits(
        a=np.array([f.a for f in fits]).reshape(shape + (-1,)), offsets=fits[0].offsets,
        b=np.array([f.b for f in fits]).reshape(shape + (n2,)),
        c=np.array([f.c for f in fits]).reshape(shape + (n,)),
        r=np.array([f.r for f in fits]).reshape(shape),
        log_var_ratio=np.array([f.log_var_ratio for f in fits]).reshape(shape))  # fmt: skip


def three_term_heads(q: Any, k: Any, spec: RopeSpec, positions: Any = None,
                     mask: Any = None) -> dict[str, np.ndarray]:  # fmt: skip
    r"""The three-term fit of every query head of a layer, beside the split on the same heads:
    on its RoPE logits and on their softmax over ``mask`` (arXiv 2602.20449 fits the latter).

    .. math:: W_{ij} = s\,\langle R(p_i) q_i, R(p_j) k_j\rangle\ \text{(docs/theory.md
              section 2)},\qquad A_{i\cdot} = \mathrm{softmax}_{j \in \mathcal M_i} W_{i\cdot}

    ``q (H, N, d)``, ``k (Hkv, N, d)`` pre-RoPE, ``spec`` the layer's geometry (head ``h``
    reads ``spec.kv_heads(H, Hkv)[h]``), ``positions (N,)`` (default ``0..N-1``), ``mask``
    as :func:`three_term_fit` takes it (None: every pair). Returns ``(H,)`` arrays
    ``r_logits``, ``log_var_ratio_logits``, ``r_probs``, ``log_var_ratio_probs``.
    """
    qx, kx = _inputs.as_float64("q", q, 3), _inputs.as_float64("k", k, 3)
    n, kv = qx.shape[1], spec.kv_heads(qx.shape[0], kx.shape[0])
    p = np.arange(n, dtype=np.float64) if positions is None else np.asarray(positions, float)
    turn = {"layout": spec.layout, "rotary_dim": spec.rotary_dim}
    a = rotate(qx, p, spec.frequencies, **turn)  # (H, N, d) R(p_i) q_i
    y = rotate(kx, p, spec.frequencies, **turn)[kv]  # (H, N, d) the keys each head reads
    w = spec.scale * a @ y.transpose(0, 2, 1)  # (H, N, N)
    m = _as_mask(mask, n)
    logits, probs = three_term_fits(w, m), three_term_fits(masked_softmax(w, m), m)
    return {"r_logits": logits.r, "log_var_ratio_logits": logits.log_var_ratio,
            "r_probs": probs.r, "log_var_ratio_probs": probs.log_var_ratio}  # fmt: skip


def masked_softmax(W: Any, mask: Any = None) -> np.ndarray:
    r"""Attention probabilities of logits ``W (..., N, N)``, each row over its masked pairs.

    .. math:: P_{ij} = \frac{e^{W_{ij}}}{\sum_{j' : (i,j')\in\mathcal M} e^{W_{ij'}}}
              \ \ ((i,j)\in\mathcal M),\qquad P_{ij} = 0\ \text{otherwise}

    ``mask (N, N)`` bool or a :class:`~ropesplit.numerics.mask.Mask`, ``None`` for
    every pair; a row with no pair is all 0.

    >>> masked_softmax(np.zeros((3, 3)), np.tril(np.ones((3, 3), bool)))[2].tolist()
    [0.3333333333333333, 0.3333333333333333, 0.3333333333333333]
    """
    w = _inputs.as_float64("W", W, max(len(np.shape(W)), 2))
    m = _as_mask(mask, w.shape[-1])
    if m.shape != w.shape[-2:]:
        raise RopesplitError(f"mask must have shape {w.shape[-2:]}, got {m.shape}")
    z = np.where(m, w, -np.inf)  # (..., N, N)
    top = z.max(axis=-1, keepdims=True)  # (..., N, 1)
    e = np.where(m, np.exp(z - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


# --------------------------------------------------------------------------- chi-square

_EPS = 1e-16  # series and continued-fraction convergence (relative)
_TINY = 1e-300  # Lentz's guard against a zero denominator


def _gamma_pq(a: float, x: float) -> tuple[float, float]:
    """Regularized incomplete gamma ``(P(a, x), Q(a, x))``: the series below ``a + 1``, the
    continued fraction (Numerical Recipes gser, gcf; modified Lentz) above."""
    if x <= 0.0:
        return 0.0, 1.0
    front = math.exp(-x + a * math.log(x) - math.lgamma(a))
    max_iter = 1000 + int(20.0 * math.sqrt(a))
    if x < a + 1.0:
        term = total = 1.0 / a
        for k in range(1, max_iter):
            term *= x / (a + k)
            total += term
            if abs(term) < abs(total) * _EPS:
                return front * total, 1.0 - front * total
    else:
        b, c, d = x + 1.0 - a, 1.0 / _TINY, 1.0 / (x + 1.0 - a)
        h = d
        for k in range(1, max_iter):
            an, b = -k * (k - a), b + 2.0
            d = an * d + b
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = b + an / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
            if abs(d * c - 1.0) < _EPS:
                return 1.0 - front * h, front * h
    raise RopesplitError(f"incomplete gamma did not converge for a={a}, x={x}")  # pragma: no cover


def _check_df(df: float) -> float:
    df = float(df)
    if not df > 0.0 or math.isinf(df):  # also catches NaN
        raise RopesplitError(f"df must be a finite positive number, got {df}")
    return df


def chi2_cdf(x: float, df: float) -> float:
    r"""Chi-square distribution function :math:`F_k(x) = P(k/2, x/2)` (regularized gamma).

    Accurate to about 1e-14 relative for moderate ``df``, 1e-9 at ``df`` near 1e6.

    >>> round(chi2_cdf(2.0, 2), 12) == round(1 - math.exp(-1.0), 12)
    True
    """
    return _gamma_pq(0.5 * _check_df(df), 0.5 * max(float(x), 0.0))[0]


def chi2_quantile(p: float, df: float) -> float:
    r"""The chi-square quantile :math:`\chi^2_{p,k}`: the ``x`` with :math:`F_k(x) = p`.

    Bracketed Newton on the lower tail for ``p < 1/2`` and the upper one
    otherwise (no loss of precision in either tail).

    >>> round(chi2_quantile(0.975, 10), 6)
    20.483177
    """
    df, p = _check_df(df), float(p)
    if not 0.0 < p < 1.0:
        raise RopesplitError(f"p must lie in (0, 1), got {p}")
    return _chi2_quantile(p, df)


@functools.lru_cache(maxsize=4096)
def _chi2_quantile(p: float, df: float) -> float:
    """:func:`chi2_quantile` for checked ``0 < p < 1`` and ``df > 0``."""
    a, upper = 0.5 * df, p >= 0.5

    def gap(x: float) -> float:  # increasing in x, 0 at the quantile
        lower_tail, upper_tail = _gamma_pq(a, 0.5 * x)
        return (1.0 - p) - upper_tail if upper else lower_tail - p

    lo, hi = 0.0, max(df, 1.0)
    while gap(hi) < 0.0:
        lo, hi = hi, 2.0 * hi
    x = 0.5 * (lo + hi)
    for _ in range(200):
        f = gap(x)
        lo, hi = (x, hi) if f < 0.0 else (lo, x)
        density = math.exp((a - 1.0) * math.log(0.5 * x) - 0.5 * x - math.lgamma(a)) * 0.5
        new = x - f / density if density > 0.0 else 0.5 * (lo + hi)
        new = new if lo < new < hi else 0.5 * (lo + hi)
        if abs(new - x) <= 1e-15 * x or hi - lo <= 1e-15 * hi:
            return new
        x = new
    return x  # pragma: no cover - 200 safeguarded steps always reach the tolerance


# --------------------------------------------------------------------------- the CV


@dataclass(frozen=True)
class CVInterval:
    """The coefficient of variation of values across one unit, with its chi-square interval."""

    cv: float  # sqrt(variance) / |mean|
    low: float  # sqrt(variance_low) / |mean|
    high: float  # sqrt(variance_high) / |mean|
    level: float  # e.g. 0.95
    variance: float  # the variance across the unit, averaged over the other axes
    variance_low: float  # df * variance / chi2_{(1+level)/2, df}
    variance_high: float  # df * variance / chi2_{(1-level)/2, df}
    mean: float  # the mean of every value
    n: int  # values along the unit's axis
    groups: int  # variances averaged: the product of the other axes' sizes
    df: float  # the chi-square degrees of freedom
    convention: str  # "released", "unbiased" or "pooled"

    def contains(self, cv: float) -> bool:
        """``low <= cv <= high``."""
        return self.low <= cv <= self.high


def cv_interval(values: Any, *, axis: int = 0, level: float = 0.95,
                convention: str = "released") -> CVInterval:  # fmt: skip
    r"""CV of ``values`` (e.g. log Var(a)/Var(b), ``(inputs, layers, heads)``) across ``axis``.

    .. math::
        s^2 = \frac{1}{m}\sum_{g=1}^{m} \frac{1}{n - \delta}
              \sum_{u=1}^{n}(x_{gu} - \bar x_g)^2,\qquad
        \mathrm{CV} = \frac{s}{|\bar x|},\qquad
        \mathrm{CI} = \frac{1}{|\bar x|}\Big[\sqrt{\tfrac{\nu s^2}{\chi^2_{(1+\ell)/2,\nu}}},\
                                             \sqrt{\tfrac{\nu s^2}{\chi^2_{(1-\ell)/2,\nu}}}\Big]

    ``n`` values along ``axis`` in each of ``m`` groups (the other axes),
    :math:`\bar x` the mean of all values. ``convention``:

    - ``"released"``, their ``compute_ratio_statistics``: :math:`\delta = 0`
      (``np.var``), :math:`\nu = n - 1`. The interval assumes :math:`\delta = 1`,
      so it sits low by :math:`(n-1)/n` (on one normal group it still covers
      near its level: 0.953 at ``n = 8``); averaged over ``m > 1`` independent
      groups it is far too wide (:math:`\nu` counts one group: 0.999999 at
      ``n = 8``, ``m = 6``).
    - ``"unbiased"``: :math:`\delta = 1`, :math:`\nu = n - 1`: exact for one
      group of normal values, and for groups that move together.
    - ``"pooled"``: :math:`\delta = 1`, :math:`\nu = m(n - 1)`: exact for
      independent normal groups of one variance.

    The interval holds :math:`|\bar x|` fixed (as theirs does): it is the
    variance's chi-square interval, scaled. arXiv 2602.20449; docs/theory.md section 5.

    >>> ci = cv_interval([[1.0, 2.0], [1.5, 2.5], [0.5, 1.5]], convention="pooled")
    >>> round(ci.cv, 4), ci.n, ci.groups, ci.df
    (0.3333, 3, 2, 4.0)
    """
    if convention not in CONVENTIONS:
        raise RopesplitError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    if not 0.0 < float(level) < 1.0:
        raise RopesplitError(f"level must lie in (0, 1), got {level}")
    x = _inputs.as_float64("values", values, max(len(np.shape(values)), 1))
    if not -x.ndim <= axis < x.ndim:
        raise RopesplitError(f"axis must index the {x.ndim} axes of values, got {axis}")
    n = x.shape[axis]
    if n < 2:
        raise RopesplitError(f"need at least 2 values along axis {axis}, got {n}")
    groups = x.size // n
    variance = float(np.var(x, axis=axis, ddof=0 if convention == "released" else 1).mean())
    df = float((n - 1) * (groups if convention == "pooled" else 1))
    var_low = df * variance / chi2_quantile(0.5 * (1.0 + level), df)
    var_high = df * variance / chi2_quantile(0.5 * (1.0 - level), df)
    mean = float(x.mean())
    scale = abs(mean)

    def cv(v: float) -> float:
        return math.sqrt(v) / scale if scale > 0 else math.inf

    return CVInterval(cv=cv(variance), low=cv(var_low), high=cv(var_high), level=float(level),
                      variance=variance, variance_low=var_low, variance_high=var_high,
                      mean=mean, n=n, groups=groups, df=df, convention=convention)  # fmt: skip
