"""Learned per-channel gains after RoPE: the relative logit plus the exact term in i + j.

The float64 twin applies the gains to the rotated features directly (what the model
does) and the parts of numerics.gains must add up to it; the absolute term must vanish
when the gains are equal within each pair and depend on p_i + p_j, not p_i - p_j.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.numerics.gains import (
    absolute_logits,
    absolute_share,
    gain_parts,
    relative_features,
)
from ropesplit.numerics.rope import rotate
from ropesplit.numerics.spec import RopeSpec

N, D = 7, 8
values = st.floats(-2.0, 2.0, allow_nan=False, width=32)


def spec_of(layout: str, rotary_dim: int | None) -> RopeSpec:
    r = rotary_dim or D
    theta = np.concatenate([0.9 ** np.arange(r // 2) * 0.7, np.zeros((D - r) // 2)])
    return RopeSpec.from_arrays(theta, 0.5, layout, rotary_dim, None, [0, 0])


def twin(q, k, spec, gain_q, gain_k, positions):
    """W as the model makes it: gains on the rotated features, then the dot product."""
    theta = spec.frequencies
    qr = rotate(q, positions, theta, layout=spec.layout, rotary_dim=spec.rotary_dim) * gain_q
    kr = rotate(k, positions, theta, layout=spec.layout, rotary_dim=spec.rotary_dim) * gain_k
    return spec.scale * np.einsum("hid,hjd->hij", qr, kr[[0, 0]])


@settings(max_examples=60, deadline=None)
@given(q=arrays(np.float64, (2, N, D), elements=values),
       k=arrays(np.float64, (1, N, D), elements=values),
       gq=arrays(np.float64, D, elements=st.floats(0.1, 2.0)),
       gk=arrays(np.float64, D, elements=st.floats(0.1, 2.0)),
       layout=st.sampled_from(["half", "interleaved"]),
       rotary_dim=st.sampled_from([None, 4]))  # fmt: skip
def test_the_relative_and_absolute_parts_add_up_to_the_gained_logit(q, k, gq, gk, layout,
                                                                   rotary_dim):  # fmt: skip
    spec = spec_of(layout, rotary_dim)
    positions = np.arange(N, dtype=np.float64) * 3 + 2
    m, n = gain_parts(gq * gk, spec)
    qr, kr = relative_features(q, k, m)
    theta = spec.frequencies
    relative = spec.scale * np.einsum(
        "hid,hjd->hij", rotate(qr, positions, theta, layout=layout, rotary_dim=rotary_dim),
        rotate(kr, positions, theta, layout=layout, rotary_dim=rotary_dim)[[0, 0]])
    absolute = absolute_logits(q, k, spec, n, positions=positions)
    np.testing.assert_allclose(relative + absolute, twin(q, k, spec, gq, gk, positions),
                               rtol=1e-12, atol=1e-12)


def test_equal_gains_within_each_pair_leave_no_absolute_term():
    rng = np.random.default_rng(0)
    spec = spec_of("half", None)
    q, k = rng.normal(size=(2, N, D)), rng.normal(size=(1, N, D))
    gain = np.tile(rng.uniform(0.5, 2.0, D // 2), 2)  # u_l = v_l: coordinates l, l + d/2
    _, n = gain_parts(gain, spec)
    assert np.all(n == 0)
    assert np.all(absolute_logits(q, k, spec, n) == 0)
    assert np.all(absolute_share(q, k, spec, gain) == 0)


def test_the_absolute_term_turns_with_the_sum_of_positions():
    """Shifting every position by t turns W^abs by 2t theta and leaves W^rel: a term in
    i + j, not in i - j."""
    rng = np.random.default_rng(1)
    spec = spec_of("half", None)
    q, k = rng.normal(size=(2, N, D)), rng.normal(size=(1, N, D))
    gain = rng.uniform(0.5, 2.0, D)
    _, n = gain_parts(gain, spec)
    p = np.arange(N, dtype=np.float64)
    before = absolute_logits(q, k, spec, n, positions=p)
    after = absolute_logits(q, k, spec, n, positions=p + 5)
    assert np.abs(before - after).max() > 1e-3
    share = absolute_share(q, k, spec, gain)
    assert np.all((share > 0) & (share < 1))


def test_bad_gains_are_refused_in_one_line():
    from ropesplit.core.errors import RopesplitError

    with pytest.raises(RopesplitError, match=r"gain must have shape \(8,\)"):
        gain_parts(np.ones(6), spec_of("half", None))
