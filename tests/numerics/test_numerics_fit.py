"""numerics.fit: the three-axis least-squares fit a_{i-j} + b_i + c_j (docs/theory.md 4-5)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics._inputs import causal_mask
from ropesplit.numerics.fit import band_gram, three_axis_fit


def lstsq_fit(w, mask):
    """Reference twin: the dense design matrix and numpy's float64 lstsq."""
    n = w.shape[0]
    rows, cols = np.nonzero(mask)
    dist = rows - cols - (rows - cols).min()
    design = np.zeros((rows.size, dist.max() + 1 + 2 * n))
    for t, (i, j, dd) in enumerate(zip(rows, cols, dist, strict=True)):
        design[t, dd] = design[t, dist.max() + 1 + i] = design[t, dist.max() + 1 + n + j] = 1
    x = np.linalg.lstsq(design, w[rows, cols], rcond=None)[0]
    return design @ x


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 30), window=st.one_of(st.none(), st.integers(2, 30)),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
@example(n=2, window=None, seed=0)
def test_fit_is_exact_on_an_additive_matrix(n, window, seed):
    rng = np.random.default_rng(seed)
    a, b, c = rng.normal(size=(3, n)) * rng.uniform(0.1, 100, size=3)[:, None]
    i, j = np.indices((n, n))
    w = a[np.abs(i - j)] + b[i] + c[j] + 7.0  # a constant too: the fit must absorb it
    mask = causal_mask(n, window)
    fit = three_axis_fit(w, mask)
    assert fit.r == pytest.approx(1.0, abs=1e-10)
    scale = np.abs(w).max()
    np.testing.assert_allclose(fit.fitted[mask], w[mask], rtol=0, atol=1e-9 * scale)
    # the returned coefficients reproduce the fit; gauge: c without mean or trend, b without mean
    rows, cols = np.nonzero(mask)
    again = fit.a[rows - cols - fit.d_min] + fit.b[rows] + fit.c[cols]
    np.testing.assert_allclose(again, w[mask], rtol=0, atol=1e-9 * scale)
    assert abs(fit.b.mean()) < 1e-9 * scale and abs(fit.c.mean()) < 1e-9 * scale


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 14), seed=st.integers(0, 2**32 - 1),
       kind=st.sampled_from(["causal", "window", "random"]))  # fmt: skip
def test_fit_matches_dense_lstsq(n, seed, kind):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(n, n)) * 3 + rng.normal(size=(n, 1))
    if kind == "random":
        mask = rng.random((n, n)) < 0.6
        mask[0, 0] = True
    else:
        mask = causal_mask(n, 3 if kind == "window" else None)
    fit = three_axis_fit(w, mask)
    np.testing.assert_allclose(fit.fitted[mask], lstsq_fit(w, mask), rtol=0, atol=1e-8)
    assert np.all(fit.fitted[~mask] == 0)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 25), window=st.one_of(st.none(), st.integers(1, 25)),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_band_gram_is_the_gram_matrix_of_the_mask(n, window, seed):
    gram = band_gram(n, window)
    rows, cols = np.nonzero(causal_mask(n, window))
    design = np.zeros((rows.size, gram.n_a + 2 * n))
    design[np.arange(rows.size), rows - cols] = 1
    design[np.arange(rows.size), gram.n_a + rows] = 1
    design[np.arange(rows.size), gram.n_a + n + cols] = 1
    x = np.random.default_rng(seed).normal(size=(gram.n_a + 2 * n, 2))
    np.testing.assert_allclose(gram.apply(x), design.T @ (design @ x), rtol=1e-12, atol=1e-10)
    assert gram.pairs == rows.size



@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), window=st.one_of(st.none(), st.integers(1, 40)),
       axes=st.sampled_from([2, 3]),
       rhs=arrays(np.float64, (4,), elements=st.floats(-1e3, 1e3)))  # fmt: skip
def test_the_compiled_band_solve_is_the_numpy_iteration(n, window, axes, rhs):
    """BandGram's CG (one compiled loop) takes the numpy CG of _Gram step for step:
    the same iterations and the same solution, to rounding, or the same error (a right
    side near 1e-161 underflows in both; layer_statistics solves for a unit one)."""
    from ropesplit.numerics.fit import BandGram, _Gram

    gram = band_gram(n, window, axes)
    x0 = np.random.default_rng(n).normal(size=(gram.diag.size, 4)) * rhs  # four right sides
    right = gram.apply(x0)
    numpy_gram = BandGram(n, window, axes)
    numpy_gram._cg = functools.partial(_Gram._cg, numpy_gram)  # type: ignore[method-assign]

    def solved(g):
        try:
            return g.solve(right)
        except RopesplitError as error:
            return str(error)

    compiled, numpy = solved(gram), solved(numpy_gram)
    if isinstance(numpy, str):
        assert compiled == numpy
        return
    (got, steps), (want, steps_np) = compiled, numpy
    assert steps == steps_np
    scale = np.abs(want).max() + 1e-300
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * scale)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), window=st.one_of(st.none(), st.integers(1, 30)),
       axes=st.sampled_from([2, 3]), compiled=st.booleans(),
       scales=arrays(np.float64, (3,), elements=st.floats(1e-6, 1e6)))  # fmt: skip
