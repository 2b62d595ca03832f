r"""Consequences of the split (docs/theory.md section 4).

.. math::

    \operatorname{softmax}_j(W_{ij} + b_i) = \operatorname{softmax}_j(W_{ij}), \qquad
    e^{-2\varepsilon} \le A_{ij}/\hat A_{ij} \le e^{2\varepsilon}, \qquad
    \sum_j |A_{ij} - \hat A_{ij}| \le e^{2\varepsilon} - 1,

    |W(\Delta + t) - W(\Delta)| \le s\sum_l |\tilde q_l||\tilde k_l|\, 2|\sin(\theta_l t/2)|,
    \qquad \Big|\sum_l h_l e^{i\theta_l\Delta}\Big|
    \le \max_l |h_{l+1} - h_l| \sum_{m=1}^{P} |S_m(\Delta)|.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy as sp

from ropesplit.theory.rope import abs2, real_part, rot2
from ropesplit.theory.split import SPLIT_EXACT
from ropesplit.theory.step import Step, Verdict, zero_verdict

__all__ = [
    "ATTENTION_BOUND",
    "DECAY_PAIRS",
    "LONG_TERM_DECAY",
    "PERTURBATION_BOUND",
    "SOFTMAX_ROW",
    "SOFTMAX_SHIFT",
]

SOFTMAX_ROW = 4  # keys in the row that softmax_shift's numeric function takes
ROWS = (2, 3, 4)  # row lengths the softmax identities are checked at
DECAY_PAIRS = (1, 2, 3, 4, 5)  # pair counts P the Abel summation is checked at


def _softmax(w: list[Any]) -> tuple[Any, ...]:
    r""":math:`\operatorname{softmax}_j(w) = e^{w_j} / \sum_k e^{w_k}`."""
    z = sum(sp.exp(x) for x in w)
    return tuple(sp.exp(x) / z for x in w)


def _rational_zero(expr: Any) -> bool:
    """Exact zero test for rational functions of exponentials (exp(x + y) split first)."""
    return bool(sp.cancel(sp.expand(sp.powsimp(expr, combine="exp"), power_exp=True)) == 0)


# --- softmax_shift -------------------------------------------------------------------------


def _shift_claim(*args: Any) -> tuple[Any, ...]:
    r"""The claimed value of :math:`\operatorname{softmax}_j(w_j + b)`: :math:`\operatorname{softmax}_j(w_j)`."""  # noqa: E501
    *w, _b = args
    return _softmax(list(w))


def _verify_shift(claim: Callable[..., Any]) -> Verdict:
    w = list(sp.symbols(f"w0:{SOFTMAX_ROW}", real=True))
    b = sp.Symbol("b", real=True)
    shifted = _softmax([x + b for x in w])
    ok = [_rational_zero(x - y) for x, y in zip(shifted, claim(*w, b), strict=True)]
    lines = [f"row of {SOFTMAX_ROW}: softmax(w + b)_{j} - claim_{j}: {'= 0' if z else '!= 0'}"
             for j, z in enumerate(ok)]
    # the three-axis fit a_{i-j} + b_i + c_j: the query-only b_i drops out of every row
    for n in ROWS:
        a, c = sp.symbols(f"a0:{n}", real=True), sp.symbols(f"c0:{n}", real=True)
        diff = [x - y for x, y in zip(_softmax([a[j] + b + c[j] for j in range(n)]),
                                      _softmax([a[j] + c[j] for j in range(n)]), strict=True)]
        z = all(_rational_zero(x) for x in diff)
        ok.append(z)
        lines.append(f"row of {n}: softmax(a + b + c) - softmax(a + c): {'= 0' if z else '!= 0'}")
    return Verdict(all(ok), "; ".join(lines))


SOFTMAX_SHIFT = Step(
    id="softmax_shift",
    kind="identity",
    title="Softmax cannot see query-only terms",
    statement="Adding the same number to every logit of a row leaves the attention weights "
    "unchanged, so any term that depends on the query alone is invisible; the model-free "
    "three-axis fit a_{i-j} + b_i + c_j therefore reduces to distance plus key.",
    statement_latex=r"\operatorname{softmax}_j(W_{ij} + b_i) = \operatorname{softmax}_j(W_{ij}),"
    r"\qquad \operatorname{softmax}_j(a_{i-j} + b_i + c_j)"
    r" = \operatorname{softmax}_j(a_{i-j} + c_j)",
    method="softmax(w + b) - softmax(w) cancelled to zero as a rational function of exponentials "
    f"for a row of {SOFTMAX_ROW}, and the three-axis form for rows of 2, 3, 4",
    claim=_shift_claim,
    numeric_args=(*(f"w{j}" for j in range(SOFTMAX_ROW)), "b"),
    verify=_verify_shift,
    uses=("split_exact",),
    numeric_doc=f"numeric(w0, .., w{SOFTMAX_ROW - 1}, b) -> the attention weights of the row "
    "w + b (which do not depend on b)",
)


# --- attention_bound -------------------------------------------------------------------


def _attention_claim(eps: Any) -> tuple[Any, Any, Any]:
    r""":math:`(e^{-2\varepsilon},\ e^{2\varepsilon},\ e^{2\varepsilon} - 1)`: ratio bounds, L1 bound."""  # noqa: E501
    return sp.exp(-2 * eps), sp.exp(2 * eps), sp.exp(2 * eps) - 1


def _verify_attention(claim: Callable[..., Any]) -> Verdict:
    eps, p = sp.Symbol("epsilon", positive=True), sp.Symbol("p", positive=True)
    low, high, l1 = claim(eps)
    ok, lines = [], []

    def note(label: str, zero: bool) -> None:
        ok.append(zero)
        lines.append(f"{label}: {'= 0' if zero else '!= 0'}")

    for n in ROWS:
        x, E = sp.symbols(f"x0:{n}", real=True), sp.symbols(f"E0:{n}", real=True)
        A, Ah = _softmax([x[j] + E[j] for j in range(n)]), _softmax(list(x))
        mean = sum(Ah[k] * sp.exp(E[k]) for k in range(n))
        note(f"row of {n}: A_j/A^_j - e^(E_j) / sum_k A^_k e^(E_k)",
             all(_rational_zero(A[j] / Ah[j] - sp.exp(E[j]) / mean) for j in range(n)))
        note(f"row of {n}: sum_j (A_j - A^_j)", _rational_zero(sum(A) - sum(Ah)))
    # the constants are sharp: E_j = eps, E_k = -eps elsewhere, A^_j = p -> 0 (or the reverse)
    ratio_hi = sp.exp(eps) / (p * sp.exp(eps) + (1 - p) * sp.exp(-eps))
    ratio_lo = sp.exp(-eps) / (p * sp.exp(-eps) + (1 - p) * sp.exp(eps))
    note("lim_{A^_j -> 0} extreme ratio - high", sp.simplify(sp.limit(ratio_hi, p, 0) - high) == 0)
    note("lim_{A^_j -> 0} extreme ratio - low", sp.simplify(sp.limit(ratio_lo, p, 0) - low) == 0)
    note("L1 - (high - 1)", sp.simplify(l1 - (high - 1)) == 0)
    note("(high - 1) - (1 - low) - (e^eps - e^-eps)^2 (so high - 1 >= 1 - low)",
         sp.expand((high - 1) - (1 - low) - (sp.exp(eps) - sp.exp(-eps)) ** 2) == 0)
    return Verdict(all(ok), "; ".join(lines))


ATTENTION_BOUND = Step(
    id="attention_bound",
    kind="inequality",
    title="From logits to attention weights",
    statement="If the remainder is at most eps in absolute value on a row, every attention weight "
    "is within a factor e^{2 eps} of the weight the split alone predicts, and the two rows differ "
    "by at most e^{2 eps} - 1 in total variation (L1); the split's attention is a position prior "
    "times a semantic weight, exp f times exp g.",
    statement_latex=r"|E_{ij}| \le \varepsilon\ \forall j \implies "
    r"e^{-2\varepsilon} \le \frac{A_{ij}}{\hat A_{ij}} \le e^{2\varepsilon},\quad "
    r"\sum_j |A_{ij} - \hat A_{ij}| \le e^{2\varepsilon} - 1,\quad "
    r"\hat A_{ij} \propto e^{f(q_i, i-j)}\, e^{g(q_i, k_j)}",
    method="ratio identity A_j / A^_j = e^(E_j) / sum_k A^_k e^(E_k) and sum_j (A_j - A^_j) = 0 "
    "cancelled to zero for rows of 2, 3, 4; the constants shown sharp by the limit of the extreme "
    "configuration; e^{2 eps} - 1 >= 1 - e^{-2 eps} as a difference equal to a square",
    claim=_attention_claim,
    numeric_args=("eps",),
    verify=_verify_attention,
    lemmas=("a weighted mean of e^(E_k) lies between their minimum and maximum",
            "exp is increasing", "sum_j A^_j |r_j - 1| <= max_j |r_j - 1| (weights sum to 1)"),
    uses=("split_exact", "softmax_shift", "remainder_bound"),
    numeric_doc="numeric(eps) -> (e^{-2 eps}, e^{2 eps}, e^{2 eps} - 1)",
)


# --- perturbation_bound ----------------------------------------------------------------


def _perturb_claim(a: Any, b: Any, c: Any, e: Any, theta: Any, t: Any, s: Any) -> Any:
    r""":math:`s|\tilde q||\tilde k|\, 2|\sin(\theta t/2)|`: one pair's bound on the logit move."""
    return s * sp.sqrt(a**2 + b**2) * sp.sqrt(c**2 + e**2) * 2 * sp.Abs(sp.sin(theta * t / 2))


