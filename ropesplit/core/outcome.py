"""The outcome of one pre-registered test or judge: the one outcome type of every layer
(a claim condition's decision, an experiment's verdict, an intervention's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ropesplit.core.errors import RopesplitError

__all__ = ["OUTCOMES", "Outcome"]

OUTCOMES = ("agrees", "disagrees", "inconclusive")  # one test's outcome, before grading


@dataclass(frozen=True)
class Outcome:
    """The outcome of one pre-registered test or judge, with the numbers behind it: the one
    outcome type (a condition's decision, an experiment's verdict, an intervention's)."""

    outcome: str  # "agrees", "disagrees" or "inconclusive"
    reason: str  # e.g. "mean 0.912 [0.897, 0.927] over 12 passages lies above 0.9"

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise RopesplitError(
                f"outcome must be one of {', '.join(OUTCOMES)}, got {self.outcome!r}"
            )

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return {"outcome": self.outcome, "reason": self.reason}
