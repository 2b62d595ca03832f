"""Cross-check: the numerics equal the theory layer's lambdified per-pair formulas (issue 3).

``get_step(...).numeric`` evaluates one rotation pair; summing over the pairs gives
the head's value, which the vectorised code must reproduce on random inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ropesplit.numerics.bound import remainder_and_bound
from ropesplit.numerics.rope import frequencies, to_pairs
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
    sp = split_head(q, k, theta, s, positions=(pq, pk))
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
