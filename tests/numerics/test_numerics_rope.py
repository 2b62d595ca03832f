"""numerics.rope: frequencies, pair layouts and rotation (docs/theory.md section 1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.rope import frequencies, from_pairs, rotate, to_pairs

LAYOUTS = ("half", "interleaved")


@st.composite
def head_dims(draw):
    """``(d, rotary_dim)`` with both even, ``0 < r <= d``."""
    d = 2 * draw(st.integers(1, 12))
    r = 2 * draw(st.integers(1, d // 2))
    return d, r


def _loop_rotate(x, positions, theta, layout, rotary_dim):
    """Reference twin: rotate each pair by hand, coordinate by coordinate."""
    n, d = x.shape
    r = rotary_dim or d
    out = x.copy()
    for t in range(n):
        for l in range(r // 2):
            i, j = (l, l + r // 2) if layout == "half" else (2 * l, 2 * l + 1)
            c, s = np.cos(positions[t] * theta[l]), np.sin(positions[t] * theta[l])
            out[t, i] = c * x[t, i] - s * x[t, j]
            out[t, j] = s * x[t, i] + c * x[t, j]
    return out


@pytest.mark.parametrize(
    "d, base, rotary_dim, scaling, expected",
    [
        (4, 10000.0, None, None, [1.0, 0.01]),
        (8, 100.0, None, None, [1.0, 100**-0.25, 0.1, 100**-0.75]),
        (6, 10000.0, 4, None, [1.0, 0.01, 0.0]),
        (4, 10000.0, None, {"type": "linear", "factor": 4.0}, [0.25, 0.0025]),
        # ntk: base a^(r/(r-2)) leaves the fastest pair and divides the slowest by a
        (4, 10000.0, None, {"type": "ntk", "factor": 2.0}, [1.0, 0.01 / 2]),
        # llama3: wavelength 2 pi < 8192/4 keeps the fast pair, 2 pi / 1e-4 > 8192 divides
        (4, 1e8, None, {"type": "llama3", "factor": 8.0}, [1.0, 1e-4 / 8]),
    ],
)
def test_frequencies_table(d, base, rotary_dim, scaling, expected):
    theta = frequencies(d, base, rotary_dim=rotary_dim, scaling=scaling)
    np.testing.assert_allclose(theta, expected, rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"d": 63}, "head_dim must be even"),
        ({"d": 8, "rotary_dim": 10}, "rotary_dim must be even and in (0, 8]"),
        ({"d": 8, "rotary_dim": 3}, "rotary_dim must be even"),
        ({"d": 8, "base": 1.0}, "base must be a finite number above 1"),
        ({"d": 8, "scaling": {"type": "proportional"}}, "scaling type must be default or one"),
        ({"d": 8, "scaling": {"type": "yarn", "factor": 2.0}}, "yarn RoPE scaling needs"),
        ({"d": 8, "scaling": {"type": "linear", "factor": 0}}, "scaling factor must be positive"),
    ],
)
def test_frequencies_errors(kwargs, message):
    with pytest.raises(RopesplitError, match=message.replace("(", r"\(").replace("]", r"\]")):
        frequencies(**kwargs)


@settings(max_examples=60, deadline=None)
@given(dims=head_dims(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**32 - 1))
def test_pairs_round_trip_and_norm(dims, layout, seed):
    d, r = dims
    x = np.random.default_rng(seed).normal(size=(3, d))
    z = to_pairs(x, layout, r)
    assert z.shape == (3, d // 2)
    np.testing.assert_array_equal(from_pairs(z, layout, r), x)
    np.testing.assert_allclose((np.abs(z) ** 2).sum(-1), (x**2).sum(-1), rtol=1e-14)


def test_layouts_are_the_documented_permutations():
    x = np.arange(8.0)
    assert to_pairs(x, "half").tolist() == [4j, 1 + 5j, 2 + 6j, 3 + 7j]
    assert to_pairs(x, "interleaved").tolist() == [1j, 2 + 3j, 4 + 5j, 6 + 7j]
    # partial rotary: rotating pairs first, the rest paired among themselves
    assert to_pairs(x, "half", rotary_dim=4).tolist() == [2j, 1 + 3j, 4 + 6j, 5 + 7j]
    assert to_pairs(x, "interleaved", rotary_dim=4).tolist() == [1j, 2 + 3j, 4 + 5j, 6 + 7j]


@settings(max_examples=40, deadline=None)
@given(dims=head_dims(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**32 - 1),
       base=st.floats(2.0, 1e7))  # fmt: skip
@example(dims=(2, 2), layout="half", seed=0, base=2.0)
def test_rotate_matches_the_loop_twin(dims, layout, seed, base):
    d, r = dims
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4, d))
    positions = rng.uniform(-1e3, 1e3, size=4)
    theta = frequencies(d, base, rotary_dim=r)
    got = rotate(x, positions, theta, layout=layout, rotary_dim=r)
    want = _loop_rotate(x, positions, theta, layout, r)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(dims=head_dims(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**32 - 1),
       i=st.floats(-1e4, 1e4), j=st.floats(-1e4, 1e4))  # fmt: skip
def test_rotation_is_relative(dims, layout, seed, i, j):
    # <R(i) q, R(j) k> = <R(i - j) q, k>: the logit depends on Delta only (section 2)
    d, r = dims
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(2, 1, d))
    theta = frequencies(d, 500.0, rotary_dim=r)
    kw = {"layout": layout, "rotary_dim": r}
    lhs = (rotate(q, [i], theta, **kw) * rotate(k, [j], theta, **kw)).sum()
    rhs = (rotate(q, [i - j], theta, **kw) * k).sum()
    assert lhs == pytest.approx(rhs, rel=1e-9, abs=1e-9 * (np.abs(q).sum() * np.abs(k).sum()))


def test_rotate_errors():
    with pytest.raises(RopesplitError, match=r"positions must have shape \(2,\)"):
        rotate(np.zeros((2, 4)), [0.0], [1.0, 0.1])
    with pytest.raises(RopesplitError, match=r"theta must have shape \(2,\)"):
        rotate(np.zeros((2, 4)), [0.0, 1.0], [1.0])
    with pytest.raises(RopesplitError, match="layout must be 'half' or 'interleaved'"):
        to_pairs(np.zeros(4), layout="neox")
