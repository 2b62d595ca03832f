"""The perturbation schemes of the word-order and position experiments (issue 5).

Properties: every word-order scheme is a permutation that moves what its rate
says and nothing at rate 0; every position scheme moves each id by at most
what ``t`` allows and nothing at ``t = 0``; all are deterministic per seed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given, note, settings
from hypothesis import strategies as st
from ropesplit.empirical.perturb import (
    ORDER_SCHEMES,
    POSITION_SCHEMES,
    adjacent_transpositions,
    jitter_positions,
    order_permutation,
    perturbed_positions,
    subset_reorder,
    swap_positions,
)

from ropesplit.errors import RopesplitError

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


@settings(max_examples=60, deadline=None)
@given(n=st.integers(min_value=2, max_value=300), rate=RATES, seed=SEEDS)
@example(n=2, rate=0.01, seed=3)
def test_subset_moves_exactly_the_chosen_positions(n: int, rate: float, seed: int) -> None:
    assume(rate > 0)
    perm = subset_reorder(n, rate, np.random.default_rng(seed))
    expected = min(n, max(2, int(round(rate * n))))
    # a derangement of the chosen set: every chosen position reads another one's token
    assert int((perm != np.arange(n)).sum()) == expected


@settings(max_examples=60, deadline=None)
@given(n=st.integers(min_value=2, max_value=300), rate=RATES, seed=SEEDS)
def test_adjacent_moves_tokens_by_at_most_the_transposition_count(
    n: int, rate: float, seed: int
) -> None:
    perm = adjacent_transpositions(n, rate, np.random.default_rng(seed))
    count = int(round(rate * n))
    # each adjacent transposition moves a token by one place, and at most two tokens
    assert int(np.abs(perm - np.arange(n)).max()) <= count
    assert int((perm != np.arange(n)).sum()) <= 2 * count
    # parity: a product of `count` transpositions has the sign (-1)^count
    assert _sign(perm) == (-1) ** count


def test_adjacent_twin_loop() -> None:
    """The scheme against a plain re-statement: swap list neighbours at the drawn places."""
    rng, twin_rng = np.random.default_rng(7), np.random.default_rng(7)
    n, rate = 50, 0.2
    perm = adjacent_transpositions(n, rate, rng)
    tokens = list(range(n))
    for a in twin_rng.integers(0, n - 1, size=10):
        tokens[a], tokens[a + 1] = tokens[a + 1], tokens[a]
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
    assert moved.any()  # n >= 2, t >= 1: the first token always finds a partner
    # a maximal matching: no two unmoved tokens within t of each other
    still = np.flatnonzero(~moved)
    assert np.all(np.diff(still) > t)


def test_jitter_spreads_over_the_whole_window() -> None:
    ids = jitter_positions(4000, 3, np.random.default_rng(0))
    offsets = ids - np.arange(4000)
    assert set(offsets.tolist()) == {-3, -2, -1, 0, 1, 2, 3}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda rng: order_permutation("shuffle", 5, 0.1, rng), "order scheme must be one of"),
        (lambda rng: order_permutation("adjacent", 5, 1.5, rng), "rate must lie in [0, 1]"),
        (lambda rng: order_permutation("subset", 0, 0.1, rng), "length must be at least 1"),
        (lambda rng: perturbed_positions("drift", 5, 1, rng), "position scheme must be one of"),
        (lambda rng: perturbed_positions("jitter", 5, -1, rng), "shift t must be a non-negative"),
        (lambda rng: perturbed_positions("swap", 5, 1.5, rng), "shift t must be a non-negative"),
    ],
)
def test_bad_input_is_one_line(call, message: str) -> None:
    with pytest.raises(RopesplitError) as info:
        call(np.random.default_rng(0))
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)
