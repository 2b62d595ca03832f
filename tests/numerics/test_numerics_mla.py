"""numerics.partial_rotary, and multi-head latent attention through the split statistics
(docs/theory.md section 7).

A float64 twin computes the rotating slice's share of the row-centred logit variance
from dense matrices, row by row: ``W_rot`` from the first ``r`` coordinates rotated by
``rope.rotate``, ``W_rest = s q_rest . k_rest``. Hypothesis draws the arrays (on a grid of
quarters, so the planted exact cases stay exact in float64). The MLA tests build heads
as a capture hands them: the whole head reordered ``[pe | nope]`` (rotary slice first,
KV map identity) and the RoPE sub-head ``q_pe (H, N, r)``, ``k_pe (1, N, r)`` shared by
every head.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import partial_rotary
from ropesplit.numerics.partial_rotary import rotary_share
from ropesplit.numerics.rope import frequencies, rotate
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head
from ropesplit.numerics.stats import layer_statistics

GRID = st.integers(-12, 12).map(lambda x: x / 4.0)  # quarters: sums of a few stay exact
RTOL = 1e-12


def grid(shape):
    return hnp.arrays(np.float64, shape, elements=GRID)


def twin(q, k, spec, positions=None):
    """``(share, energy (2, H), size (2, H))``: the share from dense ``(N, N)`` parts, row by
    row; ``energy`` the two parts' row-centred sums of squares, ``size`` the sums of
    squares of ``s sum_l |q_l k_l|`` (the magnitude rounding is relative to)."""
    h, n, d = q.shape
    r = spec.rotary_dim or d
    kv = spec.kv_heads(h, k.shape[0])
    if positions is None:
        positions = np.arange(n, dtype=float)
    pq, pk = positions if isinstance(positions, tuple) else (positions, positions)
    theta, s = spec.frequencies, spec.scale
    assert not theta[r // 2 :].any()  # the rest does not rotate: W_rest = s q_rest . k_rest
    energy, size = np.zeros((2, h)), np.zeros((2, h))
    for x in range(h):
        qr = rotate(q[x], pq, theta, layout=spec.layout, rotary_dim=spec.rotary_dim)
        kr = rotate(k[kv[x]], pk, theta, layout=spec.layout, rotary_dim=spec.rotary_dim)
        parts = [(qr[:, :r], kr[:, :r]), (q[x, :, r:], k[kv[x], :, r:])]
        for part, (a, b) in enumerate(parts):
            logits, magnitude = s * a @ b.T, s * np.abs(a) @ np.abs(b).T
            for i in range(n):
                cols = [j for j in range(i + 1) if spec.window is None or i - j < spec.window]
                row = logits[i, cols]
                energy[part, x] += ((row - row.mean()) ** 2).sum()
                size[part, x] += (magnitude[i, cols] ** 2).sum()
    total = energy.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, energy[0] / total, np.nan), energy, size


def assert_share(got, want, energy, size):
    """``got == want`` to ``RTOL`` relative, widened by the conditioning of the row-centred
    sums: a logit's rounding is relative to ``size``, not to its part's centred ``energy``,
    so each energy is known to ``RTOL sqrt(size energy)`` (and ``RTOL^2 size``)."""
    total = energy.sum(0)
    assert np.isnan(got[total == 0]).all()  # no row-centred variance: undefined
    slack = (RTOL * np.sqrt(size * energy) + RTOL**2 * size).sum(0)  # (H,)
    has = total > 0
    err = np.abs(got - want)[has]
    assert (err <= RTOL * want[has] + slack[has] / total[has]).all(), (got, want)


@st.composite
def layers(draw, rest=True):
    """A partial-rotary layer: ``(q, k, spec, positions)``, arrays on the grid; positions
    None, ``p`` or the pair ``(p, p')`` of query and key positions."""
    hkv = draw(st.integers(1, 2))
    h = hkv * draw(st.integers(1, 2))
    n = draw(st.integers(1, 10))
    r = 2 * draw(st.integers(1, 3))
    d = r + 2 * draw(st.integers(1 if rest else 0, 3))
    q, k = draw(grid((h, n, d))), draw(grid((hkv, n, d)))
    kv_map = draw(st.one_of(st.none(), st.lists(st.integers(0, hkv - 1), min_size=h,
                                                max_size=h)))  # fmt: skip
    spec = RopeSpec.from_base(d, draw(st.sampled_from([10.0, 100.0, 1e4])),
                              scale=draw(st.sampled_from([0.125, 0.3, 1.0])), rotary_dim=r,
                              layout=draw(st.sampled_from(["half", "interleaved"])),
                              window=draw(st.one_of(st.none(), st.integers(1, n))),
                              kv_map=kv_map)  # fmt: skip
    whole = hnp.arrays(np.float64, n, elements=st.integers(0, 50).map(float))
    positions = draw(st.one_of(st.none(), whole, st.tuples(whole, whole)))  # p, or (p, p')
    return q, k, spec, positions


# ------------------------------------------------------------------------- the rotary share


@settings(max_examples=120, deadline=None)
@given(layer=layers())
def test_rotary_share_equals_the_dense_twin(layer):
    q, k, spec, positions = layer
    got = rotary_share(q, k, spec, positions=positions)
    want, energy, size = twin(q, k, spec, positions)
    assert got.shape == (q.shape[0],) and got.dtype == np.float64
    assert_share(got, want, energy, size)
    assert ((got >= 0) & (got <= 1) | np.isnan(got)).all()


@pytest.mark.parametrize("window", [None, 3])
def test_blocks_of_rows_give_the_numbers_of_one_block(monkeypatch, window):
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(4, 40, 12)), rng.normal(size=(2, 40, 12))
    spec = RopeSpec.from_base(12, 1e4, rotary_dim=4, window=window)
    whole = rotary_share(q, k, spec)
    monkeypatch.setattr(partial_rotary, "_BLOCK_BYTES", 1)  # one row per block
    np.testing.assert_allclose(rotary_share(q, k, spec), whole, rtol=1e-13)
    np.testing.assert_allclose(whole, twin(q, k, spec)[0], rtol=1e-13)


