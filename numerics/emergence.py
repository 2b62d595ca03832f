r"""What watching the pattern emerge in training needs beyond section 5 (docs/theory.md 3, 5).

- :func:`pair_energy`: the per-pair deviation energy of every head, the
  summand of ``lowfreq_share`` (section 5):

  .. math:: e_{h,l} = \sum_j |\tilde x_{h,j,l} - \bar{\tilde x}_{h,l}|^2,\qquad
            \bar{\tilde x}_{h,l} = \tfrac1N \textstyle\sum_j \tilde x_{h,j,l}

- :func:`causal_bound_weight`: the remainder bound's per-pair weight
  :math:`2|\sin(\theta_l\Delta/2)|` (section 3, ``remainder_bound``) averaged
  over the causal pairs of a context of ``L`` tokens, where distance
  :math:`\Delta` occurs :math:`L - \Delta` times:

  .. math:: \bar w_l(L) = \frac{\sum_{\Delta=0}^{L-1} (L-\Delta)\,2|\sin(\theta_l\Delta/2)|}
                              {\sum_{\Delta=0}^{L-1} (L-\Delta)}

  and :func:`slow_pairs`, the pairs that turn by less than one radian over
  the context, :math:`\theta_l L < 1`: where key deviation costs the bound
  little. Both are the theory's prediction of which RoPE bases can produce
  the split at a training length, computed before any training.
- :func:`unigram_entropy`: :math:`H = -\sum_v p_v \log p_v` (nats) of a token
  sequence, the loss of the best context-free predictor.

Shapes: ``x (H, N, d)`` real features, ``theta (P,)``, energies ``(H, P)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import _inputs
from ropesplit.numerics.rope import to_pairs

__all__ = ["causal_bound_weight", "deviation_energy", "pair_energy", "retrieval_score",
           "slow_pairs", "unigram_entropy", "weighted_slow_share"]


def pair_energy(x: Any, *, layout: str = "half", rotary_dim: int | None = None) -> np.ndarray:
    r"""Deviation energy per head and pair ``(H, P)`` of features ``x (H, N, d)``.

    .. math:: e_{h,l} = \sum_j |\tilde x_{h,j,l} - \bar{\tilde x}_{h,l}|^2

    >>> pair_energy(np.array([[[1.0, 0.0], [3.0, 0.0]]])).tolist()
    [[2.0]]
    """
    arr = _inputs.as_float64("x", x, 3)  # (H, N, d)
    return deviation_energy(to_pairs(arr, layout, rotary_dim))


def deviation_energy(z: np.ndarray) -> np.ndarray:
    r"""Deviation energy per head and pair ``(H, P)`` of complex pairs ``z (H, N, P)``.

    .. math:: e_{h,l} = \sum_j |\tilde x_{h,j,l} - \bar{\tilde x}_{h,l}|^2

    >>> deviation_energy(np.array([[[1.0 + 0j], [3.0 + 0j]]])).tolist()
    [[2.0]]
    """
    dev = z - z.mean(axis=1, keepdims=True)  # (H, N, P)
    return (np.abs(dev) ** 2).sum(axis=1)  # (H, P)


def causal_bound_weight(theta: Any, length: int) -> np.ndarray:
    r"""Mean bound weight :math:`\bar w_l(L)` ``(P,)`` of each pair over a causal context.

    .. math:: \bar w_l(L) = \frac{\sum_{\Delta=0}^{L-1} (L-\Delta)\,2|\sin(\theta_l\Delta/2)|}
                                {L(L+1)/2}

    >>> causal_bound_weight([0.0], 8).tolist()
    [0.0]
    """
    th = np.asarray(theta, dtype=np.float64).ravel()  # (P,)
    if length < 1:
        raise RopesplitError(f"length must be at least 1, got {length}")
    delta = np.arange(length, dtype=np.float64)  # (L,)
    count = length - delta  # (L,) causal pairs at distance Delta
    weight = 2.0 * np.abs(np.sin(th[:, None] * delta[None, :] / 2.0))  # (P, L)
    return (weight @ count) / count.sum()


def slow_pairs(theta: Any, length: int) -> np.ndarray:
    r"""Boolean ``(P,)``: pairs turning less than one radian over ``length`` tokens, :math:`\theta_l L < 1`.

    >>> slow_pairs([1.0, 0.01, 0.0], 64).tolist()
    [False, True, True]
    """  # noqa: E501
    if length < 1:
        raise RopesplitError(f"length must be at least 1, got {length}")
    return np.asarray(theta, dtype=np.float64).ravel() * length < 1.0


def unigram_entropy(ids: Any, vocab: int) -> float:
    r"""Entropy (nats) of the token frequencies of ``ids``: :math:`-\sum_v p_v \log p_v`.

    >>> round(unigram_entropy([0, 1, 0, 1], 2), 6) == round(float(np.log(2)), 6)
    True
    """
    arr = np.asarray(ids, dtype=np.int64).ravel()
    if arr.size == 0:
        raise RopesplitError("ids must hold at least one token, got 0")
    if arr.min() < 0 or arr.max() >= vocab:
        raise RopesplitError(f"ids must lie in [0, {vocab}), got {int(arr.max())}")
    p = np.bincount(arr, minlength=vocab) / arr.size  # (vocab,)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def weighted_slow_share(qc: Any, dc: Any, theta: Any, length: int | None = None) -> np.ndarray:
    r"""Per head, the share of the bound's weight :math:`|\tilde q_{il}||\tilde\delta_{jl}|`
    in the slow pairs (:func:`slow_pairs`: :math:`\theta_l L < 1`), over the causal pairs.

    .. math:: \frac{\sum_{l:\,\theta_l L < 1} \sum_i |\tilde q_{il}|
                    \sum_{j \le i} |\tilde\delta_{jl}|}
                   {\sum_l \sum_i |\tilde q_{il}| \sum_{j \le i} |\tilde\delta_{jl}|}

    ``qc (H, N, P)`` query pairs, ``dc (H, N, P)`` the key deviations each head
    reads, ``theta (P,)``, ``length`` ``L`` (default ``N``). 1 when the keys
    deviate only in slow pairs (or the queries live only there): then the
    remainder's bound is at most :math:`2\sin(1/2)` of the weight, whatever
    the distance; NaN with no weight.
    """
    q = np.abs(np.asarray(qc, dtype=np.complex128))  # (H, N, P)
    d = np.abs(np.asarray(dc, dtype=np.complex128))
    th = np.asarray(theta, dtype=np.float64)
    if q.ndim != 3 or q.shape != d.shape or th.shape != q.shape[2:]:
        raise RopesplitError(f"qc, dc must be one shape (H, N, P) with theta (P,), got "
                             f"{q.shape}, {d.shape}, {th.shape}")  # fmt: skip
    weight = (q * np.cumsum(d, axis=1)).sum(1)  # (H, P): sum_i |q_il| sum_{j<=i} |d_jl|
    slow = slow_pairs(th, q.shape[1] if length is None else length).astype(np.float64)
    total = weight.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (weight @ slow) / total, np.nan)


def retrieval_score(probs: Any, sources: Any) -> np.ndarray:
    r"""Per head, the mean attention from each answer's query row to the answer's source.

    .. math:: \mathrm{retrieval}_h = \frac{1}{|\mathcal A|}\sum_{a \in \mathcal A}
              A^{h}_{a-1,\,s_a}

    ``probs (H, N, N)`` one sequence's attention (rows: queries), ``sources
    (N,)`` the position each answer is copied from (-1 where there is no
    answer; the answer at ``a`` is predicted from query row ``a - 1``). 1 for a
    head that puts all its attention on the sources, ``1 / (a)`` on average for
    one spread evenly over the causal prefix; NaN when there is no answer.
    """
    p = np.asarray(probs, dtype=np.float64)
    src = np.asarray(sources, dtype=np.int64)
    if p.ndim != 3 or p.shape[1:] != (src.size, src.size):
        raise RopesplitError(f"probs must be (H, N, N) with sources (N,), got {p.shape}, "
                             f"{src.shape}")  # fmt: skip
    answers = np.flatnonzero(src >= 0)
    if answers.size == 0:
        return np.full(p.shape[0], np.nan)
    if answers.min() < 1 or (src[answers] >= answers).any():
        raise RopesplitError("each answer needs a query row before it and a source before it")
    return p[:, answers - 1, src[answers]].mean(-1)  # (H,)
