r"""Attention both ways: the split on any set of pairs (docs/theory.md section 9).

An attention call lets through a set of pairs :math:`\mathcal M \subseteq \{0, \dots,
n-1\}^2` (causal :math:`j \le i`, both ways, a window of one or two sides, blocks, padding);
its offsets :math:`\Delta = i - j` lie in :math:`\{-(n-1), \dots, n-1\}`, of either sign.
Pair by pair nothing changes:

.. math::

    W_{ij} = f(q_i, \Delta) + g(q_i, k_j) + E_{ij},\qquad
    |E_{ij}| \le s\sum_l |\tilde q_l||\tilde\delta_l|\,2|\sin(\theta_l\Delta/2)|
    \qquad \forall (i, j) \in \mathcal M

and the reference rotation is the mean rotation over the offsets of :math:`\mathcal M`:

.. math::

    m_l = \mathbb E_\Delta\, e^{i\theta_l\Delta};\qquad
    w_{-\Delta} = w_\Delta \implies m_l = w_0 + 2\sum_{\Delta > 0} w_\Delta\cos\theta_l\Delta
    \in \mathbb R;\qquad
    \mathcal M = \{0..n-1\}^2:\ m_l = \frac{\sin^2(n\theta_l/2)}{n^2\sin^2(\theta_l/2)}

The checks declare the positions :math:`i, j` integers of undecided order (sympy reports
the sign of :math:`i - j` as unknown, so no simplification can have used :math:`j \le i`),
and evaluate the causal steps' own claims at a key after its query, :math:`\Delta = -D`
with :math:`D > 0`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy as sp

from ropesplit.theory.expansion import LOGIT_EXPANSION
from ropesplit.theory.optimum import MEAN_ROTATION_OPTIMUM, SQUARE, VARIANCE
from ropesplit.theory.reference import REFERENCE_BOUND, SPLIT_REFERENCE, deviation_part
from ropesplit.theory.rope import (
    LAYOUTS,
    abs2,
    real_part,
    rope_matrix,
    rot2,
    symbolic_vector,
    thetas,
    to_pairs,
)
from ropesplit.theory.split import EXACT_SPLIT_CONDITION, REMAINDER_BOUND, SPLIT_EXACT
from ropesplit.theory.step import Step, Verdict, zero_verdict
from ropesplit.theory.sums import BLOCK_DIAGONAL, split_summand, summand_of

__all__ = ["FULL_MASK_SIZES", "MEAN_ROTATION_BOTH_WAYS", "MEAN_ROTATION_FULL_MASK",
           "REMAINDER_BOUND_ANY_PAIRS", "SPLIT_ANY_PAIRS", "SYMMETRIC_REACHES", "two_way_offsets"]

HEAD_DIMS = (2, 4)  # head dims checked with full symbolic vectors at unordered (i, j)
MASK_LENGTH = 3  # the two-way full mask whose every pair is checked explicitly
SYMMETRIC_REACHES = (1, 2, 3, 4)  # K of the symmetric offset sets -K..K checked explicitly
FULL_MASK_SIZES = (1, 2, 3, 4, 5, 6)  # lengths n of the two-way full mask checked exactly

ADJACENT_RANGES = ("additivity over adjacent ranges: Sum_{D=-K}^{K} x_D = Sum_{D=-K}^{-1} x_D "
                   "+ x_0 + Sum_{D=1}^{K} x_D (the reindexing D -> -D is sympy's change_index)")
FACTORISE = ("a double sum over a product set factorises: sum_i sum_j x_i conj(x_j) = "
             "|sum_t x_t|^2 (checked at n = 1..6; for symbolic n the named lemma)")

_a, _b, _cb, _eb, _dc, _de, _s = sp.symbols("a b cbar ebar dc de s", real=True)
_u, _psi, _mre, _mim, _hr, _hi, _c = sp.symbols("u psi mre mim hr hi c", real=True)
_theta = sp.Symbol("theta", positive=True)
_i, _j = sp.symbols("i j", integer=True)  # positions of undecided order
_D, _v = sp.symbols("D v", positive=True)  # a key D (or 2 v) positions after its query
_OFFSET = sp.Symbol("D", integer=True)  # the offset as a summation index
_K = sp.Symbol("K", integer=True, positive=True)  # the reach of a symmetric offset set
_q2, _kbar2, _delta2 = sp.Matrix([_a, _b]), sp.Matrix([_cb, _eb]), sp.Matrix([_dc, _de])
_qc, _dlc, _mc = _a + sp.I * _b, _dc + sp.I * _de, _mre + sp.I * _mim


def two_way_offsets(n: int) -> list[int]:
    """The offsets ``i - j`` of every pair of the two-way full mask of length ``n``
    (``n**2`` of them, row by row)."""
    return [i - j for i in range(n) for j in range(n)]


def _logit(q2: sp.Matrix, k2: sp.Matrix, theta: Any, i: Any, j: Any) -> Any:
    r"""One pair's logit :math:`s\langle R_2(i\theta) q, R_2(j\theta) k\rangle` (the definition)."""
    return _s * (rot2(i * theta) * q2).dot(rot2(j * theta) * k2)


