r"""A passage's value from its heads: the mean of per-head statistics, or one pooled statistic.

The paper's 0.959 is "averaged" without saying over what; the claims grid
(``ropesplit.claims.registry.GRID``, axis ``heads``) reads both:

- ``mean``: :math:`\bar x = \frac1{|H'|}\sum_{h \in H'} x_h` over the heads
  whose value is defined (:func:`head_mean`);
- ``pooled``: one statistic over every head's pairs at once: a correlation
  from the heads' additive pair moments (:func:`pooled_correlation`), a
  key correlation weighted by each head's key-effect variance
  (``perturbation.weighted_key_corr``), or a share of summed parts
  (:func:`pooled_share`):

  .. math:: s = \frac{\sum_h a_h}{\sum_h b_h}

  e.g. the key-deviation energy in the slow pairs over all of it, or the
  mean :math:`|g' - g|` over the mean :math:`|W' - W|`.

Shapes: per-head values ``(H,)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.bootstrap import Interval

__all__ = ["MOMENTS", "head_mean", "pooled_correlation", "pooled_correlation_ci", "pooled_share"]

MOMENTS = ("w_mean", "w_var", "fg_mean", "fg_var", "w_fg_cov")  # a head's pair moments


def head_mean(values: Any) -> float:
    r""":math:`\frac1{|H'|}\sum_{h \in H'} x_h` over the finite values of ``values (H,)``;
    NaN when none is.

    >>> head_mean([0.5, float("nan"), 1.0])
    0.75
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


def pooled_share(part: Any, whole: Any) -> float:
    r""":math:`\sum_h a_h / \sum_h b_h` over the heads where both are finite; NaN when the
    pooled whole is not above 0.

    >>> pooled_share([1.0, 3.0], [2.0, 6.0])
    0.5
    """
    a = np.asarray(part, dtype=np.float64).reshape(-1)
    b = np.asarray(whole, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise RopesplitError(f"part and whole must have one shape, got {a.shape} and {b.shape}")
    keep = np.isfinite(a) & np.isfinite(b)
    total = float(b[keep].sum())
    return float(a[keep].sum()) / total if total > 0 else float("nan")


def pooled_correlation(moments: Any, counts: Any, weights: Any = None) -> Any:
    r"""Pearson correlation of ``W`` with ``f + g`` over the pairs of several heads pooled.

    ``moments``: per head dicts with ``w_mean, w_var, fg_mean, fg_var,
    w_fg_cov`` (``HeadStats.by_reference[spec]``), ``counts (H,)`` their pair
    counts; ``weights (..., H)`` optional head multiplicities (a bootstrap
    resample), giving ``(...)`` correlations:

    .. math:: r = \frac{\sum_h n_h[c_h + (\mu^w_h - \mu^w)(\mu^{fg}_h - \mu^{fg})]}
                  {\sqrt{\sum_h n_h[v^w_h + (\mu^w_h - \mu^w)^2]
                          \sum_h n_h[v^{fg}_h + (\mu^{fg}_h - \mu^{fg})^2]}}
    """
    names = ("w_mean", "w_var", "fg_mean", "fg_var", "w_fg_cov")
    mw, vw, mf, vf, c = (np.array([float(m[key]) for m in moments]) for key in names)  # (H,)
    n = np.asarray(counts, dtype=np.float64) * (1.0 if weights is None else np.asarray(weights))
    total = n.sum(-1, keepdims=True)
    mu_w = (n * mw).sum(-1, keepdims=True) / total
    mu_f = (n * mf).sum(-1, keepdims=True) / total
    cov = (n * (c + (mw - mu_w) * (mf - mu_f))).sum(-1)
    var_w = (n * (vw + (mw - mu_w) ** 2)).sum(-1)
    var_f = (n * (vf + (mf - mu_f) ** 2)).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return cov / np.sqrt(var_w * var_f)


def pooled_correlation_ci(
    moments: Any, counts: Any, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> Interval:
    r"""The pooled correlation of :func:`pooled_correlation` with a percentile-bootstrap interval.

    Heads are resampled with replacement (multinomial multiplicities ``(n_boot, H)``
    from ``numpy.random.default_rng(seed)``), each resample pooled as above:

    .. math:: \mathrm{CI} = \big[Q_{(1-\alpha)/2},\ Q_{(1+\alpha)/2}\big]
              \text{ of } r^*_b = r_\mathrm{pooled}(\text{heads with multiplicities } m_b)

    ``mean`` of the returned :class:`~.bootstrap.Interval` is the pooled
    correlation of all heads (not a mean of per-head values).
    """
    h = len(counts)
    if h == 0:
        raise RopesplitError("need at least one head, got 0")
    draws = np.random.default_rng(seed).multinomial(h, np.full(h, 1 / h), n_boot)  # (n_boot, H)
    boot = pooled_correlation(moments, counts, draws)  # (n_boot,)
    low, high = np.quantile(boot, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return Interval(float(pooled_correlation(moments, counts)), float(low), float(high),
                    float(level), h, int(n_boot))  # fmt: skip
