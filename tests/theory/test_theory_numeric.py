"""The lambdified steps against direct float64 matrix computations (hypothesis).

Each identity's ``numeric`` summed over pairs must agree with plain numpy
rotation matrices (or complex float64 twins) to 1e-9 relative to the natural
scale ``s |q| |k|``; each bound and each optimality claim (docs/theory.md section 6:
mean rotation, mean key) must never be beaten on random inputs.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import assume, example, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.theory import get_step

REL = 1e-9  # agreement of identities, relative to s |q| |k|
SLACK = 1e-12  # bounds: allowed float rounding, relative to the bound's scale

dims = st.integers(1, 128).map(lambda p: 2 * p)  # any even d in 2..256
bases = st.floats(2.0, 1e7)
deltas = st.integers(-1_000_000, 1_000_000)
positions = st.integers(0, 1_000_000)
seeds = st.integers(0, 2**32 - 1)
layouts = st.sampled_from(["half", "interleaved"])
SETTINGS = settings(max_examples=40, deadline=None)  # local: never a global profile


def frequencies(d: int, base: float) -> np.ndarray:
    """theta_l = base^(-2l/d), l = 0 .. d/2 - 1 (docs/theory.md section 1)."""
    return base ** (-2.0 * np.arange(d // 2) / d)


def pair_index(d: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates (x_l, y_l) of every pair in the layout."""
    P = d // 2
    l = np.arange(P)
    return (l, l + P) if layout == "half" else (2 * l, 2 * l + 1)


def rope(m: float, theta: np.ndarray, layout: str) -> np.ndarray:
    """R(m) as a dense (d, d) float64 matrix, built pair by pair (the slow twin)."""
    d = 2 * len(theta)
    xs, ys = pair_index(d, layout)
    R = np.zeros((d, d))
    for x, y, t in zip(xs, ys, theta, strict=True):
        c, s = math.cos(m * t), math.sin(m * t)
        R[x, x], R[x, y], R[y, x], R[y, y] = c, -s, s, c
    return R


def vectors(seed: int, d: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(d) for _ in range(n)]


