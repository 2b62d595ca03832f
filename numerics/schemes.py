r"""Perturbation schemes for the word-order and position experiments (docs/theory.md section 4).

Pure functions of an integer length, a ``numpy.random.Generator`` and the
positions that may move (``movable``, default every position but the first):
each returns an index array and never touches a model. The first token (BOS
or, without one, the attention sink every causal model leans on) and special
tokens never move: :func:`movable_positions`.

**Word order** (a permutation ``perm`` of the context; the model then reads
``tokens[perm]`` at the usual positions ``0..n-1``). ``rate`` is the target
share of the ``n`` positions that receive another position's token:

- ``"adjacent"``: ``round(rate n / 2)`` disjoint transpositions of
  neighbouring movable tokens (each moves two tokens by one place);
- ``"subset"``: ``max(2, round(rate n))`` movable positions whose tokens are
  re-ordered among themselves by a cyclic shift of a random ordering, a
  derangement: every chosen position receives another one's token.

:func:`nested_adjacent_swaps` draws the ``"adjacent"`` scheme at several
rates at once, nested: every swap made at a smaller rate is also made at a
larger one (a paired comparison of rates on the same draw).

**Position ids** (the tokens stay in order; only the RoPE angle
``p_n theta_l`` of token ``n`` changes; fixed positions keep ``p_n = n``):

- ``"jitter"``: ``p_n = n + u_n`` with ``u_n`` uniform in ``{-t..t}`` (the
  caller adds a common offset, invisible to RoPE, whose logits depend on
  ``p_i - p_j`` only, docs/theory.md section 2);
- ``"swap"``: disjoint transpositions of the position ids of movable tokens
  at most ``t`` apart, drawn left to right.

Every id moves by at most ``t``, so a distance ``p_i - p_j`` changes by at
most ``2t``; the experiments bound each pair by its actual change
(``numerics.perturbation.shift_change``).

    >>> rng = np.random.default_rng(0)
    >>> perm = order_permutation("subset", 10, 0.2, rng)
    >>> sorted(perm.tolist()) == list(range(10)), int((perm != np.arange(10)).sum()), int(perm[0])
    (True, 2, 0)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError

__all__ = [
    "ORDER_SCHEMES",
    "POSITION_SCHEMES",
    "adjacent_transpositions",
    "all_draws",
    "jitter_positions",
    "movable_positions",
    "nested_adjacent_swaps",
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


def movable_positions(n: int, fixed: Iterable[int] = ()) -> np.ndarray:
    """``(n,)`` bool: every position but the first and the ``fixed`` ones (special tokens)."""
    _check_length(n)
    movable = np.ones(n, dtype=bool)
    movable[0] = False
    chosen = [int(f) for f in fixed if 0 <= int(f) < n]
    movable[chosen] = False
    return movable


def _movable(n: int, movable: Any) -> np.ndarray:
    _check_length(n)
    if movable is None:
        return movable_positions(n)
    m = np.asarray(movable, dtype=bool)
    if m.shape != (n,):
        raise RopesplitError(f"movable must have shape ({n},), got {m.shape}")
    return m


def adjacent_transpositions(
    n: int, rate: float, rng: np.random.Generator, movable: Any = None
) -> np.ndarray:
    r"""``round(rate n / 2)`` disjoint swaps of neighbouring movable tokens, a permutation ``(n,)``.

    .. math:: \pi = \prod_k (a_k\ a_k{+}1),\quad a_k, a_k{+}1 \text{ movable},\
              \{a_k, a_k{+}1\} \text{ disjoint},\quad k \le \mathrm{round}(\mathrm{rate}\,n/2)

    so about ``rate n`` tokens move, each by one place (fewer when the
    movable neighbours run out). ``rate = 0`` gives the identity without
    drawing from ``rng``.
    """
    ok = _movable(n, movable)
    _check_rate(rate)
    perm = np.arange(n)
    count = int(round(rate * n / 2))
    if count == 0:
        return perm
    starts = np.flatnonzero(ok[:-1] & ok[1:])  # (n_candidates,): a with a, a + 1 movable
    used = np.zeros(n, dtype=bool)
    done = 0
    for a in rng.permutation(starts):
        if done == count:
            break
        if used[a] or used[a + 1]:
            continue
        perm[a], perm[a + 1] = a + 1, a
        used[a] = used[a + 1] = True
        done += 1
    return perm


def subset_reorder(
    n: int, rate: float, rng: np.random.Generator, movable: Any = None
) -> np.ndarray:
    r"""Re-order the tokens of ``m = max(2, round(rate n))`` random movable positions.

    .. math:: \pi(c_k) = c_{(k+1) \bmod m}\ \text{for a random ordering } c_0..c_{m-1}
              \text{ of the chosen positions},\quad \pi(x) = x \text{ elsewhere}

    A cyclic shift of a random ordering is a derangement of the chosen set:
    each chosen position gets the token of another one. ``rate = 0`` (or
    fewer than 2 movable positions) gives the identity without drawing from ``rng``.
    """
    ok = _movable(n, movable)
    _check_rate(rate)
    perm = np.arange(n)
    candidates = np.flatnonzero(ok)
    if rate == 0.0 or candidates.size < 2:
        return perm
    count = min(candidates.size, max(2, int(round(rate * n))))
    chosen = rng.choice(candidates, size=count, replace=False)  # (m,) in random order
    perm[chosen] = np.roll(chosen, -1)  # position c_k reads the token of c_{k+1}
    return perm


def nested_adjacent_swaps(
    n: int,
    rates: Sequence[float],
    rng: np.random.Generator,
    movable: Any = None,
    *,
    ids: Any = None,
) -> list[np.ndarray]:
    r"""Adjacent swaps at every rate of ``rates``, nested: one permutation ``(n,)`` per rate.

    One random ordering of the candidate sites ``a`` (``a`` and ``a + 1``
    both movable) is drawn; walking it, a site is kept when it overlaps no
    site kept before, which gives a sequence of disjoint swaps
    ``(a_1\ a_1{+}1), (a_2\ a_2{+}1), \dots``. Rate ``r`` makes the first
    ``k(r)`` of them:

    .. math:: \pi_r = \prod_{j \le k(r)} (a_j\ a_j{+}1),\qquad
              k(r) = \min\bigl(\mathrm{round}(r n / 2),\ \#\text{kept sites}\bigr)

    so about ``r n`` positions move (``2 k(r) / n`` lies within ``1 / n`` of
    ``r`` unless the movable neighbours run out).

    **Nesting**: ``k`` grows with the rate, so for ``r \le r'`` every swap of
    ``\pi_r`` is also a swap of ``\pi_{r'}`` (the 10% permutation extends the
    5% one), whatever the order of ``rates``; the list follows ``rates``.
    Each rate on its own is distributed as :func:`adjacent_transpositions`
    (with the same ``rng`` state and a single rate, the two are equal). The
    first token and the positions ``movable`` excludes never move. When every
    ``k(r)`` is 0 nothing is drawn from ``rng``. With the token ``ids (n,)``,
    a site whose two tokens are the same is no candidate: swapping them would
    move nothing, and the measured share would fall short of ``r``.
    """
    ok = _movable(n, movable)
    for rate in rates:
        _check_rate(rate)
    counts = [int(round(rate * n / 2)) for rate in rates]
    perms = [np.arange(n) for _ in counts]
    if max(counts, default=0) == 0:
        return perms
    starts = ok[:-1] & ok[1:]  # (n - 1,): a with a, a + 1 movable
    if ids is not None:
        tokens = np.asarray(ids).reshape(-1)  # (n,)
        starts &= tokens[:-1] != tokens[1:]  # a swap of equal tokens moves nothing
    starts = np.flatnonzero(starts)  # (n_candidates,)
    used = np.zeros(n, dtype=bool)
    kept: list[int] = []  # disjoint sites, in the drawn order
    for a in rng.permutation(starts):
        if len(kept) == max(counts):
            break
        if used[a] or used[a + 1]:
            continue
        kept.append(int(a))
        used[a] = used[a + 1] = True
    for perm, count in zip(perms, counts, strict=True):
        sites = np.asarray(kept[:count], dtype=np.int64)  # the first k(r) swaps
        perm[sites], perm[sites + 1] = sites + 1, sites
    return perms


ORDER_SCHEMES: dict[str, Callable[..., np.ndarray]] = {
    "adjacent": adjacent_transpositions,
    "subset": subset_reorder,
}


def order_permutation(
    scheme: str, n: int, rate: float, rng: np.random.Generator, movable: Any = None
) -> np.ndarray:
    """The permutation ``(n,)`` of word-order ``scheme`` (``"adjacent"`` or ``"subset"``)."""
    return _scheme(ORDER_SCHEMES, "order", scheme)(n, rate, rng, movable)


def jitter_positions(n: int, t: int, rng: np.random.Generator, movable: Any = None) -> np.ndarray:
    r"""Position ids ``(n,)``: ``p_x = x + u_x``, ``u_x`` uniform in ``{-t..t}`` where movable.

    .. math:: |(p_i - p_j) - (i - j)| \le 2t,\qquad p_x \ge -t

    ``t = 0`` gives ``0..n-1`` without drawing from ``rng``.
    """
    ok = _movable(n, movable)
    _check_shift(t)
    base = np.arange(n)
    if t == 0:
        return base
    return base + np.where(ok, rng.integers(-t, t + 1, size=n), 0)


def swap_positions(n: int, t: int, rng: np.random.Generator, movable: Any = None) -> np.ndarray:
    r"""Position ids ``(n,)``: disjoint swaps of the ids of movable tokens at most ``t`` apart.

    .. math:: p = \sigma(0..n{-}1),\ \sigma = \prod_k (a_k\ b_k),\ 0 < b_k - a_k \le t

    Left to right, each movable token not yet swapped trades its id with a
    random free movable token among the next ``t`` (if any). The ids stay a
    permutation of ``0..n-1``; ``t = 0`` gives ``0..n-1`` without drawing from ``rng``.
    """
    free = _movable(n, movable).copy()
    _check_shift(t)
    ids = np.arange(n)
    if t == 0:
        return ids
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


POSITION_SCHEMES: dict[str, Callable[..., np.ndarray]] = {
    "jitter": jitter_positions,
    "swap": swap_positions,
}


def perturbed_positions(
    scheme: str, n: int, t: int, rng: np.random.Generator, movable: Any = None
) -> np.ndarray:
    """The position ids ``(n,)`` of position ``scheme`` (``"jitter"`` or ``"swap"``)."""
    return _scheme(POSITION_SCHEMES, "position", scheme)(n, t, rng, movable)


def all_draws(
    schemes: Sequence[str], sizes: Sequence[Any], count: int, seed: int
) -> Iterator[tuple[str, Any, int, np.random.Generator]]:
    """``(scheme, size, s, rng)`` for every scheme, size and draw ``s < count``.

    ``rng = numpy.random.default_rng([seed, a, b, s])`` with ``a``, ``b`` the
    scheme's and size's indices: each draw is the same whatever else is asked for.
    """
    if count < 1:
        raise RopesplitError(f"draws must be at least 1, got {count}")
    for a, scheme in enumerate(schemes):
        for b, size in enumerate(sizes):
            for s in range(count):
                yield scheme, size, s, np.random.default_rng([seed, a, b, s])


def _scheme(
    table: dict[str, Callable[..., np.ndarray]], kind: str, name: str
) -> Callable[..., np.ndarray]:
    """``table[name]``, or a one-line error naming the choices."""
    if name not in table:
        raise RopesplitError(f"{kind} scheme must be one of {', '.join(table)}, got {name!r}")
    return table[name]
