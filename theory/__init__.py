r"""ropesplit.theory: docs/theory.md derived and machine-checked with sympy.

Every result is a :class:`Step` (id, kind, statement in words and LaTeX, the
lemmas an inequality rests on) whose ``check()`` really checks it and whose
``numeric`` is the lambdified formula (``modules="math"``, no numpy)::

    >>> from ropesplit.theory import get_step
    >>> get_step("logit_expansion").numeric(1.0, 0.0, 1.0, 0.0, 0.5, 0.0, 1.0)
    1.0
    >>> [step.id for step in STEPS][:3]
    ['rope_relative', 'layouts_equivalent', 'logit_expansion']

This layer imports sympy and the standard library only.
"""

from ropesplit.theory.derivation import (
    STEPS,
    check_all,
    derivation_markdown,
    derive_record,
    get_step,
)
from ropesplit.theory.step import CheckResult, Step

__all__ = ["STEPS", "CheckResult", "Step", "check_all", "derivation_markdown", "derive_record",
           "get_step"]
