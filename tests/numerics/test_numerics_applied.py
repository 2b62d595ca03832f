"""The rotation a RoPE function applies, read off its response to unit vectors.

``read_rotation`` must recover, from the map alone, orders and a table with
``y[out_order] = rotate_half(x[in_order])`` for every way modeling code writes RoPE:
pairs split or interleaved, inputs read in one layout and written in another, turns of
either sign, pass-through coordinates; and refuse a map that is not a rotation of pairs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.applied import read_rotation


def rope_map(theta, positions, pairs_in, pairs_out, signs, rest_in, rest_out, d_out):
    """``M (1, N, d_out, d_in)`` of a rotation: pair ``l`` reads inputs ``pairs_in[l]`` and
    writes outputs ``pairs_out[l]``, turning by ``signs[l] p theta_l`` (float64 twin)."""
    d_in = 2 * len(theta) + len(rest_in)
    M = np.zeros((1, len(positions), d_out, d_in))
    for (a, b), (c, d), th, sg in zip(pairs_in, pairs_out, theta, signs, strict=True):
        angle = sg * positions * th
        M[0, :, c, a], M[0, :, d, a] = np.cos(angle), np.sin(angle)
        M[0, :, c, b], M[0, :, d, b] = -np.sin(angle), np.cos(angle)
    for i, o in zip(rest_in, rest_out, strict=True):
        M[0, :, o, i] = 1.0
    return M


def standard(x, cos, sin, layout="half"):
    """``x (N, d)`` turned by the table ``(N, r)`` in ``layout``: ``rotate_half`` for the
    half split, each pair ``(2l, 2l+1)`` interleaved (float64 twin)."""
    r = cos.shape[-1]
    rot, rest = x[:, :r], x[:, r:]
    if layout == "half":
        turned = np.concatenate([-rot[:, r // 2:], rot[:, : r // 2]], axis=-1)
    else:
        turned = np.stack([-rot[:, 1::2], rot[:, 0::2]], axis=-1).reshape(rot.shape)
    return np.concatenate([rot * cos + turned * sin, rest], axis=-1)


thetas = arrays(np.float64, st.integers(1, 6),
                elements=st.floats(1e-3, 1.0, allow_nan=False)).filter(
    lambda t: len(np.unique(np.round(t, 6))) == len(t))  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(theta=thetas, data=st.data())
def test_any_written_rotation_reads_back_as_the_standard_one(theta, data):
    P = len(theta)
    rest = data.draw(st.integers(0, 3))
    d = 2 * P + rest
    slots_in = data.draw(st.permutations(range(d)))
    slots_out = data.draw(st.permutations(range(d)))
    signs = data.draw(arrays(np.int64, P, elements=st.sampled_from([-1, 1])))
    pairs_in = [(slots_in[2 * l], slots_in[2 * l + 1]) for l in range(P)]
    pairs_out = [(slots_out[2 * l], slots_out[2 * l + 1]) for l in range(P)]
    positions = np.arange(12, dtype=np.float64)
    M = rope_map(theta, positions, pairs_in, pairs_out, signs, slots_in[2 * P:],
                 slots_out[2 * P:], d)  # fmt: skip
    got = read_rotation(M)
    x = data.draw(arrays(np.float64, (12, d), elements=st.floats(-2, 2)))
    y = np.einsum("noi,ni->no", M[0], x)  # the function's output
    # a function already interleaved is read in its own layout (the orders the identity)
    np.testing.assert_allclose(y[:, got.out_order], standard(x[:, got.in_order], got.cos[0],
                                                              got.sin[0], got.layout),
                               atol=1e-12)  # fmt: skip
    # every turn reads positive: the table's phase steps are +theta of some pair
    pair = slice(0, P) if got.layout == "half" else slice(0, 2 * P, 2)  # a column per pair
    step = np.angle(np.exp(1j * (np.arctan2(got.sin[0, 1, pair], got.cos[0, 1, pair])
                                 - np.arctan2(got.sin[0, 0, pair], got.cos[0, 0, pair]))))
    assert np.all(step > 0)
    np.testing.assert_allclose(np.sort(step), np.sort(theta), rtol=1e-9)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_the_standard_layouts_are_read_as_themselves(layout):
    theta = np.array([0.9, 0.3, 0.05])
    P = len(theta)
    pairs = ([(l, l + P) for l in range(P)] if layout == "half"
             else [(2 * l, 2 * l + 1) for l in range(P)])  # fmt: skip
    M = rope_map(theta, np.arange(8.0), pairs, pairs, [1] * P, [6, 7], [6, 7], 8)
    got = read_rotation(M)
    assert got.identity and got.layout == layout and got.rotary_dim == 6


def test_deepseek_v3_reads_interleaved_and_writes_split():
    """``apply_rotary_pos_emb_interleave``: pairs (2l, 2l+1) in, (l, l + r/2) out."""
    theta = np.array([1.0, 0.1])
    M = rope_map(theta, np.arange(6.0), [(0, 1), (2, 3)], [(0, 2), (1, 3)], [1, 1], [], [], 4)
    got = read_rotation(M)
    assert list(got.in_order) == [0, 2, 1, 3] and list(got.out_order) == [0, 1, 2, 3]
    assert got.layout == "half" and not got.identity


def test_a_negated_sine_reads_as_the_pair_swapped():
    """nanochat turns by ``-p theta``: the same relative rotation, read (b, a)."""
    M = rope_map(np.array([0.5]), np.arange(6.0), [(0, 1)], [(0, 1)], [-1], [], [], 2)
    got = read_rotation(M)
    assert list(got.in_order) == [1, 0] and list(got.out_order) == [1, 0]
    np.testing.assert_allclose(got.sin[0, :, 0], np.sin(0.5 * np.arange(6.0)), atol=1e-15)


def test_a_map_that_mixes_three_coordinates_is_refused():
    M = rope_map(np.array([0.5]), np.arange(4.0), [(0, 1)], [(0, 1)], [1], [2], [2], 3)
    M[0, :, 2, 0] = 0.3  # input 0 now leaks into a third output
    with pytest.raises(RopesplitError, match="mixes input coordinate 0 into 3 outputs"):
        read_rotation(M)


def test_a_pair_that_does_not_rotate_is_refused():
    M = rope_map(np.array([0.5]), np.arange(4.0), [(0, 1)], [(0, 1)], [1], [], [], 2)
    M[0, :, 0, 0] *= 2.0  # cos entries no longer equal: a shear, not a turn
    with pytest.raises(RopesplitError, match="is not a rotation"):
        read_rotation(M)


def test_a_pair_that_barely_turns_is_still_a_pair():
    """A base of 1e9 turns the slowest pair by 1.3e-8 rad a token: its sine entries are tiny
    but nonzero, and it is a rotating pair, not a pass-through coordinate."""
    theta = np.array([1.0, 1.3e-8])
    M = rope_map(theta, np.arange(24.0), [(0, 2), (1, 3)], [(0, 2), (1, 3)], [1, 1], [], [], 4)
    got = read_rotation(M.astype(np.float32))
    assert got.rotary_dim == 4 and got.identity


def test_the_direction_of_a_turn_is_read_where_positions_step_by_one():
    """Moved positions jump (the perturbation experiments): a phase step across a jump
    wraps, so only steps of one position read each pair's direction."""
    theta = np.array([2.5, 0.4])
    positions = np.array([0, 1, 2, 3, 50, 51, 52, 1000, 1001, 7, 8, 9], dtype=np.float64)
    M = rope_map(theta, positions, [(0, 2), (1, 3)], [(0, 2), (1, 3)], [1, 1], [], [], 4)
    got = read_rotation(M, positions[None])
    assert got.identity
    np.testing.assert_allclose(got.sin[0, 1, :2], np.sin(theta), atol=1e-15)
