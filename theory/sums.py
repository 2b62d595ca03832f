r"""Sums over a symbolic number of pairs (and of distances or keys): docs/theory.md sections 1-3, 6.

A per-pair identity proved for a pair ``l`` with *indexed* symbols
(:math:`a_l, b_l, \theta_l, \dots`) holds for the whole head with a symbolic
pair count ``P`` once the head-level quantity is a sum over pairs.  For the
logit that is the block-diagonal lemma:

.. math::

    R(m) = \operatorname{blockdiag}_l R_2(m\,\theta_l)
    \implies \langle R(i) x, R(j) y\rangle = \sum_{l=0}^{P-1}
    \langle R_2(i\theta_l) x_l, R_2(j\theta_l) y_l\rangle

(the pairs partition the coordinates).  :func:`summand_of` then combines a
difference of ``Sum`` objects with equal limits into one ``Sum`` (linearity of
finite sums) and returns its summand, which the steps test for zero.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy as sp

from ropesplit.theory.rope import rot2

__all__ = [
    "BLOCK_DIAGONAL",
    "BLOCK_PRODUCT",
    "EXCHANGE",
    "LINEARITY",
    "PAIR",
    "PAIRS",
    "indexed",
    "over_pairs",
    "split_summand",
    "summand_of",
]

PAIR = sp.Symbol("l", integer=True, nonnegative=True)  # the pair index l
PAIRS = sp.Symbol("P", integer=True, positive=True)  # the symbolic pair count P = d/2

BLOCK_DIAGONAL = (
    "block-diagonal inner product: R(m) = blockdiag_l R_2(m theta_l) acts on disjoint coordinate "
    "pairs, so <R(i) x, R(j) y> = sum_l <R_2(i theta_l) x_l, R_2(j theta_l) y_l> for any P "
    "(checked as matrices at d = 2, 4, 6, 8 in both layouts; for symbolic P it is the partition "
    "of the coordinates into pairs)"
)
BLOCK_PRODUCT = (
    "block-diagonal product: blockdiag_l(A_l)^T blockdiag_l(B_l) = blockdiag_l(A_l^T B_l) for "
    "blocks on the same coordinate pairs, any P (checked as matrices at d = 2, 4, 6, 8 in both "
    "layouts)"
)
LINEARITY = ("linearity of finite sums: sum_t c_t Sum_l f_t(l) = Sum_l sum_t c_t f_t(l) "
             "(c_t free of l)")
EXCHANGE = "exchange of finite sums: Sum_j Sum_l x_jl = Sum_l Sum_j x_jl"


def indexed(names: str, index: Any = PAIR) -> tuple[Any, ...]:
    """Real indexed symbols ``name[index]`` for each space-separated name."""
    return tuple(sp.IndexedBase(name, real=True)[index] for name in names.split())


def over_pairs(summand: Any, index: Any = PAIR, count: Any = PAIRS) -> sp.Sum:
    r""":math:`\sum_{l=0}^{P-1} \text{summand}(l)` as an unevaluated ``Sum``."""
    return sp.Sum(summand, (index, 0, count - 1))


def summand_of(expr: Any, index: Any = PAIR) -> Any:
    r"""The summand of ``expr`` written as one ``Sum`` over ``index`` (linearity of finite sums).

    .. math:: \sum_t c_t \sum_{l} f_t(l) = \sum_{l} \sum_t c_t f_t(l),
              \quad c_t \text{ free of } l,\ \text{equal limits}

    ``expr`` must be an ``Add`` of terms ``c_t * Sum(f_t, (index, lo, hi))`` with
    the same ``(lo, hi)`` (``index`` the outermost limit of a nested ``Sum``);
    anything else gives ``sp.nan`` (never zero), so a difference that is not a
    sum over pairs cannot pass as one.
    """
    total, limits = sp.Integer(0), None
    for term in sp.Add.make_args(expr):
        sums = [f for f in sp.Mul.make_args(term) if isinstance(f, sp.Sum)]
        if len(sums) != 1 or sums[0].limits[-1][0] != index:
            return sp.nan
        S, coeff = sums[0], term / sums[0]
        if coeff.has(index) or (limits is not None and S.limits[-1] != limits):
            return sp.nan
        limits = S.limits[-1]
        # sympy flattens nested Sums: the outermost limit is the last, the rest stay inside
        total += coeff * (sp.Sum(S.function, *S.limits[:-1]) if len(S.limits) > 1 else S.function)
    return total


def split_summand(terms: Callable[..., Sequence[Any]], i: Any, j: Any, s: Any) -> Any:
    r"""Summand of :math:`\sum_l W_l - \sum_t \sum_l T_{t,l}` for a symbolic pair count.

    .. math:: W_l = s\langle R_2(i\theta_l) q_l, R_2(j\theta_l)(\bar k_l + \delta_l)\rangle

    (the block-diagonal lemma), ``terms(a, b, cbar, ebar, dc, de, theta)`` giving
    one pair's split terms from the indexed symbols of pair ``l``; zero iff the
    terms add up to the logit pair by pair.
    """
    a, b, cb, eb, dc, de, th = indexed("a b cbar ebar dc de theta")
    k2 = sp.Matrix([cb + dc, eb + de])  # pair l of kbar + delta
    W = over_pairs(s * (rot2(i * th) * sp.Matrix([a, b])).dot(rot2(j * th) * k2))
    return summand_of(W - sum(over_pairs(t) for t in terms(a, b, cb, eb, dc, de, th)))