@settings(max_examples=60, deadline=None)
@given(layer=layers(), side=st.sampled_from(["q", "k"]))
def test_rotary_share_is_exactly_one_when_the_rest_carries_nothing(layer, side):
    q, k, spec, positions = layer
    r = spec.rotary_dim
    (q if side == "q" else k)[..., r:] = 0.0
    got = rotary_share(q, k, spec, positions=positions)
    _, energy, _ = twin(q, k, spec, positions)
    assert (got[energy[0] > 0] == 1.0).all()
    assert np.isnan(got[energy[0] == 0]).all()  # no row-centred variance at all


@settings(max_examples=60, deadline=None)
@given(layer=layers(), side=st.sampled_from(["q", "k"]))
def test_rotary_share_is_exactly_zero_when_the_rotating_slice_carries_nothing(layer, side):
    q, k, spec, positions = layer
    (q if side == "q" else k)[..., : spec.rotary_dim] = 0.0
    got = rotary_share(q, k, spec, positions=positions)
    _, energy, _ = twin(q, k, spec, positions)
    assert (got[energy[1] > 0] == 0.0).all()
    assert np.isnan(got[energy[1] == 0]).all()


def test_a_full_rotary_head_has_share_one():
    q, k = np.random.default_rng(1).normal(size=(2, 2, 20, 8))
    assert rotary_share(q, k, RopeSpec.from_base(8, 1e4)).tolist() == [1.0, 1.0]


@settings(max_examples=60, deadline=None)
@given(layer=layers(), data=st.data())
def test_a_query_only_term_changes_nothing(layer, data):
    # a rest coordinate with a key constant over tokens adds q_ix c to row i of W_rest
    q, k, spec, positions = layer
    x = data.draw(st.integers(spec.rotary_dim, q.shape[-1] - 1))
    k_plain = k.copy()
    k_plain[..., x] = 0.0
    k_row = k_plain.copy()
    k_row[..., x] = data.draw(grid((k.shape[0], 1)))  # one constant per KV head
    plain = rotary_share(q, k_plain, spec, positions=positions)
    want, energy, size = twin(q, k_plain, spec, positions)
    _, _, size_row = twin(q, k_row, spec, positions)
    assert_share(rotary_share(q, k_row, spec, positions=positions), want, energy,
                 np.maximum(size, size_row))  # fmt: skip
    assert_share(plain, want, energy, size)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(2, 10), pairs=st.integers(1, 3),
       c=st.sampled_from([-2.0, -1.0, -0.5, 0.5, 1.0, 3.0]),
       layout=st.sampled_from(["half", "interleaved"]))  # fmt: skip