def pairs(v: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = pair_index(len(v), layout)
    return v[xs], v[ys]


@SETTINGS
@given(dims, bases, positions, deltas, seeds, layouts)
@example(2, 10_000.0, 0, 0, 0, "half")
@example(256, 1e7, 1_000_000, 1_000_000, 1, "interleaved")
def test_logit_expansion_matches_rotated_dot_product(d, base, j, Delta, seed, layout):
    theta, s = frequencies(d, base), 1 / math.sqrt(d)
    q, k = vectors(seed, d, 2)
    i = j + Delta
    W = s * (rope(i, theta, layout) @ q) @ (rope(j, theta, layout) @ k)
    fn = get_step("logit_expansion").numeric
    (a, b), (c, e) = pairs(q, layout), pairs(k, layout)
    total = math.fsum(fn(*args, Delta, s) for args in zip(a, b, c, e, theta, strict=True))
    note(f"W={W!r} numeric={total!r}")
    assert abs(total - W) <= REL * s * np.linalg.norm(q) * np.linalg.norm(k)


@SETTINGS
@given(dims, bases, positions, deltas, seeds, layouts)
def test_split_exact_terms_match_their_definitions(d, base, j, Delta, seed, layout):
    theta, s = frequencies(d, base), 1 / math.sqrt(d)
    q, kbar, delta = vectors(seed, d, 3)
    i = j + Delta
    back = rope(-Delta, theta, layout)  # R(-Delta), (d, d)
    W = s * (rope(i, theta, layout) @ q) @ (rope(j, theta, layout) @ (kbar + delta))
    want = (s * q @ back @ kbar, s * q @ delta, s * q @ (back - np.eye(d)) @ delta)
    fn = get_step("split_exact").numeric
    terms = [fn(*args, Delta, s) for args in zip(
        *pairs(q, layout), *pairs(kbar, layout), *pairs(delta, layout), theta, strict=True)]
    got = [math.fsum(t[n] for t in terms) for n in range(3)]
    scale = s * np.linalg.norm(q) * (np.linalg.norm(kbar) + np.linalg.norm(delta))
    assert abs(sum(got) - W) <= REL * scale
    for g_, w_ in zip(got, want, strict=True):
        assert abs(g_ - w_) <= REL * scale


@SETTINGS
@given(dims, bases, positions, positions, layouts)
def test_rope_relative_blocks_match_matrix_product(d, base, m, n, layout):
    theta = frequencies(d, base)
    M = rope(m, theta, layout).T @ rope(n, theta, layout)  # (d, d)
    xs, ys = pair_index(d, layout)
    fn = get_step("rope_relative").numeric
    for x, y, t in zip(xs, ys, theta, strict=True):
        block = np.array(fn(t, m, n))
        assert np.allclose(M[np.ix_([x, y], [x, y])], block, rtol=0, atol=REL)


@SETTINGS
@given(dims, bases, positions, deltas, seeds)
def test_layouts_agree_after_the_permutation(d, base, j, Delta, seed):
    theta, P = frequencies(d, base), d // 2
    q, k = vectors(seed, d, 2)
    fn = get_step("layouts_equivalent").numeric
    Pi = np.zeros((d, d))
    for l in range(P):
        for t in (0, 1):
            Pi[fn(l, t, P), 2 * l + t] = 1.0
    assert np.array_equal(Pi @ Pi.T, np.eye(d))
    i = j + Delta
    inter = (rope(i, theta, "interleaved") @ q) @ (rope(j, theta, "interleaved") @ k)
    half = (rope(i, theta, "half") @ Pi @ q) @ (rope(j, theta, "half") @ Pi @ k)
    assert abs(half - inter) <= REL * np.linalg.norm(q) * np.linalg.norm(k)


@SETTINGS
@given(dims, bases, deltas, seeds, st.floats(1e-3, 1e3))
@example(64, 100_000.0, 1, 0, 1.0)
def test_remainder_never_exceeds_either_bound(d, base, Delta, seed, spread):
    theta, s = frequencies(d, base), 1 / math.sqrt(d)
    q, delta = vectors(seed, d, 2)
    delta = spread * delta
    E = s * q @ (rope(-Delta, theta, "half") - np.eye(d)) @ delta
    fn = get_step("remainder_bound").numeric
    bounds = [fn(*args, Delta, s) for args in zip(
        *pairs(q, "half"), *pairs(delta, "half"), theta, strict=True)]
    tight, loose = (math.fsum(b[n] for b in bounds) for n in range(2))
    note(f"E={E!r} tight={tight!r} loose={loose!r}")
    scale = s * np.linalg.norm(q) * np.linalg.norm(delta)
    assert abs(E) <= tight + SLACK * scale
    assert tight <= loose + SLACK * scale


# the step's numeric form is sympy's sqrt(dc**2 + de**2): below about 1e-154 the squares
# underflow to subnormals and the float evaluation loses digits (a fresh database drew
# de = 9.6e-160: 1e-6 relative); such inputs are rounding, not the condition
_NOT_UNDERFLOWING = st.floats(-1e3, 1e3).map(lambda v: 0.0 if abs(v) < 1e-150 else v)


@SETTINGS
@given(_NOT_UNDERFLOWING, _NOT_UNDERFLOWING, st.floats(0, 100), st.floats(0.01, 10))
@example(1.0, 0.0, 2 * math.pi, 1.0)
@example(0.0, 0.0, 1.0, 1.0)
def test_exact_split_condition_is_the_worst_remainder_at_distance_one(dc, de, theta, s):
    fn = get_step("exact_split_condition").numeric
    grad = s * (np.array([[math.cos(theta), math.sin(theta)], [-math.sin(theta), math.cos(theta)]])
                - np.eye(2)) @ np.array([dc, de])  # E(Delta=1) = grad . q
    worst = fn(dc, de, theta, s)
    scale = s * math.hypot(dc, de)
    # hypot, not norm: the squares of entries near 1e-160 underflow (a fresh database drew one)
    assert math.isclose(worst, math.hypot(*grad), rel_tol=1e-9, abs_tol=1e-9 * scale)


@SETTINGS
@given(st.floats(1e-3, 1e3), st.floats(0, 2 * math.pi), st.integers(-1000, 1000))
def test_exact_split_condition_zero_only_on_non_rotating_pairs(norm, angle, k):
    fn = get_step("exact_split_condition").numeric
    assert fn(norm * math.cos(angle), norm * math.sin(angle), 2 * math.pi * k, 1.0) <= 1e-9 * norm
    theta = 2 * math.pi * k + angle
    assume(abs(math.sin(angle / 2)) > 1e-3)
    assert fn(norm * math.cos(angle), norm * math.sin(angle), theta, 1.0) > 1e-4 * norm


@SETTINGS
@given(st.lists(st.floats(-50, 50), min_size=4, max_size=4), st.floats(-1e3, 1e3))
def test_softmax_shift_numeric_matches_softmax_of_shifted_row(w, b):
    x = np.array(w) + b
    want = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    got = get_step("softmax_shift").numeric(*w, b)
    assert np.allclose(got, want, rtol=1e-9, atol=1e-15)


@SETTINGS
@given(st.integers(1, 64), st.floats(0.0, 3.0), seeds)
@example(2, 0.0, 0)
def test_attention_never_leaves_the_bound(n, eps, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 5  # f + g on one row
    E = rng.uniform(-eps, eps, n)
    A, Ah = np.exp(x + E - (x + E).max()), np.exp(x - x.max())
    A, Ah = A / A.sum(), Ah / Ah.sum()
    low, high, l1 = get_step("attention_bound").numeric(eps)
    ratio = A / Ah
    assert np.all(ratio >= low * (1 - 1e-12)) and np.all(ratio <= high * (1 + 1e-12))
    assert np.abs(A - Ah).sum() <= l1 + 1e-12


@SETTINGS
@given(dims, bases, deltas, st.integers(-10_000, 10_000), seeds)
def test_moving_a_key_never_exceeds_the_perturbation_bound(d, base, Delta, t, seed):
    theta, s = frequencies(d, base), 1 / math.sqrt(d)
    q, k = vectors(seed, d, 2)
    move = s * q @ (rope(-(Delta + t), theta, "half") - rope(-Delta, theta, "half")) @ k
    fn = get_step("perturbation_bound").numeric
    bound = math.fsum(fn(*args, t, s) for args in zip(
        *pairs(q, "half"), *pairs(k, "half"), theta, strict=True))
    assert abs(move) <= bound + SLACK * s * np.linalg.norm(q) * np.linalg.norm(k)


@SETTINGS
@given(st.integers(1, 128), bases, deltas, seeds)
@example(1, 10_000.0, 0, 0)
def test_long_term_decay_chain_of_bounds(P, base, Delta, seed):
    theta = frequencies(2 * P, base)
    rng = np.random.default_rng(seed)
    h = rng.standard_normal(P) + 1j * rng.standard_normal(P)
    lhs, abel, decay = get_step("long_term_decay").numeric(
        list(h.real), list(h.imag), list(theta), Delta, P)
    direct = abs(np.sum(h * np.exp(1j * theta * Delta)))
    jumps = np.abs(np.diff(np.append(h, 0)))  # |h_{m} - h_{m-1}|, h_P = 0
    assert math.isclose(lhs, direct, rel_tol=1e-9, abs_tol=1e-9 * np.abs(h).sum())
    assert lhs <= abel * (1 + 1e-12) + 1e-12
    assert abel <= jumps.max() * decay * (1 + 1e-12) + 1e-12


# --- section 6: the reference rotation, its optimum and the mean key (hypothesis arrays) ----

# the lambdified bounds square coordinates (x^2 underflows below ~1e-154, the complex twin
# does not), so magnitudes start at 1e-100; exact zeros stay in
coords = st.floats(-10, 10, allow_nan=False, allow_infinity=False).filter(
    lambda x: x == 0.0 or abs(x) >= 1e-100)
unit = st.floats(-1, 1, allow_nan=False, allow_infinity=False)
pair_counts = st.integers(1, 12)
weights_el = st.floats(1e-3, 1.0, allow_nan=False)


def vec(n: int):
    """Strategy: a float64 array of n coordinates in [-10, 10]."""
    return arrays(np.float64, n, elements=coords)


def complex_pairs(v: np.ndarray) -> np.ndarray:
    """Half-layout pairs of a real (d,) vector as complex (P,): x_l + i y_l (the float64 twin)."""
    x, y = pairs(v, "half")
    return x + 1j * y


@st.composite
def heads(draw):
    """(theta, s, q, kbar, delta, m): P pairs, any reference rotation m with |Re|, |Im| <= 1."""
    P = draw(pair_counts)
    theta, s = frequencies(2 * P, draw(bases)), 1 / math.sqrt(2 * P)
    q, kbar, delta = (draw(vec(2 * P)) for _ in range(3))
    m = draw(arrays(np.float64, P, elements=unit)) + 1j * draw(arrays(np.float64, P, elements=unit))
    return theta, s, q, kbar, delta, m


@st.composite
def distance_laws(draw):
    """(Delta, w): 1..10 distances in 0..5000 with positive weights summing to 1."""
    n = draw(st.integers(1, 10))
    Delta = draw(arrays(np.int64, n, elements=st.integers(0, 5000)))
    w = draw(arrays(np.float64, n, elements=weights_el))
    return Delta, w / w.sum()


def _deviation_part(theta, s, q, delta, rot):
    """s Re sum_l q~_l conj(delta~_l) rot_l (complex float64 twin); rot (..., P)."""
    return s * np.real(np.sum(complex_pairs(q) * np.conj(complex_pairs(delta)) * rot, axis=-1))


@SETTINGS
@given(heads(), positions, deltas, st.integers(-5000, 5000))
def test_split_reference_terms_match_their_twins(head, j, Delta, c):
    theta, s, q, kbar, delta, m = head
    i = j + Delta
    fn = get_step("split_reference").numeric
    args = list(zip(*pairs(q, "half"), *pairs(kbar, "half"), *pairs(delta, "half"), theta,
                    strict=True))

    def summed(mm):
        terms = [fn(*a, t_, Delta, x.real, x.imag, s) for (*a, t_), x in zip(args, mm, strict=True)]
        return [math.fsum(t[n] for t in terms) for n in range(3)]

    f, g, E = summed(m)
    W = s * (rope(i, theta, "half") @ q) @ (rope(j, theta, "half") @ (kbar + delta))
    scale = s * np.linalg.norm(q) * (np.linalg.norm(kbar) + np.linalg.norm(delta)) * 2 + 1e-300
    note(f"W={W!r} f+g+E={f + g + E!r}")
    assert abs(f + g + E - W) <= REL * scale
    assert abs(f - s * q @ rope(-Delta, theta, "half") @ kbar) <= REL * scale
    assert abs(g - _deviation_part(theta, s, q, delta, m)) <= REL * scale
    # a reference distance c: g_m is the query rotated to position c against the deviation
    g_c = summed(np.exp(1j * theta * c))[1]
    assert abs(g_c - s * (rope(c, theta, "half") @ q) @ delta) <= REL * scale


@SETTINGS
@given(heads(), deltas, st.floats(0.0, 1.0))
@example((np.array([1.0]), 1.0, np.array([1.0, 0.0]), np.zeros(2), np.array([0.0, 1.0]),
          np.array([1.0 + 0j])), 3, 1.0)
def test_reference_remainder_never_exceeds_its_bound(head, Delta, shrink):
    theta, s, q, _, delta, m = head
    m = shrink * m
    E = _deviation_part(theta, s, q, delta, np.exp(1j * theta * Delta) - m)  # the twin
    fn = get_step("reference_bound").numeric
    bound = math.fsum(fn(*args, Delta, x.real, x.imag, s) for *args, x in zip(
        *pairs(q, "half"), *pairs(delta, "half"), theta, m, strict=True))
    note(f"E={E!r} bound={bound!r}")
    assert abs(E) <= bound + SLACK * s * np.linalg.norm(q) * np.linalg.norm(delta)
    # at m = 1 the bound is section 3's tight chord, pair by pair
    tight = get_step("remainder_bound").numeric
    for *args, t_ in zip(*pairs(q, "half"), *pairs(delta, "half"), theta, strict=True):
        assert math.isclose(fn(*args, t_, Delta, 1.0, 0.0, s), tight(*args, t_, Delta, s)[0],
                            rel_tol=1e-9, abs_tol=1e-12)


def _mean_rotation(theta, Delta, w):
    """m_l from the step's numeric, one pair at a time; (P,) complex."""
    fn = get_step("mean_rotation_optimum").numeric
    out = [fn(t_, [float(x) for x in Delta], list(w), len(w)) for t_ in theta]
    return np.array([re + 1j * im for re, im in out])


@SETTINGS
@given(heads(), distance_laws(), st.floats(-1e3, 1e3), st.integers(-5000, 5000))
def test_mean_rotation_is_never_beaten_by_zero_a_distance_or_any_constant(head, law, const, c):
    theta, s, q, _, delta, _ = head
    Delta, w = law
    rot = np.exp(1j * np.outer(Delta, theta))  # (n, P)
    m = _mean_rotation(theta, Delta, w)
    assert np.allclose(m, w @ rot, rtol=0, atol=1e-12)  # float64 twin of E_Delta e^{i theta Delta}
    X = _deviation_part(theta, s, q, delta, rot)  # (n,) the deviation part per distance
    g_mean = _deviation_part(theta, s, q, delta, m)
    scale = s * np.abs(complex_pairs(q) * complex_pairs(delta)).sum() + 1e-300
    assert abs(w @ X - g_mean) <= REL * scale  # the mean is g_m with the mean rotation
    best = w @ (X - g_mean) ** 2
    for other in (_deviation_part(theta, s, q, delta, np.ones_like(m)),  # m = 1
                  _deviation_part(theta, s, q, delta, np.exp(1j * theta * c)),  # distance c
                  const):
        note(f"best={best!r} other={other!r}")
        assert best <= w @ (X - other) ** 2 + 1e-9 * scale**2


@SETTINGS
@given(heads(), distance_laws())
def test_mean_square_remainder_closed_form_matches_the_direct_mean(head, law):
    theta, s, q, _, delta, _ = head
    Delta, w = law
    h = complex_pairs(q) * np.conj(complex_pairs(delta))  # (P,)
    rot = np.exp(1j * np.outer(Delta, theta))  # (n, P)
    m = w @ rot
    direct = w @ (s * np.real((rot - m) @ h)) ** 2  # E_Delta E_m^2, float64 twin
    fn = get_step("mean_rotation_remainder").numeric
    D, ws, n = [float(x) for x in Delta], list(w), len(w)
    terms = {(l, k): fn(h[l].real, h[l].imag, h[k].real, h[k].imag, theta[l], theta[k], D, ws, n, s)
             for l in range(len(h)) for k in range(len(h))}
    scale = (s * np.abs(h).sum()) ** 2 + 1e-300
    note(f"direct={direct!r} closed={math.fsum(terms.values())!r}")
    assert abs(math.fsum(terms.values()) - direct) <= 1e-9 * scale
    for l in range(len(h)):  # one pair: 0 <= term <= s^2 |h|^2 (1 - |m|^2)
        top = s**2 * abs(h[l]) ** 2 * (1 - abs(m[l]) ** 2)
        assert -1e-9 * scale <= terms[l, l] <= top + 1e-9 * scale


@SETTINGS
@given(st.integers(1, 8), st.integers(1, 8), bases, deltas, st.data())
def test_mean_key_is_never_beaten_by_another_reference_key(P, n, base, Delta, data):
    theta, s = frequencies(2 * P, base), 1 / math.sqrt(2 * P)
    keys = data.draw(arrays(np.float64, (n, 2 * P), elements=coords))  # (n, d)
    w = data.draw(arrays(np.float64, n, elements=weights_el))
    w = w / w.sum()
    q, other = data.draw(vec(2 * P)), data.draw(vec(2 * P))
    m = data.draw(arrays(np.float64, P, elements=unit)) + 1j * data.draw(
        arrays(np.float64, P, elements=unit))
    fn = get_step("mean_key_optimum").numeric
    xs, ys = pair_index(2 * P, "half")
    kbar = np.zeros(2 * P)
    for l in range(P):  # the mean key, one pair at a time
        kbar[xs[l]], kbar[ys[l]] = fn(list(keys[:, xs[l]]), list(keys[:, ys[l]]), list(w), n)
    assert np.allclose(kbar, w @ keys, rtol=0, atol=1e-9)

    def remainders(ref):  # E_m of every key against reference key ref, (n,)
        return np.array([_deviation_part(theta, s, q, k - ref, np.exp(1j * theta * Delta) - m)
                         for k in keys])

    scale = s * np.linalg.norm(q) * (np.abs(keys).sum() + np.abs(other).sum()) + 1e-300
    assert abs(w @ remainders(kbar)) <= REL * scale
    assert w @ remainders(kbar) ** 2 <= w @ remainders(other) ** 2 + 1e-9 * scale**2


# --- section 9: any set of pairs, offsets of both signs (issue 54) ----------------------

lengths = st.integers(1, 9)


@st.composite
def masks(draw):
    """(n, allowed): a length n and any (n, n) boolean set of pairs, keys after queries
    included."""
    n = draw(lengths)
    return n, draw(arrays(np.bool_, (n, n), elements=st.booleans()))


def _upper(n: int) -> tuple[int, np.ndarray]:
    """Only keys after their query: the pairs a causal derivation never sees."""
    return n, np.triu(np.ones((n, n), dtype=bool), 1)


@SETTINGS
@given(dims, bases, positions, seeds, layouts, masks())
@example(8, 10_000.0, 0, 0, "half", _upper(5))
@example(2, 1e7, 1_000_000, 1, "interleaved", _upper(9))
def test_split_any_pairs_matches_the_rotated_dot_product_on_every_allowed_pair(
        d, base, start, seed, layout, mask):
    n, allowed = mask
    theta, s = frequencies(d, base), 1 / math.sqrt(d)
    q, k = np.array(vectors(seed, d, 2 * n)).reshape(2, n, d)  # (2, n, d): queries, keys
    kbar = k.mean(0)  # (d,)
    fn = get_step("split_any_pairs").numeric
    for i, j in zip(*np.nonzero(allowed), strict=True):
        pi, pj = start + int(i), start + int(j)  # positions; pj > pi where j > i
        W = s * (rope(pi, theta, layout) @ q[i]) @ (rope(pj, theta, layout) @ k[j])
        terms = [fn(*args, pi, pj, s) for args in zip(
            *pairs(q[i], layout), *pairs(kbar, layout), *pairs(k[j] - kbar, layout), theta,
            strict=True)]
        f, g, E = (math.fsum(t[m] for t in terms) for m in range(3))
        scale = s * np.linalg.norm(q[i]) * (np.linalg.norm(kbar) + np.linalg.norm(k[j] - kbar))
        note(f"(i, j)=({pi}, {pj}) W={W!r} f+g+E={f + g + E!r}")
        assert abs(f + g + E - W) <= REL * scale
        assert abs(f - s * q[i] @ rope(pj - pi, theta, layout) @ kbar) <= REL * scale
        assert abs(g - s * q[i] @ (k[j] - kbar)) <= REL * scale


@SETTINGS
@given(dims, bases, positions, seeds, masks(), st.floats(1e-3, 1e3))
@example(64, 100_000.0, 0, 0, _upper(4), 1.0)
def test_remainder_never_exceeds_its_bound_on_any_pair_of_any_mask(
        d, base, start, seed, mask, spread):
    n, allowed = mask
    theta, s = frequencies(d, base), 1 / math.sqrt(d)
    q, k = np.array(vectors(seed, d, 2 * n)).reshape(2, n, d)  # (2, n, d)
    delta = spread * (k - k.mean(0))  # (n, d) key deviations
    fn = get_step("remainder_bound_any_pairs").numeric
    for i, j in zip(*np.nonzero(allowed), strict=True):
        pi, pj = start + int(i), start + int(j)
        E = s * q[i] @ (rope(pj - pi, theta, "half") - np.eye(d)) @ delta[j]  # the twin
        bounds = [fn(*args, pi, pj, s) for args in zip(
            *pairs(q[i], "half"), *pairs(delta[j], "half"), theta, strict=True)]
        mirror = [fn(*args, pj, pi, s) for args in zip(
            *pairs(q[i], "half"), *pairs(delta[j], "half"), theta, strict=True)]
        tight, loose = (math.fsum(b[m] for b in bounds) for m in range(2))
        note(f"(i, j)=({pi}, {pj}) E={E!r} tight={tight!r} loose={loose!r}")
        scale = s * np.linalg.norm(q[i]) * np.linalg.norm(delta[j])
        assert abs(E) <= tight + SLACK * scale
        assert tight <= loose + SLACK * scale
        assert bounds == mirror  # a pair and its mirror: one bound


@SETTINGS
@given(dims, bases, deltas, seeds)
@example(64, 100_000.0, -1, 0)
@example(2, 10_000.0, -1_000_000, 1)
def test_remainder_bound_any_pairs_agrees_with_the_causal_bound_at_the_mirrored_offset(
        d, base, Delta, seed):
    theta, s = frequencies(d, base), 1 / math.sqrt(d)
    q, delta = vectors(seed, d, 2)
    both = get_step("remainder_bound_any_pairs").numeric
    causal = get_step("remainder_bound").numeric
    for args in zip(*pairs(q, "half"), *pairs(delta, "half"), theta, strict=True):
        got = both(*args, 0, Delta, s)  # query at 0, key at Delta: the offset is -Delta
        want = causal(*args, abs(Delta), s)
        assert all(math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-300)
                   for x, y in zip(got, want, strict=True))


@st.composite
def symmetric_laws(draw):
    """(K, w): weights w[0..K] > 0, w[D] on each of +D and -D, w[0] + 2 sum w[1:] = 1."""
    K = draw(st.integers(0, 40))
    w = draw(arrays(np.float64, K + 1, elements=weights_el))
    return K, w / (w[0] + 2 * w[1:].sum())


@SETTINGS
@given(symmetric_laws(), st.floats(0.0, 3.0))
@example((0, np.array([1.0])), 1.0)
def test_symmetric_mean_rotation_is_real_and_is_the_mean_over_both_signs(law, theta):
    K, w = law
    re, im = get_step("mean_rotation_both_ways").numeric(theta, list(w), K)
    offsets = np.arange(-K, K + 1)  # (2K + 1,)
    direct = np.sum(w[np.abs(offsets)] * np.exp(1j * theta * offsets))  # the complex twin
    note(f"claim={re!r}+{im!r}i direct={direct!r}")
    assert im == 0 and abs(direct.imag) <= 1e-12
    assert abs(re - direct.real) <= 1e-12


@st.composite
def two_sided_laws(draw):
    """(Delta, w): 1..10 offsets in -5000..5000 (both signs) with weights summing to 1."""
    n = draw(st.integers(1, 10))
    Delta = draw(arrays(np.int64, n, elements=st.integers(-5000, 5000)))
    w = draw(arrays(np.float64, n, elements=weights_el))
    return Delta, w / w.sum()


@SETTINGS
@given(heads(), two_sided_laws(), st.floats(-1e3, 1e3), st.integers(-5000, 5000))
def test_mean_rotation_over_offsets_of_both_signs_is_never_beaten(head, law, const, c):
    theta, s, q, _, delta, _ = head
    Delta, w = law
    rot = np.exp(1j * np.outer(Delta, theta))  # (n, P)
    m = _mean_rotation(theta, Delta, w)
    X = _deviation_part(theta, s, q, delta, rot)  # (n,) the deviation part per offset
    g_mean = _deviation_part(theta, s, q, delta, m)
    scale = s * np.abs(complex_pairs(q) * complex_pairs(delta)).sum() + 1e-300
    best = w @ (X - g_mean) ** 2
    for other in (_deviation_part(theta, s, q, delta, np.ones_like(m)),
                  _deviation_part(theta, s, q, delta, np.exp(1j * theta * c)), const):
        assert best <= w @ (X - other) ** 2 + 1e-9 * scale**2


# the numeric form is sinc(n theta/2)^2 / sinc(theta/2)^2, sinc x = sin x / x: a subnormal theta
# makes sin(theta/2) round to 0; such angles are rounding, not a frequency (theta_l >= b^-1)
angles = st.floats(0.0, 6.0).filter(lambda x: x == 0.0 or x >= 1e-300)


@SETTINGS
@given(st.integers(1, 300), angles)
@example(1, 0.0)
@example(300, 1.0)
@example(7, 1e-300)
def test_full_mask_mean_rotation_is_the_mean_over_every_pair(n, theta):
    t = np.arange(n)
    direct = np.mean(np.exp(1j * theta * (t[:, None] - t[None, :])))  # all n^2 pairs (i, j)
    m = get_step("mean_rotation_full_mask").numeric(theta, n)
    note(f"claim={m!r} direct={direct!r}")
    assert abs(direct.imag) <= 1e-12
    assert abs(m - direct.real) <= 1e-9
    assert -1e-15 <= m <= 1 + 1e-12
    assert m * (n * math.sin(theta / 2)) ** 2 <= 1 + 1e-9  # fast pairs: 1 / (n^2 sin^2)


@SETTINGS
@given(st.integers(1, 200), st.integers(0, 250), st.floats(0.0, 3.0))
@example(10, 0, 1.0)
@example(50, 3, 0.5)
def test_two_sided_window_gives_a_real_mean_rotation(n, reach, theta):
    """A two-sided window over n tokens: offset D occurs n - |D| times for |D| <= reach."""
    t = np.arange(n)
    offsets = t[:, None] - t[None, :]  # (n, n)
    allowed = np.abs(offsets) <= reach
    direct = np.mean(np.exp(1j * theta * offsets[allowed]))  # over the mask's pairs
    K = min(reach, n - 1)
    counts = np.array([n - D for D in range(K + 1)], dtype=float)  # per side
    w = counts / allowed.sum()
    re, im = get_step("mean_rotation_both_ways").numeric(theta, list(w), K)
    assert abs(direct.imag) <= 1e-12 and im == 0
    assert abs(re - direct.real) <= 1e-12