def _verify_perturb(claim: Callable[..., Any]) -> Verdict:
    a, b, c, e, cb, eb, dc, de, s, theta, D, psi = sp.symbols(
        "a b c e cbar ebar dc de s theta Delta psi", real=True)
    t = 2 * psi  # a move of t positions, written 2 psi so half angles are polynomial
    q2 = sp.Matrix([a, b])

    def W(k: sp.Matrix, dist: Any) -> Any:
        return s * q2.dot(rot2(-theta * dist) * k)

    def move(x: Any, y: Any) -> Any:  # s Re(q~ conj(k~) e^{i theta Delta} (e^{i theta t} - 1))
        z = (a + sp.I * b) * (x - sp.I * y) * sp.exp(sp.I * theta * D) * (
            sp.exp(sp.I * theta * t) - 1)
        return s * real_part(z), abs2(z)

    mv, mv2 = move(c, e)
    f0, g0, E0 = SPLIT_EXACT.claim(a, b, cb, eb, dc, de, theta, D, s)
    f1, g1, E1 = SPLIT_EXACT.claim(a, b, cb, eb, dc, de, theta, D + t, s)
    cases = [
        ("W(Delta + t) - W(Delta) - s Re(q~ conj(k~) e^{i theta Delta}(e^{i theta t} - 1))",
         W(sp.Matrix([c, e]), D + t) - W(sp.Matrix([c, e]), D) - mv),
        ("|e^{i theta Delta}|^2 - 1", abs2(sp.exp(sp.I * theta * D)) - 1),
        ("claim^2 - s^2 |q~ conj(k~) e^{i theta Delta}(e^{i theta t} - 1)|^2",
         claim(a, b, c, e, theta, t, s) ** 2 - s**2 * mv2),
        ("g(Delta + t) - g(Delta)", g1 - g0),
        ("f(Delta + t) - f(Delta) - move with kbar", f1 - f0 - move(cb, eb)[0]),
        ("E(Delta + t) - E(Delta) - move with delta", E1 - E0 - move(dc, de)[0]),
    ]
    return zero_verdict(cases)


