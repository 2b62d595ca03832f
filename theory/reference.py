r"""The reference-rotation family of splits and its remainder bound (docs/theory.md section 6).

.. math::

    W = f + g_m + E_m,\qquad
    g_m(q, k) = s\operatorname{Re}\sum_l \tilde q_l\overline{\tilde\delta_l}\, m_l,\qquad
    E_m = s\operatorname{Re}\sum_l \tilde q_l\overline{\tilde\delta_l}\,(e^{i\theta_l\Delta} - m_l)

    |E_m| \le s\sum_l |\tilde q_l||\tilde\delta_l|\,|e^{i\theta_l\Delta} - m_l|

``m_l = 1`` is section 3 (reference distance 0); ``m_l = e^{i theta_l c}`` is a
reference distance ``c``; the mean rotation is in :mod:`ropesplit.theory.optimum`.
One pair's quantities in real form, with :math:`\tilde q = a + ib`,
:math:`\tilde\delta = dc + i\,de`, :math:`m = mre + i\,mim`:
:math:`s\operatorname{Re}(\tilde q\,\overline{\tilde\delta}(x + iy))
= s[(a\,dc + b\,de)x + (a\,de - b\,dc)y]`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy as sp

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
from ropesplit.theory.split import REMAINDER_BOUND, SPLIT_EXACT, Complex
from ropesplit.theory.step import Step, Verdict, zero_verdict
from ropesplit.theory.sums import BLOCK_DIAGONAL, indexed, split_summand

__all__ = ["REFERENCE_BOUND", "SPLIT_REFERENCE", "deviation_part"]

REFERENCE_DIMS = (2, 4)  # head dims also checked with full symbolic vectors (both layouts)

_a, _b, _cb, _eb, _dc, _de, _s = sp.symbols("a b cbar ebar dc de s", real=True)
_i, _j, _D, _c, _psi, _mre, _mim = sp.symbols("i j Delta c psi mre mim", real=True)
_theta = sp.Symbol("theta", positive=True)
_q2, _kbar2, _delta2 = sp.Matrix([_a, _b]), sp.Matrix([_cb, _eb]), sp.Matrix([_dc, _de])
_qc, _dlc, _mc = _a + sp.I * _b, _dc + sp.I * _de, _mre + sp.I * _mim


def deviation_part(a: Any, b: Any, dc: Any, de: Any, x: Any, y: Any, s: Any) -> Any:
    r""":math:`s\operatorname{Re}(\tilde q\,\overline{\tilde\delta}\,(x + iy))
    = s[(a\,dc + b\,de)\,x + (a\,de - b\,dc)\,y]` for one pair."""
    return s * ((a * dc + b * de) * x + (a * de - b * dc) * y)


# --- split_reference -------------------------------------------------------------------


def _part(q: Complex, p: Complex, z: Complex, s: Any) -> Any:
    r""":func:`deviation_part` of complex pairs: :math:`s\operatorname{Re}(\tilde q\,
    \overline{\tilde p}\,z)`."""
    return deviation_part(q.re, q.im, p.re, p.im, z.re, z.im, s)


def _reference_terms(q: Complex, kbar: Complex, delta: Complex, theta: Any, Delta: Any,
                     m: Complex, s: Any) -> tuple[Any, Any, Any]:
    r"""One pair's :math:`(f, g_m, E_m)`:

    .. math::
        f = s\operatorname{Re}(\tilde q\,\overline{\tilde{\bar k}}\,e^{i\theta\Delta}),\quad
        g_m = s\operatorname{Re}(\tilde q\,\overline{\tilde\delta}\,m),\quad
        E_m = s\operatorname{Re}(\tilde q\,\overline{\tilde\delta}\,(e^{i\theta\Delta} - m))
    """
    rotation = Complex.rotation(theta * Delta)  # e^{i theta Delta}
    f = _part(q, kbar, rotation, s)
    return f, _part(q, delta, m, s), _part(q, delta, rotation - m, s)


def _reference_claim(*numeric_args: Any) -> tuple[Any, Any, Any]:
    """split_reference's claim on its ``numeric_args`` ``(a, b, cbar, ebar, dc, de, theta,
    Delta, mre, mim, s)``, in order: :func:`_reference_terms` of the pairs they make."""
    a, b, cbar, ebar, dc, de, theta, Delta, mre, mim, s = numeric_args
    return _reference_terms(Complex(a, b), Complex(cbar, ebar), Complex(dc, de), theta, Delta,
                            Complex(mre, mim), s)


def _verify_reference(claim: Callable[..., Any]) -> Verdict:
    f, g, E = claim(_a, _b, _cb, _eb, _dc, _de, _theta, _D, _mre, _mim, _s)
    back = rot2(-_D * _theta)  # R_2(-Delta theta), (2, 2)
    h = _qc * sp.conjugate(_dlc)  # q~ conj(delta~)
    _, g0, E0 = SPLIT_EXACT.claim(_a, _b, _cb, _eb, _dc, _de, _theta, _D, _s)
    fc, gc, Ec = claim(_a, _b, _cb, _eb, _dc, _de, _theta, _D, sp.cos(_theta * _c),
                       sp.sin(_theta * _c), _s)
    cases: list[tuple[str, Any]] = [
        ("pair: W(q, kbar + delta) - (f + g_m + E_m)",
         _s * _q2.dot(back * (_kbar2 + _delta2)) - f - g - E),
        ("pair: f - s<q, R(-Delta) kbar>", f - _s * _q2.dot(back * _kbar2)),
        ("pair: g_m - s Re(q~ conj(delta~) m)", g - _s * real_part(h * _mc)),
        ("pair: E_m - s Re(q~ conj(delta~)(e^{i theta Delta} - m))",
         E - _s * real_part(h * (sp.exp(sp.I * _theta * _D) - _mc))),
        ("pair: dg_m/dDelta", sp.diff(g, _D)),
        ("m = 1: (g_m, E_m) - split_exact's (g, E)",
         sp.Matrix([g.subs({_mre: 1, _mim: 0}) - g0, E.subs({_mre: 1, _mim: 0}) - E0])),
        ("m = e^{i theta c}: g_m - s<R(c) q, delta> (query at position c, key unrotated)",
         gc - _s * (rot2(_c * _theta) * _q2).dot(_delta2)),
        ("m = e^{i theta c}: E_m - s<q, (R(-Delta) - R(-c)) delta>",
         Ec - _s * _q2.dot((back - rot2(-_c * _theta)) * _delta2)),
    ]
    for d in REFERENCE_DIMS:
        th = thetas(d)
        for layout in LAYOUTS:
            q, kb, dl = (symbolic_vector(n, d) for n in ("q", "kbar", "delta"))
            ms = sp.symbols(f"mre0:{d // 2}", real=True), sp.symbols(f"mim0:{d // 2}", real=True)
            W = _s * (rope_matrix(_i, th, layout) * q).dot(rope_matrix(_j, th, layout) * (kb + dl))
            parts = [claim(*qp, *kp, *dp, t, _i - _j, mr, mi, _s) for qp, kp, dp, t, mr, mi in zip(
                to_pairs(q, layout), to_pairs(kb, layout), to_pairs(dl, layout), th, *ms,
                strict=True)]
            cases.append((f"d={d} {layout}: W - sum_l (f + g_m + E_m)",
                          W - sum(sum(p) for p in parts)))
    mr, mi = indexed("mre mim")  # pair l's reference rotation
    cases.append(("symbolic P: Sum_l W_l - (Sum_l f_l + Sum_l g_m,l + Sum_l E_m,l)",
                  split_summand(lambda *pair: claim(*pair, _i - _j, mr, mi, _s), _i, _j, _s)))
    return zero_verdict(cases)


SPLIT_REFERENCE = Step(
    id="split_reference",
    kind="identity",
    title="A family of splits: the reference rotation",
    statement="The semantic term may replace each pair's rotation e^{i theta_l Delta} by any "
    "constant m_l; the split stays exact, with the remainder carrying the difference. m_l = 1 is "
    "the split of section 3 (every pair compared at distance 0); m_l = e^{i theta_l c} compares "
    "every pair at a reference distance c (the query rotated to position c against the unrotated "
    "deviation). f does not depend on m.",
    statement_latex=r"W_{ij} = f(q_i, \Delta) + g_m(q_i, k_j) + E_{m,ij},\quad "
    r"g_m = s\operatorname{Re}\sum_l \tilde q_l\,\overline{\tilde\delta_l}\,m_l,\quad "
    r"E_m = s\operatorname{Re}\sum_l \tilde q_l\,\overline{\tilde\delta_l}\,"
    r"(e^{i\theta_l\Delta} - m_l);\quad m_l = 1:\ g_m = g,\ E_m = E;\quad "
    r"m_l = e^{i\theta_l c}:\ g_m = s\langle R(c)\,q, \delta\rangle",
    method="for one symbolic pair with symbolic m = mre + i mim: W - (f + g_m + E_m) and each term "
    "against its real and complex definitions expanded to zero, g_m has zero Delta-derivative, "
    "m = 1 gives split_exact's (g, E), m = e^{i theta c} gives s<R(c) q, delta> and "
    "s<q, (R(-Delta) - R(-c)) delta>; the full sum at d = 2, 4 (both layouts) and for a symbolic "
    "pair count P (the Sums over l combined into one whose indexed summand expands to zero)",
    claim=_reference_claim,
    numeric_args=("a", "b", "cbar", "ebar", "dc", "de", "theta", "Delta", "mre", "mim", "s"),
    verify=_verify_reference,
    lemmas=(BLOCK_DIAGONAL,),
    uses=("split_exact",),
    numeric_doc="numeric(a, b, cbar, ebar, dc, de, theta, Delta, mre, mim, s) -> (f, g_m, E_m) "
    "for one pair with m = mre + i mim",
)


# --- reference_bound -------------------------------------------------------------------


def _reference_bound(q: Complex, delta: Complex, theta: Any, Delta: Any, m: Complex,
                     s: Any) -> Any:
    r"""One pair's bound on :math:`|E_m|`:
    :math:`s|\tilde q||\tilde\delta|\,|e^{i\theta\Delta} - m|`."""
    chord = abs(Complex.rotation(theta * Delta) - m)
    return s * abs(q) * abs(delta) * chord


def _reference_bound_claim(*numeric_args: Any) -> Any:
    """reference_bound's claim on its ``numeric_args`` ``(a, b, dc, de, theta, Delta, mre, mim,
    s)``, in order: :func:`_reference_bound` of the pairs they make."""
    a, b, dc, de, theta, Delta, mre, mim, s = numeric_args
    return _reference_bound(Complex(a, b), Complex(dc, de), theta, Delta, Complex(mre, mim), s)


def _verify_reference_bound(claim: Callable[..., Any]) -> Verdict:
    bound = claim(_a, _b, _dc, _de, _theta, _D, _mre, _mim, _s)
    z = _qc * sp.conjugate(_dlc) * (sp.exp(sp.I * _theta * _D) - _mc)  # E_m = s Re z
    E = SPLIT_REFERENCE.claim(_a, _b, _cb, _eb, _dc, _de, _theta, _D, _mre, _mim, _s)[2]
    im_z = sp.expand(sp.expand(z.rewrite(sp.cos)).as_real_imag()[1])
    tight = REMAINDER_BOUND.claim(_a, _b, _dc, _de, _theta, 2 * _psi, _s)[0]
    norms2 = _s**2 * (_a**2 + _b**2) * (_dc**2 + _de**2)
    cases: list[tuple[str, Any]] = [
        ("bound^2 - s^2 |q~|^2 |delta~|^2 |e^{i theta Delta} - m|^2 (|zw| = |z||w|)",
         bound**2 - norms2 * abs2(sp.exp(sp.I * _theta * _D) - _mc)),
        ("bound^2 - s^2 |q~ conj(delta~)(e^{i theta Delta} - m)|^2", bound**2 - _s**2 * abs2(z)),
        ("bound^2 - E_m^2 - (s Im z)^2: |E_m| <= bound, the gap a square (|Re z| <= |z|)",
         bound**2 - E**2 - (_s * im_z) ** 2),
        ("m = 1: bound^2 - (remainder_bound's tight)^2 at Delta = 2 psi",
         claim(_a, _b, _dc, _de, _theta, 2 * _psi, 1, 0, _s) ** 2 - tight**2),
        ("m = e^{i theta c}: bound^2 - s^2|q~|^2|delta~|^2 4 sin^2(theta (Delta - c)/2), "
         "Delta = c + 2 psi",
         claim(_a, _b, _dc, _de, _theta, _c + 2 * _psi, sp.cos(_theta * _c), sp.sin(_theta * _c),
               _s) ** 2 - norms2 * 4 * sp.sin(_theta * _psi) ** 2),
    ]
    return zero_verdict(cases)


REFERENCE_BOUND = Step(
    id="reference_bound",
    kind="inequality",
    title="The remainder bound for any reference rotation",
    statement="For every choice of the reference rotations m_l, each pair contributes to the "
    "remainder at most the product of the query and deviation pair lengths times the distance "
    "|e^{i theta_l Delta} - m_l| between the true rotation and its reference. At m_l = 1 this is "
    "section 3's chord 2|sin(theta_l Delta / 2)|; at a reference distance c it is the chord "
    "2|sin(theta_l (Delta - c) / 2)| of the distance from c.",
    statement_latex=r"|E_{m,ij}| \le s\sum_l |\tilde q_l|\,|\tilde\delta_l|\,"
    r"\big|e^{i\theta_l\Delta} - m_l\big|;\quad m_l = 1:\ "
    r"\big|e^{i\theta_l\Delta} - 1\big| = 2\left|\sin\tfrac{\theta_l\Delta}{2}\right|;\quad "
    r"m_l = e^{i\theta_l c}:\ 2\left|\sin\tfrac{\theta_l(\Delta - c)}{2}\right|",
    method="for one symbolic pair with symbolic m: bound^2 = s^2|q~ conj(delta~)"
    "(e^{i theta Delta} - m)|^2 and bound^2 - E_m^2 = (s Im(...))^2 expanded to zero (so the "
    "per-pair inequality holds, the gap being a square and the bound >= 0); the squares at m = 1 "
    "and at m = e^{i theta c} compared with the half-angle chords; the sum over any number of "
    "pairs rests on the triangle inequality",
    claim=_reference_bound_claim,
    numeric_args=("a", "b", "dc", "de", "theta", "Delta", "mre", "mim", "s"),
    verify=_verify_reference_bound,
    lemmas=("|Re z| <= |z|", "|z w| = |z| |w|", "triangle inequality over pairs"),
    uses=("split_reference", "remainder_bound"),
    numeric_doc="numeric(a, b, dc, de, theta, Delta, mre, mim, s) -> one pair's bound "
    "s |q~||delta~| |e^{i theta Delta} - m| (sum over pairs for the head's bound)",
)
