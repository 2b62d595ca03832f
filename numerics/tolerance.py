r"""Tolerance to word order (claim 1): the damage a perturbation does to a passage's loss.

A passage :math:`x_0..x_{N-1}` and perturbed copies :math:`y^{(r)}` of it at
rates :math:`r` (nested: every position moved at :math:`r` is moved at every
larger rate). With :math:`\ell_t(y) = -\log p(y_t \mid y_{<t})` the model's
next-token loss and :math:`m_0` the first position moved at the largest
rate (so before any rate's first moved token), the scored targets are one
fixed set for every rate,

.. math:: S = \{\,t : m_0 < t \le N - 1\,\}

and the **damage** at rate :math:`r` is the log perplexity ratio over them

.. math:: D(r) = \frac{1}{|S|}\sum_{t \in S} \big(\ell_t(y^{(r)}) - \ell_t(x)\big)
          = \log\frac{\mathrm{PPL}_S(y^{(r)})}{\mathrm{PPL}_S(x)}

0 for a model that ignores order. With the **dose** :math:`\rho(r)`, the
share of the :math:`N` positions whose token changed:

.. math:: R_{5} = \frac{D(5\%)}{D(50\%)},\qquad
          \kappa = D(r_2) - \frac{\rho(r_2)}{\rho(r_1)}\,D(r_1)

:math:`R_5` (``relative_damage``) is under :math:`\rho(5\%)/\rho(50\%) \approx
0.1` when the damage stays flat before rising (below the chord from 0 to
50%), exactly that for a damage linear in the dose. :math:`\kappa`
(``curvature``) is 0 in expectation for a damage linear in the dose, > 0
when it bends upward. Shapes: losses ``(N - 1,)`` or ``(R, N - 1)``, column
``t - 1`` the loss of target ``t``.

**Both ways** (an encoder, docs/theory.md section 9): no next token, so the loss is the
masked-token loss :math:`\ell_t(y) = -\log p(y_t \mid y_{\setminus S})` on one fixed set
:math:`S` of masked targets (:func:`masked_targets`, the same for the passage and every
perturbed copy); every target reads every moved token, so :math:`D(r)` is the mean over
all of :math:`S` (``suffix_damage`` from 0 on the columns of :math:`S`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError

__all__ = ["curvature", "dose", "first_moved", "masked_targets", "relative_damage",
           "suffix_damage"]


def first_moved(clean: Any, perturbed: Any) -> int:
    """The first position whose token differs between ``clean (N,)`` and ``perturbed (N,)``
    (``N`` when none does).

    >>> first_moved([5, 6, 7, 8], [5, 7, 6, 8])
    1
    """
    x, y = np.asarray(clean).reshape(-1), np.asarray(perturbed).reshape(-1)
    if x.shape != y.shape:
        raise RopesplitError(f"clean and perturbed must have one shape, got {x.shape}, {y.shape}")
    moved = np.flatnonzero(x != y)
    return int(moved[0]) if moved.size else int(x.size)


def dose(clean: Any, perturbed: Any) -> float:
    r""":math:`\rho`: the share of positions whose token changed."""
    x, y = np.asarray(clean).reshape(-1), np.asarray(perturbed).reshape(-1)
    return float(np.mean(x != y))


def suffix_damage(clean_losses: Any, perturbed_losses: Any, start: int) -> np.ndarray:
    r""":math:`D(r)` for each row of ``perturbed_losses (R, N - 1)`` against
    ``clean_losses (N - 1,)``: the mean loss difference over the targets ``t > start``
    (``start`` = :math:`m_0`; columns ``start..N-2``).

    .. math:: D_r = \frac{1}{|S|}\sum_{t \in S} \ell_t(y^{(r)}) - \ell_t(x),\quad
              S = \{t : m_0 < t \le N-1\}

    >>> suffix_damage([1.0, 1.0, 1.0], [[1.0, 2.0, 4.0]], 1).tolist()
    [2.0]
    """
    base = np.asarray(clean_losses, dtype=np.float64).reshape(-1)  # (N - 1,)
    rows = np.asarray(perturbed_losses, dtype=np.float64)
    rows = rows.reshape(-1, base.size) if rows.size else rows.reshape(0, base.size)  # (R, N - 1)
    if int(start) != start or not 0 <= start < base.size:
        raise RopesplitError(f"start must be a position in [0, {base.size}) with a target "
                             f"after it, got {start}")  # fmt: skip
    diff = rows[:, int(start):] - base[int(start):]  # (R, |S|)
    if not np.all(np.isfinite(diff)):
        raise RopesplitError("a loss is not finite (NaN or inf logits)")
    return diff.mean(axis=1)


def relative_damage(damage: Any, reference: Any) -> np.ndarray:
    r""":math:`D(r) / D(r_\mathrm{ref})`, NaN where the reference damage is not above 0."""
    d = np.asarray(damage, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ref > 0, d / np.where(ref > 0, ref, 1.0), np.nan)


def curvature(damage_low: Any, damage_high: Any, dose_low: Any, dose_high: Any) -> np.ndarray:
    r""":math:`\kappa = D(r_2) - \frac{\rho(r_2)}{\rho(r_1)} D(r_1)`: 0 for a damage linear in
    the dose, > 0 when it bends upward between the two rates.

    >>> float(curvature(0.1, 0.2, 0.05, 0.10))
    0.0
    """
    low, high = np.asarray(dose_low, dtype=np.float64), np.asarray(dose_high, dtype=np.float64)
    if np.any(low <= 0):
        raise RopesplitError("the lower rate's dose must be above 0 (some token moved)")
    return np.asarray(damage_high, dtype=np.float64) - high / low * np.asarray(damage_low)


def masked_targets(movable: Any, bounds: Any, rate: float, rng: np.random.Generator
                   ) -> np.ndarray:  # fmt: skip
    r"""``(N,)`` bool: the masked targets :math:`S` of an encoder's word-order damage.

    .. math:: t \in S \iff \mathrm{movable}_t \wedge u_t < \mathrm{rate},\qquad
              u_t \sim U(0, 1)

    and at least one in each segment ``[bounds[i-1], bounds[i])`` (``bounds``: the lengths
    scored, ascending, from 0), so every length's first tokens hold a target: a segment left
    empty by the draw gets one of its movable positions, drawn from ``rng`` too.

    >>> s = masked_targets(np.ones(8, bool), [4, 8], 1.0, np.random.default_rng(0))
    >>> s.tolist()
    [True, True, True, True, True, True, True, True]
    """
    can = np.asarray(movable, dtype=bool).reshape(-1)  # (N,)
    edges = [0, *(int(b) for b in bounds)]
    if not 0.0 < rate <= 1.0 or edges != sorted(set(edges)) or edges[-1] > can.size:
        raise RopesplitError(f"masked targets need a rate in (0, 1] and ascending bounds within "
                             f"{can.size} tokens, got {rate} and {list(bounds)}")  # fmt: skip
    chosen = can & (rng.random(can.size) < rate)
    for lo, hi in zip(edges, edges[1:], strict=False):
        if not chosen[lo:hi].any():
            free = np.flatnonzero(can[lo:hi])
            if not free.size:
                raise RopesplitError(f"no movable token in positions [{lo}, {hi}) to mask")
            chosen[lo + int(rng.choice(free))] = True
    return chosen