PERTURBATION_BOUND = Step(
    id="perturbation_bound",
    kind="inequality",
    title="Moving a key by t positions",
    statement="Moving a key by t positions changes its logit by at most the sum over pairs of the "
    "query and key pair lengths times the chord 2|sin(theta t / 2)|. Under the split the semantic "
    "term does not move at all, the positional term moves by the same sum with the reference key, "
    "and the remainder by the same sum with the deviation.",
    statement_latex=r"|W(\Delta + t) - W(\Delta)| \le s\sum_l |\tilde q_l|\,|\tilde k_l|\, "
    r"2\left|\sin\tfrac{\theta_l t}{2}\right|,\qquad g(\Delta + t) = g(\Delta),\quad "
    r"|f(\Delta + t) - f(\Delta)| \le s\sum_l |\tilde q_l|\,|\tilde{\bar k}_l|\, "
    r"2\left|\sin\tfrac{\theta_l t}{2}\right|",
    method="the logit change written as s Re(q~ conj(k~) e^{i theta Delta}(e^{i theta t} - 1)) and "
    "the claimed bound squared equal to s^2 times its squared modulus, both expanded to zero; "
    "the split's g, f and E moves computed from split_exact's formulas; for one symbolic pair, "
    "the sum over any number of pairs resting on the triangle inequality",
    claim=_perturb_claim,
    numeric_args=("a", "b", "c", "e", "theta", "t", "s"),
    verify=_verify_perturb,
    lemmas=("|Re z| <= |z|", "|e^{i x}| = 1", "triangle inequality over pairs"),
    uses=("logit_expansion", "split_exact", "remainder_bound"),
    numeric_doc="numeric(a, b, c, e, theta, t, s) -> one pair's bound on |W(Delta + t) - W(Delta)|",
)


# --- long_term_decay -------------------------------------------------------------------


