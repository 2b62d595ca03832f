r"""What a report section is: a spec (anchor, records, figures, build) and its inputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ropesplit.core.errors import RopesplitError
from ropesplit.report.document import FigureBlock, Section

__all__ = ["ReportInputs", "SectionSpec", "need"]


@dataclass(frozen=True)
class ReportInputs:
    """Everything a section may read: the run's JSON records and the figures (drawn or not)."""

    records: Mapping[str, Mapping[str, Any]]  # stage name -> the JSON it wrote
    figures: Sequence[FigureBlock] = field(default_factory=tuple)

    def figure(self, name: str) -> list[FigureBlock]:
        """The block of figure ``name`` (registry name), as a list: empty when there is none."""
        return [block for block in self.figures if block.name == name]

    def figures_named(self, names: Sequence[str]) -> list[FigureBlock]:
        """The blocks of the figures ``names``, in that order."""
        return [block for name in names for block in self.figure(name)]


@dataclass(frozen=True)
class SectionSpec:
    """One entry of :data:`~ropesplit.report.sections.SECTIONS`.

    ``figures``: the registry names of the figures its sections show; ``build`` places
    each where it belongs (``Section(figures=inputs.figure(name))``). A figure no built
    section shows is listed at the end of the report, never dropped.
    """

    anchor: str  # HTML id of the (first) section built; others link to "#anchor"
    records: tuple[str, ...]  # JSON records read; the section is skipped without them
    build: Callable[[ReportInputs], list[Section]]
    figures: tuple[str, ...] = ()


def need(record: Mapping[str, Any], key: str, what: str) -> Any:
    """``record[key]``, or a one-line error naming the record that lacks it."""
    if key not in record:
        raise RopesplitError(f"{what} JSON has no {key!r}; was it written by this version?")
    return record[key]