def _sign_undecided(expr: Any) -> bool:
    """True when sympy can decide neither ``expr >= 0`` nor ``expr <= 0``."""
    return expr.is_nonnegative is None and expr.is_nonpositive is None


# --- split_any_pairs -------------------------------------------------------------------


def _any_split_claim(*numeric_args: Any) -> tuple[Any, Any, Any]:
    """split_any_pairs' claim on ``(a, b, cbar, ebar, dc, de, theta, i, j, s)``: split_exact's
    ``(f, g, E)`` of one pair at the offset ``Delta = i - j``, whatever its sign."""
    *pair, theta, i, j, s = numeric_args
    return SPLIT_EXACT.claim(*pair, theta, i - j, s)


def _any_split_pair(claim: Callable[..., Any]) -> list[tuple[str, Any]]:
    """One symbolic pair at unordered (i, j), at a key after its query, and every pair of the
    two-way full mask of length MASK_LENGTH."""
    f, g, E = claim(_a, _b, _cb, _eb, _dc, _de, _theta, _i, _j, _s)
    back = rot2((_j - _i) * _theta)  # R_2(-Delta theta), (2, 2)
    fa, ga, Ea = claim(_a, _b, _cb, _eb, _dc, _de, _theta, _i, _i + _D, _s)
    z = _qc * sp.conjugate(_dlc) * (sp.exp(-sp.I * _theta * _D) - 1)
    every = [_logit(_q2, _kbar2 + _delta2, _theta, i, j) - sum(claim(
        _a, _b, _cb, _eb, _dc, _de, _theta, i, j, _s)) for i in range(MASK_LENGTH)
        for j in range(MASK_LENGTH)]  # fmt: skip
    return [
        ("pair, (i, j) in any order: W - (f + g + E)",
         _logit(_q2, _kbar2 + _delta2, _theta, _i, _j) - f - g - E),
        ("pair: f - s<q, R(j - i) kbar>", f - _s * _q2.dot(back * _kbar2)),
        ("pair: g - s<q, delta>", g - _s * _q2.dot(_delta2)),
        ("pair: E - s<q, (R(j - i) - I) delta>", E - _s * _q2.dot((back - sp.eye(2)) * _delta2)),
        ("pair: (dg/di, dg/dj)", sp.Matrix([sp.diff(g, _i), sp.diff(g, _j)])),
        ("key after its query, j = i + D, D > 0: W - (f + g + E)",
         _logit(_q2, _kbar2 + _delta2, _theta, _i, _i + _D) - fa - ga - Ea),
        ("key after its query: E - s Re(q~ conj(delta~)(e^{-i theta D} - 1))",
         Ea - _s * real_part(z)),
        (f"two-way full mask n = {MASK_LENGTH}: W - (f + g + E) at all "
         f"{MASK_LENGTH ** 2} pairs", sp.Matrix(every)),
    ]


def _any_split_head(claim: Callable[..., Any]) -> list[tuple[str, Any]]:
    """The whole head at unordered (i, j): d = 2, 4 in both layouts, and a symbolic P."""
    cases: list[tuple[str, Any]] = []
    for d in HEAD_DIMS:
        th = thetas(d)
        for layout in LAYOUTS:
            q, kb, dl = (symbolic_vector(n, d) for n in ("q", "kbar", "delta"))
            W = _s * (rope_matrix(_i, th, layout) * q).dot(rope_matrix(_j, th, layout) * (kb + dl))
            parts = [claim(*qp, *kp, *dp, t, _i, _j, _s) for qp, kp, dp, t in zip(
                to_pairs(q, layout), to_pairs(kb, layout), to_pairs(dl, layout), th, strict=True)]
            cases.append((f"d={d} {layout}, (i, j) in any order: W - sum_l (f + g + E)",
                          W - sum(sum(p) for p in parts)))
    cases.append(("symbolic P, (i, j) in any order: Sum_l W_l - Sum_l (f_l + g_l + E_l)",
                  split_summand(lambda *pair: claim(*pair, _i, _j, _s), _i, _j, _s)))
    return cases


