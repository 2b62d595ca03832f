"""numerics.threeterm: the protein paper's fit a[i-j] + b[j] + c[i] (arXiv 2602.20449), its r,
log Var(a)/Var(b) and CVs, against planted matrices, dense lstsq twins and simulated coverage."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import assume, example, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.intervals import binomial_interval, t_quantile
from ropesplit.numerics.threeterm import (
    chi2_cdf,
    chi2_quantile,
    cv_interval,
    masked_softmax,
    released_three_term_fit,
    three_term_fit,
    three_term_fits,
)

VALUES = st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False)


@st.composite
def planted(draw, low: int = 2, high: int = 10):  # type: ignore[no-untyped-def]
    """``(a (2N-1,), b (N,), c (N,))``: a by offset -(N-1)..N-1, b per key, c per query."""
    n = draw(st.integers(low, high))
    return (draw(arrays(np.float64, 2 * n - 1, elements=VALUES)),
            draw(arrays(np.float64, n, elements=VALUES)),
            draw(arrays(np.float64, n, elements=VALUES)))  # fmt: skip


def matrix(a, b, c):  # type: ignore[no-untyped-def]
    """``A_ij = a[i - j] + b[j] + c[i]`` with ``a`` indexed from offset -(N-1)."""
    n = b.size
    i, j = np.indices((n, n))
    return a[i - j + n - 1] + b[j] + c[i]


def twin(w, mask):  # type: ignore[no-untyped-def]
    """Reference: the dense design on the used unknowns and numpy's minimum-norm lstsq.

    Returns ``(a, offsets, b, c, fitted on the mask, r, extra gauge directions)``.
    """
    n = w.shape[0]
    rows, cols = np.nonzero(mask)
    offsets, keys, queries = np.unique(rows - cols), np.unique(cols), np.unique(rows)
    design = np.zeros((rows.size, offsets.size + keys.size + queries.size))
    for t, (i, j) in enumerate(zip(rows, cols, strict=True)):
        design[t, np.searchsorted(offsets, i - j)] = 1
        design[t, offsets.size + np.searchsorted(keys, j)] = 1
        design[t, offsets.size + keys.size + np.searchsorted(queries, i)] = 1
    x = np.linalg.lstsq(design, w[rows, cols], rcond=None)[0]
    b, c = np.full(n, np.nan), np.full(n, np.nan)
    b[keys], c[queries] = x[offsets.size : offsets.size + keys.size], x[offsets.size + keys.size :]
    fitted = design @ x
    with warnings.catch_warnings():  # a constant matrix or a single pair: no r
        warnings.simplefilter("ignore", RuntimeWarning)
        r = np.corrcoef(fitted, w[rows, cols])[0, 1]
    extra = design.shape[1] - np.linalg.matrix_rank(design) - 3
    return x[: offsets.size], offsets, b, c, fitted, r, extra


def band(n: int, lo: int, hi: int) -> np.ndarray:
    i, j = np.indices((n, n))
    return (i - j >= lo) & (i - j <= hi)


# ------------------------------------------------------------------ planted matrices


@settings(max_examples=60, deadline=None)
@given(abc=planted())
@example(abc=(np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.0]), np.array([0.0, 0.0])))
def test_a_planted_matrix_is_recovered_in_the_min_norm_gauge(abc) -> None:
    a, b, c = abc
    w = matrix(a, b, c)
    assume(np.ptp(w) > 1e-6)  # a constant matrix has no correlation to read
    fit = three_term_fit(w)
    scale = 1.0 + np.abs(w).max()
    assert fit.r == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(fit.fitted, w, rtol=0, atol=1e-9 * scale)
    # the planted (a, b, c) moved along the gauge to minimum norm: the lstsq solution
    a_min, offsets, b_min, c_min, *_ = twin(w, np.ones(w.shape, dtype=bool))
    assert fit.offsets.tolist() == offsets.tolist() == list(range(-(b.size - 1), b.size))
    for got, want in ((fit.a, a_min), (fit.b, b_min), (fit.c, c_min)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * scale)
    # that gauge, in words: sum a = sum b = sum c and sum D a_D + sum j b_j - sum i c_i = 0
    index = np.arange(b.size)
    assert fit.a.sum() == pytest.approx(fit.b.sum(), abs=1e-9 * scale * b.size)
    assert fit.b.sum() == pytest.approx(fit.c.sum(), abs=1e-9 * scale * b.size)
    trend = fit.offsets @ fit.a + index @ fit.b - index @ fit.c
    assert abs(trend) < 1e-9 * scale * b.size**2


@settings(max_examples=40, deadline=None)
@given(abc=planted(3, 9), data=st.data())
def test_noise_moves_r_below_one(abc, data) -> None:
    a, b, c = abc
    n = b.size
    noise = data.draw(arrays(np.float64, (n, n), elements=st.floats(-1.0, 1.0)))
    w = matrix(a, b, c) + noise
    *_, fitted, r, _ = twin(w, np.ones((n, n), dtype=bool))
    residual = np.linalg.norm(fitted - w.ravel())
    assume(residual > 1e-3)  # noise outside the span of the three terms
    note(f"residual {residual}, twin r {r}")
    fit = three_term_fit(w)
    assert fit.r < 1.0
    assert fit.r == pytest.approx(r, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(3, 10), data=st.data(), k=st.floats(0.01, 100.0))
def test_log_var_ratio_of_a_planted_ratio_reads_log_k(n, data, k) -> None:
    """a symmetric in the offset with no mean, b and c without mean or trend: already in the
    min-norm gauge (each sum 0, and sum D a_D = sum j b_j = sum i c_i = 0), at any scale of a;
    scale a so that Var(a) = k Var(b) (ddof 1)."""
    half = data.draw(arrays(np.float64, n, elements=VALUES))
    b = data.draw(arrays(np.float64, n, elements=VALUES))
    c = data.draw(arrays(np.float64, n, elements=VALUES))
    a = half[np.abs(np.arange(-(n - 1), n))]
    a = a - a.mean()
    basis = np.stack([np.ones(n), np.arange(n, dtype=np.float64)], axis=1)
    b = b - basis @ np.linalg.lstsq(basis, b, rcond=None)[0]
    c = c - basis @ np.linalg.lstsq(basis, c, rcond=None)[0]
    assume(np.var(b, ddof=1) > 1e-6 and np.var(a, ddof=1) > 1e-6)
    a = a * math.sqrt(k * np.var(b, ddof=1) / np.var(a, ddof=1))
    fit = three_term_fit(matrix(a, b, c))
    assert fit.log_var_ratio == pytest.approx(math.log(k), abs=1e-9)
    scale = 1.0 + np.abs(a).max() + np.abs(b).max() + np.abs(c).max()
    np.testing.assert_allclose(fit.a, a, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(fit.b, b, rtol=0, atol=1e-9 * scale)


# ------------------------------------------------------------------ masks, against the dense twin

MASKS = {
    "every pair": lambda n: band(n, -(n - 1), n - 1),
    "causal": lambda n: band(n, 0, n - 1),
    "two-sided window 2": lambda n: band(n, -2, 2),
    "causal window 3": lambda n: band(n, 0, 2),
    "anti-causal": lambda n: band(n, -(n - 1), 0),
}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 11), kind=st.sampled_from(sorted(MASKS)), data=st.data())
def test_the_fit_is_the_dense_lstsq_twin(n, kind, data) -> None:
    """Arbitrary matrices on causal, two-way and windowed masks: the same a, b, c (minimum
    norm), fitted values and r as numpy's lstsq on the explicit design matrix."""
    w = data.draw(arrays(np.float64, (n, n), elements=VALUES))
    mask = MASKS[kind](n)
    assume(np.ptp(w[mask]) > 1e-6)  # a constant matrix: r is rounding in the twin
    a, offsets, b, c, fitted, r, extra = twin(w, mask)
    assert extra == 0
    fit = three_term_fit(w, mask)
    scale = 1.0 + np.abs(w).max()
    assert fit.offsets.tolist() == offsets.tolist()
    np.testing.assert_allclose(fit.fitted[mask], fitted, rtol=0, atol=1e-9 * scale)
    assert np.all(fit.fitted[~mask] == 0)
    for got, want in ((fit.a, a), (fit.b, b), (fit.c, c)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * scale)
    assert fit.r == pytest.approx(r, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(abc=planted(2, 9), kind=st.sampled_from(["causal", "two-sided window 2"]))
def test_a_planted_matrix_is_exact_on_a_causal_and_a_two_way_mask(abc, kind) -> None:
    a, b, c = abc
    w = matrix(a, b, c)
    mask = MASKS[kind](b.size)
    assume(np.ptp(w[mask]) > 1e-6)
    fit = three_term_fit(w, mask)
    assert fit.r == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(fit.fitted[mask], w[mask], rtol=0, atol=1e-9 * (1 + np.abs(w).max()))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 8), data=st.data())
