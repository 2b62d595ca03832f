r"""The best reference rotation and the best reference key (docs/theory.md section 6).

For a fixed query and deviation, the deviation part of the logit is
:math:`X(\Delta) = s\operatorname{Re}\sum_l h_l e^{i\theta_l\Delta}`,
:math:`h_l = \tilde q_l\overline{\tilde\delta_l}`.  Over a distribution of
distances (weights :math:`w_j \ge 0`, :math:`\sum_j w_j = 1`, distances
:math:`\Delta_j`):

.. math::

    m_l = \mathbb E_\Delta\, e^{i\theta_l\Delta} = \sum_j w_j e^{i\theta_l\Delta_j},\qquad
    \mathbb E_\Delta X = s\operatorname{Re}\sum_l h_l m_l = g_m,

    \mathbb E_\Delta (X - c)^2 = \operatorname{Var}_\Delta X + (\mathbb E_\Delta X - c)^2
    \quad\text{(variance decomposition)},

    \mathbb E_\Delta E_m^2 = \tfrac{s^2}{2}\sum_{l,k}\operatorname{Re}\big[h_l\overline{h_k}\,C_{lk}
    + h_l h_k\,\tilde C_{lk}\big],\quad
    C_{lk} = \mu(\theta_l - \theta_k) - m_l\overline{m_k},\ \
    \tilde C_{lk} = \mu(\theta_l + \theta_k) - m_l m_k,\ \
    \mu(\phi) = \mathbb E_\Delta e^{i\phi\Delta},

and, over a distribution of keys, the mean key minimises the mean-square
remainder of every reference rotation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy as sp

from ropesplit.theory.reference import SPLIT_REFERENCE
from ropesplit.theory.split import Complex
from ropesplit.theory.step import Step, Verdict, zero_verdict
from ropesplit.theory.sums import (
    EXCHANGE,
    LINEARITY,
    PAIR,
    PAIRS,
    indexed,
    over_pairs,
    summand_of,
)

__all__ = [
    "MEAN_KEY_OPTIMUM",
    "MEAN_ROTATION_OPTIMUM",
    "MEAN_ROTATION_REMAINDER",
    "SUPPORT_SIZES",
]

SUPPORT_SIZES = (1, 2, 3, 4)  # distances (or keys) n with explicit symbolic weights summing to 1
KEY_DECOMPOSITION = ((2, 1), (2, 2))  # (keys n, pairs P) of the explicit decomposition
REMAINDER_SIZES = (1, 2, 3)  # distances n for the mean-square closed form, per pair (l, k)
UNIFORM_N = (1, 2, 3, 4)  # uniform distances 0..N-1 for the Dirichlet-kernel modulus

VARIANCE = ("variance decomposition: E[(X - c)^2] = Var X + (E X - c)^2 for any constant c "
            "(its algebra checked in moment form and on explicit finite distributions)")
SQUARE = "a square is >= 0"

_s, _c, _D, _psi = sp.symbols("s c Delta psi", real=True)
_a, _b, _dc, _de, _mre, _mim, _cb, _eb = sp.symbols("a b dc de mre mim cbar ebar", real=True)
_theta = sp.Symbol("theta", real=True)
_J = sp.Symbol("j", integer=True, nonnegative=True)  # the distance (or key) index j
_N = sp.Symbol("n", integer=True, positive=True)  # the symbolic support size n
_ZERO, _ONE = Complex(0, 0), Complex(1, 0)  # m = 0 (the deviation part X); delta~ = 1 (h = q~)


def _cmul(x: tuple[Any, Any], y: tuple[Any, Any]) -> tuple[Any, Any]:
    """Product of complex numbers given as (real, imaginary) pairs."""
    return x[0] * y[0] - x[1] * y[1], x[0] * y[1] + x[1] * y[0]


def _conj(x: tuple[Any, Any]) -> tuple[Any, Any]:
    return x[0], -x[1]


def _weights(n: int) -> tuple[Any, dict[Any, Any]]:
    """Indexed weights ``w[0..n-1]`` and the substitution making them sum to 1."""
    w = sp.IndexedBase("w", real=True)
    return w, {w[n - 1]: 1 - sum((w[j] for j in range(n - 1)), sp.Integer(0))}


def _expect(values: Sequence[Any], w: Any, norm: dict[Any, Any]) -> Any:
    r""":math:`\mathbb E\,v = \sum_j w_j v_j` with the weights normalised."""
    return sp.expand(sum(w[j] * v for j, v in enumerate(values)).subs(norm))


def _variance_moments() -> tuple[str, Any]:
    r"""The variance decomposition from linearity alone: :math:`\mathbb E` maps
    :math:`X^k` to the moment :math:`\mu_k` (:math:`\mu_0 = 1`)."""
    X, c, mu1, mu2 = sp.symbols("X c mu1 mu2", real=True)

    def E(poly: Any) -> Any:
        coeffs = sp.Poly(sp.expand(poly), X).all_coeffs()[::-1]  # coefficient of X^k at k
        return sum(co * mu for co, mu in zip(coeffs, (1, mu1, mu2), strict=False))

    return ("moment form: E[(X - c)^2] - E[(X - EX)^2] - (EX - c)^2",
            E((X - c) ** 2) - E((X - mu1) ** 2) - (mu1 - c) ** 2)


def _deviation(q: Complex, delta: Complex, theta: Any, Delta: Any, m: Complex, s: Any) -> Any:
    r""":math:`E_m = s\operatorname{Re}(h(e^{i\theta\Delta} - m))` from split_reference
    (at :math:`m = 0` the deviation part :math:`X`)."""
    return SPLIT_REFERENCE.claim(q.re, q.im, 0, 0, delta.re, delta.im, theta, Delta,
                                 m.re, m.im, s)[2]


def _semantic(q: Complex, delta: Complex, m: Complex, s: Any) -> Any:
    r""":math:`g_m = s\operatorname{Re}(h\,m)` from split_reference."""
    return SPLIT_REFERENCE.claim(q.re, q.im, 0, 0, delta.re, delta.im, 0, 0, m.re, m.im, s)[1]


# --- mean_rotation_optimum -------------------------------------------------------------


def _mean_rotation_claim(theta: Any, Delta: Any, w: Any, n: Any) -> tuple[Any, Any]:
    r""":math:`(\operatorname{Re} m, \operatorname{Im} m)`,
    :math:`m = \sum_{j<n} w_j e^{i\theta\Delta_j}` (lists ``Delta``, ``w`` of length n)."""
    return (sp.Sum(w[_J] * sp.cos(theta * Delta[_J]), (_J, 0, n - 1)),
            sp.Sum(w[_J] * sp.sin(theta * Delta[_J]), (_J, 0, n - 1)))


def _verify_mean_rotation(claim: Callable[..., Any]) -> Verdict:
    Dl, w = sp.IndexedBase("Delta", real=True), sp.IndexedBase("w", real=True)
    # symbolic P and n: E_Delta[X] = Sum_j w_j Sum_l X_l(Delta_j) = Sum_l g_{m,l}
    a, b, dc, de, th = indexed("a b dc de theta")
    q, delta = Complex(a, b), Complex(dc, de)
    X_lj = _deviation(q, delta, th, Dl[_J], _ZERO, _s)  # pair l at distance Delta_j
    pooled = sp.Sum(w[_J] * X_lj, (PAIR, 0, PAIRS - 1), (_J, 0, _N - 1))  # w_j moved inside
    inner, outer = pooled.reorder((PAIR, _J)).limits  # exchange of the finite sums
    mre, mim = claim(th, Dl, w, _N)
    g = _semantic(q, delta, Complex(mre, mim), _s)
    per_pair = summand_of(sp.Sum(sp.Sum(w[_J] * X_lj, inner), outer) - over_pairs(g))
    cases: list[tuple[str, Any]] = [
        ("symbolic P and n: Sum_j w_j Sum_l X_l(Delta_j) - Sum_l s Re(h_l m_l), summand",
         summand_of(sp.expand(per_pair), _J)),
        _variance_moments(),
    ]
    # explicit finite distributions: E[(X - c)^2] - E[(X - g*)^2] - (g* - c)^2, g* = s Re(h m)
    # (q~ = h, delta~ = 1 reaches every h = q~ conj(delta~): one complex symbol per pair)
    for n, P in [(n, 1) for n in SUPPORT_SIZES] + [(2, 2)]:
        wn, norm = _weights(n)
        pairs = [sp.symbols(f"hr{l} hi{l} theta{l}", real=True) for l in range(P)]
        X = [sum(_deviation(Complex(hr, hi), _ONE, t, Dl[j], _ZERO, _s) for hr, hi, t in pairs)
             for j in range(n)]
        ms = [[x.doit() for x in claim(t, Dl, wn, n)] for _, _, t in pairs]
        g_star = sum(_semantic(Complex(hr, hi), _ONE, Complex(mr, mi), _s)
                     for (hr, hi, _), (mr, mi) in zip(pairs, ms, strict=True))
        cases.append((f"n={n} distances, P={P}: E(X - c)^2 - E(X - g*)^2 - (g* - c)^2",
                      _expect([(x - _c) ** 2 for x in X], wn, norm)
                      - _expect([(x - g_star) ** 2 for x in X], wn, norm)
                      - sp.expand(((g_star - _c) ** 2).subs(norm))))
    # special distributions: a point mass at c is the reference distance c (c = 0: m = 1)
    point = claim(_theta, sp.IndexedBase("Delta", real=True), sp.IndexedBase("w", real=True), 1)
    cases.append(("point mass at c: m - e^{i theta c}", sp.Matrix(
        [x.doit().subs({Dl[0]: _c, w[0]: 1}) for x in point])
        - sp.Matrix([sp.cos(_theta * _c), sp.sin(_theta * _c)])))
    # uniform distances 0..N-1, theta = 2 psi: |m| N |2 sin psi| = |2 sin(N psi)| (Dirichlet)
    for N in UNIFORM_N:
        mr, mi = (x.doit().subs({Dl[j]: j for j in range(N)} | {w[j]: sp.Rational(1, N)
                                                                 for j in range(N)})
                  for x in claim(2 * _psi, Dl, w, N))
        cases.append((f"uniform 0..{N - 1}: |m|^2 N^2 4 sin^2(theta/2) - 4 sin^2(N theta/2)",
                      (mr**2 + mi**2) * N**2 * 4 * sp.sin(_psi) ** 2 - 4 * sp.sin(N * _psi) ** 2))
    return zero_verdict(cases)


MEAN_ROTATION_OPTIMUM = Step(
    id="mean_rotation_optimum",
    kind="inequality",
    title="The mean rotation is the best position-free reference",
    statement="Fix a query and a key deviation and let the distance Delta follow a distribution "
    "(weights w_j on distances Delta_j). Among all Delta-free values, the mean of the deviation "
    "part over Delta has the smallest mean-square remainder (variance decomposition), and that "
    "mean is exactly g_m with the mean rotation m_l = E e^{i theta_l Delta} (linearity). A point "
    "mass at c gives the reference distance c (c = 0: section 3). For distances uniform on "
    "0..N-1, |m_l| = |sin(N theta_l / 2)| / (N |sin(theta_l / 2)|): fast pairs have |m_l| near 0, "
    "slow pairs near 1. Exact for each fixed (q, delta) and its own distance distribution. "
    "Pooled over the pairs (i, j) of a sequence, the one m of the pooled distances minimises the "
    "pooled mean square when the distance is independent of (q, k) (every (q, k) is then "
    "minimised at once); otherwise the best shared m solves a least-squares problem weighted by "
    "h_l conj(h_k), and the causal pairs are such a case (key j only meets distances "
    "0..N-1-j; the per-key optimum m_l(j) would carry position).",
    statement_latex=r"m_l = \mathbb E_\Delta\, e^{i\theta_l\Delta},\quad "
    r"\mathbb E_\Delta\Big[s\operatorname{Re}\sum_l \tilde q_l\overline{\tilde\delta_l}\,"
    r"e^{i\theta_l\Delta}\Big] = g_m,\quad "
    r"\mathbb E_\Delta\big(X - c\big)^2 = \mathbb E_\Delta E_m^2 + (g_m - c)^2 "
    r"\ge \mathbb E_\Delta E_m^2\ \ \forall c \text{ free of } \Delta",
    method="for a symbolic pair count P and a symbolic number n of distances: the double Sum "
    "(w_j moved inside, sums exchanged by sympy's reorder) minus Sum_l g_{m,l} combined into one "
    "Sum over l and then over j whose summand expands to zero; the variance decomposition's "
    "algebra from linearity (moments); E(X - c)^2 - E E_m^2 - (g_m - c)^2 expanded to zero for "
    "n = 1, 2, 3, 4 distances (P = 1) and n = 2 (P = 2) with symbolic distances and weights "
    "summing to 1; a point mass gives e^{i theta c}; |m| for uniform 0..N-1, N = 1..4, against "
    "the Dirichlet kernel",
    claim=_mean_rotation_claim,
    numeric_args=("theta", "Delta", "w", "n"),
    verify=_verify_mean_rotation,
    lemmas=(VARIANCE, SQUARE, LINEARITY, EXCHANGE),
    uses=("split_reference",),
    numeric_doc="numeric(theta, Delta, w, n) -> (Re m, Im m), m = sum_j w[j] e^{i theta Delta[j]} "
    "for lists Delta, w of length n (weights summing to 1)",
    symbol_kinds={"Delta": "indexed", "w": "indexed", "n": "integer"},
)


# --- mean_rotation_remainder -----------------------------------------------------------


@dataclass(frozen=True)
class _Distances:
    r"""A distribution of distances: weight :math:`w_j` on :math:`\Delta_j`, :math:`j < n`
    (``Delta``, ``w`` indexed or lists of length n, the weights summing to 1)."""

    Delta: Any
    w: Any
    n: Any

    def mu(self, phi: Any) -> tuple[Any, Any]:
        r""":math:`\mu(\phi) = \mathbb E_\Delta e^{i\phi\Delta}` as (real, imaginary) Sums."""
        w, Delta, n = self.w, self.Delta, self.n
        return (sp.Sum(w[_J] * sp.cos(phi * Delta[_J]), (_J, 0, n - 1)),
                sp.Sum(w[_J] * sp.sin(phi * Delta[_J]), (_J, 0, n - 1)))


def _remainder_term(h_l: tuple[Any, Any], h_k: tuple[Any, Any], theta_l: Any, theta_k: Any,
                    distances: _Distances, s: Any) -> Any:
    r"""The :math:`(l, k)` term of :math:`\mathbb E_\Delta E_m^2` under the mean rotation
    (:math:`h = h_r + i h_i` as a (real, imaginary) pair):

    .. math:: \tfrac{s^2}{2}\operatorname{Re}\big[h_l\overline{h_k}\,C_{lk}
              + h_l h_k\,\tilde C_{lk}\big]
    """
    mu = distances.mu
    m_l, m_k = mu(theta_l), mu(theta_k)
    C = tuple(x - y for x, y in zip(mu(theta_l - theta_k), _cmul(m_l, _conj(m_k)), strict=True))
    Ct = tuple(x - y for x, y in zip(mu(theta_l + theta_k), _cmul(m_l, m_k), strict=True))
    return s**2 / 2 * (_cmul(_cmul(h_l, _conj(h_k)), C)[0] + _cmul(_cmul(h_l, h_k), Ct)[0])


def _remainder_claim(*numeric_args: Any) -> Any:
    """mean_rotation_remainder's claim on its ``numeric_args`` ``(hr_l, hi_l, hr_k, hi_k,
    theta_l, theta_k, Delta, w, n, s)``, in order: :func:`_remainder_term`."""
    hr_l, hi_l, hr_k, hi_k, theta_l, theta_k, Delta, w, n, s = numeric_args
    distances = _Distances(Delta, w, n)
    return _remainder_term((hr_l, hi_l), (hr_k, hi_k), theta_l, theta_k, distances, s)


def _mean_rot(theta: Any, Delta: Any, w: Any, n: int, norm: dict[Any, Any]) -> tuple[Any, Any]:
    """mean_rotation_optimum's m for n explicit distances, weights normalised."""
    re, im = MEAN_ROTATION_OPTIMUM.claim(theta, Delta, w, n)
    return re.doit().subs(norm), im.doit().subs(norm)