def _decay_claim(hr: Any, hi: Any, theta: Any, Delta: Any, P: Any) -> tuple[Any, Any, Any]:
    r"""For ``h_l = hr[l] + i hi[l]``, ``l < P`` and :math:`h_P = 0`:

    .. math::
        \Big|\sum_{l<P} h_l e^{i\theta_l\Delta}\Big|,\quad
        \sum_{m=1}^{P} |h_{m-1} - h_m|\,|S_m|,\quad \sum_{m=1}^{P} |S_m|,\quad
        S_m = \sum_{l<m} e^{i\theta_l\Delta}
    """
    l, m = sp.Symbol("l", integer=True), sp.Symbol("m", integer=True)
    cos, sin = sp.cos(theta[l] * Delta), sp.sin(theta[l] * Delta)
    re = sp.Sum(hr[l] * cos - hi[l] * sin, (l, 0, P - 1))
    im = sp.Sum(hr[l] * sin + hi[l] * cos, (l, 0, P - 1))
    S_abs = sp.sqrt(sp.Sum(cos, (l, 0, m - 1)) ** 2 + sp.Sum(sin, (l, 0, m - 1)) ** 2)
    jump = sp.sqrt((hr[m - 1] - hr[m]) ** 2 + (hi[m - 1] - hi[m]) ** 2)
    last = sp.sqrt(hr[P - 1] ** 2 + hi[P - 1] ** 2) * S_abs.subs(m, P)  # h_P = 0
    abel = sp.Sum(jump * S_abs, (m, 1, P - 1)) + last
    return sp.sqrt(re**2 + im**2), abel, sp.Sum(S_abs, (m, 1, P))


def _verify_decay(claim: Callable[..., Any]) -> Verdict:
    hr, hi, th = (sp.IndexedBase(n, real=True) for n in ("hr", "hi", "theta"))
    D = sp.Symbol("Delta", real=True)
    cases: list[tuple[str, Any]] = []
    for P in DECAY_PAIRS:
        h = [hr[l] + sp.I * hi[l] for l in range(P)] + [sp.Integer(0)]  # h_P = 0
        u = [sp.exp(sp.I * th[l] * D) for l in range(P)]
        S = [sum(u[:m], sp.Integer(0)) for m in range(P + 1)]  # S_0 = 0, S_m = sum_{l<m} u_l
        lhs = sum(h[l] * u[l] for l in range(P))
        cases.append((f"P={P}: sum h_l u_l - sum_m (h_(m-1) - h_m) S_m (Abel summation)",
                      sp.expand(lhs - sum((h[m - 1] - h[m]) * S[m] for m in range(1, P + 1)))))
        got = [sp.expand(x.doit()) for x in claim(hr, hi, th, D, P)]
        want = [sp.sqrt(abs2(lhs)),
                sum(sp.sqrt(abs2(h[m - 1] - h[m])) * sp.sqrt(abs2(S[m])) for m in range(1, P + 1)),
                sum(sp.sqrt(abs2(S[m])) for m in range(1, P + 1))]
        for name, x, y in zip(("|sum|", "Abel bound", "sum |S_m|"), got, want, strict=True):
            cases.append((f"P={P}: claimed {name} - direct", sp.expand(x - y)))
    return zero_verdict(cases)


LONG_TERM_DECAY = Step(
    id="long_term_decay",
    kind="inequality",
    title="RoFormer's long-term decay",
    statement="Summation by parts (Abel) bounds a RoPE logit sum_l h_l e^{i theta_l Delta}, with "
    "h_l = q~_l conj(k~_l), by the largest jump between neighbouring coefficients times the sum "
    "of the partial sums |S_m(Delta)|, which shrinks on average as Delta grows (RoFormer's "
    "long-term decay); h_P = 0 by convention.",
    statement_latex=r"\Big|\sum_{l=0}^{P-1} h_l e^{i\theta_l\Delta}\Big| = "
    r"\Big|\sum_{m=1}^{P} (h_{m-1} - h_m) S_m(\Delta)\Big| \le "
    r"\Big(\max_{m} |h_{m-1} - h_m|\Big) \sum_{m=1}^{P} |S_m(\Delta)|,\quad "
    r"S_m(\Delta) = \sum_{l<m} e^{i\theta_l\Delta},\ h_P = 0",
    method="the Abel summation identity expanded to zero for P = 1..5 with symbolic complex h_l "
    "and e^{i theta_l Delta}; the claimed |sum|, Abel bound and sum |S_m| compared with their "
    "direct complex forms term by term",
    claim=_decay_claim,
    numeric_args=("hr", "hi", "theta", "Delta", "P"),
    verify=_verify_decay,
    lemmas=("triangle inequality", "|x y| = |x| |y|", "sum_m a_m b_m <= max_m a_m sum_m b_m"),
    uses=("logit_expansion",),
    numeric_doc="numeric(hr, hi, theta, Delta, P) -> (|sum|, Abel bound, sum_m |S_m|) for lists "
    "hr, hi, theta of length P (real and imaginary parts of h_l)",
    symbol_kinds={"hr": "indexed", "hi": "indexed", "theta": "indexed", "P": "integer"},
)