def test_any_mask_is_fitted_like_the_twin_or_refused(n, data) -> None:
    """A mask with gauge directions beyond the three (pairs in blocks, a lone offset) is
    refused; every other mask gives the twin's minimum-norm solution."""
    mask = data.draw(arrays(np.bool_, (n, n)))
    assume(mask.any())
    w = data.draw(arrays(np.float64, (n, n), elements=VALUES))
    a, offsets, b, c, fitted, r, extra = twin(w, mask)
    note(f"extra gauge directions {extra}")
    if extra > 0:
        with pytest.raises(RopesplitError, match="the three-term fit is not identified"):
            three_term_fit(w, mask)
        return
    fit = three_term_fit(w, mask)
    scale = 1.0 + np.abs(w).max()
    np.testing.assert_allclose(fit.fitted[mask], fitted, rtol=0, atol=1e-9 * scale)
    for got, want in ((fit.a, a), (fit.b, b), (fit.c, c)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * scale)


@pytest.mark.parametrize("n", [2, 5, 12])
def test_every_band_has_only_the_three_gauge_directions(n: int) -> None:
    """The shortcut of the identification check: a band lo <= i - j <= hi with hi > lo."""
    for lo in range(-(n - 1), n - 1):
        for hi in range(lo + 1, n):
            assert twin(np.zeros((n, n)), band(n, lo, hi))[-1] == 0, (lo, hi)


