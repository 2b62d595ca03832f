r"""The length experiment's statistics (docs/theory.md section 4): beyond the training length.

Where a model reads past its training length ``L``, docs/theory.md section 4
predicts that only the positional term meets unseen values. These are the
numbers the experiment (``empirical.experiments.length``) reports on its
arrays: the loss per position bucket (:func:`bucket_edges`,
:func:`bucket_means`), the trained range of a term and the share of values
outside it (:func:`component_range`, :func:`positional_range`,
:func:`outside_share`, :func:`outside_query_range`), a term's change against
its in-length reference (:func:`relative_change`) and a rank correlation
(:func:`rank_correlation`). LM-Infinite's attention itself is
:mod:`ropesplit.numerics.lambda_attention`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.spec import RopeSpec, as_spec
from ropesplit.numerics.types import HeadFeatures, KeyMean

__all__ = [
    "QUANTILES",
    "RANGE_RTOL",
    "bucket_edges",
    "bucket_means",
    "component_range",
    "outside_query_range",
    "outside_share",
    "positional_range",
    "rank_correlation",
    "relative_change",
]


def bucket_edges(
    length: int, multiples: Any, n_positions: int | None = None
) -> list[tuple[int, int]]:
    r"""Position buckets ``[0, L)``, then ``[m_{k-1} L, m_k L)`` for each multiple beyond 1.

    With ``n_positions``, buckets are cut at it and those starting at or after it dropped.

    >>> bucket_edges(4, (1, 2, 4, 8), 20)
    [(0, 4), (4, 8), (8, 16), (16, 20)]
    """
    ms = [int(m) for m in multiples]
    if length < 1 or not ms or ms[0] != 1 or any(b <= a for a, b in zip(ms, ms[1:], strict=False)):
        raise RopesplitError(
            f"multiples must start at 1 and increase, and L >= 1; got L={length}, {ms}"
        )
    edges = [0] + [m * length for m in ms]
    buckets = list(zip(edges[:-1], edges[1:], strict=True))
    if n_positions is None:
        return buckets
    return [(lo, min(hi, n_positions)) for lo, hi in buckets if lo < n_positions]


def bucket_means(values: Any, edges: list[tuple[int, int]]) -> list[float]:
    r"""Mean of ``values (..., N)`` over the positions of each bucket (all leading axes pooled).

    .. math:: \bar x_b = \frac{1}{|B_b|} \sum_{n \in B_b} x_n
    """
    x = np.asarray(values, dtype=np.float64)
    (n,) = x.shape[-1:]
    if edges[-1][1] > n:
        raise RopesplitError(f"buckets reach position {edges[-1][1]}, values have only {n}")
    return [float(x[..., lo:hi].mean()) for lo, hi in edges]


def outside_share(values: Any, low: float, high: float, *, tol: float | None = None) -> float:
    r"""Share of ``values`` outside ``[low, high]``, up to a tolerance ``tau``.

    .. math:: \frac{1}{M}\,\#\{m : x_m < lo - \tau \lor x_m > hi + \tau\},\quad
              \tau = 10^{-9} \max(|lo|, |hi|, 1)\ \text{unless given}

    0 for no values.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return 0.0
    tau = 1e-9 * max(abs(low), abs(high), 1.0) if tol is None else float(tol)
    return float(np.mean((x < low - tau) | (x > high + tau)))


QUANTILES = (0.01, 0.99)  # the central range reported in trained-range units
RANGE_RTOL = 1e-5  # float32 rounding of the activations, relative to the trained range's width