def _causal_steps_reversed() -> list[tuple[str, Any]]:
    """The causal steps' own claims at a key D positions after its query (Delta = -D < 0)."""
    W = _logit(_q2, _kbar2 + _delta2, _theta, _i, _i + _D)
    ref = SPLIT_REFERENCE.claim(_a, _b, _cb, _eb, _dc, _de, _theta, -_D, _mre, _mim, _s)
    h = _qc * sp.conjugate(_dlc)
    return [
        ("logit_expansion at Delta = -D: s<R(i) q, R(i + D) k> - claim",
         _logit(_q2, _kbar2, _theta, _i, _i + _D)
         - LOGIT_EXPANSION.claim(_a, _b, _cb, _eb, _theta, -_D, _s)),
        ("split_exact at Delta = -D: W - (f + g + E)",
         W - sum(SPLIT_EXACT.claim(_a, _b, _cb, _eb, _dc, _de, _theta, -_D, _s))),
        ("split_reference at Delta = -D: W - (f + g_m + E_m)", W - sum(ref)),
        ("split_reference at Delta = -D: E_m - s Re(q~ conj(delta~)(e^{-i theta D} - m))",
         ref[2] - _s * real_part(h * (sp.exp(-sp.I * _theta * _D) - _mc))),
    ]


def _verify_any_split(claim: Callable[..., Any]) -> Verdict:
    verdict = zero_verdict(_any_split_pair(claim) + _any_split_head(claim)
                           + _causal_steps_reversed())
    undecided = _sign_undecided(_i - _j)
    return Verdict(verdict.checked and undecided, f"sign of i - j undecided by sympy (i, j "
                   f"integers, no order): {undecided}; {verdict.detail}")


SPLIT_ANY_PAIRS = Step(
    id="split_any_pairs",
    kind="identity",
    title="The split on any set of pairs",
    statement="An attention call lets through a set M of pairs (i, j): causal (j <= i), both "
    "ways (every pair), a window of one or two sides, blocks or padding. On every pair of M, "
    "whatever the sign of the offset Delta = i - j in {-(n-1), .., n-1}, the logit splits "
    "exactly as in section 3, with the same f, g and E: no step of the split used j <= i. A key "
    "D positions after its query has E = s Re sum_l q~_l conj(delta~_l)(e^{-i theta_l D} - 1).",
    statement_latex=r"\forall (i, j) \in \mathcal M \subseteq \{0, \dots, n-1\}^2:\quad "
    r"W_{ij} = f(q_i, \Delta) + g(q_i, k_j) + E_{ij},\quad \Delta = i - j \in "
    r"\{-(n-1), \dots, n-1\};\quad j = i + D:\ E_{ij} = s\operatorname{Re}\sum_l \tilde q_l\,"
    r"\overline{\tilde\delta_l}\,(e^{-i\theta_l D} - 1)",
    method="with i, j integer symbols of undecided order (sympy's sign of i - j: unknown): for "
    "one symbolic pair W - (f + g + E) and each term against its definition expanded to zero, g "
    "free of i and j; at a key after its query (j = i + D, D > 0) the same, E against its complex "
    "form; every one of the 9 pairs of the two-way full mask n = 3; the whole head at d = 2, 4 "
    "in both layouts and for a symbolic pair count P; and the causal steps' own claims "
    "(logit_expansion, split_exact, split_reference) at Delta = -D against the rotated dot "
    "product",
    claim=_any_split_claim,
    numeric_args=("a", "b", "cbar", "ebar", "dc", "de", "theta", "i", "j", "s"),
    verify=_verify_any_split,
    lemmas=(BLOCK_DIAGONAL,),
    uses=("logit_expansion", "split_exact", "split_reference"),
    numeric_doc="numeric(a, b, cbar, ebar, dc, de, theta, i, j, s) -> (f, g, E) of one pair "
    "for the query at i and the key at j, in any order",
)


