"""numerics.split and numerics.bound: W = f + g + E and |E| <= bound (docs/theory.md 2-3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, example, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import bound as bound_module
from ropesplit.numerics.bound import ATOL, RTOL, CausalPairs, causal_ratios, remainder_and_bound
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.rope import frequencies, to_pairs
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head

LAYOUTS = ("half", "interleaved")


def geometry(head, **options):
    """The RopeSpec of a head's loose keys (theta, scale and, where given, layout, rotary_dim,
    window, kv_map) and the Measure of ``options``: ``(spec, measure)``."""
    spec = RopeSpec.from_arrays(head["theta"], head["scale"], head.get("layout", "half"),
                                head.get("rotary_dim"), head.get("window"), head.get("kv_map"))
    return spec, Measure(**options)


def loop_split(q, k, theta, s, pq, pk, kbar, layout="half", rotary_dim=None, distances=None,
               m=None):  # fmt: skip
    """Reference twin: every (i, j, l) term of docs/theory.md sections 3, 6 in a float64 loop.

    ``Delta_ij = pq[i] - pk[j]``, or ``distances[i, j]`` when a distance map is given;
    ``m (P,)`` the reference rotation (default 1).
    """
    qc, kc = to_pairs(q, layout, rotary_dim), to_pairs(k, layout, rotary_dim)
    kb = to_pairs(kbar, layout, rotary_dim)
    n, p = qc.shape
    m = np.ones(p, complex) if m is None else m
    out = {name: np.zeros((n, n)) for name in ("W", "f", "g", "E", "bound", "bound_loose")}
    for i in range(n):
        for j in range(n):
            delta = pq[i] - pk[j] if distances is None else distances[i, j]
            for l in range(p):
                rot = complex(math.cos(theta[l] * delta), math.sin(theta[l] * delta))
                dev = kc[j, l] - kb[l]
                out["W"][i, j] += s * (qc[i, l] * kc[j, l].conjugate() * rot).real
                out["f"][i, j] += s * (qc[i, l] * kb[l].conjugate() * rot).real
                out["g"][i, j] += s * (qc[i, l] * dev.conjugate() * m[l]).real
                out["E"][i, j] += s * (qc[i, l] * dev.conjugate() * (rot - m[l])).real
                mag = s * abs(qc[i, l]) * abs(dev)
                out["bound"][i, j] += mag * abs(rot - m[l])
                out["bound_loose"][i, j] += mag * min(1 + abs(m[l]),
                                                      theta[l] * abs(delta) + abs(1 - m[l]))
    return out


@st.composite
def heads(draw, max_n=6):
    """A small head: ``q, k (n, d)``, theta, scale, positions and options."""
    n = draw(st.integers(1, max_n))
    d = 2 * draw(st.integers(1, 6))
    r = 2 * draw(st.integers(1, d // 2))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(2, n, d)) * draw(st.sampled_from([1e-3, 1.0, 1e3]))
    base = draw(st.floats(2.0, 1e7))
    theta = frequencies(d, base, rotary_dim=r)
    pq = rng.integers(-10**6, 10**6, size=n).astype(float)
    pk = pq if draw(st.booleans()) else rng.uniform(-1e6, 1e6, size=n)
    return {"q": q, "k": k, "theta": theta, "scale": draw(st.floats(0.01, 10.0)),
            "positions": (pq, pk), "layout": draw(st.sampled_from(LAYOUTS)), "rotary_dim": r}


@settings(max_examples=40, deadline=None)
@given(head=heads())
def test_split_head_matches_the_loop_twin(head):
    spec, measure = geometry(head)
    sp = split_head(head["q"], head["k"], spec, measure, positions=head["positions"])
    pq, pk = head["positions"]
    want = loop_split(head["q"], head["k"], head["theta"], head["scale"], pq, pk,
                      head["k"].mean(0), head["layout"], head["rotary_dim"])  # fmt: skip
    size = head["scale"] * np.abs(head["q"]).sum(1)[:, None] * np.abs(head["k"]).sum(1)[None, :]
    for name, ref in want.items():
        got = getattr(sp, name)
        note(f"{name}: max diff {np.abs(got - ref).max()}")
        # angles up to 1e6 rad: the loop's cos/sin and numpy's agree to ~1e-10 of the size
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9 * size.max())
    # W rotates at absolute positions (phase error ~ eps |p| theta), E at Delta: same 1e-9
    np.testing.assert_allclose(sp.f + sp.g + sp.E, sp.W, rtol=0, atol=1e-9 * size.max())


@settings(max_examples=40, deadline=None)
@given(head=heads(), cap=st.integers(0, 8), seed=st.integers(0, 2**32 - 1),
       kind=st.sampled_from(["capped", "arbitrary"]))  # fmt: skip
def test_split_head_under_a_distance_map_matches_the_loop_twin(head, cap, seed, kind):
    n = head["q"].shape[0]
    i, j = np.indices((n, n))
    if kind == "capped":  # LM-Infinite's cap: Delta -> min(Delta, L)
        dist = np.minimum(i - j, cap).astype(float)
    else:
        dist = np.random.default_rng(seed).uniform(-1e4, 1e4, size=(n, n))
    head = head | {"positions": None}
    spec, measure = geometry(head)
    sp = split_head(head["q"], head["k"], spec, measure, distances=dist)
    want = loop_split(head["q"], head["k"], head["theta"], head["scale"], None, None,
                      head["k"].mean(0), head["layout"], head["rotary_dim"],
                      distances=dist)  # fmt: skip
    size = head["scale"] * np.abs(head["q"]).sum(1)[:, None] * np.abs(head["k"]).sum(1)[None, :]
    for name, ref in want.items():
        np.testing.assert_allclose(getattr(sp, name), ref, rtol=1e-9, atol=1e-9 * size.max())
    np.testing.assert_allclose(sp.f + sp.g + sp.E, sp.W, rtol=0, atol=1e-9 * size.max())
    np.testing.assert_array_equal(sp.delta, dist)
    np.testing.assert_array_equal(sp.mask, j <= i)  # the mask stays causal by index


@settings(max_examples=40, deadline=None)
@given(head=heads(), ref=st.one_of(st.sampled_from(["mean", "zero"]),
                                   st.floats(-2e3, 2e3).map(lambda c: f"distance:{c!r}")),
       window=st.one_of(st.none(), st.integers(1, 6)))  # fmt: skip
def test_split_under_a_reference_matches_the_loop_twin(head, ref, window):
    n = head["q"].shape[0]
    head = head | {"positions": tuple(np.round(p / 1e3) for p in head["positions"])}
    spec, measure = geometry(head | {"window": window}, reference=ref)
    sp = split_head(head["q"], head["k"], spec, measure, positions=head["positions"])
    pq, pk = head["positions"]
    dist = pq[:, None] - pk[None, :]
    th = head["theta"]
    want_m = {"zero": np.ones(th.size),
              "mean": np.exp(1j * dist[sp.mask][:, None] * th).mean(0)}.get(ref)  # fmt: skip
    if want_m is None:
        want_m = np.exp(1j * th * float(ref.split(":")[1]))
    np.testing.assert_allclose(sp.m, want_m, rtol=0, atol=1e-12)
    want = loop_split(head["q"], head["k"], th, head["scale"], pq, pk, head["k"].mean(0),
                      head["layout"], head["rotary_dim"], m=sp.m)  # fmt: skip
    size = head["scale"] * np.abs(head["q"]).sum(1)[:, None] * np.abs(head["k"]).sum(1)[None, :]
    for name, ref in want.items():
        np.testing.assert_allclose(getattr(sp, name), ref, rtol=1e-9, atol=1e-9 * size.max())
    np.testing.assert_allclose(sp.f + sp.g + sp.E, sp.W, rtol=0, atol=1e-9 * size.max())
    assert (np.abs(sp.E) <= sp.bound * (1 + RTOL) + ATOL).all() and n == sp.W.shape[0]
    assert (sp.bound <= sp.bound_loose * (1 + RTOL) + ATOL).all()


def test_zero_reference_is_the_section_3_split_bit_for_bit():
    rng = np.random.default_rng(5)
    q, k = rng.normal(size=(2, 9, 8))
    spec, zero = geometry({"theta": frequencies(8), "scale": 0.3}, reference="zero")
    a = split_head(q, k, spec)
    b = split_head(q, k, spec, zero)
    for name in ("W", "f", "g", "E", "bound", "bound_loose"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.reference == "zero" and (a.m == 1).all()


def test_distance_map_of_the_positions_gives_the_positions_split():
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(2, 7, 6))
    pos = np.arange(7.0)
    spec, measure = geometry({"theta": frequencies(6), "scale": 0.4})
    a = split_head(q, k, spec, measure, positions=pos)
    b = split_head(q, k, spec, measure, distances=pos[:, None] - pos[None, :])
    for name in ("W", "f", "g", "E", "bound", "bound_loose"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-12, atol=1e-12)


@st.composite
def extreme_pairs(draw):
    """Query and deviation pairs of extreme magnitudes, any base, distances up to 1e6."""
    p = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    mags = draw(st.tuples(st.floats(-60, 60), st.floats(-60, 60)))
    q = (rng.normal(size=p) + 1j * rng.normal(size=p)) * 10.0 ** mags[0]
    dev = (rng.normal(size=p) + 1j * rng.normal(size=p)) * 10.0 ** mags[1]
    base = draw(st.floats(2.0, 1e7))
    r = 2 * draw(st.integers(1, p))
    theta = frequencies(2 * p, base, rotary_dim=r)
    # no subnormal distance: theta * Delta would keep a few bits, and 2 sin(x/2) <= |x| is
    # then a claim about rounding, not about the bound (a fresh database drew 2.2e-313)
    delta = draw(st.one_of(st.integers(-10**6, 10**6).map(float),
                           st.floats(-1e6, 1e6, allow_subnormal=False)))  # fmt: skip
    return q, dev, theta, delta, draw(st.floats(1e-3, 1e3))


@settings(max_examples=300, deadline=None)
@given(case=extreme_pairs())
@example(case=(np.array([1 + 1j]), np.array([1e-60 - 1e-60j]), np.array([1.0]), 1e6, 1.0))
@example(case=(np.array([3 - 1j]), np.array([2 + 5j]), np.array([1.0]), 0.0, 1.0))  # Delta 0
@example(case=(np.array([1e60j]), np.array([1e60]), np.array([2.0 ** -23]), 1.0, 1e3))  # tiny x
@example(case=(np.array([1.0 + 0j]), np.array([1.0 + 0j]), np.array([0.0]), 1e6, 1.0))  # theta 0
def test_bound_is_never_violated(case):
    q, dev, theta, delta, s = case
    e, tight, loose = (float(v) for v in remainder_and_bound(q, dev, theta, delta, s, loose=True))
    note(f"E={e!r} bound={tight!r} loose={loose!r}")
    assert abs(e) <= tight * (1 + RTOL) + ATOL
    assert tight <= loose * (1 + RTOL) + ATOL  # 2|sin(x/2)| <= min(2, |x|)
    if delta == 0 or not theta.any():
        assert e == 0.0 and tight == 0.0


@settings(max_examples=30, deadline=None)
@given(head=heads(), seed=st.integers(0, 2**32 - 1))
def test_f_does_not_depend_on_the_key(head, seed):
    kbar = head["k"].mean(0)
    other = np.random.default_rng(seed).normal(size=head["k"].shape)
    spec, measure = geometry(head)
    a = split_head(head["q"], head["k"], spec, measure, positions=head["positions"], kbar=kbar)
    b = split_head(head["q"], other, spec, measure, positions=head["positions"], kbar=kbar)
    np.testing.assert_array_equal(a.f, b.f)
    assert not np.array_equal(a.g, b.g)


@settings(max_examples=30, deadline=None)
@given(head=heads(), shift=st.floats(-1e5, 1e5), seed=st.integers(0, 2**32 - 1))
def test_g_does_not_depend_on_delta(head, shift, seed):
    n = head["q"].shape[0]
    jitter = np.random.default_rng(seed).uniform(-1e3, 1e3, size=n)
    spec, measure = geometry(head)
    a = split_head(head["q"], head["k"], spec, measure, positions=head["positions"])
    b = split_head(head["q"], head["k"], spec, measure, positions=(jitter + shift, jitter))
    np.testing.assert_array_equal(a.g, b.g)


@settings(max_examples=30, deadline=None)
@given(head=heads(), seed=st.integers(0, 2**32 - 1))
def test_remainder_vanishes_when_deviations_sit_in_non_rotating_pairs(head, seed):
    d, r = head["q"].shape[1], head["rotary_dim"]
    assume(r < d)
    n = head["q"].shape[0]
    k = np.tile(head["k"][0], (n, 1))  # constant in the rotating coordinates ...
    k[:, r:] += np.random.default_rng(seed).normal(size=(n, d - r)) * 5  # ... varying elsewhere
    spec, measure = geometry(head)
    # the mean is the constant only up to rounding
    sp = split_head(head["q"], k, spec, measure, positions=head["positions"], kbar=k[0])
    np.testing.assert_array_equal(sp.bound, 0.0)
    np.testing.assert_array_equal(sp.E, 0.0)


def test_mask_is_by_index_and_windowed():
    q = np.ones((5, 2))
    spec, measure = geometry({"theta": [1.0], "scale": 1.0, "window": 2})
    sp = split_head(q, q, spec, measure, positions=(np.zeros(5), np.arange(5.0)))
    i, j = np.indices((5, 5))
    np.testing.assert_array_equal(sp.mask, (j <= i) & (i - j < 2))
    np.testing.assert_array_equal(sp.delta, -j.astype(float))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"q": np.zeros((3, 4)), "k": np.zeros((2, 4))}, "q and k must have one shape"),
        ({"q": np.zeros(4), "k": np.zeros(4)}, "q must have 2 dimensions"),
        ({"theta": [1.0]}, "the RopeSpec has head dim 2, the tensors 4"),
        ({"theta": [1.0, -1.0]}, r"theta must be P >= 1 finite frequencies >= 0, got \(2,\)"),
        ({"scale": 0.0}, "scale must be a finite number > 0, got 0.0"),
        ({"positions": np.arange(2.0)}, r"positions must have shape \(3,\)"),
        ({"window": 0}, "window must be at least 1, got 0"),
        ({"kbar": np.zeros(3)}, r"kbar must have shape \(4,\)"),
        ({"q": np.full((3, 4), np.nan)}, "q must be finite"),
        ({"layout": "gptj"}, "layout must be 'half' or 'interleaved'"),
        ({"distances": np.zeros((3, 2))}, r"distances must have shape \(3, 3\)"),
        ({"distances": np.zeros((3, 3)), "positions": np.arange(3.0)},
         "give positions or distances, not both"),
        # the old call split_head(q, k, theta, scale): loose frequencies where the spec goes
        ({"loose": (np.array([1.0, 0.1]), 1.0)}, "the geometry is one RopeSpec, got ndarray"),
        ({"loose": ([1.0, 0.1],)}, "the geometry is one RopeSpec, got list"),
        ({"pair_budget": 0}, "pair_budget must be a positive number of pairs, got 0"),
        ({"kbar_rule": "median"}, "kbar_rule must be one of mean, mean-skip-first, got 'median'"),
    ],
)  # fmt: skip
def test_split_head_errors(kwargs, message):
    args = {"q": np.ones((3, 4)), "k": np.ones((3, 4)), "theta": [1.0, 0.1], "scale": 1.0}
    args |= kwargs
    options = {key: args.pop(key) for key in ("pair_budget", "kbar_rule") if key in args}
    with pytest.raises(RopesplitError, match=f"^{message}") as refused:
        spec, measure = geometry(args, **options)  # a refusal here counts
        loose = args.get("loose", (spec, measure))
        keywords = {key: args[key] for key in ("positions", "kbar", "distances") if key in args}
        split_head(args["q"], args["k"], *loose, **keywords)
    assert "\n" not in str(refused.value)  # one line


def test_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 4, 6))
    spec, measure = geometry({"theta": frequencies(6), "scale": 0.5})
    a = split_head(q, k, spec, measure)
    b = split_head(torch.from_numpy(q).float(), torch.from_numpy(k).float(), spec, measure)
    np.testing.assert_allclose(a.W, b.W, atol=1e-5)


@st.composite
def causal_cases(draw):
    """Heads of complex pairs, whole-number positions, a window and a reference gap 1 - m.

    Eight pairs take the kernel built with its width fixed (``bound._WIDTHS``), the others
    the general build; index positions take the one-distance-per-diagonal build."""
    h, n = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    p = draw(st.sampled_from([1, 2, 3, 4, 8]))
    # no magnitudes in (0, 1e-100): their products are subnormal, where any two codings of one
    # sum round apart (a property of subnormals, not of the kernel)
    value = st.floats(-10, 10).map(lambda x: x if abs(x) > 1e-100 else 0.0)
    parts = draw(hnp.arrays(np.float64, (4, h, n, p), elements=value))
    q, dev = parts[0] + 1j * parts[1], parts[2] + 1j * parts[3]
    theta = draw(hnp.arrays(np.float64, p, elements=st.floats(0, 3)))
    positions = draw(st.sampled_from(["index", "whole"]))
    if positions == "index":
        pq = pk = np.arange(n)
    else:
        pq, pk = draw(hnp.arrays(np.int64, (2, n), elements=st.integers(-40, 40)))
    gap = draw(st.one_of(st.none(), hnp.arrays(np.complex128, p, elements=st.complex_numbers(
        max_magnitude=2, allow_nan=False, allow_infinity=False))))  # fmt: skip
    window = draw(st.one_of(st.none(), st.integers(1, n)))
    return q, dev, theta, pq, pk, draw(st.floats(0.05, 5.0)), window, gap


def causal_twin(q, dev, theta, pq, pk, s, window, gap, rtol=RTOL):
    """``causal_ratios`` pair by pair through ``remainder_and_bound`` (by diagonal, j ascending)."""
    h, n, _ = q.shape
    ratios, bad = [], np.zeros(h, dtype=np.int64)
    for x in range(h):
        row = []
        for back in range(n if window is None else min(n, window)):
            for j in range(n - back):
                i = j + back
                e, b = (float(v) for v in remainder_and_bound(q[x, i], dev[x, j], theta,
                                                              pq[i] - pk[j], s, one_minus_m=gap))
                bad[x] += abs(e) > b * (1 + rtol) + ATOL
                row.append(abs(e) / b if b > 0 else -np.inf)
        ratios.append(row)
    return np.array(ratios), bad


@settings(max_examples=60, deadline=None)
@given(case=causal_cases())
def test_causal_ratios_match_the_pair_kernel(case):
    ratio, bad = causal_ratios(*case[:6], window=case[6], one_minus_m=case[7])
    want, want_bad = causal_twin(*case)
    assert ratio.shape == want.shape
    np.testing.assert_array_equal(ratio == -np.inf, want == -np.inf)  # B = 0: no ratio, alike
    finite = want > -np.inf
    np.testing.assert_allclose(ratio[finite], want[finite], rtol=1e-9, atol=1e-12)
    assert bad.tolist() == want_bad.tolist() == [0] * len(bad)  # the bound holds


def test_causal_ratios_count_what_breaks_the_tolerance(monkeypatch):
    # with a tolerance of -1/2 every pair whose |E| passes half its bound counts: the same
    # pairs as the pair kernel's under the same rule (the counting is not a constant 0)
    rng = np.random.default_rng(0)
    q, dev = rng.normal(size=(2, 2, 30, 3)) + 1j * rng.normal(size=(2, 2, 30, 3))
    case = (q, dev, frequencies(6, 100.0), np.arange(30), np.arange(30), 0.7, None, None)
    monkeypatch.setattr(bound_module, "RTOL", -0.5)
    _, bad = causal_ratios(*case[:6])
    _, want = causal_twin(*case, rtol=-0.5)
    assert bad.tolist() == want.tolist() and bad.min() > 0


@settings(max_examples=80, deadline=None)
@given(case=causal_cases())
def test_the_float32_screen_stays_within_its_error_bound(case):
    # the lemma CausalPairs.eps states, falsification-tested: every pair float32 judges lies
    # within eps of its float64 ratio; the ones it cannot judge are NaN, never a wrong number
    pairs = CausalPairs(*case[:6], window=case[6], one_minus_m=case[7])
    ratio, _ = pairs.ratios()
    screened, top, unsure = pairs.screen()
    sure = ~np.isnan(screened)
    assert unsure.tolist() == (~sure).sum(-1).tolist()
    assert top.tolist() == [r[s].max(initial=-np.inf) for r, s in zip(screened, sure, strict=True)]
    assert np.all(ratio[sure] > -np.inf)  # B = 0 is never judged in float32
    if sure.any():
        eps = pairs.eps(ratio[sure].max())
        assert np.abs(screened[sure] - ratio[sure]).max() <= eps


@settings(max_examples=80, deadline=None)
@given(case=causal_cases(), halve=st.booleans())
def test_the_screened_summary_is_the_float64_summary(case, halve):
    # max, median and violations read off the float32 screen with float64 rechecks: those of
    # every float64 ratio (halve: a bound at half its value, so that violations occur)
    from ropesplit.numerics import stats

    q, dev, theta, pq, pk, s, window, gap = case
    pairs = CausalPairs(q, dev, theta, pq, pk, s, window=window, one_minus_m=gap)
    if halve:
        pairs = _halved(pairs)
    ratio, bad = pairs.ratios()
    want = [stats._summary(r, None, int(b)) for r, b in zip(ratio, bad, strict=True)]
    screened, top, unsure = pairs.screen()
    got = [stats._screened_summary(pairs, x, r, t, u)
           for x, (r, t, u) in enumerate(zip(screened, top, unsure, strict=True))]
    for g, w in zip(got, want, strict=True):
        assert g[2:] == w[2:]  # no sample; the violations exactly
        for x, y in zip(g[:2], w[:2], strict=True):  # two float64 builds: rounding apart
            assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-9, abs=1e-12)


def _halved(pairs):
    """``pairs`` whose every ratio is twice the true one (a bound at half its value)."""

    class Halved(CausalPairs):
        def ratios(self):
            ratio, _ = super().ratios()
            return 2.0 * ratio, (2.0 * ratio > 1.0 + RTOL).sum(-1)

        def screen(self):
            ratio, top, unsure = super().screen()
            return 2.0 * ratio, 2.0 * top, unsure

        def exact(self, head, index):
            ratio, _ = super().exact(head, index)
            return 2.0 * ratio, 2.0 * ratio > 1.0 + RTOL

    pairs.__class__ = Halved
    return pairs


def test_causal_ratios_do_not_depend_on_the_thread_count():
    # each pair is one thread's loop: 1 or 2 threads give the same bits (train measures with 1)
    numba = pytest.importorskip("numba")
    rng = np.random.default_rng(1)
    q, dev = rng.normal(size=(2, 3, 200, 8)) + 1j * rng.normal(size=(2, 3, 200, 8))
    args = (q, dev, frequencies(16, 1e4), np.arange(200), np.arange(200), 0.3)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = causal_ratios(*args)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        every = causal_ratios(*args)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one[0], every[0])
    np.testing.assert_array_equal(one[1], every[1])