def test_a_column_solved_beside_others_is_the_column_solved_alone(n, window, axes, compiled,
                                                                 scales):
    """The right sides are independent systems: each stops at the iteration it converges,
    so solving several at once gives each one its own fit, to the solve's tolerance (a converged
    column iterated on until the slowest converged drifted, or blew up: hypothesis found
    a layer whose heads did not converge together though each did alone)."""
    from ropesplit.numerics.fit import BandGram, _Gram

    gram = band_gram(n, window, axes) if compiled else BandGram(n, window, axes)
    if not compiled:
        gram._cg = functools.partial(_Gram._cg, gram)  # type: ignore[method-assign]
    rng = np.random.default_rng(n)
    right = gram.apply(rng.normal(size=(gram.diag.size, 3)) * scales)  # (K, 3)
    together, _ = gram.solve(right)
    for c in range(3):
        alone, _ = gram.solve(right[:, [c]])
        size = np.linalg.norm(right[:, c])  # the fit (G x), to the solve's tolerance
        np.testing.assert_allclose(gram.apply(together[:, [c]]), gram.apply(alone), rtol=0,
                                   atol=1e-10 * size)  # fmt: skip
        np.testing.assert_allclose(gram.apply(alone)[:, 0], right[:, c], rtol=0,
                                   atol=1e-10 * size)  # fmt: skip


def test_heads_that_converge_apart_converge_in_one_layer():
    """Hypothesis's case: nearly constant queries, constant keys, a window of 3. Each head
    converged alone in 13 or 24 iterations; solved together, the early ones were iterated
    on rounding noise until the solve failed ("did not converge in 270 iterations")."""
    from ropesplit.numerics.spec import RopeSpec
    from ropesplit.numerics.stats import head_statistics, layer_statistics

    q = np.ones((4, 12, 8))
    q[0, 0, 0] = 0.0
    k = np.full((2, 12, 8), 3.0)
    spec = RopeSpec.from_base(8, 50.0, window=3, kv_map=[1, 0, 0, 1])
    layer = layer_statistics(q, k, spec)
    alone = [head_statistics(q[h], k[[1, 0, 0, 1][h]], spec) for h in range(4)]
    for got, want in zip(layer, alone, strict=True):
        assert got.r_3axis == pytest.approx(want.r_3axis, abs=1e-12)
        assert 0.0 <= got.r_3axis <= 1.0 + 1e-12


def test_fit_converges_at_long_sequences():
    gram = band_gram(2048, None)
    rhs = gram.apply(np.random.default_rng(0).normal(size=(gram.diag.size, 3)))
    x, iterations = gram.solve(rhs)
    assert iterations < 200
    assert np.linalg.norm(gram.apply(x) - rhs) <= 1e-10 * np.linalg.norm(rhs)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 40), window=st.one_of(st.none(), st.integers(2, 40)),
       axes=st.sampled_from([2, 3]), noise=st.floats(-1.0, 1.0))  # fmt: skip
def test_rounding_along_the_gauge_directions_does_not_stall_the_solve(n, window, axes, noise):
    # A^T w is orthogonal to the gauge directions; sums with rounding are not.  A right side
    # that is mostly such rounding (logits next to constant) still solves, to the same fit.
    gram = band_gram(n, window, axes)
    rhs = gram.apply(np.random.default_rng(n).normal(size=(gram.diag.size, 1)))
    gauge = gram.gauge()
    assert np.abs(gram.apply(gauge)).max() < 1e-9 * n  # they change no fitted value
    off = rhs + noise * 1e3 * np.linalg.norm(rhs) * gauge.sum(1, keepdims=True)
    x, _ = gram.solve(off)
    np.testing.assert_allclose(gram.apply(x), rhs, rtol=0, atol=1e-9 * np.linalg.norm(rhs))


@pytest.mark.parametrize(
    "w, mask, message",
    [
        (np.zeros((2, 3)), None, r"W must be square \(N, N\)"),
        (np.zeros((3, 3)), np.zeros((2, 2), bool), r"mask must have the shape of W"),
        (np.zeros((3, 3)), np.zeros((3, 3), bool), "mask selects no pairs"),
    ],
)
def test_fit_errors(w, mask, message):
    with pytest.raises(RopesplitError, match=message):
        three_axis_fit(w, mask)