def _verify_remainder(claim: Callable[..., Any]) -> Verdict:
    Dl = sp.IndexedBase("Delta", real=True)
    l, k = PAIR, sp.Symbol("k", integer=True, nonnegative=True)  # two symbolic pair indices
    hr, hi, th = (sp.IndexedBase(x, real=True) for x in ("hr", "hi", "theta"))
    cases: list[tuple[str, Any]] = []

    def Z(h: tuple[Any, Any], t: Any, j: int, m: tuple[Any, Any]) -> Any:
        # s Re(h (e^{i theta Delta_j} - m)), h = (Re h, Im h)
        return _s * (h[0] * (sp.cos(t * Dl[j]) - m[0]) - h[1] * (sp.sin(t * Dl[j]) - m[1]))

    h_l, h_k = (hr[l], hi[l]), (hr[k], hi[k])
    for n in REMAINDER_SIZES:
        w, norm = _weights(n)
        m_l, m_k = _mean_rot(th[l], Dl, w, n, norm), _mean_rot(th[k], Dl, w, n, norm)
        direct = _expect([Z(h_l, th[l], j, m_l) * Z(h_k, th[k], j, m_k) for j in range(n)],
                         w, norm)
        got = claim(*h_l, *h_k, th[l], th[k], Dl, w, n, _s).doit().subs(norm)
        cases.append((f"n={n}, symbolic pairs l, k: E[Z_l Z_k] - claim_lk",
                      direct - sp.expand(got)))
        # the diagonal: C_ll = 1 - |m_l|^2 (|e^{i phi}| = 1), C~_ll = mu(2 theta_l) - m_l^2
        Ct = [x - y for x, y in zip(_mean_rot(2 * th[l], Dl, w, n, norm), _cmul(m_l, m_l),
                                    strict=True)]
        diag = _s**2 / 2 * ((hr[l] ** 2 + hi[l] ** 2) * (1 - m_l[0] ** 2 - m_l[1] ** 2)
                            + _cmul(_cmul(h_l, h_l), (Ct[0], Ct[1]))[0])
        same = claim(*h_l, *h_l, th[l], th[l], Dl, w, n, _s).doit().subs(norm)
        cases.append((f"n={n}, k = l: claim_ll - s^2/2 [|h|^2 (1 - |m|^2) + Re(h^2 (mu(2 theta) "
                      "- m^2))]", sp.expand(same) - sp.expand(diag)))
    # the sum over pairs: E[(sum_l Z_l)^2] = sum_{l,k} E[Z_l Z_k], explicit at P = 2, n = 2
    n, P = 2, 2
    w, norm = _weights(n)
    hs = [sp.symbols(f"hr{p} hi{p}", real=True) for p in range(P)]
    ts = sp.symbols(f"theta0:{P}", real=True)
    ms = [_mean_rot(t, Dl, w, n, norm) for t in ts]
    total = _expect([sum(Z((h[0], h[1]), t, j, m) for h, t, m in zip(hs, ts, ms, strict=True)) ** 2
                     for j in range(n)], w, norm)
    pairwise = sum(claim(*hs[p], *hs[r], ts[p], ts[r], Dl, w, n, _s).doit()
                   for p in range(P) for r in range(P))
    cases.append((f"P={P}, n={n}: E[E_m^2] - sum_(l,k) claim_lk",
                  total - sp.expand(pairwise.subs(norm))))
    return zero_verdict(cases)


