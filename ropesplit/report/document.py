r"""The report as a plain document: headings, text, tables, collapsible details, figures.

Only the building blocks live here, importing nothing of the report (and no
numpy or torch): :func:`ropesplit.report.sections.build_document` builds the
sections listed in :data:`ropesplit.report.sections.SECTIONS` (one module
each) from the JSON records of one run, and the renderers
(:mod:`ropesplit.report.render`) only format the result; neither reads the
JSON itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Cell",
    "Details",
    "Document",
    "FigureBlock",
    "Folded",
    "Section",
    "Table",
    "cell_text",
    "fmt",
    "run_line",
]


@dataclass(frozen=True)
class Folded:
    """A table cell shown as one line, its detail collapsed under it (HTML ``<details>``)."""

    summary: str
    detail: tuple[str, ...] = ()  # lines


Cell = str | Folded  # a table cell: formatted text, or one line with its detail folded


def cell_text(cell: Cell) -> str:
    """What a cell shows before anything is unfolded: its text, or a folded cell's line."""
    return cell.summary if isinstance(cell, Folded) else cell


@dataclass
class Table:
    """A table: column titles and rows of already formatted cells."""

    columns: list[str]
    rows: Sequence[Sequence[Cell]]
    caption: str = ""
    links: list[str] | None = None  # per row: the anchor its first cell links to ("" for none)


@dataclass
class FigureBlock:
    """One figure: its number, title, caption and the PNG bytes to embed, or why it is not
    drawn (``missing``, one line: which record it needs that the run did not make)."""

    number: int
    title: str
    caption: str
    png: bytes = b""
    files: list[str] = field(default_factory=list)  # the PDF/PNG files written beside
    name: str = ""  # the registry's name (``ropesplit.figures.FIGURES``); sections place by it
    missing: str = ""  # "" when drawn


@dataclass
class Details:
    """Detail shown collapsed under a one-line summary (HTML ``<details>``)."""

    summary: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


@dataclass
class Section:
    """A titled section: paragraphs of plain text, tables, collapsed details, then figures."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[FigureBlock] = field(default_factory=list)
    anchor: str = ""  # HTML id, the target of links from other sections
    details: list[Details] = field(default_factory=list)
    # the first screen: no heading, its figures beside its tables, above the contents
    lead: bool = False


@dataclass
class Document:
    """The whole report: a title, then sections in order (claims first, run metadata last)."""

    title: str
    sections: list[Section]
    run_line: str = ""  # model, corpus and tokens, date, commit: the first line under the title


def fmt(value: Any, digits: int = 3) -> str:
    """A cell: floats to ``digits`` decimals (scientific when tiny/huge), None as 'n/a'.

    >>> [fmt(0.95912), fmt(None), fmt(3), fmt(True), fmt(1.2e-7), fmt(float("nan"))]
    ['0.959', 'n/a', '3', 'yes', '1.20e-07', 'n/a']
    """
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        if value != 0 and (abs(value) < 10**-digits or abs(value) >= 1e6):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v, digits) for v in value)
    return str(value)


def run_line(run: Mapping[str, Any]) -> str:
    """``model · corpus · N tokens · date · commit`` from ``run.json`` (what is there)."""
    parts = [str(run["model"])] if "model" in run else []
    if "corpus" in run:
        parts.append(f"corpus {run['corpus']}")
    if "tokens" in run:
        parts.append(f"{run['tokens']} tokens of {run.get('text', 'the text')}")
    parts += [str(run[k]) for k in ("date",) if k in run]
    if "commit" in run:
        parts.append(f"commit {run['commit']}")
    return " · ".join(parts)