class _Allowed:
    """A stand-in for numerics.mask.Mask: what the fit reads of one is ``allowed(n)``."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def allowed(self, n: int) -> np.ndarray:
        return band(n, self.lo, self.hi)


def test_a_mask_object_is_its_allowed_pairs() -> None:
    i, j = np.indices((7, 7))
    w = np.cos(i * j / 3.0)
    for lo, hi in ((0, 6), (-2, 2)):
        by_object = three_term_fit(w, _Allowed(lo, hi))
        by_array = three_term_fit(w, band(7, lo, hi))
        assert by_object.r == by_array.r
        np.testing.assert_array_equal(by_object.a, by_array.a)
        np.testing.assert_array_equal(masked_softmax(w, _Allowed(lo, hi)),
                                      masked_softmax(w, band(7, lo, hi)))  # fmt: skip


def test_blocks_are_refused() -> None:
    i, j = np.indices((8, 8))
    with pytest.raises(RopesplitError, match="the three-term fit is not identified on this "
                                             "mask: 1 gauge"):  # fmt: skip
        three_term_fit(np.cos(i * j), (i // 4) == (j // 4))


@pytest.mark.parametrize(("call", "start"), [
    (lambda: three_term_fit(np.zeros((3, 4))), "A must be square (N, N) with N >= 2, got (3, 4)"),
    (lambda: three_term_fit(np.zeros((1, 1))), "A must be square (N, N) with N >= 2, got (1, 1)"),
    (lambda: three_term_fit(np.zeros((3, 3)), np.ones((2, 2))), "mask must have the shape of A"),
    (lambda: three_term_fit(np.zeros((3, 3)), np.zeros((3, 3))), "mask selects no pairs"),
    (lambda: three_term_fit(np.full((3, 3), np.nan)), "A must be finite, got 9 non-finite"),
    (lambda: three_term_fits(np.zeros((2, 3, 3)), convention="x"), "convention must be"),
    (lambda: three_term_fits(np.zeros((2, 3, 3)), np.ones((3, 3)), convention="released"),
     "the released fit takes every pair"),
])  # fmt: skip
def test_bad_input(call, start: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RopesplitError) as error:
        call()
    assert str(error.value).startswith(start)


# ------------------------------------------------------------------ their released code


def released_twin(L):  # type: ignore[no-untyped-def]
    """compute_attention_components.py (ahart34/protein, HEAD 9715e5e): ``_prefactor_A`` and
    ``disentangle_matrix`` as released, loops and all, with numpy's LU solve for scipy's."""
    n = L.shape[0]

    def index_a(i):  # type: ignore[no-untyped-def]
        return (2 * n + i - 1) if i < 0 else i

    def index_b(i):  # type: ignore[no-untyped-def]
        return 2 * n + i - 1

    def index_c(i):  # type: ignore[no-untyped-def]
        return 3 * n + i - 1

    A = np.zeros((4 * n - 1, 4 * n - 1))
    for i in range(-n + 1, n):
        A[index_a(i), index_a(i)] = n - abs(i)
        if i >= 0:
            A[index_a(i), index_b(0): index_b(n - i)] = 1
            A[index_a(i), index_c(i): index_c(n)] = 1
        else:
            A[index_a(i), index_b(-i): index_b(n)] = 1
            A[index_a(i), index_c(0): index_c(n + i)] = 1
    for i in range(n):
        A[index_b(i), index_a(-i): index_a(-1)] = 1
        A[index_b(i), index_a(0): index_a(n - i)] = 1
        A[index_b(i), index_b(i)] = n
        A[index_b(i), index_c(0): index_c(n)] = 1
        A[index_c(i), index_a(i - n): index_a(-1)] = 1
        A[index_c(i), index_a(0): index_a(i)] = 1
        A[index_c(i), index_b(0): index_b(n)] = 1
        A[index_c(i), index_c(i)] = n
    y = np.zeros(4 * n - 1)
    for i in range(-n + 1, n):
        y[index_a(i)] = L.diagonal(-i).sum()
    for i in range(n):
        y[index_b(i)] = L[:, i].sum()
        y[index_c(i)] = L[i, :].sum()
    x = np.linalg.solve(A + 1e-6 * np.eye(A.shape[0]), y)
    return A, x[: index_a(-1) + 1], x[index_b(0): index_b(n)], x[index_c(0): index_c(n)]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 12), data=st.data())
def test_the_released_fit_is_their_code(n, data) -> None:
    w = data.draw(arrays(np.float64, (n, n), elements=st.floats(0.0, 1.0)))
    assume(np.ptp(w) > 1e-3)
    _, a, b, c = released_twin(w)
    assume(min(np.var(a, ddof=1), np.var(b, ddof=1)) > 1e-6)  # else the ratio is rounding
    i, j = np.indices((n, n))
    fitted = a[i - j] + b[None, :] + c[:, None]  # get_low_rank_attention: numpy's wrap
    fit = released_three_term_fit(w)
    np.testing.assert_allclose(fit.fitted, fitted, rtol=0, atol=1e-8)
    assert fit.r == pytest.approx(np.corrcoef(w.ravel(), fitted.ravel())[0, 1], abs=1e-8)
    ratio = np.var(a, ddof=1) / np.var(b, ddof=1)  # process_results: torch.var, then np.log
    assert fit.log_var_ratio == pytest.approx(math.log(ratio), abs=1e-6)


@pytest.mark.parametrize("n", [3, 6, 10])
def test_their_normal_matrix_is_not_the_gram_matrix(n: int) -> None:
    """The finding the module docstring states: 5N - 5 entries of their normal matrix differ
    from X^T X, all in the b and c rows' a columns, so a planted matrix is not recovered."""
    A = released_twin(np.zeros((n, n)))[0]
    rows, cols = np.nonzero(np.ones((n, n), dtype=bool))
    design = np.zeros((n * n, 4 * n - 1))
    design[np.arange(n * n), (rows - cols) % (2 * n - 1)] = 1
    design[np.arange(n * n), 2 * n - 1 + cols] = 1
    design[np.arange(n * n), 3 * n - 1 + rows] = 1
    wrong = np.argwhere(A != design.T @ design)
    assert len(wrong) == 5 * n - 5
    assert np.all(wrong[:, 0] >= 2 * n - 1) and np.all(wrong[:, 1] < 2 * n - 1)
    i, j = np.indices((n, n))
    planted = np.cos(i - j) + np.sqrt(j) + i**2
    assert released_three_term_fit(planted).r < 1.0 - 1e-6
    assert three_term_fit(planted).r == pytest.approx(1.0, abs=1e-12)


