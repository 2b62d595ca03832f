"""The perturbation schemes of the word-order and position experiments.

Properties: every word-order scheme is a permutation that moves what its rate
says and nothing at rate 0; every position scheme moves each id by at most
what ``t`` allows and nothing at ``t = 0``; none moves the first token or a
fixed one; all are deterministic per seed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.schemes import (
    ORDER_SCHEMES,
    POSITION_SCHEMES,
    adjacent_transpositions,
    jitter_positions,
    movable_positions,
    order_permutation,
    perturbed_positions,
    subset_reorder,
    swap_positions,
)

LENGTHS = st.integers(min_value=1, max_value=300)
RATES = st.sampled_from([0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0])
SHIFTS = st.integers(min_value=0, max_value=20)
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def _sign(perm: np.ndarray) -> int:
    """The sign of a permutation, (-1)^(n - number of cycles)."""
    seen, cycles = np.zeros(perm.size, dtype=bool), 0
    for start in range(perm.size):
        if not seen[start]:
            cycles += 1
            x = start
            while not seen[x]:
                seen[x], x = True, perm[x]
    return (-1) ** (perm.size - cycles)


def _is_permutation(perm: np.ndarray, n: int) -> bool:
    return perm.shape == (n,) and np.array_equal(np.sort(perm), np.arange(n))


@settings(max_examples=60, deadline=None)
@given(scheme=st.sampled_from(sorted(ORDER_SCHEMES)), n=LENGTHS, rate=RATES, seed=SEEDS)
@example(scheme="adjacent", n=1, rate=1.0, seed=0)
@example(scheme="subset", n=2, rate=0.01, seed=0)
def test_order_schemes_are_permutations(scheme: str, n: int, rate: float, seed: int) -> None:
    perm = order_permutation(scheme, n, rate, np.random.default_rng(seed))
    note(f"perm={perm.tolist()}")
    assert _is_permutation(perm, n)
    again = order_permutation(scheme, n, rate, np.random.default_rng(seed))
    assert np.array_equal(perm, again)  # deterministic per seed


@given(scheme=st.sampled_from(sorted(ORDER_SCHEMES)), n=LENGTHS, seed=SEEDS)
def test_rate_zero_is_the_identity(scheme: str, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    state = rng.bit_generator.state
    assert np.array_equal(order_permutation(scheme, n, 0.0, rng), np.arange(n))
    assert rng.bit_generator.state == state  # nothing drawn: the very same input


MOVABLE = st.integers(min_value=2, max_value=300).flatmap(
    lambda n: arrays(np.bool_, (n,), elements=st.booleans()).map(lambda m: (n, m))
)  # (n, movable): random fixed positions (special tokens), index 0 forced fixed below


@settings(max_examples=60, deadline=None)
@given(n=st.integers(min_value=3, max_value=300), rate=RATES, seed=SEEDS)
@example(n=3, rate=0.01, seed=3)
def test_subset_moves_exactly_the_chosen_positions(n: int, rate: float, seed: int) -> None:
    assume(rate > 0)
    perm = subset_reorder(n, rate, np.random.default_rng(seed))
    expected = min(n - 1, max(2, int(round(rate * n))))  # the first token never moves
    # a derangement of the chosen set: every chosen position reads another one's token
    assert int((perm != np.arange(n)).sum()) == expected


@settings(max_examples=60, deadline=None)
@given(n=st.integers(min_value=2, max_value=300), rate=RATES, seed=SEEDS)
def test_adjacent_moves_about_rate_n_tokens_by_one_place(n: int, rate: float, seed: int) -> None:
    perm = adjacent_transpositions(n, rate, np.random.default_rng(seed))
    count = int(round(rate * n / 2))
    moved = perm != np.arange(n)
    assert int(np.abs(perm - np.arange(n)).max()) <= 1  # disjoint neighbour swaps
    assert np.array_equal(perm[perm], np.arange(n))  # an involution
    assert int(moved.sum()) == 2 * min(count, int(moved.sum()) // 2)
    if 2 * count <= (n - 1) // 3:  # plenty of free neighbours left: every swap found a place
        assert int(moved.sum()) == 2 * count


@settings(max_examples=60, deadline=None)
@given(case=MOVABLE, rate=RATES, t=SHIFTS, seed=SEEDS,
       scheme=st.sampled_from(sorted(ORDER_SCHEMES) + sorted(POSITION_SCHEMES)))  # fmt: skip
def test_fixed_positions_never_move(case, rate: float, t: int, seed: int, scheme: str) -> None:
    n, movable = case
    movable = movable.copy()
    movable[0] = False  # the first token (BOS / attention sink)
    rng = np.random.default_rng(seed)
    if scheme in ORDER_SCHEMES:
        out = order_permutation(scheme, n, rate, rng, movable)
    else:
        out = perturbed_positions(scheme, n, t, rng, movable)
    assert np.array_equal(out[~movable], np.flatnonzero(~movable))


@settings(max_examples=30, deadline=None)
@given(n=LENGTHS, fixed=st.lists(st.integers(-3, 400), max_size=10))
def test_movable_positions_excludes_the_first_and_the_fixed(n: int, fixed: list[int]) -> None:
    movable = movable_positions(n, fixed)
    expected = np.ones(n, dtype=bool)
    expected[0] = False
    for f in fixed:
        if 0 <= f < n:
            expected[f] = False
    assert np.array_equal(movable, expected)


def test_adjacent_twin_loop() -> None:
    """The scheme against a plain re-statement: take shuffled candidates, skip overlaps."""
    rng, twin_rng = np.random.default_rng(7), np.random.default_rng(7)
    n, rate = 50, 0.2
    perm = adjacent_transpositions(n, rate, rng)
    tokens = list(range(n))
    used: set[int] = set()
    for a in twin_rng.permutation(np.arange(1, n - 1)):  # a, a + 1 movable: a >= 1
        if len(used) == 2 * round(rate * n / 2):
            break
        if a in used or a + 1 in used:
            continue
        tokens[a], tokens[a + 1] = tokens[a + 1], tokens[a]
        used |= {int(a), int(a) + 1}
    assert perm.tolist() == tokens


@settings(max_examples=60, deadline=None)
@given(scheme=st.sampled_from(sorted(POSITION_SCHEMES)), n=LENGTHS, t=SHIFTS, seed=SEEDS)
@example(scheme="swap", n=1, t=5, seed=0)
@example(scheme="jitter", n=3, t=0, seed=0)
def test_position_schemes_move_ids_by_at_most_t(scheme: str, n: int, t: int, seed: int) -> None:
    ids = perturbed_positions(scheme, n, t, np.random.default_rng(seed))
    note(f"ids={ids.tolist()}")
    assert ids.shape == (n,) and ids.dtype.kind == "i"
    assert int(ids.min()) >= -t
    assert int(np.abs(ids - np.arange(n)).max()) <= t
    if t == 0:
        assert np.array_equal(ids, np.arange(n))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(min_value=2, max_value=300), t=st.integers(1, 20), seed=SEEDS)
def test_swap_is_disjoint_transpositions(n: int, t: int, seed: int) -> None:
    ids = swap_positions(n, t, np.random.default_rng(seed))
    assert _is_permutation(ids, n)
    assert np.array_equal(ids[ids], np.arange(n))  # an involution: disjoint swaps
    moved = ids != np.arange(n)
    assert ids[0] == 0
    # a maximal matching among the movable tokens: no two unmoved ones within t of each other
    still = np.flatnonzero(~moved[1:]) + 1
    assert np.all(np.diff(still) > t)


def test_jitter_spreads_over_the_whole_window() -> None:
    ids = jitter_positions(4000, 3, np.random.default_rng(0))
    offsets = ids - np.arange(4000)
    assert set(offsets[1:].tolist()) == {-3, -2, -1, 0, 1, 2, 3} and offsets[0] == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda rng: order_permutation("shuffle", 5, 0.1, rng), "order scheme must be one of"),
        (lambda rng: order_permutation("adjacent", 5, 1.5, rng), "rate must lie in [0, 1]"),
        (lambda rng: order_permutation("subset", 0, 0.1, rng), "length must be at least 1"),
        (lambda rng: perturbed_positions("drift", 5, 1, rng), "position scheme must be one of"),
        (lambda rng: perturbed_positions("jitter", 5, -1, rng), "shift t must be a non-negative"),
        (lambda rng: perturbed_positions("swap", 5, 1.5, rng), "shift t must be a non-negative"),
        (lambda rng: order_permutation("subset", 5, 0.1, rng, [True]), "movable must have shape"),
    ],
)
def test_bad_input_is_one_line(call, message: str) -> None:
    with pytest.raises(RopesplitError) as info:
        call(np.random.default_rng(0))
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)
