r"""Symbolic RoPE (docs/theory.md section 1): rotations, pair layouts, complex pairs.

.. math::

    R_2(\phi) = \begin{pmatrix} \cos\phi & -\sin\phi \\ \sin\phi & \cos\phi \end{pmatrix},
    \qquad R(m) = \operatorname{blockdiag}_l R_2(m\,\theta_l)

placed on the coordinates of pair ``l``: ``(2l, 2l+1)`` in the interleaved
layout, ``(l, l+P)`` in the half-split layout.  A pair ``(x, y)`` is the
complex number ``x + i y``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import sympy as sp

from ropesplit.core.errors import RopesplitError

__all__ = [
    "LAYOUTS",
    "Layout",
    "pair_coordinates",
    "place_blocks",
    "rope_matrix",
    "rot2",
    "symbolic_vector",
    "thetas",
    "abs2",
    "real_part",
    "to_complex",
    "to_pairs",
]

Layout = Literal["half", "interleaved"]
LAYOUTS: tuple[Layout, ...] = ("half", "interleaved")


def rot2(phi: sp.Expr) -> sp.Matrix:
    r"""The 2x2 rotation :math:`R_2(\phi)` (counter-clockwise by ``phi``)."""
    return sp.Matrix([[sp.cos(phi), -sp.sin(phi)], [sp.sin(phi), sp.cos(phi)]])


def _check_dim(d: int) -> None:
    if d < 2 or d % 2:
        raise RopesplitError(f"head_dim must be even and >= 2, got {d}")


def pair_coordinates(l: int, d: int, layout: Layout) -> tuple[int, int]:
    r"""Coordinates of pair ``l``: :math:`(2l, 2l+1)` interleaved, :math:`(l, l+P)` half."""
    _check_dim(d)
    P = d // 2
    if layout == "interleaved":
        return 2 * l, 2 * l + 1
    if layout == "half":
        return l, l + P
    raise RopesplitError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def thetas(d: int) -> tuple[sp.Symbol, ...]:
    """Symbolic frequencies ``theta0 .. theta{P-1}`` (real, no assumed values)."""
    _check_dim(d)
    return sp.symbols(f"theta0:{d // 2}", real=True)


def rope_matrix(m: sp.Expr, theta: Sequence[sp.Expr], layout: Layout) -> sp.Matrix:
    r"""The d x d rotation :math:`R(m)`, pair ``l`` rotated by :math:`m\,\theta_l`.

    ``d = 2 len(theta)``; a pair with ``theta_l = 0`` is left untouched, which is
    how partial rotary appears (docs/theory.md section 1).
    """
    return place_blocks([rot2(m * th) for th in theta], layout)


def place_blocks(blocks: Sequence[sp.Matrix], layout: Layout) -> sp.Matrix:
    """The d x d matrix acting by ``blocks[l]`` (2 x 2) on pair ``l`` and zero elsewhere."""
    d = 2 * len(blocks)
    M = sp.zeros(d, d)  # (d, d)
    for l, block in enumerate(blocks):
        coords = pair_coordinates(l, d, layout)
        for r, i in enumerate(coords):
            for c, j in enumerate(coords):
                M[i, j] = block[r, c]
    return M


def symbolic_vector(name: str, d: int) -> sp.Matrix:
    """A column of ``d`` real symbols ``name0 .. name{d-1}``."""
    return sp.Matrix(sp.symbols(f"{name}0:{d}", real=True))  # (d, 1)


def to_complex(v: sp.Matrix, layout: Layout) -> list[sp.Expr]:
    r"""Pairs of a real vector as complex numbers :math:`\tilde v_l = x_l + i y_l`."""
    d = v.rows
    return [v[x] + sp.I * v[y] for x, y in (pair_coordinates(l, d, layout) for l in range(d // 2))]


def to_pairs(v: sp.Matrix, layout: Layout) -> list[tuple[sp.Expr, sp.Expr]]:
    """Pairs of a real vector as ``(x_l, y_l)`` tuples, in pair order."""
    d = v.rows
    return [(v[x], v[y]) for x, y in (pair_coordinates(l, d, layout) for l in range(d // 2))]


def real_part(z: sp.Expr) -> sp.Expr:
    r""":math:`\operatorname{Re} z` for an expression in real symbols, exponentials as cos/sin."""
    return sp.expand(sp.expand(z.rewrite(sp.cos)).as_real_imag()[0])


def abs2(z: sp.Expr) -> sp.Expr:
    r""":math:`|z|^2 = (\operatorname{Re} z)^2 + (\operatorname{Im} z)^2`, expanded."""
    re, im = sp.expand(z.rewrite(sp.cos)).as_real_imag()
    return sp.expand(re**2 + im**2)