# --- remainder_bound_any_pairs ---------------------------------------------------------


def _any_bound_claim(*numeric_args: Any) -> tuple[Any, Any]:
    """remainder_bound_any_pairs' claim on ``(a, b, dc, de, theta, i, j, s)``: remainder_bound's
    ``(tight, loose)`` for one pair at the offset ``Delta = i - j``, whatever its sign."""
    *pair, theta, i, j, s = numeric_args
    return REMAINDER_BOUND.claim(*pair, theta, i - j, s)


def _bound_both_signs(claim: Callable[..., Any]) -> list[tuple[str, Any]]:
    """The tight bound against |E| at an offset 2u of either sign and at -2v, v > 0."""
    cases: list[tuple[str, Any]] = []
    for label, (i, j) in (("Delta = 2u, u of either sign", (_j + 2 * _u, _j)),
                          ("key after its query, Delta = -2v, v > 0", (_i, _i + 2 * _v))):
        tight = claim(_a, _b, _dc, _de, _theta, i, j, _s)[0]
        z = _qc * sp.conjugate(_dlc) * (sp.exp(sp.I * _theta * (i - j)) - 1)  # E = s Re z
        E = SPLIT_ANY_PAIRS.claim(_a, _b, 0, 0, _dc, _de, _theta, i, j, _s)[2]
        im_z = sp.expand(sp.expand(z.rewrite(sp.cos)).as_real_imag()[1])
        cases += [(f"{label}: tight^2 - s^2 |q~ conj(delta~)(e^{{i theta Delta}} - 1)|^2",
                   tight**2 - _s**2 * abs2(z)),
                  (f"{label}: tight^2 - E^2 - (s Im z)^2 (|E| <= tight, the gap a square)",
                   tight**2 - E**2 - (_s * im_z) ** 2)]
    ref = REFERENCE_BOUND.claim(_a, _b, _dc, _de, _theta, -2 * _v, 1, 0, _s)
    cases.append(("reference_bound at m = 1, Delta = -2v: bound^2 - tight^2",
                  ref**2 - claim(_a, _b, _dc, _de, _theta, _i, _i + 2 * _v, _s)[0] ** 2))
    cases.append(("bound(i, j) - bound(j, i): a pair and its mirror have one bound", sp.Matrix(
        claim(_a, _b, _dc, _de, _theta, _i, _j, _s)) - sp.Matrix(
        claim(_a, _b, _dc, _de, _theta, _j, _i, _s))))
    return cases


def _exact_both_ways(claim: Callable[..., Any]) -> list[tuple[str, Any]]:
    """At Delta = -1 the worst |E| over unit queries is the tight bound and equals
    exact_split_condition's (Delta = +1): the exactness condition is the same both ways."""
    E = _s * _q2.dot((rot2(2 * _psi) - sp.eye(2)) * _delta2)  # E at Delta = -1, theta = 2 psi
    grad = sp.Matrix([sp.diff(E, _a), sp.diff(E, _b)])  # E is linear in q: E = grad . q
    return [("Delta = -1: E - grad . q (E linear in the query)", E - grad.dot(_q2)),
            ("Delta = -1: tight(|q~| = 1)^2 - |grad|^2 (the bound is attained)",
             claim(1, 0, _dc, _de, 2 * _psi, 0, 1, _s)[0] ** 2 - grad.dot(grad)),
            ("Delta = -1: |grad|^2 - exact_split_condition's claim^2 (at Delta = +1)",
             grad.dot(grad) - EXACT_SPLIT_CONDITION.claim(_dc, _de, 2 * _psi, _s) ** 2)]