MEAN_ROTATION_REMAINDER = Step(
    id="mean_rotation_remainder",
    kind="identity",
    title="The mean-square remainder under the mean rotation",
    statement="With the mean rotation, the remainder's mean square over the distances is a "
    "quadratic form in h_l = q~_l conj(delta~_l) whose coefficients are the covariances "
    "C_lk = Cov(e^{i theta_l Delta}, e^{i theta_k Delta}) and the pseudo-covariances "
    "C~_lk = E[e^{i (theta_l + theta_k) Delta}] - m_l m_k of the pairs' rotations. On the diagonal "
    "C_ll = 1 - |m_l|^2, so a single pair contributes s^2/2 [|h_l|^2 (1 - |m_l|^2) + "
    "Re(h_l^2 C~_ll)], which lies between 0 and s^2 |q~_l|^2 |delta~_l|^2 (1 - |m_l|^2) since "
    "|C~_ll| <= C_ll: fast pairs (|m_l| ~ 0) keep their whole energy in the remainder, slow pairs "
    "(|m_l| ~ 1) almost none. Exact for a fixed (q, delta) and its distance distribution; the "
    "pooled mean square over the pairs of a sequence is the same form with h_l conj(h_k) and "
    "h_l h_k averaged over (q, k) when the distance is independent of (q, k) (not exactly on "
    "causal pairs).",
    statement_latex=r"\mathbb E_\Delta E_m^2 = \frac{s^2}{2}\sum_{l,k}\operatorname{Re}\big["
    r"h_l\overline{h_k}\,C_{lk} + h_l h_k\,\tilde C_{lk}\big],\quad "
    r"h_l = \tilde q_l\overline{\tilde\delta_l},\quad "
    r"C_{lk} = \mathbb E[e^{i(\theta_l - \theta_k)\Delta}] - m_l\overline{m_k},\quad "
    r"\tilde C_{lk} = \mathbb E[e^{i(\theta_l + \theta_k)\Delta}] - m_l m_k,\quad "
    r"C_{ll} = 1 - |m_l|^2",
    method="E[Z_l Z_k] (Z_l = s Re(h_l (e^{i theta_l Delta} - m_l))) minus the claimed (l, k) "
    "term expanded to zero for symbolic pair indices l, k (indexed h, theta) and n = 1, 2, 3 "
    "distances with symbolic distances and weights summing to 1; the diagonal against "
    "|h|^2 (1 - |m|^2) + Re(h^2 C~) at n = 1, 2, 3; the sum over pairs end to end at P = 2, n = 2 "
    "(for any P it is the square of a finite sum)",
    claim=_remainder_claim,
    numeric_args=("hr_l", "hi_l", "hr_k", "hi_k", "theta_l", "theta_k", "Delta", "w", "n", "s"),
    verify=_verify_remainder,
    lemmas=("square of a finite sum: (sum_l x_l)^2 = sum_l sum_k x_l x_k",
            "linearity of expectation", "|E v^2| <= E|v|^2 (for the single-pair range)"),
    uses=("split_reference", "mean_rotation_optimum"),
    numeric_doc="numeric(hr_l, hi_l, hr_k, hi_k, theta_l, theta_k, Delta, w, n, s) -> the (l, k) "
    "term of E_Delta E_m^2 under the mean rotation, h = q~ conj(delta~) = hr + i hi, lists "
    "Delta, w of length n (weights summing to 1); sum over all (l, k) for the head",
    symbol_kinds={"Delta": "indexed", "w": "indexed", "n": "integer"},
)


