r"""The step object: one result of docs/theory.md, its statement, its check, its numbers.

A :class:`Step` carries a *claim*: a function that builds, from sympy symbols,
the formula the statement asserts (the right-hand side of an identity, the
bound of an inequality).  ``check()`` derives the same quantity independently
(matrix products, complex exponentials) and asks sympy whether the difference
is exactly zero; ``numeric`` is ``sympy.lambdify`` of the very same claim, so
the numbers later layers use are the formula that was checked.

Replacing the claim (``dataclasses.replace(step, claim=wrong)``) rebuilds the
numeric function and makes ``check()`` test the wrong formula: that is how the
tests see a broken formula fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import sympy as sp

from ropesplit.core.errors import RopesplitError

__all__ = ["CheckResult", "Kind", "Step", "Verdict", "is_zero", "zero_verdict"]

Kind = Literal["definition", "identity", "inequality", "corollary"]
KINDS: tuple[str, ...] = ("definition", "identity", "inequality", "corollary")


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one step's check: did it pass, how it was checked, how long it took."""

    checked: bool
    method: str
    seconds: float
    detail: str


@dataclass(frozen=True)
class Verdict:
    """What a verifier returns: pass/fail and the sub-checks it ran (one line each)."""

    checked: bool
    detail: str


def is_zero(expr: sp.Expr) -> bool:
    r"""Exact zero test for trigonometric polynomials, without ``simplify``.

    .. math:: \cos(x \pm y),\ \sin(x \pm y)\ \text{expanded (expand\_trig)},
              \quad \sin^{2k + r} u \to \sin^r u\,(1 - \cos^2 u)^k\ (r \in \{0, 1\}),

    then a polynomial expansion; ``True`` only if the result is literally 0.
    """
    e = sp.expand(sp.expand_trig(sp.expand(expr)))
    if e == 0:
        return True
    e = sp.expand(e.replace(_sine_power, _reduce_sine_power))
    return bool(e == 0)


def _sine_power(x: Any) -> bool:
    """``sin(u)**k`` with an integer ``k >= 2``."""
    return bool(x.is_Pow and isinstance(x.base, sp.sin) and x.exp.is_Integer and x.exp >= 2)


def _reduce_sine_power(x: Any) -> Any:
    r""":math:`\sin^{2k + r} u = \sin^r u\,(1 - \cos^2 u)^k`."""
    k, r = divmod(int(x.exp), 2)
    return x.base**r * (1 - sp.cos(x.base.args[0]) ** 2) ** k


def zero_verdict(cases: Sequence[tuple[str, Any]]) -> Verdict:
    """Check that every expression (or matrix) in ``cases`` is exactly zero.

    ``cases`` holds ``(label, difference)`` pairs; the detail lists each label
    with ``= 0`` or ``!= 0`` so a failure names the case that broke.
    """
    lines, ok = [], True
    for label, diff in cases:
        entries = list(diff) if isinstance(diff, sp.MatrixBase) else [diff]
        zero = all(is_zero(x) for x in entries)
        ok = ok and zero
        lines.append(f"{label}: {'= 0' if zero else '!= 0'}")
    return Verdict(ok, "; ".join(lines))


def _no_check(claim: Callable[..., Any]) -> Verdict:
    return Verdict(False, "no check attached")


@dataclass(frozen=True)
class Step:
    r"""One named result of docs/theory.md.

    ``claim(*symbols)`` builds the asserted formula from real sympy symbols
    named by ``numeric_args`` (in that order); ``verify(claim)`` checks it and
    returns a :class:`Verdict`; ``numeric`` is ``lambdify(numeric_args, claim)``
    with ``modules="math"``.
    """

    id: str
    kind: Kind
    title: str
    statement: str
    statement_latex: str
    method: str
    claim: Callable[..., Any]
    numeric_args: tuple[str, ...]
    verify: Callable[[Callable[..., Any]], Verdict] = _no_check
    lemmas: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    numeric_doc: str = ""
    symbol_kinds: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise RopesplitError(f"step kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "inequality" and not self.lemmas:
            raise RopesplitError(f"inequality step {self.id!r} must name the lemmas it uses")
        self.numeric  # noqa: B018  # built now: a claim that cannot lambdify fails here

    @cached_property
    def numeric(self) -> Callable[..., Any]:
        """``lambdify(numeric_args, claim)`` with ``modules="math"`` (derived from the fields,
        built once, when the step is made)."""
        syms = [self.symbol(name) for name in self.numeric_args]
        return sp.lambdify(syms, self.claim(*syms), modules="math")

    def symbol(self, name: str) -> Any:
        """The sympy object for argument ``name``: a real symbol unless
        ``symbol_kinds`` says ``"integer"`` or ``"indexed"`` (a list argument)."""
        kind = self.symbol_kinds.get(name, "real")
        if kind == "indexed":
            return sp.IndexedBase(name, real=True)
        if kind == "integer":
            return sp.Symbol(name, integer=True)
        return sp.Symbol(name, real=True)

    def check(self) -> CheckResult:
        """Run the symbolic check of this step; never raises for a wrong formula."""
        t0 = time.perf_counter()
        try:
            verdict = self.verify(self.claim)
        except Exception as exc:  # a broken claim may not even build: that is a failure
            verdict = Verdict(False, f"check raised {type(exc).__name__}: {exc}")
        return CheckResult(verdict.checked, self.method, time.perf_counter() - t0, verdict.detail)
