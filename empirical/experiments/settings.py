"""What an experiment run may vary (:class:`ExperimentSettings`): plain data, importable
without torch (the report's :class:`~ropesplit.report.context.RunSettings` holds one)."""

from __future__ import annotations

from dataclasses import dataclass

from ropesplit.core.errors import RopesplitError

__all__ = ["ExperimentSettings"]


@dataclass(frozen=True)
class ExperimentSettings:
    """What a run may vary: the draws, the base seed, the fitted layers, the forward batch size.

    ``draws`` is the number of perturbation draws per setting (the order
    experiment's bootstrap resamples them); ``layers`` (default six evenly
    spaced) are the layers the per-head fits of the distance experiment use.
    """

    draws: int = 5
    seed: int = 0
    layers: tuple[int, ...] | None = None
    batch_size: int = 8

    def __post_init__(self) -> None:
        for name, value in (("draws", self.draws), ("batch_size", self.batch_size)):
            if value < 1:
                raise RopesplitError(f"{name} must be at least 1, got {value}")