# --- mean_key_optimum ------------------------------------------------------------------


def _mean_key_claim(c: Any, e: Any, w: Any, n: Any) -> tuple[Any, Any]:
    r"""One pair of the mean key, :math:`\bar k = \sum_{j<n} w_j k_j` (lists c, e, w)."""
    return (sp.Sum(w[_J] * c[_J], (_J, 0, n - 1)), sp.Sum(w[_J] * e[_J], (_J, 0, n - 1)))


def _verify_mean_key(claim: Callable[..., Any]) -> Verdict:
    cs, es = sp.IndexedBase("c", real=True), sp.IndexedBase("e", real=True)
    q, k, kbar, m = Complex(_a, _b), Complex(_dc, _de), Complex(_cb, _eb), Complex(_mre, _mim)
    cases: list[tuple[str, Any]] = [
        ("E_m is affine in the key: E_m(k - kbar) - (E_m(k) - E_m(kbar))",
         _deviation(q, k - kbar, _theta, _D, m, _s) - _deviation(q, k, _theta, _D, m, _s)
         + _deviation(q, kbar, _theta, _D, m, _s)),
        _variance_moments(),
    ]
    a, b, th, mr, mi = indexed("a b theta mre mim")
    q_l, m_l = Complex(a, b), Complex(mr, mi)  # pair l's query and reference rotation
    c2, e2 = sp.IndexedBase("ck", real=True), sp.IndexedBase("ek", real=True)  # [pair, key]
    for n in SUPPORT_SIZES:
        w, norm = _weights(n)
        at_l = {cs[j]: c2[PAIR, j] for j in range(n)} | {es[j]: e2[PAIR, j] for j in range(n)}
        cb, eb = (x.doit().subs(norm).subs(at_l) for x in claim(cs, es, w, n))  # pair l's mean
        k_l = [Complex(c2[PAIR, j], e2[PAIR, j]) for j in range(n)]  # pair l of each key
        mean_E = _expect([_deviation(q_l, k - Complex(cb, eb), th, _D, m_l, _s) for k in k_l],
                         w, norm)
        cases.append((f"n={n} keys, symbolic P: summand of Sum_l E_k[E_m,l] at the mean key",
                      mean_E))
    cases += [_key_decomposition(claim, n, P) for n, P in KEY_DECOMPOSITION]
    return zero_verdict(cases)


