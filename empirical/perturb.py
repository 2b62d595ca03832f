r"""Perturbation schemes for the paper's word-order and position experiments (THEORY.md section 4).

Pure functions of an integer length and a ``numpy.random.Generator``: each
returns an index array, never touches a model. Two families:

**Word order** (a permutation ``perm`` of the context; the model then reads
``tokens[perm]`` at the usual positions ``0..n-1``):

- ``"adjacent"``: ``round(rate n)`` random transpositions of neighbouring
  tokens, applied one after another;
- ``"subset"``: ``round(rate n)`` positions (at least 2 when ``rate > 0``)
  whose tokens are re-ordered among themselves by a cyclic shift of a random
  ordering, a derangement: every chosen position receives another one's token.

**Position ids** (the tokens stay in order; only the RoPE angle
``p_n theta_l`` of token ``n`` changes):

- ``"jitter"``: ``p_n = n + u_n`` with ``u_n`` uniform in ``{-t..t}`` (the
  first ids may be negative: add a common offset, invisible to RoPE, whose
  logits depend on ``p_i - p_j`` only, THEORY.md section 2);
- ``"swap"``: disjoint transpositions of the position ids of tokens at most
  ``t`` apart, drawn left to right, so every id moves by at most ``t``.

Under the split ``W = f + g + E`` none of these moves ``g``; the position
schemes move every id by at most ``t``, so a distance ``p_i - p_j`` changes
by at most ``2t`` and a logit by at most ``s sum_l |q~_l||k~_l| 2|sin(theta_l
tau/2)|`` for that change ``tau`` (THEORY.md section 4, position perturbation).

    >>> rng = np.random.default_rng(0)
    >>> perm = order_permutation("subset", 10, 0.2, rng)
    >>> sorted(perm.tolist()) == list(range(10)), int((perm != np.arange(10)).sum())
    (True, 2)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ropesplit.errors import RopesplitError

__all__ = [
    "ORDER_SCHEMES",
    "POSITION_SCHEMES",
    "adjacent_transpositions",
    "jitter_positions",
    "order_permutation",
    "perturbed_positions",
    "subset_reorder",
    "swap_positions",
]


def _check_length(n: int) -> None:
    if n < 1:
        raise RopesplitError(f"length must be at least 1, got {n}")


def _check_rate(rate: float) -> None:
    if not 0.0 <= rate <= 1.0:
        raise RopesplitError(f"rate must lie in [0, 1], got {rate}")


def _check_shift(t: int) -> None:
    if int(t) != t or t < 0:
        raise RopesplitError(f"shift t must be a non-negative integer, got {t}")


def adjacent_transpositions(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    r"""``round(rate n)`` random transpositions of adjacent tokens, as a permutation ``(n,)``.

    .. math:: \pi = \tau_{m} \circ \dots \circ \tau_1,\quad
              \tau_k = (a_k\ a_k{+}1),\ a_k \sim U\{0..n-2\},\ m = \mathrm{round}(\mathrm{rate}\,n)

    The perturbed context is ``tokens[perm]``. ``rate = 0`` (or ``n < 2``)
    gives the identity without drawing from ``rng``.
    """
    _check_length(n)
    _check_rate(rate)
    perm = np.arange(n)
    count = int(round(rate * n))
    if count == 0 or n < 2:
        return perm
    for a in rng.integers(0, n - 1, size=count):
        perm[a], perm[a + 1] = perm[a + 1], perm[a]
    return perm


def subset_reorder(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    r"""Re-order the tokens of ``m = max(2, round(rate n))`` random positions among themselves.

    .. math:: \pi(c_k) = c_{(k+1) \bmod m}\ \text{for a random ordering } c_0..c_{m-1}
              \text{ of the chosen positions},\quad \pi(x) = x \text{ elsewhere}

    A cyclic shift of a random ordering is a derangement of the chosen set:
    each chosen position gets the token of another one. ``rate = 0`` (or
    ``n < 2``) gives the identity without drawing from ``rng``.
    """
    _check_length(n)
    _check_rate(rate)
    perm = np.arange(n)
    if rate == 0.0 or n < 2:
        return perm
    count = min(n, max(2, int(round(rate * n))))
    chosen = rng.choice(n, size=count, replace=False)  # (m,) in random order
    perm[chosen] = np.roll(chosen, -1)  # position c_k reads the token of c_{k+1}
    return perm


ORDER_SCHEMES: dict[str, Callable[[int, float, np.random.Generator], np.ndarray]] = {
    "adjacent": adjacent_transpositions,
    "subset": subset_reorder,
}


def order_permutation(scheme: str, n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """The permutation ``(n,)`` of word-order ``scheme`` (``"adjacent"`` or ``"subset"``)."""
    return _scheme(ORDER_SCHEMES, "order", scheme)(n, rate, rng)


def jitter_positions(n: int, t: int, rng: np.random.Generator) -> np.ndarray:
    r"""Position ids ``(n,)``: ``p_x = x + u_x``, ``u_x`` uniform in ``{-t..t}``.

    .. math:: |(p_i - p_j) - (i - j)| \le 2t,\qquad p_x \ge -t

    ``t = 0`` gives ``0..n-1`` without drawing from ``rng``.
    """
    _check_length(n)
    _check_shift(t)
    base = np.arange(n)
    if t == 0:
        return base
    return base + rng.integers(-t, t + 1, size=n)


def swap_positions(n: int, t: int, rng: np.random.Generator) -> np.ndarray:
    r"""Position ids ``(n,)``: disjoint swaps of the ids of tokens at most ``t`` apart.

    .. math:: p = \sigma(0..n{-}1),\ \sigma = \prod_k (a_k\ b_k),\ 0 < b_k - a_k \le t

    Left to right, each token not yet swapped trades its id with a random free
    token among the next ``t`` (if any is free). The ids stay a permutation of
    ``0..n-1``; ``t = 0`` gives ``0..n-1`` without drawing from ``rng``.
    """
    _check_length(n)
    _check_shift(t)
    ids = np.arange(n)
    if t == 0:
        return ids
    free = np.ones(n, dtype=bool)
    for a in range(n):
        if not free[a]:
            continue
        partners = a + 1 + np.flatnonzero(free[a + 1 : a + 1 + t])  # free tokens within t
        if partners.size == 0:
            continue
        b = int(rng.choice(partners))
        ids[a], ids[b] = ids[b], ids[a]
        free[a] = free[b] = False
    return ids


POSITION_SCHEMES: dict[str, Callable[[int, int, np.random.Generator], np.ndarray]] = {
    "jitter": jitter_positions,
    "swap": swap_positions,
}


def perturbed_positions(scheme: str, n: int, t: int, rng: np.random.Generator) -> np.ndarray:
    """The position ids ``(n,)`` of position ``scheme`` (``"jitter"`` or ``"swap"``)."""
    return _scheme(POSITION_SCHEMES, "position", scheme)(n, t, rng)


def _scheme(
    table: dict[str, Callable[..., np.ndarray]], kind: str, name: str
) -> Callable[..., np.ndarray]:
    """``table[name]``, or a one-line error naming the choices."""
    if name not in table:
        raise RopesplitError(f"{kind} scheme must be one of {', '.join(table)}, got {name!r}")
    return table[name]