def _loose_both_signs(claim: Callable[..., Any]) -> tuple[bool, str]:
    """The loose form is the tight one with |sin x| -> min(1, |x|), x = theta (i - j) / 2, on
    both branches |x| <= 1 and |x| >= 1 (w = |x| = 1 -+ v)."""
    tight, loose = claim(_a, _b, _dc, _de, _theta, _i, _j, _s)
    norms = _s * sp.sqrt(_a**2 + _b**2) * sp.sqrt(_dc**2 + _de**2)
    w, v = sp.symbols("w v", nonnegative=True)
    gap = (loose - norms * 2 * sp.Min(1, w)).subs(sp.Abs(_i - _j), 2 * w / _theta)
    loose_ok = (all(sp.expand(gap.subs(w, br)) == 0 for br in (1 - v, 1 + v))
                and not gap.has(_i) and not gap.has(_j))
    tight_ok = sp.expand(tight - norms * 2 * sp.Abs(sp.sin(_theta * (_i - _j) / 2))) == 0
    return loose_ok and tight_ok, (
        f"tight - s|q~||delta~| 2|sin(theta (i - j)/2)|: {'= 0' if tight_ok else '!= 0'}; "
        f"loose - (tight with |sin x| -> min(1, |x|)) on both branches: "
        f"{'= 0' if loose_ok and tight_ok else '!= 0'}")


def _verify_any_bound(claim: Callable[..., Any]) -> Verdict:
    verdict = zero_verdict(_bound_both_signs(claim) + _exact_both_ways(claim))
    loose_ok, loose_detail = _loose_both_signs(claim)
    undecided = _sign_undecided(_i - _j) and _sign_undecided(_u)
    return Verdict(verdict.checked and loose_ok and undecided,
                   f"sign of i - j and of u undecided by sympy: {undecided}; {verdict.detail}; "
                   f"{loose_detail}")


REMAINDER_BOUND_ANY_PAIRS = Step(
    id="remainder_bound_any_pairs",
    kind="inequality",
    title="The remainder bound on any set of pairs",
    statement="On every pair of any allowed set M, for an offset of either sign, each rotation "
    "pair contributes to the remainder at most the query and deviation pair lengths times the "
    "chord 2|sin(theta_l Delta / 2)|, itself at most min(2, theta_l |Delta|). The chord is even "
    "in Delta: a pair (i, j) and its mirror (j, i) have one bound, and the bound is attained at "
    "Delta = -1 as at Delta = +1, so the split is exact on every offset in {-(n-1), .., n-1} "
    "(n >= 2) exactly when the key deviation lives only in non-rotating pairs (section 3).",
    statement_latex=r"\forall (i, j) \in \mathcal M:\quad |E_{ij}| \le s\sum_l |\tilde q_l|\,"
    r"|\tilde\delta_l|\;2\left|\sin\tfrac{\theta_l (i - j)}{2}\right| \le s\sum_l "
    r"|\tilde q_l|\,|\tilde\delta_l|\,\min(2, \theta_l|i - j|),\quad "
    r"\left|e^{-i\varphi} - 1\right| = \left|e^{i\varphi} - 1\right| = 2\left|\sin"
    r"\tfrac{\varphi}{2}\right|",
    method="for one symbolic pair with i, j integers of undecided order and u real of either "
    "sign: the claimed bound squared equals s^2 |q~ conj(delta~)(e^{i theta Delta} - 1)|^2 and "
    "bound^2 - E^2 = (s Im(...))^2, both expanded to zero at Delta = 2u and at a key after its "
    "query (Delta = -2v, v > 0); the bound equals its mirror's and reference_bound's at m = 1, "
    "Delta = -2v; the loose form compared on both branches; at Delta = -1 the largest |E| over "
    "unit queries (Cauchy-Schwarz equality) equals the bound and exact_split_condition's value "
    "at Delta = +1; the sum over any number of pairs rests on the named lemmas",
    claim=_any_bound_claim,
    numeric_args=("a", "b", "dc", "de", "theta", "i", "j", "s"),
    verify=_verify_any_bound,
    lemmas=("|Re z| <= |z| (Cauchy-Schwarz for one pair)", "triangle inequality over pairs",
            "|sin u| <= |u|", "|sin u| <= 1",
            "Cauchy-Schwarz equality: max of a linear form over unit vectors is its norm"),
    uses=("split_any_pairs", "remainder_bound", "exact_split_condition", "reference_bound"),
    numeric_doc="numeric(a, b, dc, de, theta, i, j, s) -> (tight, loose) for one pair, the "
    "query at i and the key at j in any order (sum over pairs for the head's bound)",
)


# --- mean_rotation_both_ways -----------------------------------------------------------