def _key_decomposition(claim: Callable[..., Any], n: int, P: int) -> tuple[str, Any]:
    """E_k E_m(kbar)^2 - E_k E_m(mean)^2 - (Y(mean) - Y(kbar))^2 for n keys of P pairs."""
    w, norm = _weights(n)
    # E_m sees (theta, Delta, m) only through e^{i theta Delta} - m; at theta = 0 with symbolic
    # m, 1 - m ranges over every complex number, so that case is the general one
    qs = [sp.symbols(f"a{l} b{l} mre{l} mim{l}", real=True) for l in range(P)]
    keys = [[sp.symbols(f"c{l}_{j} e{l}_{j}", real=True) for j in range(n)] for l in range(P)]
    any_ref = [sp.symbols(f"cbar{l} ebar{l}", real=True) for l in range(P)]
    mean_ref = []
    for l in range(P):
        cl, el = sp.IndexedBase(f"c{l}", real=True), sp.IndexedBase(f"e{l}", real=True)
        sub = {cl[j]: keys[l][j][0] for j in range(n)} | {el[j]: keys[l][j][1] for j in range(n)}
        mean_ref.append([x.doit().subs(norm).subs(sub) for x in claim(cl, el, w, n)])

    def Y(vecs: Sequence[Sequence[Any]]) -> Any:  # the linear part of E_m, summed over pairs
        return sum(_deviation(Complex(a, b), Complex(v[0], v[1]), 0, _D, Complex(mr, mi), _s)
                   for (a, b, mr, mi), v in zip(qs, vecs, strict=True))

    def mean_square(ref: Sequence[Sequence[Any]]) -> Any:
        return _expect([Y([(k[j][0] - r[0], k[j][1] - r[1]) for k, r in zip(keys, ref,
                                                                           strict=True)]) ** 2
                        for j in range(n)], w, norm)

    gap = Y([(x[0] - r[0], x[1] - r[1]) for x, r in zip(mean_ref, any_ref, strict=True)])
    return (f"n={n} keys, P={P}: E E_m(kbar)^2 - E E_m(mean)^2 - (Y(mean) - Y(kbar))^2",
            mean_square(any_ref) - mean_square(mean_ref) - sp.expand((gap**2).subs(norm)))


