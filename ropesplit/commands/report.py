"""``ropesplit report``: every step on one model, written as one self-contained report.

Runs, through the Python APIs and with the model loaded once: the sympy
checks (``derive``), the numerics table (``bound``), the per-head analysis
of the model and its random-init control (``analyze``), the four
experiments (``perturb``) and the eight figures; writes ``--out``/
``index.html`` (figures embedded, opens offline), ``report.md``, the JSON of
each step and ``figures/``. One progress line per stage on stderr.
"""

from __future__ import annotations

import argparse

from ropesplit.commands.figures import add_run_arguments  # light: argparse only

HELP = "run every step on one model; write report/index.html, report.md and each step's JSON"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, out_default="report")


def run(args: argparse.Namespace) -> int:
    """Run every stage and print where the report is."""
    from ropesplit.commands.figures import run_pipeline

    index = run_pipeline(args, "the report", "run_report")
    print(f"report written to {index}")
    return 0
