r"""The additive split, its remainder bound and when it is exact (docs/theory.md section 3).

.. math::

    W_{ij} = f(q_i, \Delta) + g(q_i, k_j) + E_{ij}, \quad
    f = s\langle q, R(-\Delta)\bar k\rangle,\quad g = s\langle q, \delta\rangle,\quad
    E = s\langle q, (R(-\Delta) - I)\delta\rangle

    |E_{ij}| \le s\sum_l |\tilde q_l||\tilde\delta_l|\, 2|\sin(\theta_l\Delta/2)|
             \le s\sum_l |\tilde q_l||\tilde\delta_l| \min(2, \theta_l|\Delta|)

Identities are checked as exact zero differences; the inequalities' algebraic
parts (:math:`|e^{i\phi} - 1| = 2|\sin(\phi/2)|`, :math:`\|R(\phi) - I\|_2`) are
checked symbolically and the standard lemmas they rest on are named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy as sp

from ropesplit.theory.expansion import SYMBOLIC_DIMS
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
from ropesplit.theory.step import Step, Verdict, zero_verdict
from ropesplit.theory.sums import BLOCK_DIAGONAL, split_summand

__all__ = ["Complex", "EXACT_SPLIT_CONDITION", "REMAINDER_BOUND", "SPLIT_EXACT"]

_a, _b, _cb, _eb, _dc, _de, _s = sp.symbols("a b cbar ebar dc de s", real=True)
_i, _j, _D, _psi = sp.symbols("i j Delta psi", real=True)
_theta = sp.Symbol("theta", positive=True)
_q2, _kbar2, _delta2 = sp.Matrix([_a, _b]), sp.Matrix([_cb, _eb]), sp.Matrix([_dc, _de])
_qc, _dlc = _a + sp.I * _b, _dc + sp.I * _de  # q~ and delta~ for one pair


@dataclass(frozen=True)
class Complex:
    r"""One pair :math:`(x, y)` as the complex number :math:`x + iy` (docs/theory.md section 1),
    its parts sympy expressions: :math:`\tilde q = a + ib`, :math:`\tilde{\bar k} = \bar c +
    i\bar e`, :math:`\tilde\delta = dc + i\,de`, a reference rotation :math:`m = mre + i\,mim`.
    """

    re: Any
    im: Any

    @staticmethod
    def rotation(phi: Any) -> Complex:
        r""":math:`e^{i\phi} = \cos\phi + i\sin\phi`."""
        return Complex(sp.cos(phi), sp.sin(phi))

    def dot(self, other: Complex) -> Any:
        r""":math:`\operatorname{Re}(z\,\overline{w}) = \langle z, w\rangle`, e.g.
        :math:`a\bar c + b\bar e` for :math:`z = \tilde q`, :math:`w = \tilde{\bar k}`."""
        return self.re * other.re + self.im * other.im

    def cross(self, other: Complex) -> Any:
        r""":math:`-\operatorname{Im}(z\,\overline{w})`, e.g. :math:`a\bar e - b\bar c`."""
        return self.re * other.im - self.im * other.re

    def __sub__(self, other: Complex) -> Complex:
        return Complex(self.re - other.re, self.im - other.im)

    def __abs__(self) -> Any:
        r""":math:`|z| = \sqrt{x^2 + y^2}` (a sympy expression)."""
        return sp.sqrt(self.re**2 + self.im**2)


# --- split_exact -----------------------------------------------------------------------


def _split_terms(q: Complex, kbar: Complex, delta: Complex, theta: Any, Delta: Any,
                 s: Any) -> tuple[Any, Any, Any]:
    r"""One pair's :math:`(f, g, E)`, :math:`\tilde q = a + ib`,
    :math:`\tilde{\bar k} = \bar c + i\bar e`, :math:`\tilde\delta = dc + i\,de`:

    .. math::
        f = s[(a\bar c + b\bar e)\cos\theta\Delta + (a\bar e - b\bar c)\sin\theta\Delta],\quad
        g = s(a\,dc + b\,de),\quad
        E = s[(a\,dc + b\,de)(\cos\theta\Delta - 1) + (a\,de - b\,dc)\sin\theta\Delta]
    """
    cos, sin = sp.cos(theta * Delta), sp.sin(theta * Delta)
    f = s * (q.dot(kbar) * cos + q.cross(kbar) * sin)
    g = s * q.dot(delta)
    E = s * (q.dot(delta) * (cos - 1) + q.cross(delta) * sin)
    return f, g, E


def _split_claim(*numeric_args: Any) -> tuple[Any, Any, Any]:
    """split_exact's claim on its ``numeric_args`` ``(a, b, cbar, ebar, dc, de, theta, Delta,
    s)``, in order: :func:`_split_terms` of the pairs they make."""
    a, b, cbar, ebar, dc, de, theta, Delta, s = numeric_args
    return _split_terms(Complex(a, b), Complex(cbar, ebar), Complex(dc, de), theta, Delta, s)


def _verify_split(claim: Callable[..., Any]) -> Verdict:
    f, g, E = claim(_a, _b, _cb, _eb, _dc, _de, _theta, _D, _s)
    back = rot2(-_D * _theta)  # R_2(-Delta theta), (2, 2)
    z = _qc * sp.conjugate(_dlc) * (sp.exp(sp.I * _theta * _D) - 1)
    cases: list[tuple[str, Any]] = [
        ("pair: W(q, kbar + delta) - (f + g + E)",
         _s * _q2.dot(back * (_kbar2 + _delta2)) - f - g - E),
        ("pair: f - s<q, R(-Delta) kbar>", f - _s * _q2.dot(back * _kbar2)),
        ("pair: g - s<q, delta>", g - _s * _q2.dot(_delta2)),
        ("pair: E - s<q, (R(-Delta) - I) delta>", E - _s * _q2.dot((back - sp.eye(2)) * _delta2)),
        ("pair: E - s Re(q~ conj(delta~)(e^{i theta Delta} - 1))", E - _s * real_part(z)),
        ("pair: dg/dDelta", sp.diff(g, _D)),
        ("pair: df/d(delta)", sp.Matrix([sp.diff(f, _dc), sp.diff(f, _de)])),
    ]
    for d in SYMBOLIC_DIMS:
        th = thetas(d)
        for layout in LAYOUTS:
            q, kb, dl = (symbolic_vector(n, d) for n in ("q", "kbar", "delta"))
            W = _s * (rope_matrix(_i, th, layout) * q).dot(rope_matrix(_j, th, layout) * (kb + dl))
            parts = [claim(*qp, *kp, *dp, t, _i - _j, _s) for qp, kp, dp, t in zip(
                to_pairs(q, layout), to_pairs(kb, layout), to_pairs(dl, layout), th, strict=True)]
            cases.append((f"d={d} {layout}: W - sum_l (f + g + E)", W - sum(sum(p) for p in parts)))
    cases.append(("symbolic P: Sum_l W_l - (Sum_l f_l + Sum_l g_l + Sum_l E_l)", split_summand(
        lambda *pair: claim(*pair, _i - _j, _s), _i, _j, _s)))
    return zero_verdict(cases)


SPLIT_EXACT = Step(
    id="split_exact",
    kind="identity",
    title="The exact additive split",
    statement="Write each key as a reference key kbar plus a deviation delta. The logit is then "
    "exactly a positional term f (the query against the rotated reference key, no key content), "
    "plus a semantic term g (the query against the deviation, no position), plus a remainder E "
    "that only the deviation's rotation creates.",
    statement_latex=r"W_{ij} = f(q_i, \Delta) + g(q_i, k_j) + E_{ij},\quad "
    r"f(q, \Delta) = s\langle q, R(-\Delta)\bar k\rangle,\quad g(q, k) = s\langle q, \delta\rangle,"
    r"\quad E_{ij} = s\langle q, (R(-\Delta) - I)\delta\rangle"
    r" = s\,"
    r"\operatorname{Re}\sum_l \tilde q_l\,\overline{\tilde\delta_l}\,(e^{i\theta_l\Delta} - 1)",
    method="W - (f + g + E) and each term against its definition (real and complex forms) expanded "
    "to zero for one symbolic pair; g has zero Delta-derivative, f zero delta-derivative; the full "
    "sum at d = 2, 4, 6, 8 in both layouts, and for a symbolic pair count P (the four Sums over l "
    "combined into one whose indexed summand expands to zero)",
    claim=_split_claim,
    numeric_args=("a", "b", "cbar", "ebar", "dc", "de", "theta", "Delta", "s"),
    verify=_verify_split,
    lemmas=(BLOCK_DIAGONAL,),
    uses=("logit_expansion",),
    numeric_doc="numeric(a, b, cbar, ebar, dc, de, theta, Delta, s) -> (f, g, E) for one pair",
)


# --- remainder_bound -------------------------------------------------------------------


def _bound_claim(a: Any, b: Any, dc: Any, de: Any, theta: Any, Delta: Any,
                 s: Any) -> tuple[Any, Any]:
    r"""One pair's bounds on :math:`|E|` (``theta >= 0``):

    .. math:: s|\tilde q||\tilde\delta|\,2|\sin(\theta\Delta/2)|,\qquad
              s|\tilde q||\tilde\delta|\min(2, \theta|\Delta|)
    """
    norms = s * sp.sqrt(a**2 + b**2) * sp.sqrt(dc**2 + de**2)
    return norms * 2 * sp.Abs(sp.sin(theta * Delta / 2)), norms * sp.Min(2, theta * sp.Abs(Delta))


def _verify_bound(claim: Callable[..., Any]) -> Verdict:
    # the angle is written theta * (2 psi) so that half angles are polynomial in cos/sin(theta psi)
    tight, loose = claim(_a, _b, _dc, _de, _theta, 2 * _psi, _s)
    phi = 2 * _theta * _psi
    chord = sp.exp(sp.I * phi) - 1
    M = rot2(phi) - sp.eye(2)  # R(phi) - I, (2, 2)
    half = 2 * sp.sin(_theta * _psi)  # 2 sin(phi/2)
    cases: list[tuple[str, Any]] = [
        ("|e^{i phi} - 1|^2 - 4 sin^2(phi/2)", abs2(chord) - half**2),
        ("(R(phi) - I)^T (R(phi) - I) - 4 sin^2(phi/2) I: both singular values 2|sin(phi/2)|",
         M.T * M - half**2 * sp.eye(2)),
        ("|q~ conj(delta~)(e^{i phi} - 1)|^2 - |q~|^2 |delta~|^2 |e^{i phi} - 1|^2",
         abs2(_qc * sp.conjugate(_dlc) * chord) - abs2(_qc) * abs2(_dlc) * abs2(chord)),
        ("tight^2 - s^2 |q~ conj(delta~)(e^{i phi} - 1)|^2",
         tight**2 - _s**2 * abs2(_qc * sp.conjugate(_dlc) * chord)),
    ]
    verdict = zero_verdict(cases)
    # the loose form is the tight one with |sin u| replaced by min(1, |u|)
    # (u = theta psi = theta Delta / 2, w = |u|), compared on both branches w = 1 -+ v, v >= 0
    norms = _s * sp.sqrt(_a**2 + _b**2) * sp.sqrt(_dc**2 + _de**2)
    w, v = sp.symbols("w v", nonnegative=True)
    gap = (loose - norms * 2 * sp.Min(1, w)).subs(sp.Abs(_psi), w / _theta)
    loose_ok = all(sp.expand(gap.subs(w, br)) == 0 for br in (1 - v, 1 + v)) and not gap.has(_psi)
    tight_ok = sp.expand(tight - norms * 2 * sp.Abs(sp.sin(_theta * _psi))) == 0
    detail = (f"{verdict.detail}; tight - s|q~||delta~| 2|sin u|: {'= 0' if tight_ok else '!= 0'}"
              f"; loose - (tight with |sin u| -> min(1, |u|)) on both branches |u| <= 1, >= 1: "
              f"{'= 0' if loose_ok else '!= 0'}")
    return Verdict(verdict.checked and loose_ok and tight_ok, detail)


REMAINDER_BOUND = Step(
    id="remainder_bound",
    kind="inequality",
    title="The remainder bound",
    statement="Each pair contributes to the remainder at most the product of the query and "
    "deviation pair lengths times the chord 2|sin(theta Delta / 2)| of the rotation; the chord is "
    "at most 2 and at most theta |Delta|. Deviation in slow (low-frequency) pairs therefore costs "
    "almost nothing over a context.",
    statement_latex=r"|E_{ij}| \le s\sum_l |\tilde q_l|\,|\tilde\delta_l|\; "
    r"2\left|\sin\tfrac{\theta_l\Delta}{2}\right|"
    r" \le s\sum_l |\tilde q_l|\,|\tilde\delta_l|\,\min(2, \theta_l|\Delta|)",
    method="algebraic parts checked symbolically: |e^{i phi} - 1|^2 = 4 sin^2(phi/2), "
    "(R - I)^T (R - I) = 4 sin^2(phi/2) I (so ||R(phi) - I||_2 = 2|sin(phi/2)|), |zw| = |z||w| and "
    "the claimed bound squared equals s^2 |q~ conj(delta~)(e^{i phi} - 1)|^2, for one symbolic "
    "pair; the inequalities themselves, and the sum over any number of pairs, rest on the named "
    "lemmas",
    claim=_bound_claim,
    numeric_args=("a", "b", "dc", "de", "theta", "Delta", "s"),
    verify=_verify_bound,
    lemmas=("|Re z| <= |z| (Cauchy-Schwarz for one pair)", "triangle inequality over pairs",
            "|sin u| <= |u|", "|sin u| <= 1"),
    uses=("split_exact",),
    numeric_doc="numeric(a, b, dc, de, theta, Delta, s) -> (tight, loose) for one pair",
)


# --- exact_split_condition -------------------------------------------------------------


def _worst_claim(dc: Any, de: Any, theta: Any, s: Any) -> Any:
    r"""The largest :math:`|E|` over unit query pairs at :math:`\Delta = 1`:
    :math:`s|\tilde\delta|\, 2|\sin(\theta/2)|`."""
    return s * sp.sqrt(dc**2 + de**2) * 2 * sp.Abs(sp.sin(theta / 2))


def _verify_condition(claim: Callable[..., Any]) -> Verdict:
    E1 = _s * _q2.dot((rot2(-2 * _psi) - sp.eye(2)) * _delta2)  # E at Delta = 1, theta = 2 psi
    grad = sp.Matrix([sp.diff(E1, _a), sp.diff(E1, _b)])  # E is linear in q: E = grad . q
    th_any = sp.Symbol("theta", real=True)
    k, Dn = sp.symbols("k Delta_n", integer=True)
    cases: list[tuple[str, Any]] = [
        ("E(Delta=1) - grad . q (E linear in the query)", E1 - grad.dot(_q2)),
        ("claim(theta=2 psi)^2 - |grad|^2 (max over unit q, Cauchy-Schwarz equality)",
         claim(_dc, _de, 2 * _psi, _s) ** 2 - grad.dot(grad)),
        ("claim(delta~=1)^2 - (2 - 2 cos theta)",
         claim(1, 0, 2 * _psi, 1) ** 2 - (2 - 2 * sp.cos(2 * _psi))),
        ("E at theta = 2 pi k, integer Delta", _s * _q2.dot(
            (rot2(-2 * sp.pi * k * Dn) - sp.eye(2)) * _delta2)),
        ("E at Delta = 0 for any delta (why N >= 2 is needed)",
         _s * _q2.dot((rot2(0 * th_any) - sp.eye(2)) * _delta2)),
    ]
    for d in SYMBOLIC_DIMS:
        th = thetas(d)
        for layout in LAYOUTS:
            dl = symbolic_vector("delta", d)
            G = (rope_matrix(-1, th, layout) - sp.eye(d)) * dl  # gradient of E/s in q, (d, 1)
            per_pair = sum(claim(*dp, t, 1) ** 2
                           for dp, t in zip(to_pairs(dl, layout), th, strict=True))
            cases.append((f"d={d} {layout}: |grad_q E|^2 - sum_l claim_l^2",
                          _half_angle(G.dot(G) - per_pair, th)))
    verdict = zero_verdict(cases)
    zeros = sp.solveset(2 - 2 * sp.cos(th_any), th_any, sp.S.Reals)
    n = sp.Symbol("n", integer=True)
    zset_ok = bool(zeros.dummy_eq(sp.ImageSet(sp.Lambda(n, 2 * n * sp.pi), sp.S.Integers)))
    detail = f"{verdict.detail}; zero set of 2 - 2 cos theta = 2 pi Z: {zset_ok}"
    return Verdict(verdict.checked and zset_ok, detail)


def _half_angle(expr: sp.Expr, th: tuple[sp.Symbol, ...]) -> sp.Expr:
    """``expr`` with each ``theta_l`` written as ``2 psi_l`` (half angles become polynomial)."""
    psis = sp.symbols(f"psi0:{len(th)}", real=True)
    return expr.subs({t: 2 * p for t, p in zip(th, psis, strict=True)})


EXACT_SPLIT_CONDITION = Step(
    id="exact_split_condition",
    kind="corollary",
    title="When the split is exact",
    statement="The remainder vanishes for every query and every distance 0..N-1 (N >= 2) exactly "
    "when the key deviation lives only in pairs that do not rotate (theta_l a multiple of 2 pi): "
    "a fully rotary head cannot disentangle exactly; real heads approximate it with their slowest "
    "pairs.",
    statement_latex=r"E_{ij} = 0\ \ \forall q,\ \forall \Delta \in \{0, \dots, N-1\}\ (N \ge 2)"
    r"\iff \tilde\delta_l = 0\ \text{ for every } l \text{ with } \theta_l \notin 2\pi\mathbb{Z};"
    r"\qquad \max_{|\tilde q_l| = 1} |E_l(\Delta = 1)| = s|\tilde\delta_l|\,"
    r"2\left|\sin\tfrac{\theta_l}{2}\right|",
    method="E is linear in q with gradient s (R(-1) - I) delta; its squared norm equals the sum of "
    "the per-pair claims squared at d = 2, 4, 6, 8 (both layouts), each pair's is "
    "s^2 |delta~|^2 (2 - 2 cos theta), whose real zero set sympy solves to 2 pi Z; E = 0 at "
    "theta = 2 pi k with integer Delta, and E = 0 at Delta = 0 for any delta; for any P the "
    "squared norm is the sum over pairs by the block-diagonal lemma",
    claim=_worst_claim,
    numeric_args=("dc", "de", "theta", "s"),
    verify=_verify_condition,
    lemmas=("Cauchy-Schwarz equality: max of a linear form over unit vectors is its norm",
            BLOCK_DIAGONAL),
    uses=("split_exact", "remainder_bound"),
    numeric_doc="numeric(dc, de, theta, s) -> max |E| over unit query pairs at Delta = 1 "
    "(zero iff delta~ = 0 or theta in 2 pi Z)",
)
