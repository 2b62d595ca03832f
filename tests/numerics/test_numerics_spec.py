"""One RopeSpec through the numerics: the one-object form equals the loose keywords."""

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head
from ropesplit.numerics.stats import head_statistics, layer_statistics

from ropesplit.core.errors import RopesplitError

_FLOATS = st.floats(-3, 3, allow_nan=False, width=64)


@settings(deadline=None, max_examples=15)
@given(q=hnp.arrays(np.float64, (4, 12, 8), elements=_FLOATS),
       k=hnp.arrays(np.float64, (2, 12, 8), elements=_FLOATS),
       window=st.one_of(st.none(), st.integers(1, 12)),
       layout=st.sampled_from(["half", "interleaved"]),
       rotary=st.sampled_from([None, 4]))  # fmt: skip
def test_spec_equals_loose_keywords(q, k, window, layout, rotary):
    spec = RopeSpec.from_base(8, 50.0, layout=layout, rotary_dim=rotary, window=window,
                              kv_map=[1, 0, 0, 1])  # fmt: skip
    loose = dict(layout=layout, rotary_dim=rotary, window=window)
    one = layer_statistics(q, k, spec)
    many = layer_statistics(q, k, [1, 0, 0, 1], spec.frequencies, spec.scale, **loose)
    for a, b in zip(one, many, strict=True):
        _same(a.as_dict(), b.as_dict(), 0.0)
    _same(head_statistics(q[0], k[1], spec).as_dict(), many[0].as_dict(), 1e-9)
    a = split_head(q[0], k[1], spec)
    b = split_head(q[0], k[1], spec.frequencies, spec.scale, **loose)
    for name in ("W", "f", "g", "E", "mask"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


def _same(a, b, rel):
    """Equal field by field (NaN equal to NaN; floats to ``rel``)."""
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], float):
            assert a[key] == pytest.approx(b[key], rel=rel, abs=1e-12, nan_ok=True), key
        elif key != "by_reference":
            assert a[key] == b[key], key


def test_spec_with_the_wrong_kv_map_differs():
    """The spec's KV map is used, not the default grouping (a test that can fail)."""
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 12, 8)), rng.normal(size=(2, 12, 8))
    swapped = RopeSpec.from_base(8, 50.0, kv_map=[1, 0])
    default = RopeSpec.from_base(8, 50.0)
    assert layer_statistics(q, k, swapped)[0].r_split != layer_statistics(q, k, default)[0].r_split


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q, k, s: split_head(q[0], k[0], s, 0.5), "give a RopeSpec or loose geometry"),
        (lambda q, k, s: split_head(q[0], k[0], s, window=3), "give a RopeSpec or loose"),
        (lambda q, k, s: layer_statistics(q, k, s, s.frequencies), "give a RopeSpec alone"),
        (lambda q, k, s: head_statistics(q[0, :, :6], k[0, :, :6], s),
         "the RopeSpec has head dim 8, the tensors 6"),
        (lambda q, k, s: split_head(q[0], k[0], s.frequencies), "scale is required"),
    ],
)  # fmt: skip
def test_mixed_or_mismatched_geometry_is_refused(call, message):
    q = k = np.ones((1, 5, 8))
    with pytest.raises(RopesplitError, match=f"^{message}"):
        call(q, k, RopeSpec.from_base(8, 50.0))
