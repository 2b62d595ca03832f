"""numerics.stats_torch: the dense torch blocks against the compiled path of numerics.stats.

Both are float64; they differ only in the order of their sums, so they agree
to 1e-6 relative (with an absolute floor at the rounding scale of the sums:
``N K^4`` for the row moments, ``K`` the largest feature norm; 1e-12 for the
ratios, which lie in ``[0, 1]``), and exactly in every count.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ropesplit.numerics import pairing, stats, stats_torch
from ropesplit.numerics.fit import band_gram

CPU = torch.device("cpu")
RTOL = 1e-6

# values of q, k and gaps: exact zeros kept (pairs with no bound), nothing tiny (no underflow)
PART = st.floats(-4, 4, allow_nan=False, allow_subnormal=False).map(
    lambda v: 0.0 if abs(v) < 1e-3 else v
)
ANGLE = st.floats(0, 3.2, allow_subnormal=False).map(lambda v: 0.0 if v < 1e-3 else v)


def complex_array(draw, shape):
    re_im = draw(hnp.arrays(np.float64, (2, *shape), elements=PART))
    return re_im[0] + 1j * re_im[1]


def positions(draw, n):
    """``(pq, pk)``: by index, evenly spaced, whole numbers out of order, or any reals."""
    kind = draw(st.sampled_from(["index", "spaced", "whole", "real", "real pair"]))
    if kind == "index":
        p = np.arange(n, dtype=np.float64)
        return p, p
    if kind == "spaced":
        p = np.arange(n) * draw(st.sampled_from([0.5, 0.1, 3.0]))
        return p, p
    if kind == "whole":
        p = draw(hnp.arrays(np.int64, n, elements=st.integers(0, 3 * n))).astype(np.float64)
        return p, p
    reals = hnp.arrays(np.float64, n, elements=st.floats(0, 3 * n, allow_subnormal=False))
    pq = draw(reals)
    return pq, (draw(reals) if kind == "real pair" else pq)


@st.composite
def layers(draw):
    """A layer's complex pairs ``qc (H, N, P)``, ``kc (Hkv, N, P)``, its kv map, angles etc."""
    hkv = draw(st.integers(1, 3))
    h = hkv * draw(st.integers(1, 3 // hkv))
    n, p = draw(st.integers(1, 40)), draw(st.integers(1, 4))
    qc, kc = complex_array(draw, (h, n, p)), complex_array(draw, (hkv, n, p))
    theta = draw(hnp.arrays(np.float64, p, elements=ANGLE))
    window = draw(st.none() | st.integers(1, n + 2))
    gap = draw(st.none() | st.builds(lambda z: z[0] + 1j * z[1],
                                     hnp.arrays(np.float64, (2, p), elements=PART)))  # fmt: skip
    return {"qc": qc, "kc": kc, "kv": np.arange(h) // (h // hkv), "theta": theta,
            "window": window, "gap": gap, "pos": positions(draw, n)}  # fmt: skip


def factors(qc, kc, kv, theta, pq, pk, gaps):
    """``pairing.Factors`` as ``stats._logit_sums`` builds them (one reference per gap)."""
    ms = [np.ones(theta.size) if g is None else 1.0 - g for g in gaps]
    dc = kc - kc.mean(axis=1, keepdims=True)
    silent = (theta == 0) & np.logical_and.reduce([m == 1 for m in ms])  # E_m = 0 there
    de = np.where(silent, 0.0, dc)
    rot_k = np.exp(1j * pk[:, None] * theta)
    real = lambda z: pairing.real_pairs(torch.from_numpy(np.ascontiguousarray(z)))  # noqa: E731
    a = real(qc * np.exp(1j * pq[:, None] * theta))
    feats = [real(v) for v in (kc * rot_k, de * rot_k, de)]
    m = torch.from_numpy(np.stack(ms).astype(np.complex128))
    return pairing.Factors(a, *feats, real(qc), m, kv)


def assert_moments_equal(got, want, f):
    n = f.a.shape[1]
    k = max(float(x.norm(dim=-1).max()) for x in (f.a, f.y, f.b, f.dp, *f.us))
    for g, w in zip(got.fields(), want.fields(), strict=True):
        assert g.dtype == torch.float64 and g.device == CPU and g.shape == w.shape
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=RTOL, atol=1e-12 * n * k**4)


def assert_tightness_equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g[2:] == w[2:]  # sampled pairs, violations: exactly
        assert isinstance(g[3], int) and (g[2] is None or isinstance(g[2], int))
        for x, y in zip(g[:2], w[:2], strict=True):  # max, median
            assert (math.isnan(x) and math.isnan(y)) or abs(x - y) <= RTOL * abs(y) + 1e-12


@settings(deadline=None, max_examples=60)
@given(layers())
def test_band_sums_on_a_torch_device_match_numpy_and_the_dense_twin(layer):
    """Row, column and diagonal sums of ``M = a y^T`` over the band: torch's FFT on a
    device, numpy's on the host and the dense float64 matrix agree."""
    pq, pk = layer["pos"]
    f = factors(layer["qc"], layer["kc"], layer["kv"], layer["theta"], pq, pk, [None])
    heads, window = torch.from_numpy(layer["kv"]), layer["window"]
    h, n, _ = f.a.shape
    gram = band_gram(n, window)
    i, j = np.indices((n, n))
    band = (j <= i) & (window is None or i - j < window)
    m = np.where(band, f.a.numpy() @ f.y.numpy()[layer["kv"]].transpose(0, 2, 1), 0.0)
    diags = np.stack([[np.trace(x, -d) for d in range(gram.n_a)] for x in m])  # (H, n_a)
    k = max(float(x.norm(dim=-1).max()) for x in (f.a, f.y))
    for got in (stats._band_sums(f.a, f.y, window, heads, CPU),
                stats._band_sums(f.a, f.y, window, heads)):  # fmt: skip
        for g, want in zip(got, (m.sum(2), m.sum(1), diags.reshape(h, -1)), strict=True):
            assert g.dtype == torch.float64 and g.device == CPU
            np.testing.assert_allclose(g.numpy(), want, rtol=RTOL, atol=1e-12 * n * k**2)


@settings(deadline=None, max_examples=60)
@given(layers(), st.booleans())
def test_row_moments_match_the_compiled_path(layer, two_refs):
    pq, pk = layer["pos"]
    gaps = [None, layer["gap"]] if two_refs else [layer["gap"]]
    f = factors(layer["qc"], layer["kc"], layer["kv"], layer["theta"], pq, pk, gaps)
    got = stats_torch.row_moments(f, layer["window"], CPU)
    assert_moments_equal(got, stats.row_moments(f, layer["window"]), f)


@settings(deadline=None, max_examples=80)
@given(layers(), st.floats(0.01, 10), st.integers(0, 2**32 - 1), st.data())
def test_tightness_matches_the_compiled_path(layer, s, seed, data):
    qc, kv, theta, window, gap = (layer[k] for k in ("qc", "kv", "theta", "window", "gap"))
    dc = (layer["kc"] - layer["kc"].mean(axis=1, keepdims=True))[kv]
    pairs = band_gram(qc.shape[1], window).pairs
    budget = data.draw(st.none() | st.integers(1, pairs + 3), label="pair_budget")
    check = pairing.BoundCheck(qc, dc, theta, *layer["pos"], s, window, gap)
    assert_tightness_equal(stats_torch.tightness(check, budget, seed, CPU),
                           stats.tightness(check, budget, seed))  # fmt: skip


def test_the_window_is_honoured():
    """Row moments and tightness under a window of 3 match the compiled path and differ
    from the same data with no window (rows past the window see fewer columns)."""
    n, p, window = 12, 3, 3
    t = np.arange(2 * n * p, dtype=np.float64).reshape(2, 1, n, p)
    qc, kc = np.cos(t[0]) + 1j * np.sin(1.7 * t[0]), np.sin(0.3 * t[1]) + 0.5j * np.cos(t[1])
    theta, pos, gap = np.array([1.0, 0.3, 0.05]), np.arange(n, dtype=np.float64), None
    kv = np.zeros(1, dtype=np.int64)
    f = factors(qc, kc, kv, theta, pos, pos, [gap])
    banded = stats_torch.row_moments(f, window, CPU)
    assert_moments_equal(banded, stats.row_moments(f, window), f)
    full = stats_torch.row_moments(f, None, CPU)
    rows = slice(0, 3)  # per-row moments (one block of 12 rows: nothing lies before it)
    for a, b in zip(banded.fields()[rows], full.fields()[rows], strict=True):
        torch.testing.assert_close(a[..., :window], b[..., :window], rtol=RTOL, atol=1e-12)
    assert (banded.ww[:, window:] < full.ww[:, window:]).all()  # fewer squares past the window
    dc = kc - kc.mean(axis=1, keepdims=True)
    check = pairing.BoundCheck(qc, dc, theta, pos, pos, 0.5, window, gap)
    for budget in (None, 20):  # exact, and the sample of pairs (numbered within the band)
        got = stats_torch.tightness(check, budget, 0, CPU)
        assert_tightness_equal(got, stats.tightness(check, budget, 0))
        unbanded = stats_torch.tightness(replace(check, window=None), budget, 0, CPU)
        assert got[0][:2] != unbanded[0][:2]


def test_every_step_stays_on_the_device():
    """On the meta device (data-free, and it refuses host tensors as CUDA does) the row
    moments stay there (prefix sums and triangles, or the band), and the bound check runs
    to its one copy of the per-head summaries back to the host: no host tensor is mixed
    in, and nothing is read back inside the block loops."""
    n, p = 130, 2  # three blocks of 64 rows, the last one partial
    qc = np.exp(1j * np.arange(n * p, dtype=np.float64)).reshape(1, n, p)
    theta, pos, gap = np.array([0.7, 0.0]), np.arange(n, dtype=np.float64), np.array([0.5j, 0.1])
    f = factors(qc, qc, np.zeros(1, dtype=np.int64), theta, pos, pos, [None, gap])
    for window in (None, 3):
        got = stats_torch.row_moments(f, window, "meta")
        assert {x.device.type for x in got.fields()} == {"meta"}
        assert got.ww.shape == (1, n) and got.we.shape == got.ee.shape == (2, 1, n)
        assert got.ww_before.shape == (1,) and got.ee_before.shape == (2, 1)
    dc = qc - qc.mean(axis=1, keepdims=True)
    calls = [
        lambda budget=budget: stats_torch.tightness(
            pairing.BoundCheck(qc, dc, theta, pos + 0.5 * np.sin(pos), pos, 1.0, 4, gap),
            budget, 0, "meta")
        for budget in (None, 7)
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(NotImplementedError, match="copy out of meta"):
            call()


def test_layer_statistics_on_a_torch_device_equals_the_compiled_path():
    """The dispatch: ``Measure(device=...)`` runs both N^2 parts in torch, same
    statistics."""
    from ropesplit.numerics.measure import Measure
    from ropesplit.numerics.spec import RopeSpec
    from ropesplit.numerics.stats import layer_statistics

    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(4, 40, 8)), rng.normal(size=(2, 40, 8)) + 1.0
    spec = RopeSpec.from_base(8, 100.0)
    for budget in (None, 300):
        measure = Measure(pair_budget=budget, references=("mean",))
        cpu = layer_statistics(q, k, spec, measure)
        dev = layer_statistics(q, k, spec, replace(measure, device=torch.device("cpu")))
        for a, b in zip(cpu, dev, strict=True):
            for key, value in a.as_dict().items():
                if isinstance(value, float):
                    assert b.as_dict()[key] == pytest.approx(value, rel=1e-6, abs=1e-12), key
                elif key != "by_reference":
                    assert b.as_dict()[key] == value, key
