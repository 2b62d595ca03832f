"""numerics.reference: the reference rotation m_l and what the mean reference is best at.

docs/theory.md section 6.  What is exact, and tested here:

(a) for one query ``q`` and one key deviation ``delta`` over any distance distribution ``D``,
    ``mean_D E_c^2 = mean_D E_m^2 + (g_m - g_c)^2`` with ``m`` the mean rotation over ``D``:
    the mean reference is the best Delta-free value, for every other reference ``c``;
(b) hence over any product set queries x deviations x D (distance independent of ``q``, ``delta``);
(c) over the causal pairs of one sequence the distance is tied to the pair (i, j): the aggregate
    can be larger under the mean than under ``zero`` (a constructed head below); what does hold is
    the per-pair identity ``mean_M |e^{i theta Delta} - m'|^2 = mean_M |e^{i theta Delta} - m|^2 +
    |m - m'|^2``, i.e. optimality in expectation for deviations that are circular, uncorrelated
    across pairs and independent of position and of the queries.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.bound import ATOL, RTOL, remainder_and_bound
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.reference import (
    canonical,
    mean_rotation,
    mean_rotation_of,
    parse_reference,
    resolve_reference,
)
from ropesplit.numerics.rope import frequencies, to_pairs
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head
from ropesplit.numerics.synthetic import PATTERNS, make_qk


def loop_mean(theta, pq, pk, window=None):
    """Float64 twin: the mean of e^{i theta Delta} over the causal pairs (by index), one by one."""
    n = len(pq)
    total, count = np.zeros(len(theta), complex), 0
    for i in range(n):
        for j in range(i + 1):
            if window is not None and i - j >= window:
                continue
            x = [t * (pq[i] - pk[j]) for t in theta]
            total += np.array([complex(math.cos(a), math.sin(a)) for a in x])
            count += 1
    return total / count


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), window=st.one_of(st.none(), st.integers(1, 40)),
       base=st.floats(2.0, 1e6), d=st.integers(1, 6).map(lambda x: 2 * x),
       spacing=st.sampled_from(["unit", "scaled", "jitter"]),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_mean_rotation_matches_the_loop_twin(n, window, base, d, spacing, seed):
    theta = frequencies(d, base)
    rng = np.random.default_rng(seed)
    pos = {"unit": np.arange(n) + 3.0, "scaled": 2.5 * np.arange(n),
           "jitter": np.arange(n) + rng.uniform(-0.4, 0.4, n)}[spacing]  # fmt: skip
    ref = resolve_reference("mean", theta, n=n, window=window, positions=pos)
    want = loop_mean(theta, pos, pos, window)
    np.testing.assert_allclose(ref.m, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ref.one_minus, 1 - want, rtol=0, atol=1e-12)
    assert (np.abs(ref.m) <= 1 + 1e-12).all()
    if spacing == "unit":
        np.testing.assert_allclose(mean_rotation(theta, n, window).m, want, rtol=0, atol=1e-12)


def test_mean_rotation_of_an_arbitrary_set_and_its_limits():
    theta = np.array([1.0, 0.01, 0.0])
    dist = np.array([[0.0, 5.0], [2.0, 7.0]])
    mask = np.array([[True, False], [True, True]])
    ref = mean_rotation_of(theta, dist, mask)
    np.testing.assert_allclose(ref.m, np.exp(1j * np.outer([0.0, 2.0, 7.0], theta)).mean(0))
    assert ref.m[2] == 1 and ref.one_minus[2] == 0  # a non-rotating pair: m = 1 exactly
    # ... also where the pair weights (n - Delta) / total do not sum to 1 in floating point
    assert mean_rotation(frequencies(6, 100.0, rotary_dim=4), 40).m[2] == 1
    fast = mean_rotation(frequencies(64, 1e4), 4096)
    assert abs(fast.m[0]) < 0.01 and abs(fast.m[-1]) > 0.99  # fast pairs ~0, slow pairs ~1
    # 1 - m keeps its digits where m is within 1e-12 of 1
    tiny = mean_rotation([1e-9], 100)
    assert tiny.one_minus[0].imag == pytest.approx(-1e-9 * 33.0, rel=1e-9)  # -theta E[Delta]


@pytest.mark.parametrize(
    "spec, kind, c, name",
    [("zero", "zero", None, "zero"), ("mean", "mean", None, "mean"),
     ("distance:256", "distance", 256.0, "distance:256"),
     (" distance:1e3 ", "distance", 1000.0, "distance:1000"),
     ("distance:-2.5", "distance", -2.5, "distance:-2.5")],
)  # fmt: skip
def test_parse_reference(spec, kind, c, name):
    assert parse_reference(spec) == (kind, c)
    assert canonical(spec) == name


@pytest.mark.parametrize("spec", ["", "one", "distance", "distance:", "distance:x",
                                  "distance:inf", "distance:nan", "mean:3"])  # fmt: skip
def test_parse_reference_errors(spec):
    with pytest.raises(RopesplitError, match="reference must be zero, distance:C"):
        parse_reference(spec)


def test_mean_needs_pairs():
    with pytest.raises(RopesplitError, match="the mean reference needs the pairs"):
        resolve_reference("mean", [1.0])


@st.composite
def mean_cases(draw):
    """Extreme query/deviation pairs, a mean rotation over some causal pairs, a distance."""
    p = draw(st.integers(1, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mags = draw(st.tuples(st.floats(-60, 60), st.floats(-60, 60)))
    q = (rng.normal(size=p) + 1j * rng.normal(size=p)) * 10.0 ** mags[0]
    dev = (rng.normal(size=p) + 1j * rng.normal(size=p)) * 10.0 ** mags[1]
    theta = frequencies(2 * p, draw(st.floats(2.0, 1e7)), rotary_dim=2 * draw(st.integers(1, p)))
    n = draw(st.integers(1, 5000))
    ref = mean_rotation(theta, n, draw(st.one_of(st.none(), st.integers(1, 5000))))
    delta = draw(st.one_of(st.integers(0, n - 1).map(float), st.floats(-1e6, 1e6)))
    return q, dev, theta, delta, draw(st.floats(1e-3, 1e3)), ref


@settings(max_examples=300, deadline=None)
@given(case=mean_cases())
@example(case=(np.array([1 + 1j]), np.array([1 - 1j]), np.array([1e-9]), 0.0, 1.0,
               mean_rotation([1e-9], 2)))  # m within 1e-9 of 1, at Delta = 0  # fmt: skip
def test_mean_rotation_remainder_never_exceeds_its_bound(case):
    q, dev, theta, delta, s, ref = case
    e, bound, loose = (float(v) for v in remainder_and_bound(q, dev, theta, delta, s, loose=True,
                                                            one_minus_m=ref.one_minus))  # fmt: skip
    note(f"E={e!r} bound={bound!r} loose={loose!r}")
    assert abs(e) <= bound * (1 + RTOL) + ATOL
    assert bound <= loose * (1 + RTOL) + ATOL
    # against a float64 twin: rot - m in complex arithmetic, term by term
    u = np.exp(1j * theta * delta) - ref.m
    terms = s * (q * np.conj(dev) * u).real
    size = s * (np.abs(q) * np.abs(dev) * (np.abs(u) + 1e-6)).sum()
    assert e == pytest.approx(terms.sum(), abs=1e-9 * size)


def _pair_values(q, dev, theta, s, dist, m):
    """Per distance: the deviation part X, g under m, and E = X - g (plain complex arithmetic)."""
    x = s * (q * np.conj(dev) * np.exp(1j * np.outer(dist, theta))).real.sum(-1)  # (K,)
    g = s * (q * np.conj(dev) * m).real.sum()
    return x, g, x - g


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), p=st.integers(1, 8), base=st.floats(2.0, 1e6),
       c=st.floats(-5e3, 5e3), size=st.integers(1, 60))  # fmt: skip
def test_mean_is_the_best_delta_free_value_for_each_query_and_deviation(seed, p, base, c, size):
    # (a): mean_D E_c^2 = mean_D E_m^2 + (g_m - g_c)^2 for any distance multiset D
    rng = np.random.default_rng(seed)
    q, dev = rng.normal(size=(2, p)) + 1j * rng.normal(size=(2, p))
    theta = frequencies(2 * p, base)
    dist = rng.integers(0, 3000, size=size).astype(float)  # (K,) the distances that occur
    ref = mean_rotation_of(theta, dist[:, None])
    x, g_m, e_m = _pair_values(q, dev, theta, 1.0, dist, ref.m)
    assert g_m == pytest.approx(x.mean(), abs=1e-9 * np.abs(x).max(initial=1.0))
    for other in (resolve_reference("zero", theta), resolve_reference(f"distance:{c}", theta)):
        _, g_c, e_c = _pair_values(q, dev, theta, 1.0, dist, other.m)
        scale = (np.abs(q) * np.abs(dev)).sum() ** 2
        assert (e_c**2).mean() == pytest.approx((e_m**2).mean() + (g_m - g_c) ** 2,
                                                abs=1e-9 * scale)  # fmt: skip
        assert (e_m**2).mean() <= (e_c**2).mean() + 1e-12 * scale


@settings(max_examples=20, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), seed=st.integers(0, 2**16), tokens=st.integers(8, 32),
       c=st.integers(0, 2000))  # fmt: skip
def test_mean_wins_over_the_product_set_on_synthetic_heads(pattern, seed, tokens, c):
    # (b): queries x deviations x the causal distance distribution, each combination once
    qk = make_qk(pattern, d=16, base=1e4, tokens=tokens, seed=seed)
    qc, dc = to_pairs(qk.q), to_pairs(qk.k - qk.k.mean(0))
    dist = np.concatenate([np.full(tokens - t, float(t)) for t in range(tokens)])  # (M,)
    refs = [resolve_reference(spec, qk.theta, n=tokens) for spec in ("mean", "zero",
                                                                      f"distance:{c}")]  # fmt: skip
    z = qc[:, None, :] * np.conj(dc)[None, :, :]  # (N, N, P) q~ conj(delta~) of every combination
    rot = np.exp(1j * np.outer(dist, qk.theta))  # (M, P)
    ms = [qk.scale**2 * (((z[:, :, None, :] * (rot - r.m)).real.sum(-1)) ** 2).mean() for r in refs]
    note(f"mean-square remainders mean/zero/c: {ms}")
    assert ms[0] <= ms[1] * (1 + 1e-12) and ms[0] <= ms[2] * (1 + 1e-12)


def test_over_causal_pairs_the_mean_can_lose_to_zero():
    # (c): the query of the last row meets the large deviation of its own token at Delta = 0,
    # where zero is exact; the mean reference pays |1 - m| there
    n, theta = 8, np.array([2.0])
    q, k = np.zeros((n, 2)), np.zeros((n, 2))
    q[-1] = [1.0, 0.0]
    k[-1] = [1.0, 0.0]  # one token's key deviates; kbar = k / n
    mean_square = {}
    for spec in ("zero", "mean"):
        sp = split_head(q, k, RopeSpec.from_arrays(theta, 1.0), Measure(reference=spec))
        mean_square[spec] = (sp.E[sp.mask] ** 2).mean()
    assert mean_square["mean"] > 2 * mean_square["zero"]


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 300), window=st.one_of(st.none(), st.integers(1, 300)),
       theta=st.floats(0.0, 4.0), c=st.floats(-1e3, 1e3))  # fmt: skip
def test_per_pair_mean_rotation_is_the_least_squares_constant(n, window, theta, c):
    # (c), in expectation: mean_M |e^{i theta Delta} - m'|^2 = mean_M |.. - m|^2 + |m - m'|^2
    span = n if window is None else min(n, window)
    dist = np.concatenate([np.full(n - t, float(t)) for t in range(span)])
    rot = np.exp(1j * theta * dist)
    m = mean_rotation([theta], n, window).m[0]
    other = np.exp(1j * theta * c)
    lhs = (np.abs(rot - other) ** 2).mean()
    assert lhs == pytest.approx((np.abs(rot - m) ** 2).mean() + abs(m - other) ** 2, abs=1e-12)
