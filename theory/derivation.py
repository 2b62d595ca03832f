r"""The derivation in order: every step of THEORY.md, looked up by id and checked together."""

from __future__ import annotations

from ropesplit.theory.expansion import LAYOUTS_EQUIVALENT, LOGIT_EXPANSION, ROPE_RELATIVE
from ropesplit.theory.split import EXACT_SPLIT_CONDITION, REMAINDER_BOUND, SPLIT_EXACT
from ropesplit.theory.step import CheckResult, Step

from ropesplit.errors import RopesplitError

__all__ = ["STEPS", "check_all", "get_step"]

STEPS: tuple[Step, ...] = (
    ROPE_RELATIVE,
    LAYOUTS_EQUIVALENT,
    LOGIT_EXPANSION,
    SPLIT_EXACT,
    REMAINDER_BOUND,
    EXACT_SPLIT_CONDITION,
)
_BY_ID = {step.id: step for step in STEPS}


def get_step(step_id: str) -> Step:
    """The step named ``step_id``; a one-line error listing the ids otherwise."""
    try:
        return _BY_ID[step_id]
    except KeyError:
        raise RopesplitError(
            f"unknown step {step_id!r}, expected one of {', '.join(_BY_ID)}"
        ) from None


def check_all() -> dict[str, CheckResult]:
    """Run every step's check, in derivation order."""
    return {step.id: step.check() for step in STEPS}