def lstsq_fit_axes(w, mask, axes):
    """Reference twin of a two- or three-axis fit: dense design matrix, float64 lstsq."""
    n = w.shape[0]
    rows, cols = np.nonzero(mask)
    blocks = [np.eye(n)[rows], np.eye(n)[cols]]  # (pairs, N) each: u_i, v_j
    if axes == 3:
        blocks.insert(0, np.eye(n)[rows - cols])  # a_{i-j}
    design = np.concatenate(blocks, axis=1)
    return design @ np.linalg.lstsq(design, w[rows, cols], rcond=None)[0]


@settings(max_examples=30, deadline=None)
@given(w=arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 12)).map(
           lambda kn: (kn[0], kn[1], kn[1])), elements=st.integers(-40, 40).map(lambda v: v / 4)),
       axes=st.sampled_from([2, 3]), window=st.one_of(st.none(), st.integers(1, 12)))  # fmt: skip
def test_additive_fits_match_dense_lstsq(w, axes, window):
    from ropesplit.numerics.fit import additive_fits

    n = w.shape[1]
    mask = causal_mask(n, window)
    fits = additive_fits(w, axes=axes, window=window)
    fitted = fits.fitted()
    for k in range(w.shape[0]):
        np.testing.assert_allclose(fitted[k][mask], lstsq_fit_axes(w[k], mask, axes),
                                   rtol=0, atol=1e-8 * max(1.0, np.abs(w).max()))  # fmt: skip
    np.testing.assert_allclose(fits.c.mean(axis=1), 0.0, atol=1e-9 * max(1.0, np.abs(w).max()))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 20), window=st.one_of(st.none(), st.integers(1, 20)),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_two_axis_band_gram_is_the_gram_matrix_of_the_mask(n, window, seed):
    gram = band_gram(n, window, 2)
    rows, cols = np.nonzero(causal_mask(n, window))
    design = np.zeros((rows.size, 2 * n))
    design[np.arange(rows.size), rows] = 1
    design[np.arange(rows.size), n + cols] = 1
    x = np.random.default_rng(seed).normal(size=(2 * n, 3))
    np.testing.assert_allclose(gram.apply(x), design.T @ (design @ x), rtol=1e-12, atol=1e-10)
    w = np.random.default_rng(seed).normal(size=(3, n, n))
    np.testing.assert_allclose(gram.sums(w), np.stack([design.T @ wk[rows, cols] for wk in w], 1),
                               rtol=1e-12, atol=1e-10)  # fmt: skip


def test_additive_fits_three_axes_equal_three_axis_fit():
    from ropesplit.numerics.fit import additive_fits

    w = np.random.default_rng(1).normal(size=(2, 40, 40))
    fits = additive_fits(w, axes=3)
    for k in range(2):
        one = three_axis_fit(w[k])
        np.testing.assert_allclose(fits.a[k], one.a, atol=1e-9)
        np.testing.assert_allclose(fits.b[k], one.b, atol=1e-9)
        np.testing.assert_allclose(fits.c[k], one.c, atol=1e-9)


def test_additive_fits_of_a_constant_matrix_need_no_solve():
    from ropesplit.numerics.fit import additive_fits

    fits = additive_fits(np.full((1, 6, 6), 2.5), axes=2)
    np.testing.assert_allclose(fits.fitted()[0], 2.5)
    assert fits.iterations == 0 and np.all(fits.c == 0)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(3, 30), window=st.one_of(st.none(), st.integers(2, 30)),
       axes=st.sampled_from([2, 3]),
       shift=arrays(np.float64, 3, elements=st.floats(-5.0, 5.0)))  # fmt: skip
def test_normalise_is_one_representative_per_fit(n, window, axes, shift):
    # two solutions that differ along the gauge directions are the same fit; normalise must
    # map both to one x, with c of mean 0 (and, three-axis, no linear trend) and b of mean 0
    gram = band_gram(n, window, axes)
    x = np.random.default_rng(n).normal(size=(gram.diag.size, 1))
    gauge = gram.gauge()
    moved = x + gauge @ shift[: gauge.shape[1], None]
    np.testing.assert_allclose(gram.apply(moved), gram.apply(x), atol=1e-9)  # the same fit
    one, other = gram.normalise(x), gram.normalise(moved)
    np.testing.assert_allclose(one, other, atol=1e-9)
    c = one[gram.n_a + n :, 0]
    assert abs(c.mean()) < 1e-9
    if gram.n_a:  # three axes: the trend a_D = -D, b_i = i, c_j = -j changes no fitted value
        assert abs((np.arange(n) - (n - 1) / 2) @ c) < 1e-8
        assert abs(one[gram.n_a : gram.n_a + n, 0].mean()) < 1e-9

