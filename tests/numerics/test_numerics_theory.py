"""Cross-check: the numerics equal the theory layer's lambdified per-pair formulas.

``get_step(...).numeric`` evaluates one rotation pair; summing over the pairs gives
the head's value, which the vectorised code must reproduce on random inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ropesplit.numerics.bound import remainder_and_bound
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.reference import mean_rotation, mean_rotation_of
from ropesplit.numerics.rope import frequencies, to_pairs
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head
from ropesplit.theory import get_step


@st.composite
def heads(draw):
    n = draw(st.integers(1, 5))
    d = 2 * draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q, k = rng.normal(size=(2, n, d)) * draw(st.floats(0.1, 10.0))
    pos = (rng.uniform(-1e3, 1e3, n), rng.uniform(-1e3, 1e3, n))
    return q, k, frequencies(d, draw(st.floats(2.0, 1e6))), draw(st.floats(0.01, 5.0)), pos


@settings(max_examples=30, deadline=None)
@given(head=heads())
def test_split_head_equals_the_theory_per_pair_functions(head):
    q, k, theta, s, (pq, pk) = head
    sp = split_head(q, k, RopeSpec.from_arrays(theta, s), positions=(pq, pk))
    qc, kc, kb = to_pairs(q), to_pairs(k), to_pairs(sp.kbar)
    expand = get_step("logit_expansion").numeric
    split = get_step("split_exact").numeric
    bound = get_step("remainder_bound").numeric
    n, p = qc.shape
    for i in range(n):
        for j in range(n):
            delta = pq[i] - pk[j]
            terms = [(qc[i, l].real, qc[i, l].imag, kc[j, l], kb[l], theta[l]) for l in range(p)]
            w = sum(expand(a, b, c.real, c.imag, th, delta, s) for a, b, c, _, th in terms)
            fge = np.sum([split(a, b, m.real, m.imag, (c - m).real, (c - m).imag, th, delta, s)
                          for a, b, c, m, th in terms], axis=0)  # fmt: skip
            tl = np.sum([bound(a, b, (c - m).real, (c - m).imag, th, delta, s)
                         for a, b, c, m, th in terms], axis=0)  # fmt: skip
            size = s * np.abs(qc[i]).sum() * (np.abs(kc[j]).sum() + np.abs(kb).sum())
            ours = (sp.W[i, j], sp.f[i, j], sp.g[i, j], sp.E[i, j], sp.bound[i, j],
                    sp.bound_loose[i, j])  # fmt: skip
            theirs = (w, *fge, *tl)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-10 * size)


# the lambdified |z| = sqrt(a^2 + b^2) underflows below ~1e-154 (the kernel uses hypot)
COORD = st.floats(-1e3, 1e3).filter(lambda x: x == 0 or abs(x) > 1e-100)


@settings(max_examples=50, deadline=None)
@given(a=COORD, b=COORD, dc=COORD, de=COORD, theta=st.floats(0, 3.2),
       delta=st.floats(-1e5, 1e5), s=st.floats(1e-3, 1e3))  # fmt: skip
def test_remainder_kernel_equals_the_theory_on_one_pair(a, b, dc, de, theta, delta, s):
    e, tight, loose = (float(v) for v in remainder_and_bound(
        np.array([a + 1j * b]), np.array([dc + 1j * de]), [theta], delta, s, loose=True))
    f, g, e_theory = get_step("split_exact").numeric(a, b, 0.0, 0.0, dc, de, theta, delta, s)
    size = s * abs(complex(a, b)) * abs(complex(dc, de))
    assert e == pytest.approx(e_theory, abs=1e-9 * size + 1e-300)
    assert (tight, loose) == pytest.approx(
        get_step("remainder_bound").numeric(a, b, dc, de, theta, delta, s), rel=1e-12, abs=1e-300)


# ------------------------------------------------------------- docs/theory.md section 6


@settings(max_examples=25, deadline=None)
@given(head=heads(), spec=st.one_of(st.sampled_from(["zero", "mean"]),
                                    st.floats(-500, 500).map(lambda c: f"distance:{c!r}")))
def test_split_under_a_reference_equals_the_theory_per_pair_functions(head, spec):
    q, k, theta, s, (pq, pk) = head
    sp = split_head(q, k, RopeSpec.from_arrays(theta, s), Measure(reference=spec),
                    positions=(pq, pk))  # fmt: skip
    qc, kc, kb = to_pairs(q), to_pairs(k), to_pairs(sp.kbar)
    split = get_step("split_reference").numeric
    bound = get_step("reference_bound").numeric
    n, p = qc.shape
    for i in range(n):
        for j in range(n):
            delta = pq[i] - pk[j]
            terms = [(qc[i, l].real, qc[i, l].imag, kc[j, l], kb[l], theta[l], sp.m[l])
                     for l in range(p)]  # fmt: skip
            fge = np.sum([split(a, b, m.real, m.imag, (c - m).real, (c - m).imag, th, delta,
                                r.real, r.imag, s) for a, b, c, m, th, r in terms], axis=0)
            tight = sum(bound(a, b, (c - m).real, (c - m).imag, th, delta, r.real, r.imag, s)
                        for a, b, c, m, th, r in terms)  # fmt: skip
            size = s * np.abs(qc[i]).sum() * (np.abs(kc[j]).sum() + np.abs(kb).sum())
            np.testing.assert_allclose((sp.f[i, j], sp.g[i, j], sp.E[i, j], sp.bound[i, j]),
                                       (*fge, tight), rtol=0, atol=1e-10 * size)  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), window=st.one_of(st.none(), st.integers(1, 40)),
       theta=st.floats(0.0, 3.2))  # fmt: skip
def test_mean_rotation_equals_the_theory_optimum(n, window, theta):
    span = n if window is None else min(n, window)
    dist = [float(t) for t in range(span)]
    w = [(n - t) / sum(n - u for u in range(span)) for t in range(span)]  # causal histogram
    want = get_step("mean_rotation_optimum").numeric(theta, dist, w, span)
    got = mean_rotation([theta], n, window).m[0]
    assert (got.real, got.imag) == pytest.approx(want, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), p=st.integers(1, 4), base=st.floats(2.0, 1e4),
       size=st.integers(1, 12))  # fmt: skip
def test_mean_square_remainder_equals_the_theory_sum_over_pair_couples(seed, p, base, size):
    rng = np.random.default_rng(seed)
    q, dev = rng.normal(size=(2, p)) + 1j * rng.normal(size=(2, p))
    theta = frequencies(2 * p, base)
    dist = rng.integers(0, 500, size=size).astype(float)
    ref = mean_rotation_of(theta, dist[:, None])
    e = remainder_and_bound(q[None], dev[None], theta, dist, 0.7,
                            one_minus_m=ref.one_minus)[0].numpy()  # (K,) E_m at each distance
    h = q * np.conj(dev)  # (P,)
    term = get_step("mean_rotation_remainder").numeric
    w = [1.0 / size] * size
    want = sum(term(h[l].real, h[l].imag, h[k].real, h[k].imag, theta[l], theta[k],
                    list(dist), w, size, 0.7) for l in range(p) for k in range(p))  # fmt: skip
    assert (e**2).mean() == pytest.approx(want, rel=1e-9, abs=1e-12 * np.abs(h).sum() ** 2)


def test_mean_key_is_the_theory_weighted_mean():
    k = np.random.default_rng(2).normal(size=(7, 6))
    sp = split_head(k, k, RopeSpec.from_arrays(frequencies(6), 1.0))
    kc, kb = to_pairs(k), to_pairs(sp.kbar)
    for l in range(3):
        want = get_step("mean_key_optimum").numeric(list(kc[:, l].real), list(kc[:, l].imag),
                                                     [1 / 7] * 7, 7)  # fmt: skip
        assert (kb[l].real, kb[l].imag) == pytest.approx(want, abs=1e-12)
