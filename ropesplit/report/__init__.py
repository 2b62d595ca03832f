r"""ropesplit.report: one run of every step, written as a self-contained report.

:func:`run_report` derives (sympy checks), runs the numerics table, loads the
model once, analyses every head (trained and random-init control), runs the
four experiments and draws the eight figures; it writes the JSON of each
step beside ``index.html`` (figures embedded, no external assets) and
``report.md``. :func:`build_document` turns those JSON records into the
report's sections (every number read from them), and :func:`render_html` /
:func:`render_markdown` format it.
"""

from ropesplit.report.document import Document, FigureBlock, Table, build_document
from ropesplit.report.pipeline import RunSettings, collect_figure_data, run_figures, run_report
from ropesplit.report.render import render_html, render_markdown

__all__ = [
    "Document",
    "FigureBlock",
    "RunSettings",
    "Table",
    "build_document",
    "collect_figure_data",
    "render_html",
    "render_markdown",
    "run_figures",
    "run_report",
]