MEAN_KEY_OPTIMUM = Step(
    id="mean_key_optimum",
    kind="inequality",
    title="The mean key is the best reference key",
    statement="For every reference rotation m (section 3's m = 1 included), every query and "
    "every distance, the remainder is affine in the key: E_m(k; kbar) = Y(k) - Y(kbar) with Y "
    "linear. Over any distribution of keys its mean square is the variance of Y(k) plus "
    "(Y(E k) - Y(kbar))^2, so the mean key minimises it, for all (q, Delta, m) at once, and makes "
    "the remainder's mean over keys zero. Exact per (q, Delta) for the keys that query meets. "
    "Pooled over the causal pairs (i, j), E_m = a_ij^T (k_j - kbar) with a_ij the gradient of "
    "E_m in the key, and the pooled optimum solves the normal equations "
    "(sum a a^T) kbar = sum a_ij a_ij^T k_j: the pair-weighted mean "
    "sum_j (N - j) k_j / sum_j (N - j) when a a^T is uncorrelated with the key over the pairs, "
    "and the plain context mean (the default) only if moreover every key met equally many "
    "queries, which causal pairs do not (key j meets N - j).",
    statement_latex=r"E_m(k;\bar k) = Y(k) - Y(\bar k),\quad "
    r"\mathbb E_k E_m(k;\bar k)^2 = \operatorname{Var}_k Y(k) + \big(Y(\mathbb E k)"
    r" - Y(\bar k)\big)^2 \ge \mathbb E_k E_m(k; \mathbb E k)^2,\quad "
    r"\mathbb E_k E_m(k;\mathbb E k) = 0",
    method="E_m's affinity in the key expanded to zero for one symbolic pair with symbolic m; the "
    "mean of E_m over n = 1, 2, 3, 4 keys at the claimed mean key expanded to zero for a symbolic "
    "pair index l (so for any P); the variance decomposition's algebra from linearity "
    "(moments); E E_m(kbar)^2 - E E_m(mean)^2 - (Y(mean) - Y(kbar))^2 expanded to zero for "
    "n = 2 keys at P = 1 and P = 2 with symbolic keys, weights summing to 1, query, "
    "distance, m and an arbitrary kbar",
    claim=_mean_key_claim,
    numeric_args=("c", "e", "w", "n"),
    verify=_verify_mean_key,
    lemmas=(VARIANCE, SQUARE, "linearity of expectation",
            "least squares: a convex quadratic is minimised where its gradient (the normal "
            "equations) vanishes (for the pooled statement)"),
    uses=("split_reference",),
    numeric_doc="numeric(c, e, w, n) -> (cbar, ebar), one pair of the mean key "
    "sum_j w[j] (c[j], e[j]) for lists c, e, w of length n",
    symbol_kinds={"c": "indexed", "e": "indexed", "w": "indexed", "n": "integer"},
)
