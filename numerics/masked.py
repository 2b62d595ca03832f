r"""The section 5 statistics over any set of pairs: attention both ways, windows on both
sides, blocks and padding (docs/theory.md section 9).

The causal band has a prefix-sum algorithm (:mod:`.stats`: the columns before a row are
a running sum).  Any other :class:`.mask.Mask` is measured here, row block by row block,
as dense products of the same real features (:class:`.pairing.Factors`):

.. math:: W_{ij} = a_i\cdot y_j,\qquad E^m_{ij} = a_i\cdot b_j - u^m_i\cdot\delta_j,
          \qquad (i, j) \in \mathcal M

giving, per row, the raw moments :math:`\sum_{j\in\mathcal M_i} W_{ij}^2`,
:math:`\sum W E^m`, :math:`\sum (E^m)^2`, the row sums of ``W`` and ``E``, and the column
and offset sums of ``W`` (the three-axis fit's right side): what :mod:`.stats` centres
and combines into every statistic, the same way for both algorithms.  ``O(N^2 c)`` per
head, in blocks of bounded memory; no ``(N, N)`` matrix per head is kept.

The bound :math:`|E_{ij}| \le B_{ij}` is checked on every allowed pair (or a seeded
sample of ``pair_budget`` of them). On a band (``-after <= i - j <= before``, no blocks, no
padding) with positions in whole steps it runs compiled (:func:`band_ratios`): the pairs
at or before the query are :func:`.bound.causal_ratios`' own, and the pairs after it are
the causal pairs of the reversed sequence with conjugated features,

.. math:: E_{i,i+D} = s\,\mathrm{Re}\sum_l \tilde q_l\overline{\tilde\delta_l}
          \,(e^{-i\theta_l D} - m_l)
          = s\,\mathrm{Re}\sum_l \overline{\tilde q_l}\,\tilde\delta_l
          \,(e^{i\theta_l D} - \overline{m_l}),\qquad B \text{ even in } D

(positions ``-p`` in reverse order: whole steps still). Any other mask goes pair by pair
through :func:`.bound.remainder_and_bound`, in chunks, both signs alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ropesplit.numerics.bound import causal_ratios, pair_ratios, remainder_and_bound, violations
from ropesplit.numerics.mask import Mask
from ropesplit.numerics.pairing import WORK_BYTES, BoundCheck, Factors, Moments, whole_steps

__all__ = ["MaskSums", "band_ratios", "mask_ratios", "mask_sums"]

_BLOCK_ROWS = 128  # rows of one dense block of mask_sums


@dataclass(frozen=True)
class MaskSums:
    r"""Per-row sums of a layer's pairs over a mask (raw, in units of the scale ``s``)."""

    moments: Moments  # each row's sum_j W^2, W E^m, (E^m)^2 (nothing "before": zeros)
    row_w: torch.Tensor  # (H, N) sum_j W_ij
    row_e: list[torch.Tensor]  # per reference (H, N) sum_j E^m_ij
    col_w: torch.Tensor  # (H, N) sum_i W_ij
    diag_w: torch.Tensor  # (H, n_a) sum over the pairs of offset D = d_min + t of W
    products: torch.Tensor  # (H, N) sum_j |a_i|^2 |y_j|^2: the scale of the logits' rounding
    counts: tuple[np.ndarray, np.ndarray, np.ndarray]  # pairs per offset, row, column
    d_min: int  # the smallest offset i - j of the mask


