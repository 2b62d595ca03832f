r"""Percentile bootstrap confidence interval of a mean (model-wide means over heads).

docs/theory.md section 5 defines the statistics per head; a model's value is their
mean over heads. Its uncertainty comes from resampling the heads with
replacement (Efron's percentile bootstrap):

.. math::

    \bar x^{*}_b = \frac1n \sum_{i=1}^{n} x_{I_{b,i}},\quad I_{b,i} \sim U\{1..n\},\qquad
    \mathrm{CI}_\alpha = \big[Q_{(1-\alpha)/2}(\bar x^*),\ Q_{(1+\alpha)/2}(\bar x^*)\big]

with ``b = 1..n_boot`` resamples drawn by ``numpy.random.default_rng(seed)``
and ``Q`` the linear-interpolation quantile. The point estimate is the plain
sample mean. Shapes: ``values (n,)``, resample indices ``(n_boot, n)``.

>>> ci = bootstrap_ci([0.9, 0.95, 1.0], n_boot=1000, seed=0, level=0.9)
>>> round(ci.mean, 3), 0.9 <= ci.low <= ci.mean <= ci.high <= 1.0
(0.95, True)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError

__all__ = ["Interval", "bootstrap_ci"]

_CHUNK = 2**22  # resampled values per chunk: bounded memory for many values or resamples


@dataclass(frozen=True)
class Interval:
    """A sample mean with its bootstrap confidence interval."""

    mean: float  # plain sample mean of the values
    low: float  # (1 - level)/2 quantile of the resampled means
    high: float  # (1 + level)/2 quantile of the resampled means
    level: float  # e.g. 0.95
    n: int  # number of values (heads)
    n_boot: int  # resamples drawn

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return asdict(self)

    def contains(self, value: float) -> bool:
        """``low <= value <= high``."""
        return self.low <= value <= self.high


def bootstrap_ci(
    values: Any, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> Interval:
    r"""Mean of ``values (n,)`` and its percentile-bootstrap interval at ``level``.

    .. math:: \mathrm{CI} = \big[Q_{(1-\alpha)/2},\ Q_{(1+\alpha)/2}\big]
              \text{ of } \bar x^*_b = \tfrac1n\textstyle\sum_i x_{I_{b,i}}

    ``values`` must be finite (filter undefined heads first and report how
    many were left out); deterministic for a given ``seed``.
    """
    x = np.asarray(values, dtype=np.float64).ravel()  # (n,)
    (n,) = x.shape
    if n == 0:
        raise RopesplitError("values must hold at least one number, got 0")
    if not np.isfinite(x).all():
        raise RopesplitError(f"values must be finite, got {int((~np.isfinite(x)).sum())} NaN/inf")
    if n_boot < 1:
        raise RopesplitError(f"n_boot must be at least 1, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise RopesplitError(f"level must lie in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    rows = max(1, _CHUNK // n)  # resamples per chunk
    means = np.concatenate([
        x[rng.integers(0, n, size=(min(rows, n_boot - b0), n))].mean(axis=1)  # (rows,)
        for b0 in range(0, n_boot, rows)
    ])  # fmt: skip  # (n_boot,)
    low, high = np.quantile(means, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return Interval(float(x.mean()), float(low), float(high), float(level), n, int(n_boot))