def component_range(values: Any, low: float, high: float) -> dict[str, float]:
    r"""Where ``values`` lie against a trained range ``[lo, hi]``: share outside and central range.

    .. math:: u(x) = \frac{x - (hi + lo)/2}{(hi - lo)/2}\quad(\text{the trained range is }
              [-1, 1]),\qquad \mathrm{lo}, \mathrm{hi} = u(q_{0.01}), u(q_{0.99})

    Returns ``outside`` (:func:`outside_share` with ``tau`` =
    :data:`RANGE_RTOL` ``(hi - lo)``: values from float32 activations that
    differ from the range's ends by rounding are not outside), ``lo`` and
    ``hi``. A degenerate range (``hi == lo``) reads in units of
    ``max(|lo|, 1e-12)``.
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return {"outside": 0.0, "lo": math.nan, "hi": math.nan}
    mid, half = (high + low) / 2, (high - low) / 2
    half = half if half > 0 else max(abs(low), 1e-12)
    q_lo, q_hi = np.quantile(x, QUANTILES)
    tau = RANGE_RTOL * (high - low) if high > low else None
    return {"outside": outside_share(x, low, high, tol=tau), "lo": float((q_lo - mid) / half),
            "hi": float((q_hi - mid) / half)}  # fmt: skip


def positional_range(
    q: HeadFeatures, kbar: KeyMean, spec: RopeSpec, length: int
) -> tuple[np.ndarray, np.ndarray]:
    r"""Each query's own trained range of ``f``: min and max over the distances ``0..L``.

    .. math:: f(q_i, \Delta) = s\,\mathrm{Re}\sum_l \tilde q_{il}\,\overline{\tilde{\bar k}_l}
              \,e^{i\theta_l\Delta},\qquad
              [\mathrm{lo}_i, \mathrm{hi}_i] = [\min_{0\le\Delta\le L} f,\ \max_{0\le\Delta\le L} f]

    ``q (N, d)`` pre-RoPE queries, ``kbar (d,)``, ``spec`` the head's geometry;
    returns ``lo, hi`` ``(N,)``.
    ``f`` at distance ``Delta`` depends on the query and ``Delta`` only, so the
    range the model met in training is known for every query, also one beyond
    ``L``: a value outside it is an angle the model never used for that query
    (unlike one range pooled over pairs, which a fresh sample of the same
    distribution leaves with probability about ``2/(n+1)``).
    """
    from ropesplit.numerics.rope import to_pairs

    if length < 0:
        raise RopesplitError(f"length must be >= 0, got {length}")
    q = np.asarray(q, dtype=np.float64)
    spec = as_spec(spec, q.shape[-1])
    kb = np.asarray(kbar, dtype=np.float64)
    if kb.shape != (spec.head_dim,):
        raise RopesplitError(f"kbar must have shape ({spec.head_dim},), got {kb.shape}")
    qc = to_pairs(q, spec.layout, spec.rotary_dim)  # (N, P)
    kc = to_pairs(kb, spec.layout, spec.rotary_dim)  # (P,)
    turn = np.exp(1j * np.outer(spec.frequencies, np.arange(length + 1)))  # (P, L + 1)
    f = spec.scale * np.real((qc * np.conj(kc)) @ turn)  # (N, L + 1)
    return f.min(axis=1), f.max(axis=1)


def outside_query_range(values: Any, lo: Any, hi: Any, mask: Any) -> float:
    r"""Share of the ``mask`` pairs whose ``values (N, N)`` leave their row's ``[lo_i, hi_i]``.

    .. math:: \frac{\#\{(i, j) \in \mathcal M : x_{ij} < lo_i - \tau_i \lor
              x_{ij} > hi_i + \tau_i\}}{|\mathcal M|},\quad
              \tau_i = \mathrm{RANGE\_RTOL}\,\max(hi_i - lo_i, 10^{-12})

    (float32 activations that differ from an end by rounding are not outside); 0
    for an empty mask.
    """
    x = np.asarray(values, dtype=np.float64)
    m = np.asarray(mask, dtype=bool)
    low, high = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if not m.any():
        return 0.0
    tau = RANGE_RTOL * np.maximum(high - low, 1e-12)  # (N,)
    out = (x < (low - tau)[:, None]) | (x > (high + tau)[:, None])  # (N, N)
    return float(out[m].mean())


def relative_change(values: Any, reference: Any) -> float:
    r"""Root-mean-square change relative to the reference's size.

    .. math:: \sqrt{\textstyle\sum (x - x^{\mathrm{ref}})^2 / \sum (x^{\mathrm{ref}})^2}

    0 for no values; ``inf`` when the reference is all zero and the values are not.
    """
    x, r = np.asarray(values, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if x.shape != r.shape:
        raise RopesplitError(
            f"values and reference must have one shape, got {x.shape} and {r.shape}"
        )
    num, den = float(np.sum((x - r) ** 2)), float(np.sum(r**2))
    if num == 0.0:
        return 0.0
    return math.sqrt(num / den) if den > 0 else math.inf


def rank_correlation(x: Any, y: Any) -> float | None:
    r"""Spearman's rank correlation (average ranks for ties); None when either side is constant.

    .. math:: \rho = \mathrm{corr}(\mathrm{rank}(x), \mathrm{rank}(y))

    >>> rank_correlation([1, 2, 3, 4], [10, 20, 25, 40])
    1.0
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise RopesplitError(f"x and y must be (n,) of one length, got {a.shape} and {b.shape}")
    ra, rb = _ranks(a), _ranks(b)
    if a.size < 2 or np.ptp(ra) == 0 or np.ptp(rb) == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks ``0..n-1``, ties sharing their average rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(x.size)
    ranks[order] = np.arange(x.size, dtype=np.float64)
    for value in np.unique(x):
        tie = x == value
        ranks[tie] = ranks[tie].mean()
    return ranks
