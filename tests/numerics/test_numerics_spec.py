"""One RopeSpec through the numerics: one geometry object, the options one Measure."""

import importlib
import inspect
import math
import pathlib
import typing

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ropesplit.numerics
from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.measure import EXACT, Measure
from ropesplit.numerics.rope import frequencies
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head
from ropesplit.numerics.stats import HeadStats, head_statistics, layer_statistics

_FLOATS = st.floats(-3, 3, allow_nan=False, width=64)
_SPLIT = ("W", "f", "g", "E", "bound", "bound_loose", "mask", "kbar", "delta", "m")


def _identical(a, b, where=""):
    """Equal field by field, exactly (NaN equal to NaN), nested dicts included."""
    if isinstance(a, HeadStats):
        assert isinstance(b, HeadStats)
        a, b = a.as_dict(), b.as_dict()
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b and type(a) is type(b), where


def _same(a, b, rel):
    """Equal field by field (NaN equal to NaN; floats to ``rel``)."""
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], float):
            assert a[key] == pytest.approx(b[key], rel=rel, abs=1e-12, nan_ok=True), key
        elif key != "by_reference":
            assert a[key] == b[key], key


@settings(deadline=None, max_examples=15)
@given(q=hnp.arrays(np.float64, (4, 12, 8), elements=_FLOATS),
       k=hnp.arrays(np.float64, (2, 12, 8), elements=_FLOATS),
       window=st.one_of(st.none(), st.integers(1, 12)),
       layout=st.sampled_from(["half", "interleaved"]),
       rotary=st.sampled_from([8, 4]))  # fmt: skip
def test_spec_from_capture_arrays_equals_the_hand_built_spec(q, k, window, layout, rotary):
    # as a capture holds them: theta a float64 array, numpy scalars, the KV map an int array,
    # rotary_dim = d when every coordinate rotates
    theta = frequencies(8, 50.0, rotary_dim=rotary)
    captured = RopeSpec.from_arrays(theta, np.float64(8**-0.5), layout, np.int64(rotary),
                                    window, np.array([1, 0, 0, 1], dtype=np.int64))  # fmt: skip
    by_hand = RopeSpec(tuple(float(t) for t in theta), 8**-0.5, layout,
                       None if rotary == 8 else rotary, window, (1, 0, 0, 1))  # fmt: skip
    assert captured == by_hand
    for a, b in zip(layer_statistics(q, k, captured), layer_statistics(q, k, by_hand),
                    strict=True):  # fmt: skip
        _identical(a, b)
    _identical(head_statistics(q[0], k[1], captured), head_statistics(q[0], k[1], by_hand))
    a, b = split_head(q[0], k[1], captured), split_head(q[0], k[1], by_hand)
    for name in _SPLIT:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@settings(deadline=None, max_examples=15)
@given(q=hnp.arrays(np.float64, (4, 12, 8), elements=_FLOATS),
       k=hnp.arrays(np.float64, (2, 12, 8), elements=_FLOATS),
       window=st.one_of(st.none(), st.integers(1, 12)),
       layout=st.sampled_from(["half", "interleaved"]),
       rotary=st.sampled_from([None, 4]))  # fmt: skip
def test_head_statistics_are_the_layer_statistics_of_the_mapped_kv_head(q, k, window, layout,
                                                                       rotary):  # fmt: skip
    spec = RopeSpec.from_base(8, 50.0, layout=layout, rotary_dim=rotary, window=window,
                              kv_map=[1, 0, 0, 1])  # fmt: skip
    layer = layer_statistics(q, k, spec)
    for h, kv in enumerate(spec.kv_map):
        _same(head_statistics(q[h], k[kv], spec).as_dict(), layer[h].as_dict(), 1e-9)


def test_spec_with_the_wrong_kv_map_differs():
    """The spec's KV map is used, not the default grouping (a test that can fail)."""
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 12, 8)), rng.normal(size=(2, 12, 8))
    swapped = RopeSpec.from_base(8, 50.0, kv_map=[1, 0])
    default = RopeSpec.from_base(8, 50.0)
    assert layer_statistics(q, k, swapped)[0].r_split != layer_statistics(q, k, default)[0].r_split


_LOOSE = "the geometry is one RopeSpec, got {}: build it with RopeSpec.from_arrays"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q, k, s: split_head(q[0], k[0], s.frequencies), _LOOSE.format("ndarray")),
        (lambda q, k, s: split_head(q[0], k[0], s.frequencies, 0.5), _LOOSE.format("ndarray")),
        (lambda q, k, s: split_head(q[0], k[0], {"theta": s.theta, "scale": s.scale}),
         _LOOSE.format("dict")),
        (lambda q, k, s: split_head(q[0], k[0], Measure()), _LOOSE.format("Measure")),
        (lambda q, k, s: head_statistics(q[0], k[0], s.theta, s.scale), _LOOSE.format("tuple")),
        (lambda q, k, s: layer_statistics(q, k, s.frequencies), _LOOSE.format("ndarray")),
        (lambda q, k, s: layer_statistics(q, k, [0], s.frequencies), _LOOSE.format("list")),
        (lambda q, k, s: head_statistics(q[0, :, :6], k[0, :, :6], s),
         "the RopeSpec has head dim 8, the tensors 6"),
        (lambda q, k, s: split_head(q[0, :, :6], k[0, :, :6], s),
         "the RopeSpec has head dim 8, the tensors 6"),
        (lambda q, k, s: layer_statistics(q[..., :6], k[..., :6], s),
         "the RopeSpec has head dim 8, the tensors 6"),
        (lambda q, k, s: split_head(q[0], k[0], RopeSpec.from_arrays(s.theta[:3], s.scale)),
         "the RopeSpec has head dim 6, the tensors 8"),
    ],
)  # fmt: skip
def test_loose_or_mismatched_geometry_is_refused(call, message):
    q = k = np.ones((1, 5, 8))
    with pytest.raises(RopesplitError, match=f"^{message}") as refused:
        call(q, k, RopeSpec.from_base(8, 50.0))
    assert "\n" not in str(refused.value)  # one line


