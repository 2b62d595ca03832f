r"""ropesplit.report: one run of every step, written as a self-contained report.

:func:`run_report` runs the stages of :data:`STAGES` (sympy checks, numerics
table, the model loaded once, every head trained and random-init, every
experiment of the registry, every figure) and writes each stage's JSON
beside ``index.html`` (figures embedded, no external assets) and
``report.md``. :func:`build_document` turns those JSON records into the
sections of :data:`SECTIONS` (the paper's claims at a glance first, run
metadata last; every number read from the records), and
:func:`render_html` / :func:`render_markdown` format it.
"""

from ropesplit.report.document import Document, FigureBlock, Section, Table, build_document
from ropesplit.report.pipeline import (
    STAGES,
    RunContext,
    RunSettings,
    Stage,
    collect_figure_data,
    run_figures,
    run_report,
)
from ropesplit.report.render import render_html, render_markdown
from ropesplit.report.sections import SECTIONS, ReportInputs, SectionSpec

__all__ = [
    "SECTIONS",
    "STAGES",
    "Document",
    "FigureBlock",
    "ReportInputs",
    "RunContext",
    "RunSettings",
    "Section",
    "SectionSpec",
    "Stage",
    "Table",
    "build_document",
    "collect_figure_data",
    "render_html",
    "render_markdown",
    "run_figures",
    "run_report",
]
