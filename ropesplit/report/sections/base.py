r"""What a report section is: a spec (anchor, records read, build) and the inputs it reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ropesplit.errors import RopesplitError
from ropesplit.report.document import FigureBlock, Section

__all__ = ["ReportInputs", "SectionSpec", "need"]


@dataclass(frozen=True)
class ReportInputs:
    """Everything a section may read: the run's JSON records and the figures drawn."""

    records: Mapping[str, Mapping[str, Any]]  # stage name -> the JSON it wrote
    figures: Sequence[FigureBlock] = field(default_factory=tuple)


@dataclass(frozen=True)
class SectionSpec:
    """One entry of :data:`~ropesplit.report.sections.SECTIONS`."""

    anchor: str  # HTML id of the (first) section built; others link to "#anchor"
    records: tuple[str, ...]  # JSON records read; the section is skipped without them
    build: Callable[[ReportInputs], list[Section]]


def need(record: Mapping[str, Any], key: str, what: str) -> Any:
    """``record[key]``, or a one-line error naming the record that lacks it."""
    if key not in record:
        raise RopesplitError(f"{what} JSON has no {key!r}; was it written by this version?")
    return record[key]
