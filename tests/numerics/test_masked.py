"""The section 5 statistics over any mask (numerics/masked.py, docs/theory.md section 9):
against a float64 twin built from the definitions, equal to the causal prefix algorithm on
the causal band, exact on a planted two-way split, and refused by causal-only code."""

from __future__ import annotations

import math

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import bound, fit, stats
from ropesplit.numerics.mask import Mask
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.rope import to_pairs
from ropesplit.numerics.spec import RopeSpec

FIELDS = ("r_split", "r_split_rowcentred", "r_3axis", "remainder_share", "tightness_max",
          "tightness_median", "n_pairs", "violations")  # fmt: skip


@np.errstate(invalid="ignore", divide="ignore")
def twin(q, k, theta, scale, mask):
    """The statistics of one head over ``mask``'s pairs from the definitions, float64, dense:
    W, f, g and E as matrices (docs/theory.md section 3), numpy's corrcoef, lstsq on the
    explicit design of a_{i-j} + b_i + c_j, and |E| / B pair by pair."""
    n = q.shape[0]
    qc, kc = to_pairs(q, "half"), to_pairs(k, "half")  # (N, P)
    kbar = kc.mean(0)
    dc = kc - kbar
    delta = np.subtract.outer(np.arange(n), np.arange(n)).astype(float)  # i - j
    turn = np.exp(1j * delta[..., None] * theta)  # (N, N, P)
    w = scale * np.einsum("il,jl,ijl->ij", qc, kc.conj(), turn).real
    f = scale * np.einsum("il,l,ijl->ij", qc, kbar.conj(), turn).real
    g = scale * (qc @ dc.conj().T).real
    e = scale * np.einsum("il,jl,ijl->ij", qc, dc.conj(), turn - 1).real
    b = scale * np.einsum("il,jl,ijl->ij", np.abs(qc), np.abs(dc), np.abs(turn - 1))
    m = mask.allowed(n)
    wm, fg = w[m], (f + g)[m]
    rows = np.nonzero(m)[0]
    row_mean = lambda x: np.bincount(rows, x) / np.bincount(rows)  # noqa: E731
    wc, fgc = wm - row_mean(wm)[rows], fg - row_mean(fg)[rows]
    i, j = np.nonzero(m)
    offsets = np.unique(i - j)
    design = np.concatenate([(i - j)[:, None] == offsets[None], np.eye(n)[i], np.eye(n)[j]], 1)
    fitted = design @ np.linalg.lstsq(design.astype(float), wm, rcond=None)[0]
    ratio = np.abs(e[m])[b[m] > 0] / b[m][b[m] > 0]
    # a bound that is rounding of the key deviations (a key column constant up to the
    # mean's rounding) gives a ratio of rounding residues: no number to compare
    size = scale * np.einsum("il,jl->ij", np.abs(qc), np.abs(kc))[m]
    conditioned = bool((b[m][b[m] > 0] > 1e-9 * size[b[m] > 0]).all())
    return {
        "r_split": np.corrcoef(wm, fg)[0, 1], "r_split_rowcentred": np.corrcoef(wc, fgc)[0, 1],
        "r_3axis": np.corrcoef(wm, fitted)[0, 1],
        "remainder_share": np.linalg.norm(e[m]) / np.linalg.norm(wm - wm.mean()),
        "tightness_max": ratio.max() if ratio.size else math.nan,
        "tightness_median": float(np.median(ratio)) if ratio.size else math.nan,
        "n_pairs": int(m.sum()), "violations": int((np.abs(e[m]) > b[m] * (1 + 1e-9)).sum()),
        "identity": np.abs(w - f - g - e).max(), "conditioned": conditioned,
    }  # fmt: skip


