r"""ropesplit.report: one run of every step, written as a self-contained report.

:func:`run_report` runs the stages of :data:`STAGES` (sympy checks, numerics
table, the model loaded once, every head trained and random-init, every
experiment of the registry, a small model trained here, then the one gather
step that builds every figure's data from the records it declares, and the
figures) and writes each stage's JSON beside ``index.html`` (figures
embedded, no external assets) and ``report.md``. :func:`build_document`
turns those JSON records into the sections of :data:`SECTIONS` (the paper's
claims at a glance first, run metadata last; every number read from the
records, each figure in its section), and :func:`render_html` /
:func:`render_markdown` format it.

Importing this package (or :mod:`ropesplit.report.document`) imports neither
torch nor numpy: the stages import what they use when they run.
"""

from ropesplit.report.document import Details, Document, FigureBlock, Section, Table
from ropesplit.report.pipeline import (
    STAGES,
    RunContext,
    RunSettings,
    Stage,
    check_plan,
    run_figures,
    run_report,
)
from ropesplit.report.render import render_html, render_markdown
from ropesplit.report.sections import SECTIONS, ReportInputs, SectionSpec, build_document

__all__ = [
    "SECTIONS",
    "STAGES",
    "Details",
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
    "check_plan",
    "render_html",
    "render_markdown",
    "run_figures",
    "run_report",
]
