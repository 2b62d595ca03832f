"""numerics.perturbation: controlled distance and moved positions on known truth, float64 twins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from ropesplit.numerics.perturbation import (
    causal_pairs,
    controlled_distance,
    pair_logits,
    query_only_share,
    shift_change,
)
from ropesplit.numerics.split import split_head

from ropesplit.errors import RopesplitError

FLOATS = st.integers(-24, 24).map(lambda v: v / 8)  # exact, no underflow in products


def complex_arrays(shape):
    return arrays(np.float64, (2, *shape), elements=FLOATS).map(lambda x: x[0] + 1j * x[1])


def theta_with_still_pairs(p, still):
    """``p`` frequencies of base 100, the last ``still`` of them non-rotating (theta = 0)."""
    theta = 100.0 ** (-np.arange(p) / p)
    theta[p - still :] = 0.0
    return theta


def two_axis_twin(w, mask):
    """Reference: the key effect of u_i + v_j by a dense design matrix and lstsq, mean 0."""
    n = w.shape[0]
    rows, cols = np.nonzero(mask)
    design = np.zeros((rows.size, 2 * n))
    for t, (i, j) in enumerate(zip(rows, cols, strict=True)):
        design[t, i] = design[t, n + j] = 1.0
    x = np.linalg.lstsq(design, w[rows, cols], rcond=None)[0]
    v = x[n:]
    return v - v.mean()


def controlled_twin(qc, kc, theta, s, distances):
    """Loop twin of controlled_distance: every logit a sum over pairs, fits by lstsq."""
    n_heads, n, p = qc.shape
    mask = np.tril(np.ones((n, n), dtype=bool))
    out = {key: np.empty((n_heads, len(distances)))
           for key in ("key_corr", "query_share", "logit_change", "remainder_share")}  # fmt: skip
    for h in range(n_heads):
        kbar = kc[h].mean(axis=0)

        def logit(d, i, j, h=h, kbar=kbar):
            return s * sum((qc[h, i, l] * np.conj(kc[h, j, l]) * np.exp(1j * theta[l] * d)).real
                           for l in range(p))  # fmt: skip

        g = np.array([[s * sum((qc[h, i, l] * np.conj(kc[h, j, l] - kbar[l])).real
                               for l in range(p)) for j in range(n)]
                      for i in range(n)])  # fmt: skip
        w0 = np.array([[logit(0, i, j) for j in range(n)] for i in range(n)])
        vg = two_axis_twin(g, mask)
        for index, d in enumerate(distances):
            wd = np.array([[logit(d, i, j) for j in range(n)] for i in range(n)])
            f = np.array([s * sum((qc[h, i, l] * np.conj(kbar[l]) * np.exp(1j * theta[l] * d)).real
                                  for l in range(p)) for i in range(n)])  # fmt: skip
            out["key_corr"][h, index] = np.corrcoef(two_axis_twin(wd, mask), vg)[0, 1]
            x = wd - w0
            resid = sum((x[i, j] - np.mean(x[i, : i + 1])) ** 2 for i in range(n)
                        for j in range(i + 1))  # fmt: skip
            with np.errstate(invalid="ignore"):  # D = 0: no change at all, the share is NaN
                out["query_share"][h, index] = 1 - resid / np.sum(x[mask] ** 2)
            out["logit_change"][h, index] = np.sqrt(np.mean(x[mask] ** 2)) / np.std(w0[mask])
            e = wd - f[:, None] - g
            out["remainder_share"][h, index] = np.linalg.norm(e[mask]) / np.linalg.norm(
                wd[mask] - wd[mask].mean()
            )
    return out


@settings(max_examples=15, deadline=None)
@given(q=complex_arrays((2, 7, 4)), kbar=complex_arrays((4,)), spread=complex_arrays((2, 7, 4)),
       mix=st.floats(0.0, 1.0))  # fmt: skip
def test_controlled_distance_matches_its_loop_twin(q, kbar, spread, mix):
    theta = theta_with_still_pairs(4, 1)
    base = np.random.default_rng(3).normal(size=(2, 2, 7, 4))  # well-conditioned centre
    q = q + base[0, 0] + 1j * base[0, 1]
    k = kbar + (spread + base[1, 0] + 1j * base[1, 1]) * np.where(theta == 0, 1.0, mix)
    ours = controlled_distance(q, k, theta, 0.7, [3, 40])
    twin = controlled_twin(q, k, theta, 0.7, [3, 40])
    for key, value in twin.items():
        np.testing.assert_allclose(ours[key], value, rtol=1e-6, atol=1e-8, err_msg=key)


@settings(max_examples=20, deadline=None)
@given(q=complex_arrays((2, 24, 6)), kbar=complex_arrays((6,)), still=complex_arrays((2, 24, 2)))
def test_key_corr_and_query_share_are_one_when_e_is_zero(q, kbar, still):
    theta = theta_with_still_pairs(6, 2)
    base = np.random.default_rng(5).normal(size=(2, 2, 24, 6))  # well-conditioned centre
    q = q + base[0, 0] + 1j * base[0, 1]
    kbar = kbar + base[1, 1, 0]  # a rotating reference key: the logits move with D
    deviation = np.zeros((2, 24, 6), dtype=complex)
    deviation[..., 4:] = still + base[1, 0, :, :2]  # keys deviate only in non-rotating pairs
    out = controlled_distance(q, kbar + deviation, theta, 0.5, [1, 16, 300])
    assert out["remainder_share"].max() < 1e-10  # E = 0 to rounding
    np.testing.assert_allclose(out["key_corr"], 1.0, atol=1e-9)
    np.testing.assert_allclose(out["query_share"], 1.0, atol=1e-9)


def test_key_corr_and_query_share_fall_as_e_grows():
    rng = np.random.default_rng(7)
    n, p = 48, 8
    theta = theta_with_still_pairs(p, 2)
    q = rng.normal(size=(3, n, p)) + 1j * rng.normal(size=(3, n, p))
    kbar = rng.normal(size=p) + 1j * rng.normal(size=p)
    still = np.zeros((3, n, p), dtype=complex)
    still[..., -2:] = rng.normal(size=(3, n, 2)) + 1j * rng.normal(size=(3, n, 2))
    moving = (rng.normal(size=(3, n, p)) + 1j * rng.normal(size=(3, n, p))) * (theta > 0)
    means = []
    for eps in (0.0, 0.1, 0.3, 1.0):
        out = controlled_distance(q, kbar + still + eps * moving, theta, 0.4, [16, 64])
        means.append([float(out[key].mean()) for key in
                      ("key_corr", "query_share", "remainder_share")])  # fmt: skip
    corr, share, remainder = np.array(means).T
    assert corr[0] == pytest.approx(1.0, abs=1e-9) and share[0] == pytest.approx(1.0, abs=1e-9)
    assert np.all(np.diff(corr) < 0) and np.all(np.diff(share) < 0)
    assert np.all(np.diff(remainder) > 0) and corr[-1] < 0.95 and share[-1] < 0.9


def test_controlled_distance_refuses_distance_zero():
    q = np.ones((1, 4, 2), dtype=complex)
    with pytest.raises(RopesplitError, match="distances must be positive"):
        controlled_distance(q, q, [1.0, 0.1], 1.0, [0, 4])


@settings(max_examples=30, deadline=None)
@given(x=arrays(np.float64, (2, 6, 6), elements=FLOATS))
def test_query_only_share_matches_a_loop(x):
    mask = np.tril(np.ones((6, 6), dtype=bool))
    ours = query_only_share(x, mask)
    for b in range(2):
        total = sum(x[b, i, j] ** 2 for i in range(6) for j in range(i + 1))
        if total == 0:
            assert np.isnan(ours[b])
            continue
        left = sum((x[b, i, j] - np.mean(x[b, i, : i + 1])) ** 2 for i in range(6)
                   for j in range(i + 1))  # fmt: skip
        assert ours[b] == pytest.approx(1 - left / total, rel=1e-9, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(q=complex_arrays((2, 9, 3)), k=complex_arrays((2, 9, 3)),
       moves=arrays(np.int64, (9,), elements=st.integers(-5, 5)))  # fmt: skip
def test_shift_change_matches_its_loop_twin_and_stays_under_its_bound(q, k, moves):
    theta = np.array([1.0, 0.2, 0.0])
    s = 0.6
    before = np.arange(9.0)
    after = before + moves
    i, j = np.tril_indices(9)
    out = shift_change(q, k, theta, s, before, after, (i, j))
    kbar = k.mean(axis=1)
    for h in range(2):
        for m, (a, b) in enumerate(zip(i, j, strict=True)):
            gap, tau = a - b, (after[a] - after[b]) - (a - b)
            assert out["tau"][m] == tau
            for name, key in (("W", k[h, b]), ("f", kbar[h]), ("E", k[h, b] - kbar[h])):
                terms = [q[h, a, l] * np.conj(key[l]) for l in range(3)]
                change = s * sum((t * np.exp(1j * theta[l] * gap)
                                  * (np.exp(1j * theta[l] * tau) - 1)).real
                                 for l, t in enumerate(terms))  # fmt: skip
                bound = s * sum(abs(t) * 2 * abs(np.sin(theta[l] * tau / 2))
                                for l, t in enumerate(terms))  # fmt: skip
                assert out[f"measured_{name}"][h, m] == pytest.approx(abs(change), abs=1e-9)
                assert out[f"bound_{name}"][h, m] == pytest.approx(bound, abs=1e-9)
                assert out[f"measured_{name}"][h, m] <= out[f"bound_{name}"][h, m] + 1e-9


@settings(max_examples=20, deadline=None)
@given(q=arrays(np.float64, (5, 4), elements=FLOATS), k=arrays(np.float64, (5, 4), elements=FLOATS),
       positions=arrays(np.int64, (5,), elements=st.integers(0, 40)))  # fmt: skip
def test_pair_logits_agree_with_split_head(q, k, positions):
    from ropesplit.numerics.rope import to_pairs

    theta = np.array([1.0, 0.05])
    split = split_head(q, k, theta, 0.5, positions=positions.astype(float))
    i, j = np.tril_indices(5)
    out = pair_logits(to_pairs(q)[None], to_pairs(k)[None], theta, 0.5, positions, (i, j))
    np.testing.assert_allclose(out["W"][0], split.W[i, j], atol=1e-9)
    np.testing.assert_allclose(out["g"][0], split.g[i, j], atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 60), budget=st.one_of(st.none(), st.integers(1, 400)))
def test_causal_pairs_are_causal_distinct_and_complete_without_budget(n, budget):
    i, j = causal_pairs(n, budget, np.random.default_rng(0))
    total = n * (n + 1) // 2
    assert i.size == (total if budget is None else min(budget, total))
    assert np.all(j <= i) and np.all(j >= 0) and np.all(i < n)
    assert len(set(zip(i.tolist(), j.tolist(), strict=True))) == i.size
