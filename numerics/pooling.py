r"""A passage's value from its heads: the mean of per-head statistics, or one pooled statistic.

The paper's 0.959 is "averaged" without saying over what; the claims grid
(``ropesplit.core.claims.GRID``, axis ``heads``) reads both:

- ``mean``: :math:`\bar x = \frac1{|H'|}\sum_{h \in H'} x_h` over the heads
  whose value is defined (:func:`head_mean`);
- ``pooled``: one statistic over every head's pairs at once: a correlation
  from the heads' additive pair moments (``stats.pooled_correlation``), a
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

__all__ = ["head_mean", "pooled_share"]


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