def _symmetric_claim(theta: Any, w: Any, K: Any) -> tuple[Any, Any]:
    r""":math:`(\operatorname{Re} m, \operatorname{Im} m)` for offsets :math:`-K..K` with
    weight :math:`w_{|D|}` on each of :math:`\pm D`:
    :math:`(w_0 + 2\sum_{D=1}^{K} w_D\cos\theta D,\ 0)`."""
    return (w[0] + 2 * sp.Sum(w[_OFFSET] * sp.cos(theta * _OFFSET), (_OFFSET, 1, K)),
            sp.Integer(0))


def _mean_rotation_at(theta: Any, offsets: list[Any], weights: list[Any]) -> list[Any]:
    """mean_rotation_optimum's (Re m, Im m) for explicit offsets and weights."""
    Dl, u = sp.IndexedBase("Delta", real=True), sp.IndexedBase("u", real=True)
    sub = {Dl[k]: x for k, x in enumerate(offsets)} | {u[k]: x for k, x in enumerate(weights)}
    return [x.doit().subs(sub) for x in MEAN_ROTATION_OPTIMUM.claim(theta, Dl, u, len(offsets))]


def _symmetric_sets(claim: Callable[..., Any]) -> list[tuple[str, Any]]:
    """The claim against the mean rotation of -K..K (explicit K), for a symbolic K, and the
    uniform two-sided window's Dirichlet kernel."""
    w = sp.IndexedBase("w", real=True)
    cases: list[tuple[str, Any]] = []
    for K in SYMMETRIC_REACHES:
        offsets = list(range(-K, K + 1))
        m = _mean_rotation_at(_theta, offsets, [w[abs(x)] for x in offsets])
        mine = [sp.sympify(x).doit() for x in claim(_theta, w, K)]
        cases.append((f"K={K}: mean rotation of offsets -K..K, weights w_|D|, minus claim "
                       f"(Re, Im)", sp.Matrix([m[0] - mine[0], m[1] - mine[1]])))
        uniform = {w[k]: sp.Rational(1, 2 * K + 1) for k in range(K + 1)}
        re = sp.sympify(claim(2 * _psi, w, K)[0]).doit().subs(uniform)
        cases.append((f"K={K}, uniform two-sided window: (2K + 1) sin(theta/2) Re claim - "
                      f"sin((2K + 1) theta/2)", (2 * K + 1) * sp.sin(_psi) * re
                      - sp.sin((2 * K + 1) * _psi)))
    negative = sp.Sum(w[-_OFFSET] * sp.exp(sp.I * _theta * _OFFSET), (_OFFSET, -_K, -1))
    positive = sp.Sum(w[_OFFSET] * sp.exp(sp.I * _theta * _OFFSET), (_OFFSET, 1, _K))
    re, im = claim(_theta, w, _K)
    total = negative.change_index(_OFFSET, -_OFFSET) + w[0] + positive - re - sp.I * im
    cases.append(("symbolic K: Sum_{D=-K}^{K} w_|D| e^{i theta D} - (Re + i Im claim), the "
                  "negative half reindexed D -> -D, summand", summand_of(total, _OFFSET).rewrite(
                      sp.cos)))
    return cases


def _optimum_both_signs() -> list[tuple[str, Any]]:
    """mean_rotation_optimum's variance decomposition with offsets of both signs."""
    d1, d2 = sp.symbols("D1 D2", positive=True)
    cases: list[tuple[str, Any]] = []
    for offsets in ([-d1, d2], [-d1, 0, d2]):
        n = len(offsets)
        p = sp.symbols(f"p0:{n}", real=True)
        weights = [*p[:-1], 1 - sum(p[:-1])]  # summing to 1
        mre, mim = _mean_rotation_at(_theta, offsets, weights)
        X = [deviation_part(_hr, _hi, 1, 0, sp.cos(_theta * x), sp.sin(_theta * x), _s)
             for x in offsets]  # the deviation part at each offset, h = hr + i hi
        g_star = deviation_part(_hr, _hi, 1, 0, mre, mim, _s)
        gap = sum(wt * ((x - _c) ** 2 - (x - g_star) ** 2) for wt, x in zip(weights, X,
                                                                          strict=True))  # fmt: skip
        cases.append((f"offsets {', '.join(map(str, offsets))}: E(X - c)^2 - E(X - g*)^2 - "
                      f"(g* - c)^2", gap - (g_star - _c) ** 2))
    return cases


