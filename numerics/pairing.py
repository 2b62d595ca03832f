r"""What the section 5 statistics share between their numpy/numba kernels (:mod:`.stats`)
and their dense torch blocks (:mod:`.stats_torch`): the real features of the logits and
the remainder, the row moments they give, and the plan of a tightness check's causal
pairs. Neither kernel module imports the other's private names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ropesplit.numerics.fit import band_gram

__all__ = ["DISTANCE_TABLE", "BoundCheck", "Factors", "Moments", "pair_indices", "pair_plan",
           "whole_steps"]

DISTANCE_TABLE = 64  # whole-number positions: distance-table rows per token, at most


Moments = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # S^WW (H, N), S^WE, S^EE (M, H, N)

@dataclass(frozen=True)
class BoundCheck:
    r"""What the check :math:`|E_{ij}| \le B_{ij}` of a layer's heads reads (docs/theory.md
    section 3): ``tightness`` of :mod:`.stats` and of :mod:`.stats_torch` take it whole."""

    qc: np.ndarray  # (H, N, P) complex query pairs
    dc: np.ndarray  # (H, N, P) complex key deviations, the ones each query head reads
    theta: np.ndarray  # (P,) frequencies
    pq: np.ndarray  # (N,) query positions
    pk: np.ndarray  # (N,) key positions
    scale: float  # the logit scale s
    window: int | None  # sliding window (None: every causal pair)
    gap: np.ndarray | None = None  # (P,) complex 1 - m_l of the reference (None: m_l = 1)


@dataclass(frozen=True)
class Factors:
    r"""The real features of :math:`W = a\cdot y` and :math:`E_m = a\cdot b - u^m\cdot\delta`."""

    a: torch.Tensor  # (H, N, c) R(p_i) q_i
    y: torch.Tensor  # (Hkv, N, c) R(p'_j) k_j
    b: torch.Tensor  # (Hkv, N, c) R(p'_j) delta_j
    dp: torch.Tensor  # (Hkv, N, c) delta_j
    us: torch.Tensor  # (M, H, N, c): q_i m, one per reference
    kv: np.ndarray  # (H,) the KV head each query head reads

def pair_indices(n: int, window: int | None, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Causal pairs ``(i, j)`` numbered row by row: ``flat (S,)`` -> two ``(S,)`` int arrays."""
    gram = band_gram(n, window)
    ends = np.cumsum(gram.count_b.astype(np.int64))  # (N,) pairs up to and including row i
    i = np.searchsorted(ends, flat, side="right")
    first = np.maximum(0, i - gram.n_a + 1)  # first column of row i
    return i, first + (flat - (ends[i] - gram.count_b[i].astype(np.int64)))

def pair_plan(
    n: int, window: int | None, pair_budget: int | None, seed: int, pq: np.ndarray, pk: np.ndarray
) -> tuple[int, np.ndarray | None, tuple[np.ndarray, np.ndarray, float] | None]:
    """``(n_pairs, flat, whole)`` of a tightness check: the causal pairs, the seeded sample of
    ``pair_budget`` of them (flat indices, sorted; None when every pair is checked) and, for an
    exact check, the positions as whole steps (:func:`whole_steps`)."""
    n_pairs = band_gram(n, window).pairs
    if pair_budget is not None and pair_budget < n_pairs:
        rng = np.random.default_rng(seed)
        return n_pairs, np.sort(rng.choice(n_pairs, size=int(pair_budget), replace=False)), None
    return n_pairs, None, whole_steps(pq, pk)


def whole_steps(pq: np.ndarray, pk: np.ndarray) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Positions as whole numbers of one step ``(iq, ik, step)``, or None.

    Queries and keys sharing one evenly spaced sequence count in steps of
    its spacing; otherwise whole-number positions count as they are, while
    their distances span at most :data:`DISTANCE_TABLE` times ``N`` values.
    """
    n = pq.size
    steps = np.diff(pq)
    if np.array_equal(pq, pk) and (steps.size == 0 or (steps == steps[0]).all()):
        index = np.arange(n)
        return index, index, float(steps[0]) if n > 1 else 1.0  # a step of 0: Delta = 0
    whole = np.array_equal(pq, np.round(pq)) and np.array_equal(pk, np.round(pk))
    if whole and n and (pq.max() - pk.min()) - (pq.min() - pk.max()) < DISTANCE_TABLE * n:
        return pq.astype(np.int64), pk.astype(np.int64), 1.0
    return None