def test_a_planted_share_is_recovered(data, n, pairs, c, layout):
    # the rest carries c times the rotating slice, pre-rotated: W_rest = c W_rot exactly in
    # exact arithmetic, so the share is 1 / (1 + c^2); c = -1 cancels W to 0, share 1/2
    r = 2 * pairs
    q_rot, k_rot = data.draw(grid((2, n, r)))
    spec = RopeSpec.from_base(2 * r, 100.0, rotary_dim=r, layout=layout)
    theta = spec.frequencies[:pairs]
    p = np.arange(n, dtype=float)
    q = np.concatenate([q_rot, c * rotate(q_rot, p, theta, layout=layout)], -1)[None]
    k = np.concatenate([k_rot, rotate(k_rot, p, theta, layout=layout)], -1)[None]
    _, energy, size = twin(q, k, spec)
    assume(energy[0, 0] > 1e-6 * size[0, 0])  # W_rot has row-centred variance to recover
    got = rotary_share(q, k, spec)
    assert got[0] == pytest.approx(1 / (1 + c * c), rel=1e-10)


def test_bad_inputs_are_refused_with_one_line():
    spec = RopeSpec.from_base(8, 1e4, rotary_dim=4)
    q = np.zeros((2, 5, 8))
    with pytest.raises(RopesplitError, match="like q"):
        rotary_share(q, np.zeros((1, 4, 8)), spec)
    with pytest.raises(RopesplitError, match="head dim"):
        rotary_share(q[..., :6], np.zeros((1, 5, 6)), spec)
    with pytest.raises(RopesplitError, match="one RopeSpec"):
        rotary_share(q, np.zeros((1, 5, 8)), frequencies(8))  # type: ignore[arg-type]


# ------------------------------------------------- multi-head latent attention, section 7


def mla(q, k_nope, k_pe, base=1e4):
    """The capture's two views of an MLA layer: ``(q, k, whole_spec)`` of the whole heads
    ``[pe | nope]`` (``q (H, N, d)``, ``k (H, N, d)`` with ``k_pe`` broadcast, KV map
    identity) and ``(q_pe, k_pe, sub_spec)`` of the RoPE sub-head (one shared key head)."""
    h, n, d = q.shape
    r = k_pe.shape[-1]
    k = np.concatenate([np.broadcast_to(k_pe, (h, n, r)), k_nope], -1)
    whole = RopeSpec.from_base(d, base, rotary_dim=r, kv_map=range(h))
    sub = RopeSpec.from_base(r, base, scale=d**-0.5, kv_map=[0] * h)  # the whole head's s
    return (q, k, whole), (q[..., :r], k_pe, sub)


@st.composite
def mla_layers(draw, constant_pe=False):
    h, n = draw(st.integers(1, 3)), draw(st.integers(2, 12))
    r, nope = 2 * draw(st.integers(1, 3)), 2 * draw(st.integers(1, 3))
    q, k_nope = draw(grid((h, n, r + nope))), draw(grid((h, n, nope)))
    k_pe = draw(grid((1, 1 if constant_pe else n, r)))
    return mla(q, k_nope, np.broadcast_to(k_pe, (1, n, r)).copy())


@settings(max_examples=40, deadline=None)
@given(layer=mla_layers(constant_pe=True))
def test_mla_split_is_exact_when_the_shared_k_pe_is_constant(layer):
    # delta_pe = 0 (the mean of equal quarters is exact): E = 0 and its bound B = 0 at every
    # pair, on the sub-head and on the whole head (key variation only in theta = 0 pairs)
    for q, k, spec in layer:
        for st_ in layer_statistics(q, k, spec):
            assert st_.remainder_share == 0.0 or math.isnan(st_.remainder_share)
            assert st_.violations == 0
            assert math.isnan(st_.tightness_max)  # no pair with B > 0 to take a ratio over
            assert st_.r_split == pytest.approx(1.0, abs=1e-12) or math.isnan(st_.r_split)