def _verify_both_ways(claim: Callable[..., Any]) -> Verdict:
    return zero_verdict(_symmetric_sets(claim) + _optimum_both_signs())


MEAN_ROTATION_BOTH_WAYS = Step(
    id="mean_rotation_both_ways",
    kind="inequality",
    title="The reference rotation over offsets of both signs",
    statement="Section 6's mean rotation m_l = E e^{i theta_l Delta}, taken over the offsets of "
    "the allowed set M (either sign), stays the best Delta-free value in mean square. When the "
    "offsets are symmetric (weight w_D on each of +D and -D: both ways with no window, or a "
    "two-sided window) the imaginary parts cancel and m_l is real, w_0 + 2 sum_D w_D "
    "cos(theta_l D); for a query far from the ends of a two-sided window of reach K it is the "
    "Dirichlet kernel sin((2K+1) theta_l/2) / ((2K+1) sin(theta_l/2)), which turns negative "
    "for some fast pairs. A causal or one-sided mask gives a complex m_l.",
    statement_latex=r"m_l = \mathbb E_{\Delta}\, e^{i\theta_l\Delta}\ \text{over the offsets of } "
    r"\mathcal M;\quad w_{-D} = w_D \implies m_l = \sum_{D=-K}^{K} w_{|D|} e^{i\theta_l D}"
    r" = w_0 + 2\sum_{D=1}^{K} w_D\cos\theta_l D \in \mathbb R;\quad w_D = \tfrac{1}{2K+1}:\ "
    r"m_l = \frac{\sin\big((2K+1)\theta_l/2\big)}{(2K+1)\sin(\theta_l/2)}",
    method="for K = 1, 2, 3, 4 mean_rotation_optimum's m over the offsets -K..K with weights "
    "w_|D| minus the claim expanded to zero (the imaginary part cancels); for a symbolic K the "
    "negative half reindexed (sympy's change_index) and the Sums over D combined into one whose "
    "summand, exponentials written as cos + i sin, is zero; the uniform window against the "
    "Dirichlet kernel at K = 1..4; the variance decomposition E(X - c)^2 = E(X - g*)^2 + "
    "(g* - c)^2 expanded to zero at n = 2, 3 offsets -D1, (0,) D2 of both signs with symbolic "
    "weights summing to 1, one symbolic pair",
    claim=_symmetric_claim,
    numeric_args=("theta", "w", "K"),
    verify=_verify_both_ways,
    lemmas=(VARIANCE, SQUARE, ADJACENT_RANGES),
    uses=("split_any_pairs", "mean_rotation_optimum"),
    numeric_doc="numeric(theta, w, K) -> (Re m, Im m) for a list w of length K + 1, w[D] the "
    "weight of each of the offsets +D and -D (w[0] + 2 sum w[1:] = 1)",
    symbol_kinds={"w": "indexed", "K": "integer"},
)


# --- mean_rotation_full_mask -----------------------------------------------------------


def _full_mask_claim(theta: Any, n: Any) -> Any:
    r""":math:`m = \sin^2(n\theta/2) / (n^2\sin^2(\theta/2))`, written
    :math:`(\operatorname{sinc}(n\theta/2)/\operatorname{sinc}(\theta/2))^2` so that
    :math:`\theta = 0` gives 1."""
    return (sp.sinc(n * theta / 2) / sp.sinc(theta / 2)) ** 2


def _unsinc(expr: Any) -> Any:
    r""":math:`\operatorname{sinc} x = \sin x / x` (away from :math:`x = 0`), then cancelled."""
    return sp.cancel(expr.replace(sp.sinc, lambda x: sp.sin(x) / x))


def _full_mask_exact(claim: Callable[..., Any]) -> list[tuple[str, Any]]:
    """Every pair of the two-way mask of length n = 1..6, theta = 2 psi."""
    cases: list[tuple[str, Any]] = []
    for n in FULL_MASK_SIZES:
        offsets = two_way_offsets(n)
        re, im = _mean_rotation_at(2 * _psi, offsets, [sp.Rational(1, n * n)] * len(offsets))
        fejer = sum((n - abs(D)) * sp.exp(2 * sp.I * _psi * D) for D in range(1 - n, n)) / n**2
        dirichlet = sum(sp.exp(2 * sp.I * _psi * t) for t in range(n)) / n
        cases.append((f"n={n}, all {n * n} pairs: m - Fejer sum, Im m, n^2 sin^2(theta/2) "
                       f"(m, claim) - sin^2(n theta/2), m - |mean of e^(i theta t)|^2", sp.Matrix([
                           sp.expand(re + sp.I * im - fejer).rewrite(sp.cos),
                           im, n**2 * sp.sin(_psi) ** 2 * re - sp.sin(n * _psi) ** 2,
                           _unsinc(n**2 * sp.sin(_psi) ** 2 * claim(2 * _psi, n))
                           - sp.sin(n * _psi) ** 2, re - abs2(dirichlet)])))
    return cases