def mask_sums(f: Factors, allowed: np.ndarray) -> MaskSums:
    r""":class:`MaskSums` of the features ``f`` over the pairs ``allowed (N, N)``.

    .. math:: S^{WW}_i = \sum_{j\in\mathcal M_i} W_{ij}^2,\quad
              S^{WE}_i = \sum_{j\in\mathcal M_i} W_{ij}E^m_{ij},\quad
              S^{EE}_i = \sum_{j\in\mathcal M_i} (E^m_{ij})^2
    """
    h, n, c = f.a.shape
    refs = f.us.shape[0]
    heads = torch.from_numpy(f.kv)
    y, b, dp = (x[heads] for x in (f.y, f.b, f.dp))  # (H, N, c): the keys each head reads
    rows, cols = np.nonzero(allowed)
    d_min = int((rows - cols).min())
    n_a = int((rows - cols).max()) - d_min + 1
    moments = Moments.zeros(h, n, refs, f.a.device)
    row_w = torch.zeros(h, n, dtype=torch.float64)
    row_e = [torch.zeros(h, n, dtype=torch.float64) for _ in range(refs)]
    col_w = torch.zeros(h, n, dtype=torch.float64)
    diag_w = torch.zeros(h, n_a, dtype=torch.float64)
    y_sq = (y * y).sum(-1)  # (H, N)
    keep = torch.from_numpy(allowed.astype(np.float64))
    # rows per block: bounded memory, and few enough that a band's block reads a narrow strip
    step = max(1, min(_BLOCK_ROWS, WORK_BYTES // (8 * 4 * h * n * max(refs, 1))))
    for i0 in range(0, n, step):
        i1 = min(n, i0 + step)
        read = np.flatnonzero(allowed[i0:i1].any(0))  # the columns these rows read
        if not read.size:
            continue
        c0, c1 = int(read[0]), int(read[-1]) + 1
        m = keep[i0:i1, c0:c1]  # (B, C)
        full = bool(allowed[i0:i1, c0:c1].all())  # every pair of the block: no mask to apply
        at = torch.from_numpy(np.arange(i0, i1)[:, None] - np.arange(c0, c1)[None, :] - d_min)
        on = m.bool()
        w = f.a[:, i0:i1] @ y[:, c0:c1].transpose(1, 2)  # (H, B, C)
        wm = w if full else w * m
        moments.ww[:, i0:i1] = (wm * w).sum(-1)
        row_w[:, i0:i1] = wm.sum(-1)
        col_w[:, c0:c1] += wm.sum(1)
        diag_w.index_add_(1, at[on], wm[:, on])
        ab = f.a[:, i0:i1] @ b[:, c0:c1].transpose(1, 2)  # (H, B, C)
        for r in range(refs):
            e = ab - f.us[r][:, i0:i1] @ dp[:, c0:c1].transpose(1, 2)  # (H, B, C) E^m
            em = e if full else e * m
            moments.we[r][:, i0:i1] = (wm * e).sum(-1)
            moments.ee[r][:, i0:i1] = (em * e).sum(-1)
            row_e[r][:, i0:i1] = em.sum(-1)
    products = (f.a * f.a).sum(-1) * (y_sq @ keep.T)  # (H, N)
    counts = (np.bincount(rows - cols - d_min, minlength=n_a).astype(np.float64),
              allowed.sum(1).astype(np.float64), allowed.sum(0).astype(np.float64))  # fmt: skip
    return MaskSums(moments, row_w, row_e, col_w, diag_w, products, counts, d_min)


def band_ratios(check: BoundCheck, mask: Mask) -> tuple[list[np.ndarray], list[int]] | None:
    r"""Per head the ratios :math:`|E_{ij}|/B_{ij}` (``-inf`` where :math:`B = 0`) and the
    violation counts over every pair of a band ``mask``, compiled (module docstring): the
    pairs at or before each query by :func:`.bound.causal_ratios`, those after it by the
    same on the reversed, conjugated sequence (its diagonal, the queries' own keys again,
    left out). None where it does not apply: blocks, padding, or positions not in whole
    steps (:func:`mask_ratios` checks those pair by pair)."""
    steps = whole_steps(check.pq, check.pk)
    if mask.segments is not None or mask.keep is not None or steps is None:
        return None
    iq, ik, step = steps
    th, s, gap = check.theta * step, check.scale, check.gap
    n = check.qc.shape[1]
    back, bad_back = causal_ratios(check.qc, check.dc, th, iq, ik, s,
                                   window=None if mask.before is None else mask.before + 1,
                                   one_minus_m=gap)  # fmt: skip
    if mask.after == 0:
        return list(back), [int(b) for b in bad_back]
    ahead, bad_ahead = causal_ratios(
        np.conj(check.qc[:, ::-1]), np.conj(check.dc[:, ::-1]), th, -ik[::-1], -iq[::-1], s,
        window=None if mask.after is None else mask.after + 1,
        one_minus_m=None if gap is None else np.conj(gap))  # fmt: skip
    # the reversed sequence's diagonal is the queries' own keys, counted in ``back``
    own = remainder_and_bound(check.qc, check.dc, check.theta, np.zeros(n), s,
                              one_minus_m=gap)  # (H, N) each  # fmt: skip
    bad = [int(b) + int(a) - violations(own[0][x], own[1][x])
           for x, (b, a) in enumerate(zip(bad_back, bad_ahead, strict=True))]  # fmt: skip
    return [np.concatenate([b, a[n:]]) for b, a in zip(back, ahead, strict=True)], bad


def mask_ratios(
    check: BoundCheck, allowed: np.ndarray, pair_budget: int | None = None, seed: int = 0
) -> tuple[list[torch.Tensor], list[int], int | None]:
    r"""Per head the ratios :math:`|E_{ij}| / B_{ij}` over the pairs ``allowed (N, N)`` (those
    with :math:`B > 0`), the violation counts, and the number of sampled pairs (None: every
    allowed pair checked; else a seeded uniform sample of ``pair_budget``, the same pairs
    for every head).  ``check.window`` is not read: the mask says which pairs there are.
    """
    h, n, p = check.qc.shape
    flat = np.flatnonzero(allowed)  # the allowed pairs, row by row
    sampled = None
    if pair_budget is not None and pair_budget < flat.size:
        rng = np.random.default_rng(seed)
        flat = np.sort(flat[rng.choice(flat.size, size=int(pair_budget), replace=False)])
        sampled = flat.size
    i, j = np.divmod(flat, n)
    chunk = max(1, WORK_BYTES // (8 * 8 * h * max(p, 1)))  # pairs per chunk: (H, chunk, P)
    ratios, bad = pair_ratios(check.qc, check.dc, check.theta, (i, j), check.pq[i] - check.pk[j],
                              check.scale, check.gap, chunk)  # fmt: skip
    return ratios, bad, sampled
