"""numerics.bound on its own: the remainder E and its bound, pair by pair.

A float64 twin computes E = s Re sum_l q_l conj(delta_l) (e^{i theta_l Delta} - m_l) from
complex exponentials directly; hypothesis draws the pairs, frequencies and distances.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ropesplit.numerics.bound import causal_ratios, remainder_and_bound, violations

ENTRIES = st.floats(-3, 3, allow_nan=False)


def pairs(p: int):
    return hnp.arrays(np.float64, (2, p), elements=ENTRIES).map(lambda x: x[0] + 1j * x[1])


def twin(q, dev, theta, delta, scale, m=None):
    """E and the bound from e^{i theta Delta} - m, in complex128 (no half angles)."""
    m = np.ones_like(theta, dtype=np.complex128) if m is None else m
    u = np.exp(1j * np.multiply.outer(delta, theta)) - m  # (..., P)
    e = scale * np.real((q * np.conj(dev) * u).sum(-1))
    bound = scale * (np.abs(q) * np.abs(dev) * np.abs(u)).sum(-1)
    return e, bound


@settings(max_examples=80, deadline=None)
@given(data=st.data(), p=st.integers(1, 8), scale=st.floats(0.01, 2.0))
def test_e_matches_the_complex_twin_and_never_exceeds_its_bound(data, p, scale):
    q, dev = data.draw(pairs(p)), data.draw(pairs(p))
    theta = data.draw(hnp.arrays(np.float64, p, elements=st.floats(0.0, 1.0)))
    delta = data.draw(hnp.arrays(np.float64, 5, elements=st.floats(-600, 600)))
    m = data.draw(st.one_of(st.none(), pairs(p)))
    e, bound, loose = remainder_and_bound(q, dev, theta, delta, scale, loose=True,
                                          one_minus_m=None if m is None else 1 - m)  # fmt: skip
    want_e, want_bound = twin(q, dev, theta, delta, scale, m)
    size = scale * (np.abs(q) * np.abs(dev)).sum() * 2 + 1e-300
    np.testing.assert_allclose(e.numpy(), want_e, rtol=0, atol=1e-11 * size)
    np.testing.assert_allclose(bound.numpy(), want_bound, rtol=1e-11, atol=1e-11 * size)
    assert violations(e, bound) == 0
    assert bool((bound <= loose * (1 + 1e-12) + 1e-300).all())  # the loose bound is looser


def test_zero_distance_gives_zero_remainder_and_zero_bound():
    q = np.array([1 + 2j, -0.5j])
    e, bound = remainder_and_bound(q, q.conj(), np.array([1.0, 0.1]), np.zeros(3), 0.5)
    assert torch.equal(e, torch.zeros(3)) and torch.equal(bound, torch.zeros(3))


def test_violations_counts_what_exceeds_the_bound_beyond_rounding():
    f64 = torch.float64
    bound = torch.tensor([1.0, 1.0, 0.0], dtype=f64)
    assert violations(torch.tensor([1.0, -1.0, 0.0], dtype=f64), bound) == 0
    assert violations(torch.tensor([1.0 + 1e-14, -1.0, 1e-301], dtype=f64), bound) == 0
    assert violations(torch.tensor([1.0 + 1e-9, 0.5, 1e-200], dtype=f64), bound) == 2


@settings(max_examples=30, deadline=None)
@given(data=st.data(), h=st.integers(1, 2), n=st.integers(1, 7), p=st.integers(1, 4))
def test_causal_ratios_match_the_pairwise_twin(data, h, n, p):
    q = data.draw(hnp.arrays(np.float64, (2, h, n, p), elements=ENTRIES))
    dev = data.draw(hnp.arrays(np.float64, (2, h, n, p), elements=ENTRIES))
    q, dev = q[0] + 1j * q[1], dev[0] + 1j * dev[1]
    # no subnormal frequency: at theta = 5e-324 the bound's 2 sin(theta D / 2) underflows to 0
    # where the twin's |e^{i theta D} - 1| is 5e-324, a ratio of rounding residues either way
    theta = data.draw(hnp.arrays(np.float64, p, elements=st.floats(0.0, 1.0,
                                                                   allow_subnormal=False)))
    pos = np.arange(n)
    ratio, bad = causal_ratios(q, dev, theta, pos, pos, 0.7)
    assert bad.tolist() == [0] * h
    for head in range(h):
        want, slack = [], []
        for diag in range(n):  # diagonal by diagonal, j ascending
            for j in range(n - diag):
                i = j + diag
                e, b = twin(q[head, i], dev[head, j], theta, np.float64(diag), 0.7)
                want.append(-np.inf if b == 0 else abs(e) / b)
                # the twin's own rounding: e^{ix} - 1 without half angles loses the digits of
                # cos x - 1 near x = 0 (hypothesis: x = 3e-5, 8e-8 relative), about eps |q||d|
                size = 0.7 * (np.abs(q[head, i]) * np.abs(dev[head, j])).sum()
                slack.append(0.0 if b == 0 else 1e-15 * size / b)
        got = ratio[head]
        finite = np.isfinite(want)
        assert np.array_equal(np.isfinite(got), finite)
        gap = np.abs(got[finite] - np.asarray(want)[finite])
        assert (gap <= 1e-9 * np.abs(np.asarray(want)[finite]) + 1e-12
                + np.asarray(slack)[finite]).all(), gap.max()
