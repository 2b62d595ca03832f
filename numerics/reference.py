r"""The reference rotation :math:`m_l` of the split (docs/theory.md section 6).

A position-free semantic term replaces each pair's rotation :math:`e^{i\theta_l\Delta}`
by a constant :math:`m_l` (:math:`|m_l| \le 1`):

.. math::
    g_m(q, k) = s\,\mathrm{Re}\sum_l \tilde q_l\,\overline{\tilde\delta_l}\,m_l,\qquad
    E_m = s\,\mathrm{Re}\sum_l \tilde q_l\,\overline{\tilde\delta_l}\,(e^{i\theta_l\Delta} - m_l)

Three references, named by a string:

    zero          m_l = 1                      (section 3: every pair read at distance 0)
    distance:C    m_l = e^{i theta_l C}        (a reference distance C)
    mean          m_l = E_Delta e^{i theta_l Delta} over the distances that occur

The mean is over the analysed pairs: the causal pairs ``j <= i`` of ``n`` tokens
(within a sliding window when the layer has one), whose distance histogram is
``count(Delta) = n - Delta`` for ``0 <= Delta < min(n, window)``, so it costs
``O(n P)`` (:func:`mean_rotation`); any other set of pairs goes through
:func:`mean_rotation_of` (a distance matrix and a mask).  Besides ``m`` every
:class:`Reference` carries ``1 - m`` computed without cancellation,
:math:`1 - m_l = \mathrm{E}_\Delta[2\sin^2(\theta_l\Delta/2) - i\sin(\theta_l\Delta)]`,
which the remainder kernels (:mod:`.bound`) add to :math:`e^{i x} - 1`.

Shapes::

    theta        (P,)    frequencies
    m, one_minus (P,)    complex128
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import _inputs

__all__ = [
    "COMPARED",
    "Reference",
    "mean_rotation",
    "mean_rotation_of",
    "parse_reference",
    "resolve_reference",
]

COMPARED = ("zero", "distance:256", "distance:1000", "mean")  # references every analysis reports


@dataclass(frozen=True)
class Reference:
    """One reference rotation: its name, ``m (P,)`` and ``1 - m (P,)`` (complex128)."""

    name: str  # "zero", "distance:C" or "mean"
    m: np.ndarray  # m_l
    one_minus: np.ndarray  # 1 - m_l, without cancellation

    @property
    def is_zero(self) -> bool:
        """True for ``m_l = 1`` exactly (the section 3 split, evaluated by its own kernels)."""
        return self.name == "zero"


def parse_reference(name: str) -> tuple[str, float | None]:
    """``"zero" | "distance:C" | "mean"`` -> ``(kind, C)``; a one-line error otherwise.

    >>> parse_reference("distance:256"), parse_reference("mean")
    (('distance', 256.0), ('mean', None))
    """
    text = str(name).strip()
    if text in ("zero", "mean"):
        return text, None
    kind, sep, value = text.partition(":")
    if kind == "distance" and sep:
        try:
            c = float(value)
        except ValueError:
            c = math.nan
        if math.isfinite(c):
            return "distance", c
    raise RopesplitError(f"reference must be zero, distance:C (C a number) or mean, got {name!r}")


def canonical(name: str) -> str:
    """The name in one spelling (``distance:256.0`` -> ``distance:256``)."""
    kind, c = parse_reference(name)
    if c is None:
        return kind
    return f"distance:{int(c)}" if c == int(c) else f"distance:{c!r}"


def _from_counts(theta: np.ndarray, dist: np.ndarray, counts: np.ndarray) -> Reference:
    r""":math:`m_l = \sum c_\Delta e^{i\theta_l\Delta} / \sum c_\Delta` and ``1 - m``.

    ``m`` is taken as ``1 - (1 - m)``: exactly 1 where :math:`\theta_l = 0`
    (the weights need not sum to 1 in floating point), as for every reference.
    """
    total = counts.sum()
    if total <= 0:
        raise RopesplitError("the mean rotation needs at least one pair, got 0")
    x = dist[:, None] * theta  # (K, P) angles
    w = (counts / total)[:, None]  # (K, 1) weights
    one_minus = (w * (2.0 * np.sin(0.5 * x) ** 2 - 1j * np.sin(x))).sum(0)  # (P,)
    return Reference("mean", 1.0 - one_minus, one_minus)


def mean_rotation(theta: Any, n: int, window: int | None = None) -> Reference:
    r"""The mean rotation over the causal pairs of ``n`` tokens at positions ``0..n-1``.

    .. math:: m_l = \frac{\sum_{\Delta=0}^{D-1} (n - \Delta)\,e^{i\theta_l\Delta}}
                         {\sum_{\Delta=0}^{D-1} (n - \Delta)},\quad D = \min(n, \text{window})

    ``O(n P)`` from the distance histogram.

    >>> r = mean_rotation([1.0, 0.0], 3)
    >>> bool(np.allclose(r.m, [(3 + 2 * np.exp(1j) + np.exp(2j)) / 6, 1.0]))
    True
    """
    th = _inputs.as_float64("theta", theta, 1)
    if n < 1:
        raise RopesplitError(f"n must be at least 1, got {n}")
    w = _inputs.check_window(window)
    span = n if w is None else min(n, w)
    dist = np.arange(span, dtype=np.float64)  # (D,)
    return _from_counts(th, dist, n - dist)


def mean_rotation_of(theta: Any, distances: Any, mask: Any = None) -> Reference:
    r"""The mean rotation over an arbitrary set of pairs: ``distances (N, N)`` where ``mask``.

    .. math:: m_l = \frac{1}{|\mathcal M|}\sum_{(i,j)\in\mathcal M} e^{i\theta_l\Delta_{ij}}

    (each distinct distance once, weighted by its count; ``mask`` defaults to all pairs).
    """
    th = _inputs.as_float64("theta", theta, 1)
    dist = _inputs.as_float64("distances", distances, 2)
    keep = np.ones(dist.shape, bool) if mask is None else np.asarray(mask, bool)
    if keep.shape != dist.shape:
        raise RopesplitError(f"mask must have shape {dist.shape}, got {keep.shape}")
    values, counts = np.unique(dist[keep], return_counts=True)  # (K,), (K,)
    return _from_counts(th, values, counts.astype(np.float64))


def _positions_mean(theta: np.ndarray, pq: np.ndarray, pk: np.ndarray, window: int | None,
                    ) -> Reference:  # fmt: skip
    """The mean rotation over the causal pairs (by index) of the given positions."""
    n = pq.size
    steps = np.diff(pq)
    if np.array_equal(pq, pk) and (n < 2 or (steps == steps[0]).all()):
        step = 1.0 if n < 2 else float(steps[0])  # evenly spaced: the histogram, scaled
        ref = mean_rotation(theta * step, n, window)
        return Reference("mean", ref.m, ref.one_minus)
    dist = pq[:, None] - pk[None, :]  # (N, N)
    return mean_rotation_of(theta, dist, _inputs.causal_mask(n, window))


def resolve_reference(
    name: str | Reference,
    theta: Any,
    *,
    n: int | None = None,
    window: int | None = None,
    positions: Any = None,
    distances: Any = None,
    mask: Any = None,
) -> Reference:
    r"""The :class:`Reference` a name stands for, for these frequencies and pairs.

    ``mean`` needs the pairs: ``distances (N, N)`` with an optional ``mask``,
    else the causal pairs of ``n`` tokens (``positions`` as in
    :func:`~.split.split_head`, default ``0..n-1``; ``window``).  A
    :class:`Reference` passes through unchanged.

    .. math:: m_l \in \{1,\ e^{i\theta_l C},\ \mathrm{E}_\Delta e^{i\theta_l\Delta}\}
    """
    if isinstance(name, Reference):
        return name
    kind, c = parse_reference(name)
    th = _inputs.as_float64("theta", theta, 1)
    if kind == "zero":
        return Reference("zero", np.ones(th.size, complex), np.zeros(th.size, complex))
    if kind == "distance":
        assert c is not None
        x = th * c  # (P,)
        gap = 2.0 * np.sin(0.5 * x) ** 2 - 1j * np.sin(x)  # 1 - e^{i theta C}
        return Reference(canonical(name), np.exp(1j * x), gap)
    if distances is not None:
        return mean_rotation_of(th, distances, mask)
    if n is None:
        raise RopesplitError("the mean reference needs the pairs: give n or distances")
    pq, pk = _inputs.check_positions(positions, n)
    return _positions_mean(th, pq, pk, _inputs.check_window(window))