def _full_mask_symbolic(claim: Callable[..., Any]) -> list[tuple[str, Any]]:
    """A symbolic length n: the geometric series' modulus against the claim, and theta = 0."""
    n = sp.Symbol("n", integer=True, positive=True)
    t = sp.Symbol("t", integer=True, nonnegative=True)
    series = sp.Sum(sp.exp(2 * sp.I * _psi * t), (t, 0, n - 1)).doit()  # sympy's geometric sum
    z = series.args[-1][0] if isinstance(series, sp.Piecewise) else series  # e^{i theta} != 1
    num, den = sp.fraction(sp.together(z))  # z = num / den
    return [("symbolic n: |num|^2 sin^2(theta/2) - |den|^2 sin^2(n theta/2) (so |z|^2 = "
             "sin^2(n theta/2) / sin^2(theta/2))",
             abs2(num) * sp.sin(_psi) ** 2 - abs2(den) * sp.sin(n * _psi) ** 2),
            ("symbolic n: n^2 sin^2(theta/2) claim - sin^2(n theta/2) (so claim = |z|^2 / n^2)",
             _unsinc(n**2 * sp.sin(_psi) ** 2 * claim(2 * _psi, n)) - sp.sin(n * _psi) ** 2),
            ("symbolic n, theta = 0: claim - 1", claim(0, n) - 1)]


def _verify_full_mask(claim: Callable[..., Any]) -> Verdict:
    return zero_verdict(_full_mask_exact(claim) + _full_mask_symbolic(claim))


MEAN_ROTATION_FULL_MASK = Step(
    id="mean_rotation_full_mask",
    kind="identity",
    title="The mean rotation of the two-way mask",
    statement="Over every pair of the two-way mask of length n (no window), the offset D occurs "
    "n - |D| times and i, j are independent and uniform, so the mean rotation is the squared "
    "modulus of the mean rotation of the distances 0..n-1 (section 6's Dirichlet kernel): the "
    "Fejer kernel divided by n, real, in [0, 1], 1 at theta_l = 0 and at most "
    "1 / (n^2 sin^2(theta_l/2)) for fast pairs.",
    statement_latex=r"\mathcal M = \{0, \dots, n-1\}^2:\quad m_l = \frac{1}{n^2}\sum_{D=-(n-1)}"
    r"^{n-1} (n - |D|)\, e^{i\theta_l D} = \Big|\frac{1}{n}\sum_{t=0}^{n-1} e^{i\theta_l t}"
    r"\Big|^2 = \frac{\sin^2(n\theta_l/2)}{n^2\sin^2(\theta_l/2)}",
    method="for n = 1..6 mean_rotation_optimum's m over all n^2 pairs (i, j) with weights 1/n^2 "
    "against the Fejer sum and the squared mean of e^{i theta t}, its imaginary part zero and "
    "n^2 sin^2(theta/2) m - sin^2(n theta/2) expanded to zero (theta = 2 psi), the multiplicities "
    "n - |D| in the Fejer sum; for a symbolic n sympy's geometric series z (e^{i theta} != 1), "
    "z = num / den with |num|^2 sin^2(theta/2) - |den|^2 sin^2(n theta/2) expanded to zero, "
    "and the claim times "
    "n^2 sin^2(theta/2) cancelled to sin^2(n theta/2); theta = 0 gives 1",
    claim=_full_mask_claim,
    numeric_args=("theta", "n"),
    verify=_verify_full_mask,
    lemmas=(FACTORISE,),
    uses=("mean_rotation_both_ways",),
    numeric_doc="numeric(theta, n) -> m for the two-way full mask of length n (real; theta not a "
    "nonzero multiple of 2 pi, where m = 1)",
    symbol_kinds={"n": "integer"},
)