# ------------------------------------------------------------------ batches and probabilities


@settings(max_examples=20, deadline=None)
@given(w=arrays(np.float64, (2, 3, 5, 5), elements=VALUES),
       convention=st.sampled_from(["least_squares", "released"]))  # fmt: skip
def test_a_batch_is_its_matrices_one_by_one(w, convention) -> None:
    # a fixed slope under every drawn matrix: a constant one (which hypothesis draws often,
    # and whose fit is undefined) needs the draw to cancel it exactly
    w = w + np.arange(25.0).reshape(5, 5) / 8
    assume(all(np.ptp(m) > 1e-3 for m in w.reshape(-1, 5, 5)))
    fits = three_term_fits(w, convention=convention)
    assert fits.r.shape == fits.log_var_ratio.shape == (2, 3)
    assert fits.a.shape == (2, 3, 9) and fits.b.shape == fits.c.shape == (2, 3, 5)
    one = three_term_fit if convention == "least_squares" else released_three_term_fit
    for s in np.ndindex(2, 3):
        single = one(w[s])
        assert fits.r[s] == single.r
        np.testing.assert_array_equal(fits.a[s], single.a)
        assert fits.log_var_ratio[s] == single.log_var_ratio or np.isnan(single.log_var_ratio)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 8), data=st.data())