@settings(max_examples=40, deadline=None)
@given(layer=mla_layers())
def test_mla_remainder_lives_on_the_rope_subhead(layer):
    # ||E||_F^2 = remainder_share^2 ||W - mean W||^2 is the same on the whole head and on
    # its RoPE sub-head: the nope coordinates are theta = 0 pairs and add nothing to E
    (q, k, whole), (q_pe, k_pe, sub) = layer
    for h, (a, b) in enumerate(zip(layer_statistics(q, k, whole), layer_statistics(q_pe, k_pe, sub),
                                   strict=True)):  # fmt: skip
        e_whole = split_head(q[h], k[h], whole).E
        e_sub = split_head(q_pe[h], k_pe[0], sub).E
        size = whole.scale * np.abs(q[h]).sum() * np.abs(k[h]).sum() + 1e-300
        np.testing.assert_allclose(e_whole, e_sub, rtol=0, atol=1e-13 * size)
        for st_ in (a, b):
            if st_.remainder_share == st_.remainder_share:  # W has variance
                moments = st_.by_reference["zero"]
                want = float(np.sum(split_head(q_pe[h], k_pe[0], sub).E[np.tril(
                    np.ones(e_sub.shape, bool))] ** 2))  # fmt: skip
                got = st_.remainder_share**2 * moments["w_var"] * st_.n_pairs
                assert got == pytest.approx(want, rel=1e-9, abs=1e-12 * size**2)


def fast_or_slow_pe(pair, n=64, h=3, amplitude=1.0, seed=0):
    """An MLA layer (r = 8, 16 nope coordinates) whose shared k_pe deviates from a constant
    only in rope pair ``pair`` (0: the fastest, one radian a token; 3: the slowest)."""
    rng = np.random.default_rng(seed)
    q, k_nope = rng.normal(size=(h, n, 24)), rng.normal(size=(h, n, 16))
    k_pe = np.tile(rng.normal(size=8), (1, n, 1))
    k_pe[0, :, pair] += amplitude * rng.normal(size=n)  # half layout: pair l = (l, l + 4)
    k_pe[0, :, pair + 4] += amplitude * rng.normal(size=n)
    return mla(q, k_nope, k_pe)


def test_mla_deviations_in_fast_pairs_break_the_split_and_slow_ones_hardly():
    sub_fast = layer_statistics(*fast_or_slow_pe(0)[1])
    sub_slow = layer_statistics(*fast_or_slow_pe(3)[1])
    for fast, slow in zip(sub_fast, sub_slow, strict=True):
        assert fast.remainder_share > 0.3 and fast.r_split < 0.95
        assert 0 < fast.tightness_max <= 1 and fast.violations == 0
        assert slow.remainder_share < 0.05 and slow.r_split > 0.999
        # the mean of the constant part is exact only to rounding: delta ~ 1e-16 elsewhere
        assert fast.lowfreq_share_k == pytest.approx(0.0, abs=1e-12)
        assert slow.lowfreq_share_k == pytest.approx(1.0, abs=1e-12)


def test_mla_whole_head_lowfreq_share_k_cannot_see_where_k_pe_varies():
    # the low-frequency half of the whole head's 12 pairs is 6 nope pairs (theta = 0): moving
    # k_pe's deviation from the fastest pair to the slowest leaves it where it was
    (q, k_fast, whole), _ = fast_or_slow_pe(0)
    (_, k_slow, _), _ = fast_or_slow_pe(3)
    fast, slow = layer_statistics(q, k_fast, whole), layer_statistics(q, k_slow, whole)
    for a, b in zip(fast, slow, strict=True):
        assert a.lowfreq_share_k == pytest.approx(b.lowfreq_share_k, rel=1e-12)


def test_mla_whole_head_r_split_is_high_by_construction_at_random_init():
    # iid Gaussian q, k_nope and the shared k_pe, r = 8 of d = 24: the 16 nope coordinates
    # enter g exactly, so the whole head splits far better than its RoPE sub-head
    rng = np.random.default_rng(1)
    h, n = 4, 256
    (q, k, whole), (q_pe, k_pe, sub) = mla(rng.normal(size=(h, n, 24)),
                                           rng.normal(size=(h, n, 16)),
                                           rng.normal(size=(1, n, 8)))  # fmt: skip
    whole_stats, sub_stats = layer_statistics(q, k, whole), layer_statistics(q_pe, k_pe, sub)
    r_whole = np.array([x.r_split for x in whole_stats])
    r_sub = np.array([x.r_split for x in sub_stats])
    assert (r_whole - r_sub > 0.3).all(), (r_whole, r_sub)
    assert (r_whole > 0.75).all() and (r_sub < 0.5).all()
    # the rotating slice carries about r/d of the row-centred variance at random init
    np.testing.assert_allclose(rotary_share(q, k, whole), 8 / 24, atol=0.05)