@pytest.mark.parametrize("loose", [{"window": 3}, {"layout": "half"}, {"rotary_dim": 4},
                                   {"theta": [1.0] * 4}, {"scale": 0.5}, {"kv_map": [0]}])
@pytest.mark.parametrize("function", [split_head, head_statistics, layer_statistics])
def test_the_loose_keywords_are_gone(function, loose):
    q = np.ones((1, 5, 8)) if function is layer_statistics else np.ones((5, 8))
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        function(q, q, RopeSpec.from_base(8, 50.0), **loose)


def _outlier_first(k):
    """``k`` with its first key (token 0, every KV head) moved far off: an attention sink."""
    k = k.copy()
    k[..., 0, :] += 40.0
    return k


@settings(deadline=None, max_examples=15)
@given(q=hnp.arrays(np.float64, (4, 12, 8), elements=_FLOATS),
       k=hnp.arrays(np.float64, (2, 12, 8), elements=_FLOATS),
       window=st.one_of(st.none(), st.integers(1, 12)),
       reference=st.sampled_from(["zero", "mean"]), outlier=st.booleans())  # fmt: skip
def test_mean_skip_first_is_the_mean_of_keys_1_to_n(q, k, window, reference, outlier):
    k = _outlier_first(k) if outlier else k
    spec = RopeSpec.from_base(8, 50.0, window=window, kv_map=[1, 0, 0, 1])
    measure = Measure(reference=reference)
    skip = Measure(reference=reference, kbar_rule="mean-skip-first")
    kbar = k[:, 1:].mean(axis=1)  # (Hkv, d)
    for a, b in zip(layer_statistics(q, k, spec, skip),
                    layer_statistics(q, k, spec, measure, kbar=kbar), strict=True):  # fmt: skip
        _identical(a, b)
    _identical(head_statistics(q[0], k[1], spec, skip),
               head_statistics(q[0], k[1], spec, measure, kbar=kbar[1]))  # fmt: skip
    a = split_head(q[0], k[1], spec, skip)
    b = split_head(q[0], k[1], spec, measure, kbar=kbar[1])
    for name in _SPLIT:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_mean_skip_first_differs_from_the_mean_when_the_first_key_is_an_outlier():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(2, 30, 8)), _outlier_first(rng.normal(size=(2, 30, 8)))
    spec = RopeSpec.from_base(8, 50.0, kv_map=[1, 0])
    skip = Measure(kbar_rule="mean-skip-first")
    for a, b in zip(layer_statistics(q, k, spec), layer_statistics(q, k, spec, skip),
                    strict=True):  # fmt: skip
        for name in ("r_split", "remainder_share", "lowfreq_share_k"):
            assert math.isfinite(getattr(a, name)) and math.isfinite(getattr(b, name)), name
            assert getattr(a, name) != pytest.approx(getattr(b, name), rel=1e-6), name
    a, b = split_head(q[0], k[1], spec), split_head(q[0], k[1], spec, skip)
    np.testing.assert_array_equal(a.kbar, k[1].mean(axis=0))
    np.testing.assert_array_equal(b.kbar, k[1, 1:].mean(axis=0))
    assert not np.allclose(a.f, b.f) and not np.allclose(a.g, b.g)


def _public_modules():
    """Every public numerics module (numerics/*.py not starting with ``_``), imported."""
    root = pathlib.Path(ropesplit.numerics.__path__[0])
    names = sorted(p.stem for p in root.glob("*.py") if not p.name.startswith("_"))
    assert {"measure", "spec", "split", "stats"} <= set(names)
    return [importlib.import_module(f"ropesplit.numerics.{name}") for name in names]


def test_no_public_numerics_function_takes_more_than_8_parameters():
    too_many, checked = [], 0
    for module in _public_modules():
        for name, obj in vars(module).items():
            if name.startswith("_") or not inspect.isfunction(obj):
                continue
            if obj.__module__ != module.__name__:  # imported from elsewhere
                continue
            checked += 1
            count = len(inspect.signature(obj).parameters)  # every kind of parameter counts
            if count > 8:
                too_many.append(f"{module.__name__}.{name}: {count}")
    assert checked > 20  # the modules' functions were found
    assert too_many == []


@pytest.mark.parametrize("function", [split_head, head_statistics, layer_statistics])
def test_the_geometry_is_the_third_parameter_and_the_options_one_measure(function):
    params = list(inspect.signature(function).parameters.values())
    hints = typing.get_type_hints(function)
    assert params[2].name == "spec" and hints["spec"] is RopeSpec
    measures = [p.name for p in params if hints.get(p.name) is Measure]
    assert measures == ["measure"]  # at most one, and named measure
    assert params[3].name == "measure" and params[3].default is EXACT
    assert not any(hints.get(p.name) is RopeSpec for p in params[3:])  # one geometry argument