def test_masked_softmax_is_the_loop_twin_and_ignores_query_terms(n, data) -> None:
    w = data.draw(arrays(np.float64, (n, n), elements=st.floats(-30, 30)))
    mask = data.draw(arrays(np.bool_, (n, n)))
    shift = data.draw(arrays(np.float64, (n, 1), elements=st.floats(-30, 30)))
    p = masked_softmax(w, mask)
    for i in range(n):
        allowed = np.flatnonzero(mask[i])
        want = np.zeros(n)
        if allowed.size:
            e = np.exp(w[i, allowed] - w[i, allowed].max())
            want[allowed] = e / e.sum()
        np.testing.assert_allclose(p[i], want, rtol=1e-12, atol=1e-300)
    # docs/theory.md section 4: softmax_j(W_ij + c_i) = softmax_j(W_ij)
    np.testing.assert_allclose(masked_softmax(w + shift, mask), p, rtol=1e-9, atol=1e-12)
    assert masked_softmax(w[None], None).shape == (1, n, n)


# ------------------------------------------------------------------ chi-square


@settings(max_examples=60, deadline=None)
@given(x=st.floats(1e-6, 200.0), k=st.integers(1, 6))
def test_chi2_cdf_closed_forms(x: float, k: int) -> None:
    """df = 1: erf(sqrt(x/2)); even df = 2k: 1 - e^{-x/2} sum_{i<k} (x/2)^i / i!."""
    assert chi2_cdf(x, 1) == pytest.approx(math.erf(math.sqrt(x / 2)), rel=1e-12, abs=1e-15)
    g = x / 2
    poisson = math.exp(-g) * sum(g**i / math.factorial(i) for i in range(k))
    assert chi2_cdf(x, 2 * k) == pytest.approx(1.0 - poisson, rel=1e-12, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(p=st.floats(1e-6, 1 - 1e-6), df=st.floats(0.5, 5000.0))
def test_chi2_quantile_inverts_the_cdf(p: float, df: float) -> None:
    x = chi2_quantile(p, df)
    assert chi2_cdf(x, df) == pytest.approx(p, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("p", "df", "table"), [
    (0.975, 1, 5.023886), (0.025, 1, 0.000982069), (0.975, 10, 20.483177),
    (0.025, 10, 3.246973), (0.95, 5, 11.070498), (0.99, 100, 135.806723),
])  # fmt: skip
def test_chi2_quantile_matches_table(p: float, df: float, table: float) -> None:
    assert chi2_quantile(p, df) == pytest.approx(table, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(p=st.floats(0.001, 0.999))
def test_chi2_quantile_closed_forms(p: float) -> None:
    """df = 2: -2 log(1 - p); df = 1: the squared normal quantile at (1 + p) / 2."""
    assert chi2_quantile(p, 2) == pytest.approx(-2 * math.log1p(-p), rel=1e-12)
    assert chi2_quantile(p, 1) == pytest.approx(t_quantile((1 + p) / 2, math.inf) ** 2, rel=1e-10)


def test_chi2_at_large_df_is_wilson_hilferty() -> None:
    df, z = 384_000.0, t_quantile(0.975, math.inf)  # 1000 inputs x 24 layers x 16 heads
    wilson = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    assert chi2_quantile(0.975, df) == pytest.approx(wilson, rel=1e-7)


# ------------------------------------------------------------------ the CV and its interval


def released_cv_twin(data: np.ndarray, axis: int, confidence: float = 0.95):  # type: ignore[no-untyped-def]
    """process_results.compute_ratio_statistics for one axis, with our chi-square quantile."""
    mean_data = np.abs(np.mean(data))
    variance = np.var(data, axis=axis).mean()
    dof, alpha = data.shape[axis] - 1, 1 - confidence
    lower = dof * variance / chi2_quantile(1 - alpha / 2, dof)
    upper = dof * variance / chi2_quantile(alpha / 2, dof)
    return np.sqrt(variance) / mean_data, np.sqrt(lower) / mean_data, np.sqrt(upper) / mean_data


@settings(max_examples=40, deadline=None)
@given(values=arrays(np.float64, (4, 3, 5), elements=st.floats(-5, 5)), axis=st.integers(0, 2))
def test_the_released_cv_is_their_code(values, axis) -> None:
    assume(abs(values.mean()) > 1e-3)
    ci = cv_interval(values, axis=axis)
    cv, low, high = released_cv_twin(values, axis)
    assert (ci.cv, ci.low, ci.high) == pytest.approx((cv, low, high), rel=1e-12)
    assert ci.n == values.shape[axis] and ci.groups == 60 // values.shape[axis]
    assert ci.df == values.shape[axis] - 1 and ci.contains(ci.cv)


N_SIM = 2000


def _coverage(ci_of, samples: np.ndarray, sigma2: float) -> int:  # type: ignore[no-untyped-def]
    """How many of the simulated data sets' variance intervals hold the true variance."""
    hits = 0
    for sample in samples:
        ci = ci_of(sample)
        hits += ci.variance_low <= sigma2 <= ci.variance_high
    return hits


def _within_binomial_tolerance(hits: int, rate: float) -> bool:
    """``rate`` inside the 99.9% Clopper-Pearson interval of ``hits / N_SIM``."""
    ci = binomial_interval(hits, N_SIM, level=0.999)
    return ci.low <= rate <= ci.high


@pytest.mark.parametrize("n", [8, 20])
def test_coverage_one_group_unbiased(n: int) -> None:
    """Normal values, one group: the unbiased convention covers the variance at 95%."""
    rng = np.random.default_rng(2602 + n)
    samples = rng.normal(1.5, 0.4, size=(N_SIM, n))
    hits = _coverage(lambda s: cv_interval(s, convention="unbiased"), samples, 0.16)
    assert _within_binomial_tolerance(hits, 0.95), hits / N_SIM


@pytest.mark.parametrize(("n", "groups"), [(8, 6), (5, 24)])
def test_coverage_independent_groups_pooled(n: int, groups: int) -> None:
    """Independent normal groups of one variance: the pooled convention covers at 95%."""
    rng = np.random.default_rng(20449 + n)
    samples = rng.normal(-2.0, 0.7, size=(N_SIM, n, groups)) + rng.normal(size=(N_SIM, 1, groups))
    hits = _coverage(lambda s: cv_interval(s, axis=0, convention="pooled"), samples, 0.49)
    assert _within_binomial_tolerance(hits, 0.95), hits / N_SIM


@pytest.mark.parametrize(("n", "groups"), [(8, 1), (20, 1), (8, 6)])
def test_coverage_released_is_what_its_formula_predicts(n: int, groups: int) -> None:
    """Their interval: ddof-0 variance s0^2 with n - 1 degrees of freedom. With
    T = n m s0^2 / sigma^2 ~ chi2_{m(n-1)} it holds sigma^2 iff
    n m chi2_lo / (n-1) <= T <= n m chi2_hi / (n-1): near 95% on one group (0.953 at
    n = 8: the interval sits low by (n-1)/n, but both of its ends move), nearly always on six
    independent ones."""
    lo, hi = chi2_quantile(0.025, n - 1), chi2_quantile(0.975, n - 1)
    df, stretch = groups * (n - 1), n * groups / (n - 1)
    predicted = chi2_cdf(stretch * hi, df) - chi2_cdf(stretch * lo, df)
    rng = np.random.default_rng(9715 + n + groups)
    samples = rng.normal(0.8, 0.3, size=(N_SIM, n, groups))
    hits = _coverage(lambda s: cv_interval(s, axis=0), samples, 0.09)
    assert _within_binomial_tolerance(hits, predicted), (predicted, hits / N_SIM)
    assert abs(predicted - 0.95) < 0.005 if groups == 1 else predicted > 0.999


def test_level_is_used() -> None:
    rng = np.random.default_rng(5)
    samples = rng.normal(3.0, 1.0, size=(N_SIM, 10))
    hits = _coverage(lambda s: cv_interval(s, level=0.5, convention="unbiased"), samples, 1.0)
    assert _within_binomial_tolerance(hits, 0.5)
    wide, narrow = cv_interval(samples[0], level=0.99), cv_interval(samples[0], level=0.5)
    assert wide.low < narrow.low <= narrow.cv <= narrow.high < wide.high


@pytest.mark.parametrize(("call", "start"), [
    (lambda: cv_interval([1.0, 2.0], convention="x"), "convention must be one of"),
    (lambda: cv_interval([1.0, 2.0], level=1.0), "level must lie in (0, 1), got 1.0"),
    (lambda: cv_interval([1.0]), "need at least 2 values along axis 0, got 1"),
    (lambda: cv_interval([[1.0, 2.0]], axis=2), "axis must index the 2 axes of values, got 2"),
    (lambda: cv_interval([1.0, np.inf]), "values must be finite"),
    (lambda: chi2_quantile(1.0, 3), "p must lie in (0, 1), got 1.0"),
    (lambda: chi2_cdf(1.0, 0), "df must be a finite positive number, got 0.0"),
])  # fmt: skip
def test_bad_cv_input(call, start: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RopesplitError) as error:
        call()
    assert str(error.value).startswith(start)


def test_a_layer_s_heads_are_fitted_on_their_own_rope_logits_and_probabilities():
    """three_term_heads against a float64 twin: each head's W from complex pairs (docs/theory.md
    section 2) through the keys it reads, its softmax over the mask, fitted one by one."""
    from ropesplit.numerics.mask import Mask
    from ropesplit.numerics.rope import to_pairs
    from ropesplit.numerics.spec import RopeSpec
    from ropesplit.numerics.threeterm import masked_softmax, three_term_heads

    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(4, 10, 8)), rng.normal(size=(2, 10, 8))
    spec = RopeSpec.from_base(8, 50.0)
    mask = Mask.both(3)
    got = three_term_heads(q, k, spec, positions=None, mask=mask)
    p = np.arange(10.0)
    turn = np.exp(1j * np.subtract.outer(p, p)[..., None] * np.asarray(spec.frequencies))
    for h in range(4):
        qc, kc = to_pairs(q[h], "half"), to_pairs(k[h // 2], "half")
        w = spec.scale * np.einsum("il,jl,ijl->ij", qc, kc.conj(), turn).real
        logits = three_term_fit(w, mask.allowed(10))
        probs = three_term_fit(masked_softmax(w, mask.allowed(10)), mask.allowed(10))
        assert got["r_logits"][h] == pytest.approx(logits.r, rel=1e-9)
        assert got["log_var_ratio_logits"][h] == pytest.approx(logits.log_var_ratio, rel=1e-9)
        assert got["r_probs"][h] == pytest.approx(probs.r, rel=1e-9)
        assert got["log_var_ratio_probs"][h] == pytest.approx(probs.log_var_ratio, rel=1e-9)
