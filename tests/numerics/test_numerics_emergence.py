"""numerics.emergence: per-pair energy, causal bound weight, slow pairs, unigram entropy.

Each vectorised formula against a float64 loop twin; the bound weight against
THEORY's ``remainder_bound`` step; the energy's sum against ``lowfreq_share``'s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.emergence import (
    causal_bound_weight,
    pair_energy,
    slow_pairs,
    unigram_entropy,
)
from ropesplit.numerics.rope import frequencies
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.stats import head_statistics
from ropesplit.theory import get_step

FEATURES = st.tuples(st.integers(1, 3), st.integers(1, 9), st.sampled_from([2, 4, 8])).flatmap(
    lambda s: arrays(np.float64, s, elements=st.floats(-100, 100, allow_nan=False))
)


@settings(max_examples=40, deadline=None)
@given(FEATURES, st.sampled_from(["half", "interleaved"]))
def test_pair_energy_matches_loop(x: np.ndarray, layout: str) -> None:
    h, n, d = x.shape
    p = d // 2
    got = pair_energy(x, layout=layout)
    for a in range(h):
        for l in range(p):
            re, im = (l, l + p) if layout == "half" else (2 * l, 2 * l + 1)
            mr = sum(x[a, j, re] for j in range(n)) / n
            mi = sum(x[a, j, im] for j in range(n)) / n
            want = sum((x[a, j, re] - mr) ** 2 + (x[a, j, im] - mi) ** 2 for j in range(n))
            assert got[a, l] == pytest.approx(want, rel=1e-9, abs=1e-9 * (1 + want))


def test_pair_energy_low_half_is_lowfreq_share() -> None:
    """The energy's low-frequency half over its total is numerics.stats' lowfreq_share_q."""
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 32, 8)) * np.array([0.1, 1, 3, 10, 0.2, 2, 5, 7])
    theta = frequencies(8)
    energy = pair_energy(q[None])[0]  # (P,)
    share = energy[np.argsort(theta)[:2]].sum() / energy.sum()
    stats = head_statistics(q, k, RopeSpec.from_arrays(theta, 0.3))
    assert share == pytest.approx(stats.lowfreq_share_q, rel=1e-12)


def test_pair_energy_zero_for_constant_features() -> None:
    """Known truth: features equal at every token have no deviation energy."""
    x = np.broadcast_to(np.arange(6.0), (2, 5, 6))
    assert np.array_equal(pair_energy(x), np.zeros((2, 3)))


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.integers(1, 6), elements=st.floats(0, 3)), st.integers(1, 40))
def test_causal_bound_weight_vs_theory(theta: np.ndarray, length: int) -> None:
    """Loop twin through THEORY's remainder_bound with unit query and deviation pairs."""
    bound = get_step("remainder_bound").numeric
    got = causal_bound_weight(theta, length)
    for l, th in enumerate(theta):
        total = sum((length - delta) * bound(1.0, 0.0, 1.0, 0.0, th, delta, 1.0)[0]
                    for delta in range(length))  # fmt: skip
        assert got[l] == pytest.approx(total / (length * (length + 1) / 2), rel=1e-9, abs=1e-12)


def test_bound_weight_grows_with_theta_while_slow() -> None:
    """Known truth: while theta (L - 1) <= pi every sine grows with theta, so the weight does;
    a smaller base therefore costs more in total (base 100 vs 10000 at L = 128)."""
    theta = np.linspace(0.0, np.pi / 127, 50)
    assert (np.diff(causal_bound_weight(theta, 128)) > 0).all()
    fast = causal_bound_weight(frequencies(32, 100.0), 128)
    slow = causal_bound_weight(frequencies(32, 10000.0), 128)
    assert fast.sum() > 1.5 * slow.sum()


def test_slow_pairs_counts() -> None:
    """theta_l = b^(-l/16), L = 128: base 10000 leaves l >= 9 slow, base 100 none."""
    assert slow_pairs(frequencies(32, 10000.0), 128).sum() == 7
    assert slow_pairs(frequencies(32, 100.0), 128).sum() == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=60))
def test_unigram_entropy_matches_loop(ids: list[int]) -> None:
    want = 0.0
    for v in set(ids):
        p = ids.count(v) / len(ids)
        want -= p * math.log(p)
    assert unigram_entropy(ids, 10) == pytest.approx(want, abs=1e-12)


def test_unigram_entropy_known_values() -> None:
    assert unigram_entropy([3] * 7, 4) == 0.0
    assert unigram_entropy(list(range(256)), 256) == pytest.approx(math.log(256))


@pytest.mark.parametrize(
    ("call", "start"),
    [
        (lambda: unigram_entropy([], 4), "ids must hold at least one token, got 0"),
        (lambda: unigram_entropy([0, 5], 4), "ids must lie in [0, 4), got 5"),
        (lambda: causal_bound_weight([1.0], 0), "length must be at least 1, got 0"),
        (lambda: slow_pairs([1.0], 0), "length must be at least 1, got 0"),
        (lambda: pair_energy(np.zeros((2, 3))), "x must have 3 dimensions"),
    ],
)
def test_bad_input(call, start: str) -> None:
    with pytest.raises(RopesplitError) as err:
        call()
    assert str(err.value).startswith(start)
