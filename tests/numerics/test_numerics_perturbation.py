"""numerics.perturbation: controlled distance and moved positions on known truth, float64 twins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.mask import Mask
from ropesplit.numerics.perturbation import (
    DISTANCE_MEASURES,
    causal_pairs,
    controlled_distance,
    mask_pairs,
    pair_logits,
    query_only_share,
    remainder_change_share,
    shift_change,
    weighted_key_corr,
)
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head

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


def controlled_twin(qc, kc, theta, s, distances, mask=None):
    """Loop twin of controlled_distance: every logit a sum over pairs, fits by lstsq, over
    ``mask (N, N)`` (default the causal pairs)."""
    n_heads, n, p = qc.shape
    mask = np.tril(np.ones((n, n), dtype=bool)) if mask is None else mask
    seen = [np.flatnonzero(mask[i]) for i in range(n)]  # the keys row i reads
    out = {key: np.empty((n_heads, len(distances)))
           for key in ("key_corr", "query_share", "visible_change", "logit_change",
                       "remainder_share", "key_var")}  # fmt: skip
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
        out["key_var"][h] = np.mean((vg - vg.mean()) ** 2)
        for index, d in enumerate(distances):
            wd = np.array([[logit(d, i, j) for j in range(n)] for i in range(n)])
            f = np.array([s * sum((qc[h, i, l] * np.conj(kbar[l]) * np.exp(1j * theta[l] * d)).real
                                  for l in range(p)) for i in range(n)])  # fmt: skip
            out["key_corr"][h, index] = np.corrcoef(two_axis_twin(wd, mask), vg)[0, 1]
            x = wd - w0
            resid = sum((x[i, j] - np.mean(x[i, seen[i]])) ** 2 for i in range(n)
                        for j in seen[i])  # fmt: skip
            with np.errstate(invalid="ignore"):  # D = 0: no change at all, the share is NaN
                out["query_share"][h, index] = 1 - resid / np.sum(x[mask] ** 2)
            out["visible_change"][h, index] = np.sqrt(resid / sum(
                (w0[i, j] - np.mean(w0[i, seen[i]])) ** 2 for i in range(n) for j in seen[i]
            ))  # fmt: skip
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


@pytest.mark.parametrize("mask", [Mask.both(), Mask.both(reach=3), Mask(before=2, after=5)],
                         ids=str)
def test_controlled_distance_both_ways_matches_its_loop_twin(mask):
    """Attention both ways (docs/theory.md section 9): every measure over the mask's pairs,
    offsets of both signs, against the loop twin on the same pairs."""
    rng = np.random.default_rng(11)
    qc = rng.normal(size=(2, 9, 3)) + 1j * rng.normal(size=(2, 9, 3))
    kc = rng.normal(size=(2, 9, 3)) + 1j * rng.normal(size=(2, 9, 3))
    theta = np.array([1.0, 0.3, 0.05])
    ours = controlled_distance(qc, kc, theta, 0.7, [3, 40], window=mask)
    twin = controlled_twin(qc, kc, theta, 0.7, [3, 40], mask=mask.allowed(9))
    for key, value in twin.items():
        np.testing.assert_allclose(ours[key], value, rtol=1e-6, atol=1e-8, err_msg=key)
    causal = controlled_distance(qc, kc, theta, 0.7, [3, 40])
    assert not np.allclose(ours["visible_change"], causal["visible_change"])  # other pairs


def test_controlled_distance_on_a_causal_band_mask_is_the_window_s():
    rng = np.random.default_rng(12)
    qc = rng.normal(size=(2, 10, 3)) + 1j * rng.normal(size=(2, 10, 3))
    kc = rng.normal(size=(2, 10, 3)) + 1j * rng.normal(size=(2, 10, 3))
    theta = np.array([1.0, 0.3, 0.05])
    by_window = controlled_distance(qc, kc, theta, 0.5, [2, 7], window=4)
    by_mask = controlled_distance(qc, kc, theta, 0.5, [2, 7], window=Mask.causal(window=4))
    for key, value in by_window.items():
        np.testing.assert_array_equal(by_mask[key], value, err_msg=key)


def test_key_corr_is_one_and_the_change_invisible_both_ways_when_e_is_zero():
    """Known truth both ways: keys that deviate only in non-rotating pairs leave E = 0, so
    key_corr is 1 and visible_change 0 on the two-way pairs too."""
    rng = np.random.default_rng(13)
    theta = theta_with_still_pairs(6, 2)
    q = rng.normal(size=(2, 20, 6)) + 1j * rng.normal(size=(2, 20, 6))
    kbar = rng.normal(size=6) + 1j * rng.normal(size=6)
    deviation = np.zeros((2, 20, 6), dtype=complex)
    deviation[..., 4:] = rng.normal(size=(2, 20, 2)) + 1j * rng.normal(size=(2, 20, 2))
    for mask in (Mask.both(), Mask.both(reach=4)):
        out = controlled_distance(q, kbar + deviation, theta, 0.5, [1, 16], window=mask)
        np.testing.assert_allclose(out["key_corr"], 1.0, atol=1e-9)
        np.testing.assert_allclose(out["visible_change"], 0.0, atol=1e-9)
        moved = deviation + 0.5 * (rng.normal(size=(2, 20, 6)) * (theta > 0))
        broken = controlled_distance(q, kbar + moved, theta, 0.5, [16], window=mask)
        assert broken["key_corr"].max() < 1 - 1e-6 and broken["visible_change"].min() > 1e-6


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), budget=st.one_of(st.none(), st.integers(1, 200)),
       before=st.one_of(st.none(), st.integers(0, 12)),
       after=st.one_of(st.none(), st.integers(0, 12)), seed=st.integers(0, 2**32 - 1))
def test_mask_pairs_draw_only_the_mask_s_pairs(n, budget, before, after, seed):
    mask = Mask(before=before, after=after)
    allowed = mask.allowed(n)
    i, j = mask_pairs(n, budget, np.random.default_rng(seed), mask)
    assert allowed[i, j].all()
    assert i.size == (allowed.sum() if budget is None else min(budget, allowed.sum()))
    order = i * n + j
    assert (np.diff(order) > 0).all()  # distinct, row-major
    a, b = mask_pairs(n, budget, np.random.default_rng(seed), None)
    c, d = causal_pairs(n, budget, np.random.default_rng(seed))
    assert np.array_equal(a, c) and np.array_equal(b, d)  # None: the causal pairs
    e, f = mask_pairs(n, budget, np.random.default_rng(seed), Mask.causal())
    assert np.array_equal(a, e) and np.array_equal(b, f)  # the same draw as the formula


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
    split = split_head(q, k, RopeSpec.from_arrays(theta, 0.5), positions=positions.astype(float))
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


# ----------------------------------------------------- kbar in slow pairs, the row-centred measures

SLOW_THETA = np.array([1.0, 0.6, 0.3, 0.03, 0.01, 0.0, 0.0, 0.0])  # 3 fast, 2 slow, 3 still
FAST, SLOW, STILL = slice(0, 3), slice(3, 5), slice(5, 8)
FAST_LEVELS = (0.001, 0.01, 0.1)  # share of the deviation energy moved into the fast pairs


def slow_kbar_heads(fast_share, slow=(0.03, 0.01), seed=0, heads=3, n=32):
    """``q, k, theta, kbar``: the mean key ``kbar`` only in the slow pairs (where query_share
    failed), deviations of fixed energy, a share ``fast_share`` in the fast pairs and the rest
    in the non-rotating ones (the same draws at every share)."""
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.normal(size=shape) + 1j * rng.normal(size=shape)

    theta = SLOW_THETA.copy()
    theta[SLOW] = slow
    q = normal(heads, n, 8)
    kbar = np.zeros((heads, 8), dtype=complex)
    kbar[:, SLOW] = 2 * normal(heads, 2)
    dev = np.zeros((heads, n, 8), dtype=complex)
    dev[..., STILL] = np.sqrt(1 - fast_share) * normal(heads, n, 3)
    dev[..., FAST] = np.sqrt(fast_share) * normal(heads, n, 3)
    dev -= dev.mean(axis=1, keepdims=True)
    return q, kbar[:, None, :] + dev, theta, kbar


def jittered(n, seed=1, t=3):
    before = np.arange(n, dtype=float)
    return before, before + np.random.default_rng(seed).integers(-t, t + 1, n), np.tril_indices(n)


@settings(max_examples=20, deadline=None)
@given(q=complex_arrays((2, 20, 8)), slow=complex_arrays((2, 2)), still=complex_arrays((2, 20, 3)),
       moves=arrays(np.int64, (20,), elements=st.integers(-4, 4)))  # fmt: skip
def test_row_centred_measures_are_ideal_when_e_is_zero_with_kbar_in_slow_pairs(
    q, slow, still, moves
):
    base = np.random.default_rng(11).normal(size=(2, 2, 20, 8))  # well-conditioned centre
    q = q + base[0, 0] + 1j * base[0, 1]
    k = np.zeros((2, 20, 8), dtype=complex)
    k[..., SLOW] = (slow + base[1, 1, :2, :2] + 2.0)[:, None, :]  # kbar: slow pairs only
    k[..., STILL] = still + base[1, 0, :, :3]  # keys deviate only in non-rotating pairs
    out = controlled_distance(q, k, SLOW_THETA, 0.5, [1, 16, 300])
    assert out["visible_change"].max() <= 1e-12
    np.testing.assert_allclose(weighted_key_corr(out["key_corr"], out["key_var"]), 1.0, atol=1e-9)
    assert out["key_var"].min() > 0 and np.all(out["key_var"] == out["key_var"][:, :1])
    before = np.arange(20.0)
    pairs = np.tril_indices(20)
    mean_key = k.mean(axis=1)
    exact = mean_key.copy()
    exact[:, SLOW] = k[:, 0, SLOW]  # the constant part exactly: delta is 0 outside STILL
    share = remainder_change_share(q, k, SLOW_THETA, 0.5, before, before + moves, pairs,
                                   kbar=exact)  # fmt: skip
    if np.all(moves == moves[0]):  # nothing moved: Delta W = 0 everywhere
        assert np.all(np.isnan(share))
    else:
        assert np.all(share == 0.0)
        rounded = remainder_change_share(q, k, SLOW_THETA, 0.5, before, before + moves, pairs)
        assert rounded.max() <= 1e-12  # the mean key: delta off STILL is rounding only


def test_row_centred_measures_move_away_as_deviation_moves_into_fast_pairs():
    rows = []
    for fast in FAST_LEVELS:  # the table: one row of measures per level
        q, k, theta, _ = slow_kbar_heads(fast)
        out = controlled_distance(q, k, theta, 0.35, [4, 16, 64])
        before, after, pairs = jittered(q.shape[1])
        share = remainder_change_share(q, k, theta, 0.35, before, after, pairs)  # (H,)
        corr = weighted_key_corr(out["key_corr"], out["key_var"]).mean()  # over D
        rows.append({"visible": out["visible_change"].mean(axis=1), "corr": corr, "share": share})
    visible, share = (np.array([r[key] for r in rows]) for key in ("visible", "share"))  # (3, H)
    corr = np.array([r["corr"] for r in rows])  # (3,)
    assert visible[0].min() > 5e-3 and share[0].min() > 0.05 and corr[0] < 1 - 1e-5  # E != 0
    assert np.all(np.diff(visible, axis=0) > 0) and np.all(np.diff(share, axis=0) > 0)
    assert np.all(np.diff(corr) < 0) and corr[-1] < 0.99 and visible[-1].min() > 0.2


def test_query_share_falls_far_below_one_for_a_tiny_remainder():
    """kbar in very slow pairs: W^D - W^0 = Delta f + E^D is small, a tiny E^D dominates it."""
    q, k, theta, _ = slow_kbar_heads(1e-4, slow=(0.003, 0.001))
    out = controlled_distance(q, k, theta, 0.35, [4])
    assert out["remainder_share"].max() < 0.02  # E^D is tiny beside W^D ...
    assert out["visible_change"].max() < 0.03  # ... and so is what softmax sees move
    assert weighted_key_corr(out["key_corr"][:, 0], out["key_var"][:, 0]) > 0.9999
    assert out["query_share"].mean() < 0.5 and out["query_share"].min() < 0.4  # the flaw


@settings(max_examples=30, deadline=None)
@given(q=complex_arrays((2, 6, 3)), k=complex_arrays((2, 6, 3)),
       window=st.one_of(st.none(), st.integers(1, 7)))  # fmt: skip
def test_visible_change_matches_a_loop(q, k, window):
    theta, s, distances = np.array([1.0, 0.2, 0.0]), 0.6, [3.0, 40.0]
    out = controlled_distance(q, k, theta, s, distances, window=window)

    def logit(h, i, j, d):
        return s * sum((q[h, i, l] * np.conj(k[h, j, l]) * np.exp(1j * theta[l] * d)).real
                       for l in range(3))  # fmt: skip

    def centred_energy(x):  # sum over the causal (window) pairs of (x_ij - row mean)^2
        total = 0.0
        for i in range(6):
            row = [j for j in range(i + 1) if window is None or i - j < window]
            mean = sum(x[i][j] for j in row) / len(row)
            total += sum((x[i][j] - mean) ** 2 for j in row)
        return total

    for h in range(2):
        w0 = [[logit(h, i, j, 0.0) for j in range(6)] for i in range(6)]
        reference = centred_energy(w0)
        for index, d in enumerate(distances):
            x = [[logit(h, i, j, d) - w0[i][j] for j in range(6)] for i in range(6)]
            ours = out["visible_change"][h, index]
            if reference == 0:
                assert np.isnan(ours)
            else:
                assert ours == pytest.approx(np.sqrt(centred_energy(x) / reference),
                                             rel=1e-9, abs=1e-10)  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(q=complex_arrays((2, 9, 3)), k=complex_arrays((2, 9, 3)), kbar=complex_arrays((2, 3)),
       given_kbar=st.booleans(),
       moves=arrays(np.int64, (9,), elements=st.integers(-5, 5)))  # fmt: skip
def test_remainder_change_share_matches_a_loop(q, k, kbar, given_kbar, moves):
    theta, s = np.array([1.0, 0.2, 0.0]), 0.6
    before = np.arange(9.0)
    after = before + moves
    i, j = np.tril_indices(9)
    ours = remainder_change_share(q, k, theta, s, before, after, (i, j),
                                  kbar=kbar if given_kbar else None)  # fmt: skip
    reference = kbar if given_kbar else k.mean(axis=1)
    for h in range(2):
        moved = remainder = 0.0
        for a, b in zip(i, j, strict=True):
            gap, tau = a - b, (after[a] - after[b]) - (a - b)
            for key, out in ((k[h, b], "W"), (k[h, b] - reference[h], "E")):
                change = s * sum((q[h, a, l] * np.conj(key[l]) * np.exp(1j * theta[l] * gap)
                                  * (np.exp(1j * theta[l] * tau) - 1)).real
                                 for l in range(3))  # fmt: skip
                if out == "W":
                    moved += change**2
                else:
                    remainder += change**2
        if moved == 0:
            assert np.isnan(ours[h])
        else:
            assert ours[h] == pytest.approx(np.sqrt(remainder / moved), rel=1e-7, abs=1e-12)


WEIGHTS = st.floats(0.0, 10.0)
CORRS = st.one_of(st.floats(-1.0, 1.0), st.just(float("nan")))


@settings(max_examples=50, deadline=None)
@given(corr=arrays(np.float64, (4, 3), elements=CORRS),
       var=arrays(np.float64, (4, 3), elements=WEIGHTS), per_head=st.booleans())  # fmt: skip
def test_weighted_key_corr_matches_a_loop(corr, var, per_head):
    weights = var[:, 0] if per_head else var  # (H,) or (H, K)
    ours = weighted_key_corr(corr, weights)
    assert ours.shape == (3,)
    for d in range(3):
        top = bottom = 0.0
        for h in range(4):
            w = var[h, 0] if per_head else var[h, d]
            if not np.isnan(corr[h, d]):
                top += w * corr[h, d]
                bottom += w
        if bottom == 0:
            assert np.isnan(ours[d])
        else:
            assert ours[d] == pytest.approx(top / bottom, rel=1e-12, abs=1e-12)
    one = weighted_key_corr(corr[:, 0], var[:, 0])  # (H,) -> a float, column 0's weights
    assert isinstance(one, float) and one == pytest.approx(ours[0], rel=1e-12, nan_ok=True)


def test_weighted_key_corr_lets_a_near_constant_key_effect_count_for_little():
    assert weighted_key_corr([0.99, -0.4], [1.0, 1e-9]) == pytest.approx(0.99, abs=1e-8)
    assert np.isnan(weighted_key_corr([float("nan"), 0.3], [1.0, 0.0]))
    with pytest.raises(RopesplitError, match="non-negative"):
        weighted_key_corr([0.5, 0.5], [1.0, -1.0])
    with pytest.raises(RopesplitError, match="key_var must have shape"):
        weighted_key_corr(np.ones((2, 3)), np.ones((3,)))


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 10**6), c=st.integers(1, 30))
def test_run_changes_are_the_mean_pair_logit_changes(seed, c):
    """run_changes against pair_logits pair by pair: |dW| and |dg_m| for m = 1 and e^{i theta c}
    (the loop twin), and g_m through pair_logits' m equal to the split's g under distance c."""
    from ropesplit.numerics.perturbation import causal_pairs, pair_logits, run_changes
    from ropesplit.numerics.reference import resolve_reference

    rng = np.random.default_rng(seed)
    theta = theta_with_still_pairs(4, 1)
    qc0, kc0, qc1, kc1 = (rng.normal(size=(2, 12, 4)) + 1j * rng.normal(size=(2, 12, 4))
                          for _ in range(4))  # fmt: skip
    p0, p1 = np.arange(12.0), np.arange(12.0) + rng.integers(-2, 3, size=12)
    pairs = causal_pairs(12, 30, rng)
    ms = np.stack([np.ones(4, dtype=complex), resolve_reference(f"distance:{c}", theta).m])
    dw, dg = run_changes((qc0, kc0, p0), (qc1, kc1, p1), theta, 0.3, pairs, ms=ms)
    for r, m in enumerate(ms):
        a = pair_logits(qc0, kc0, theta, 0.3, p0, pairs, m=m)
        b = pair_logits(qc1, kc1, theta, 0.3, p1, pairs, m=m)
        np.testing.assert_allclose(dg[r], np.abs(b["g"] - a["g"]).mean(axis=1), atol=1e-12)
        np.testing.assert_allclose(dw, np.abs(b["W"] - a["W"]).mean(axis=1), atol=1e-12)
    _, none = run_changes((qc0, kc0, p0), (qc0, kc0, p0 + 5.0), theta, 0.3, pairs)
    assert np.all(none == 0.0)  # one q and k: positions alone never move g


@settings(max_examples=25, deadline=None)
@given(q=complex_arrays((2, 9, 3)), k=complex_arrays((2, 9, 3)),
       chosen=st.lists(st.sampled_from(DISTANCE_MEASURES), min_size=1, unique=True),
       window=st.one_of(st.none(), st.integers(1, 10)))  # fmt: skip
def test_a_subset_of_distance_measures_is_the_full_run_bit_for_bit(q, k, chosen, window):
    theta, s, distances = np.array([1.0, 0.2, 0.0]), 0.6, [3.0, 5.0]
    full = controlled_distance(q, k, theta, s, distances, window=window)
    some = controlled_distance(q, k, theta, s, distances, window=window, measures=chosen)
    assert set(some) == {*chosen, "key_var"}
    for name in some:
        np.testing.assert_array_equal(some[name], full[name], err_msg=name)


def test_an_unknown_distance_measure_is_named():
    q = np.ones((1, 4, 2), dtype=complex)
    with pytest.raises(RopesplitError, match=r"unknown distance measures \['key_cor'\]"):
        controlled_distance(q, q, [1.0, 0.1], 1.0, [2], measures=("key_cor",))