@st.composite
def masks(draw, n):
    reach = st.one_of(st.none(), st.integers(0, n))
    mask = Mask(before=draw(reach), after=draw(reach))
    if draw(st.booleans()):
        cut = draw(st.integers(1, n - 1))
        mask = Mask(mask.before, mask.after, segments=(0,) * cut + (1,) * (n - cut))
    if draw(st.booleans()):
        keep = tuple(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        mask = Mask(mask.before, mask.after, mask.segments, keep)
    return mask


N, D = 9, 6
# entries 0 or at least 1e-3 in size: products of subnormal features (1e-133 times
# 1e-189) underflow, and their ratios are no number to compare
value = st.one_of(st.just(0.0), st.floats(1e-3, 2.0), st.floats(-2.0, -1e-3))
features = hnp.arrays(np.float64, (N, D), elements=value)


@settings(max_examples=60, deadline=None)
@given(q=features, k=features, mask=masks(N), base=st.sampled_from([3.0, 100.0]))
def test_every_statistic_matches_its_float64_twin_on_any_mask(q, k, mask, base):
    """Any mask (both ways, windows either side, blocks, padding): the batched statistics
    are the definitions' numbers, to 1e-9."""
    allowed = mask.allowed(N)
    spec = RopeSpec.from_base(D, base)
    w = twin(q, k, np.asarray(spec.frequencies), spec.scale, mask)
    assert w["identity"] < 1e-12  # the twin's own split is exact
    if allowed.sum() < 3:
        return
    got = stats.head_statistics(q, k, spec, mask=mask).as_dict()
    for key in FIELDS:
        if key.startswith("tightness") and not w["conditioned"]:
            continue
        want, have = w[key], got[key]
        if isinstance(want, float) and (math.isnan(want) or math.isnan(have)):
            continue  # no spread: the twin's corrcoef and the statistic both undefined
        assert have == pytest.approx(want, rel=1e-8, abs=1e-9), (key, mask)


@settings(max_examples=30, deadline=None)
@given(q=hnp.arrays(np.float64, (2, N, D), elements=value),
       k=features, window=st.one_of(st.none(), st.integers(1, N)),
       reference=st.sampled_from(["zero", "mean", "distance:3"]))  # fmt: skip
def test_the_causal_band_gives_the_prefix_algorithms_numbers(q, k, window, reference):
    """The causal band with padding that drops nothing goes the dense way: the same numbers
    as the prefix sums, every field, every reference (1e-9)."""
    spec = RopeSpec.from_base(D, 10.0)
    measure = Measure(reference=reference, references=("mean",))
    band = stats.layer_statistics(q, k[None], spec, measure, mask=Mask.causal(window))
    dense = stats.layer_statistics(q, k[None], spec, measure,
                                   mask=Mask(None if window is None else window - 1, 0,
                                             keep=(True,) * N))  # fmt: skip
    for a, b in zip(band, dense, strict=True):
        x, y = a.as_dict(), b.as_dict()
        assert x["n_pairs"] == y["n_pairs"] and x["violations"] == y["violations"]
        for key, value in x.items():
            if isinstance(value, float) and not math.isnan(value):
                assert y[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
        for ref, moments in x["by_reference"].items():
            for key, value in moments.items():
                assert y["by_reference"][ref][key] == pytest.approx(value, rel=1e-9, abs=1e-12,
                                                                    nan_ok=True), (ref, key)


def planted(rotating_deviation: float) -> tuple[np.ndarray, np.ndarray, RopeSpec]:
    """Keys that vary only in the non-rotating coordinates (partial rotary): ``E = 0`` at
    every offset of either sign, unless ``rotating_deviation`` moves a fast pair too."""
    rng = np.random.default_rng(7)
    n, d = 24, 8
    spec = RopeSpec.from_base(d, 10000.0, rotary_dim=4)  # coordinates 4..7 do not rotate
    q = rng.normal(size=(n, d))
    k = np.tile(rng.normal(size=d), (n, 1))
    k[:, 4:] += rng.normal(size=(n, 4))  # the non-rotating coordinates
    k[:, 0] += rotating_deviation * rng.normal(size=n)  # the fastest rotating pair
    return q, k, spec


@pytest.mark.parametrize("mask", [Mask.both(), Mask.both(5), Mask(before=2, after=9)],
                         ids=str)  # fmt: skip
def test_a_planted_two_way_split_is_exact_and_breaks_when_a_fast_pair_varies(mask):
    q, k, spec = planted(0.0)
    exact = stats.head_statistics(q, k, spec, mask=mask)
    assert exact.r_split == pytest.approx(1.0, abs=1e-12)
    assert exact.remainder_share == pytest.approx(0.0, abs=1e-12)
    assert exact.violations == 0
    broken = stats.head_statistics(*planted(1.0), mask=mask)
    assert broken.r_split < 0.999 and broken.remainder_share > 1e-3
    assert broken.tightness_max <= 1.0


def test_the_mean_reference_of_a_symmetric_mask_is_real_and_of_a_one_sided_one_is_not():
    from ropesplit.numerics.reference import resolve_reference

    theta = RopeSpec.from_base(8, 10.0).frequencies
    n = 16
    dist = np.subtract.outer(np.arange(n), np.arange(n)).astype(float)
    both = resolve_reference("mean", theta, distances=dist, mask=Mask.both(4).allowed(n))
    ahead = resolve_reference("mean", theta, distances=dist, mask=Mask(1, 6).allowed(n))
    assert np.abs(both.m.imag).max() < 1e-15
    assert np.abs(ahead.m.imag).max() > 1e-2


def test_causal_only_algorithms_refuse_a_two_way_mask():
    """The prefix sums, the band's Gram and the diagonal-by-diagonal bound know j <= i only:
    handed a two-way mask each refuses in one line naming itself; the causal band passes."""
    q, k, spec = planted(1.0)
    qc, dc = to_pairs(q, "half")[None], to_pairs(k - k.mean(0), "half")[None]
    pos = np.arange(q.shape[0], dtype=float)
    theta = np.asarray(spec.frequencies)
    for mask in (Mask.both(), Mask(before=None, after=0, segments=(0,) * 12 + (1,) * 12)):
        with pytest.raises(RopesplitError, match="band_gram.*knows only causal pairs"):
            fit.band_gram(24, mask)
        with pytest.raises(RopesplitError, match="causal_ratios.*knows only causal pairs"):
            bound.causal_ratios(qc, dc, theta, pos, pos, 1.0, window=mask)
    with pytest.raises(RopesplitError, match="row_moments.*knows only causal pairs"):
        stats.row_moments(None, Mask.both(3))  # refused before the features are read
    assert fit.band_gram(24, Mask.causal(5)).pairs == fit.band_gram(24, 5).pairs
    ratio, bad = bound.causal_ratios(qc, dc, theta, pos, pos, 1.0, window=Mask.causal())
    assert ratio.shape == (1, 24 * 25 // 2) and bad.tolist() == [0]


def test_a_mask_the_spec_contradicts_or_that_lets_nothing_through_is_refused():
    q, k, _ = planted(1.0)
    with pytest.raises(RopesplitError, match="window .8. and the mask .both ways. disagree"):
        stats.head_statistics(q, k, RopeSpec.from_base(8, 100.0, window=8), mask=Mask.both())
    nothing = Mask(keep=(False,) * 24)
    with pytest.raises(RopesplitError, match="lets no pair through"):
        stats.head_statistics(q, k, RopeSpec.from_base(8, 100.0), mask=nothing)
    same = stats.head_statistics(q, k, RopeSpec.from_base(8, 100.0, window=8),
                                 mask=Mask.causal(8))  # fmt: skip
    assert same.n_pairs == Mask.causal(8).n_pairs(24)


@pytest.mark.parametrize("mask", [Mask.both(), Mask.both(3), Mask(2, 7)], ids=str)
def test_the_two_sided_band_gram_is_the_pair_lists(mask):
    """SpanGram's O(N) product equals the Gram applied pair by pair (float64 twin)."""
    n = 11
    span, pairs = fit.mask_gram(n, mask), fit._MaskGram(mask.allowed(n))
    assert isinstance(span, fit.SpanGram) and (span.n_a, span.d_min) == (pairs.n_a, pairs.d_min)
    x = np.random.default_rng(0).normal(size=(span.diag.size, 3))
    np.testing.assert_allclose(span.apply(x), pairs.apply(x), atol=1e-12)
    np.testing.assert_array_equal(span.diag, pairs.diag)


def dense_fit(w, allowed, axes):
    """Float64 twin of a two- or three-axis fit over any pairs: the explicit design of
    (a_{i-j}, over the offsets present, both signs) + u_i + v_j, numpy's lstsq."""
    n = w.shape[0]
    i, j = np.nonzero(allowed)
    blocks = [np.eye(n)[i], np.eye(n)[j]]
    if axes == 3:
        blocks.insert(0, (i - j)[:, None] == np.unique(i - j)[None])
    design = np.concatenate(blocks, axis=1).astype(float)
    return design @ np.linalg.lstsq(design, w[i, j], rcond=None)[0]


@settings(max_examples=60, deadline=None)
@given(w=hnp.arrays(np.float64, (2, N, N), elements=value), mask=masks(N),
       axes=st.sampled_from([2, 3]))  # fmt: skip
def test_additive_fits_over_any_mask_match_their_float64_twin(w, mask, axes):
    allowed = mask.allowed(N)
    assume(allowed.any())
    fits = fit.additive_fits(w, axes=axes, window=mask)
    fitted = fits.fitted()
    for k in range(2):
        np.testing.assert_allclose(fitted[k][allowed], dense_fit(w[k], allowed, axes),
                                   rtol=0, atol=1e-8 * max(1.0, np.abs(w).max()))  # fmt: skip


def test_additive_fits_on_the_causal_band_s_mask_are_the_window_s():
    w = np.random.default_rng(3).normal(size=(3, 11, 11))
    for axes in (2, 3):
        by_window = fit.additive_fits(w, axes=axes, window=4)
        by_mask = fit.additive_fits(w, axes=axes, window=Mask.causal(window=4))
        np.testing.assert_array_equal(by_mask.fitted(), by_window.fitted())


@settings(max_examples=80, deadline=None)
@given(mask=masks(N))
def test_a_mask_read_off_its_pairs_lets_the_same_pairs_through(mask):
    """What an attention call's mask tensor gives (Mask.of) is the mask that made it."""
    allowed = mask.allowed(N)
    if not allowed.any():
        return
    np.testing.assert_array_equal(Mask.of(allowed).allowed(N), allowed)


def test_a_mask_tensor_that_is_no_band_blocks_or_padding_is_refused():
    allowed = np.tril(np.ones((6, 6), bool))
    allowed[5, 1] = False  # a hole inside the band
    with pytest.raises(RopesplitError, match="no band, blocks and padding describe"):
        Mask.of(allowed)
    assert str(Mask.of(Mask.both(2).allowed(7))) == "both ways within 2 back and 2 ahead"
    docs = Mask(None, 0, segments=(0, 0, 0, 1, 1, 1, 1))
    assert Mask.of(docs.allowed(7)) == docs
