"""What an experiment run may vary (:class:`ExperimentSettings`): plain data, importable
without torch (the report's :class:`~ropesplit.report.context.RunSettings` holds one)."""

from __future__ import annotations

from dataclasses import dataclass

from ropesplit.core.errors import SettingError

__all__ = ["ExperimentSettings"]


@dataclass(frozen=True)
class ExperimentSettings:
    """What a run may vary: the draws, the base seed, the fitted layers, the forward batch size.

    ``draws`` is the number of perturbation draws per setting (the order
    experiment's bootstrap resamples them); ``layers`` (default six evenly
    spaced) are the layers the per-head fits of the distance experiment use. Each field is
    the option of ``ropesplit perturb`` of its name and holds its default; a failed check is
    a :class:`~ropesplit.core.errors.SettingError` naming the field.
    """

    draws: int = 5
    seed: int = 0
    layers: tuple[int, ...] | None = None
    batch_size: int = 8

    def __post_init__(self) -> None:
        for name, value in (("draws", self.draws), ("batch_size", self.batch_size)):
            if value < 1:
                raise SettingError(name, f"must be at least 1, got {value}")
