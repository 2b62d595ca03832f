r"""The report as a plain document (headings, text, tables, figures), built from the run's JSON.

:func:`build_document` builds the sections listed in
:data:`ropesplit.report.sections.SECTIONS` (one module each), which read
every number from the JSON records of one run (``derive``, ``bound``,
``analyze``, ``perturb``, ``run``, ...); the only constants are the seed
paper's (:mod:`ropesplit.paper`), labelled as the paper's where they
appear. The renderers (:mod:`ropesplit.report.render`) only format this
document; neither reads the JSON itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Document",
    "FigureBlock",
    "Section",
    "Table",
    "build_document",
    "fmt",
]

@dataclass
class Table:
    """A table: column titles and rows of already formatted cells."""

    columns: list[str]
    rows: list[list[str]]
    caption: str = ""
    links: list[str] | None = None  # per row: the anchor its first cell links to ("" for none)


@dataclass
class FigureBlock:
    """One figure: its number, title, caption and the PNG bytes to embed."""

    number: int
    title: str
    caption: str
    png: bytes
    files: list[str] = field(default_factory=list)  # the PDF/PNG files written beside


@dataclass
class Section:
    """A titled section: paragraphs of plain text, then tables, then figures."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[FigureBlock] = field(default_factory=list)
    anchor: str = ""  # HTML id, the target of links from other sections


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


def build_document(
    records: Mapping[str, Mapping[str, Any]], figures: Sequence[FigureBlock] = ()
) -> Document:
    """The report from the run's JSON ``records`` and the figures, section by section.

    ``records`` maps each stage's name (``derive``, ``bound``, ``analyze``,
    ``perturb``, ``run``, ...) to the JSON it wrote. Every entry of
    :data:`ropesplit.report.sections.SECTIONS` whose records are present is
    built, in order; the stages whose records are missing are listed as not
    run, before the run metadata.
    """
    from ropesplit.report.sections import SECTIONS, ReportInputs

    inputs = ReportInputs(records, tuple(figures))
    sections: list[Section] = []
    missing: list[str] = []
    for spec in SECTIONS:
        absent = [name for name in spec.records if name not in records]
        missing += [name for name in absent if name not in missing]
        if not absent:
            sections += spec.build(inputs)
    if missing:
        at = next((i for i, s in enumerate(sections) if s.anchor == "run"), len(sections))
        sections.insert(at, Section("Steps not run", [", ".join(missing)], anchor="not-run"))
    return Document("ropesplit report", sections, run_line(records.get("run", {})))


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
