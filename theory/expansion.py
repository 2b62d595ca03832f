r"""RoPE's relative property and the logit expansion (docs/theory.md sections 1 and 2).

.. math::

    R(m)^T R(n) = R(n - m), \qquad
    W_{ij} = s\langle R(i) q, R(j) k\rangle = s\, q^T R(-\Delta) k
           = s \operatorname{Re} \sum_l \tilde q_l \overline{\tilde k_l} e^{i\theta_l\Delta}
           = s \sum_l [(ac + be)\cos\theta_l\Delta + (ae - bc)\sin\theta_l\Delta]

Each identity is checked for one symbolic pair, for full symbolic vectors
at ``d = 2, 4, 6, 8`` in both pair layouts, and the expansion for a symbolic
pair count ``P`` (a ``Sum`` over ``l`` whose summand vanishes; the reduction
to pairs is the block-diagonal lemma of :mod:`ropesplit.theory.sums`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy as sp

from ropesplit.theory.rope import (
    LAYOUTS,
    place_blocks,
    real_part,
    rope_matrix,
    rot2,
    symbolic_vector,
    thetas,
    to_complex,
    to_pairs,
)
from ropesplit.theory.step import Step, Verdict, zero_verdict
from ropesplit.theory.sums import BLOCK_DIAGONAL, BLOCK_PRODUCT, indexed, over_pairs, summand_of

__all__ = ["LAYOUTS_EQUIVALENT", "LOGIT_EXPANSION", "ROPE_RELATIVE", "SYMBOLIC_DIMS"]

SYMBOLIC_DIMS = (2, 4, 6, 8)  # head dims checked with full symbolic vectors

_a, _b, _c, _e, _s = sp.symbols("a b c e s", real=True)
_i, _j, _m, _n, _theta = sp.symbols("i j m n theta", real=True)


# --- rope_relative -------------------------------------------------------------------


def _relative_claim(theta: Any, m: Any, n: Any) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    r""":math:`R_2(\theta(n - m))`, the claimed value of :math:`R_2(m\theta)^T R_2(n\theta)`."""
    phi = theta * (n - m)
    return ((sp.cos(phi), -sp.sin(phi)), (sp.sin(phi), sp.cos(phi)))


def _verify_relative(claim: Callable[..., Any]) -> Verdict:
    cases = [("pair: R2(m t)^T R2(n t) - claim", rot2(_m * _theta).T * rot2(_n * _theta)
              - sp.Matrix(claim(_theta, _m, _n)))]
    for d in SYMBOLIC_DIMS:
        th = thetas(d)
        for layout in LAYOUTS:
            lhs = rope_matrix(_m, th, layout).T * rope_matrix(_n, th, layout)  # (d, d)
            rhs = place_blocks([sp.Matrix(claim(t, _m, _n)) for t in th], layout)  # (d, d)
            cases.append((f"d={d} {layout}", lhs - rhs))
    return zero_verdict(cases)


ROPE_RELATIVE = Step(
    id="rope_relative",
    kind="identity",
    title="RoPE only sees relative positions",
    statement="Rotating by position m and then undoing position n leaves a rotation by n - m: "
    "the product of two RoPE rotations depends on the positions only through their difference.",
    statement_latex=r"R(m)^\top R(n) = R(n - m), \qquad "
    r"R(m) = \operatorname{blockdiag}_l R_2(m\,\theta_l)",
    method="R(m)^T R(n) - R(n-m) expanded with expand_trig to the zero matrix, for one symbolic "
    "pair and for symbolic frequencies at d = 2, 4, 6, 8 in both layouts; for any P it follows "
    "from the pair case by the block-diagonal product (named lemma)",
    claim=_relative_claim,
    numeric_args=("theta", "m", "n"),
    verify=_verify_relative,
    lemmas=(BLOCK_PRODUCT,),
    numeric_doc="numeric(theta, m, n) -> the 2x2 block R_2(theta (n - m)) as nested tuples",
)


# --- layouts_equivalent ----------------------------------------------------------------


def _half_index(l: Any, t: Any, P: Any) -> Any:
    r"""Interleaved coordinate :math:`2l + t` sits at half-split coordinate :math:`l + tP`."""
    return l + t * P


def _permutation(claim: Callable[..., Any], d: int) -> sp.Matrix:
    P = d // 2
    Pi = sp.zeros(d, d)  # (d, d): Pi[half index, interleaved index] = 1
    for l in range(P):
        for t in (0, 1):
            Pi[int(claim(l, t, P)), 2 * l + t] = 1
    return Pi


def _verify_layouts(claim: Callable[..., Any]) -> Verdict:
    cases: list[tuple[str, Any]] = []
    for d in SYMBOLIC_DIMS:
        th = thetas(d)
        Pi = _permutation(claim, d)
        cases.append((f"d={d} Pi Pi^T - I", Pi * Pi.T - sp.eye(d)))
        inter_m = Pi * rope_matrix(_m, th, "interleaved") * Pi.T  # (d, d)
        cases.append((f"d={d} Pi R_inter Pi^T - R_half", inter_m - rope_matrix(_m, th, "half")))
        q, k = symbolic_vector("q", d), symbolic_vector("k", d)
        inter = (rope_matrix(_i, th, "interleaved") * q).dot(rope_matrix(_j, th, "interleaved") * k)
        half = (rope_matrix(_i, th, "half") * Pi * q).dot(rope_matrix(_j, th, "half") * Pi * k)
        cases.append((f"d={d} logits equal after Pi", half - inter))
    # partial rotary: the first r = 4 of d = 8 coordinates rotate (half layout inside them),
    # the rest are pairs with theta = 0; equal to the interleaved layout with theta_l = 0, l >= 2
    th = thetas(4)
    partial = sp.diag(rope_matrix(_m, th, "half"), rope_matrix(_m, (0, 0), "half"))  # (8, 8)
    Pr = sp.diag(_permutation(claim, 4), sp.eye(4))  # (8, 8)
    full = rope_matrix(_m, (*th, 0, 0), "interleaved")  # (8, 8)
    cases.append(("partial r=4 of d=8: theta=0 pairs are the identity",
                  partial - sp.diag(rope_matrix(_m, th, "half"), sp.eye(4))))
    cases.append(("partial r=4 of d=8 = interleaved with theta=0 tail", Pr * full * Pr.T - partial))
    return zero_verdict(cases)


LAYOUTS_EQUIVALENT = Step(
    id="layouts_equivalent",
    kind="identity",
    title="Pair layouts are one permutation apart; partial rotary is theta = 0",
    statement="The interleaved layout (pair l on coordinates 2l, 2l+1) and the half-split layout "
    "(pair l on coordinates l, l+P) differ by a fixed permutation of coordinates, which carries "
    "rotations and logits of one onto the other; partial rotary is the same rotation with "
    "theta = 0 on the coordinates that do not rotate.",
    statement_latex=r"\Pi\, e_{2l+t} = e_{l + tP}\ (t \in \{0, 1\}), \qquad "
    r"R_{\text{half}}(m) = \Pi\, R_{\text{inter}}(m)\, \Pi^\top, \qquad "
    r"R_{\text{partial}}(m) = \operatorname{blockdiag}\big(R^{(r)}(m), I_{d-r}\big)"
    r" = R(m)\big|_{\theta_l = 0,\ l \ge r/2}",
    method="Pi Pi^T = I, Pi R_inter Pi^T - R_half and the logit difference expanded to zero at "
    "d = 2, 4, 6, 8; partial rotary r = 4 of d = 8 compared entrywise with theta = 0 pairs",
    claim=_half_index,
    numeric_args=("l", "t", "P"),
    verify=_verify_layouts,
    uses=("rope_relative",),
    numeric_doc="numeric(l, t, P) -> the half-split coordinate of interleaved coordinate 2l + t",
    symbol_kinds={"l": "integer", "t": "integer", "P": "integer"},
)


# --- logit_expansion -------------------------------------------------------------------


def _expansion_claim(a: Any, b: Any, c: Any, e: Any, theta: Any, Delta: Any, s: Any) -> Any:
    r""":math:`s[(ac + be)\cos\theta\Delta + (ae - bc)\sin\theta\Delta]` for one pair."""
    return s * ((a * c + b * e) * sp.cos(theta * Delta) + (a * e - b * c) * sp.sin(theta * Delta))


def _verify_expansion(claim: Callable[..., Any]) -> Verdict:
    Delta = _i - _j
    q2, k2 = sp.Matrix([_a, _b]), sp.Matrix([_c, _e])
    pair = claim(_a, _b, _c, _e, _theta, Delta, _s)
    zc = (_a + sp.I * _b) * (_c - sp.I * _e) * sp.exp(sp.I * _theta * Delta)
    cases: list[tuple[str, Any]] = [
        ("pair: s<R(i)q, R(j)k> - claim",
         _s * (rot2(_i * _theta) * q2).dot(rot2(_j * _theta) * k2) - pair),
        ("pair: s q^T R(-Delta) k - claim", _s * q2.dot(rot2(-Delta * _theta) * k2) - pair),
        ("pair: s Re(q~ conj(k~) e^{i theta Delta}) - claim", _s * real_part(zc) - pair),
    ]
    for d in SYMBOLIC_DIMS:
        th = thetas(d)
        for layout in LAYOUTS:
            q, k = symbolic_vector("q", d), symbolic_vector("k", d)
            pairs = zip(to_pairs(q, layout), to_pairs(k, layout), th, strict=True)
            rhs = sum(claim(*qp, *kp, t, Delta, _s) for qp, kp, t in pairs)
            W = _s * (rope_matrix(_i, th, layout) * q).dot(rope_matrix(_j, th, layout) * k)
            z = sum(qc * sp.conjugate(kc) * sp.exp(sp.I * t * Delta) for qc, kc, t
                    in zip(to_complex(q, layout), to_complex(k, layout), th, strict=True))
            cases.append((f"d={d} {layout} real form", W - rhs))
            cases.append((f"d={d} {layout} complex form", _s * real_part(z) - rhs))
    cases.append(("symbolic P: Sum_l s<R_2(i theta_l) q_l, R_2(j theta_l) k_l> - Sum_l claim_l",
                  _pair_sum_difference(claim)))
    return zero_verdict(cases)


def _pair_sum_difference(claim: Callable[..., Any]) -> Any:
    """The summand of W - sum_l claim_l for a symbolic pair count (block-diagonal lemma)."""
    a, b, c, e, th = indexed("a b c e theta")
    q2, k2 = sp.Matrix([a, b]), sp.Matrix([c, e])
    W = over_pairs(_s * (rot2(_i * th) * q2).dot(rot2(_j * th) * k2))
    return summand_of(W - over_pairs(claim(a, b, c, e, th, _i - _j, _s)))


LOGIT_EXPANSION = Step(
    id="logit_expansion",
    kind="identity",
    title="The logit expansion",
    statement="The attention logit of query q at position i and key k at position j is a sum over "
    "rotation pairs of a cosine and a sine of theta_l times the distance Delta = i - j, with "
    "coefficients set by the query and key pair; equivalently the real part of a complex "
    "trigonometric polynomial in Delta.",
    statement_latex=r"W_{ij} = s\langle R(i) q, R(j) k\rangle = s\, q^\top R(-\Delta) k"
    r" = s\,\operatorname{Re} \sum_l \tilde q_l\, \overline{\tilde k_l}\, e^{i\theta_l \Delta}"
    r" = s \sum_l \big[(a c + b e)\cos(\theta_l\Delta) + (a e - b c)\sin(\theta_l\Delta)\big]",
    method="both sides expanded with expand_trig (complex form via exp -> cos + i sin) to a zero "
    "difference, for one symbolic pair and for symbolic q, k, theta at d = 2, 4, 6, 8 in both "
    "layouts; for a symbolic pair count P, Sum_l (pair logit - claim) combined into one Sum "
    "whose summand (indexed symbols a_l, b_l, c_l, e_l, theta_l) expands to zero",
    claim=_expansion_claim,
    numeric_args=("a", "b", "c", "e", "theta", "Delta", "s"),
    verify=_verify_expansion,
    lemmas=(BLOCK_DIAGONAL,),
    uses=("rope_relative", "layouts_equivalent"),
    numeric_doc="numeric(a, b, c, e, theta, Delta, s) -> one pair's term of W (sum over pairs)",
)
