"""``ropesplit report``: every step on one model, written as one self-contained report.

Runs the stages of :data:`ropesplit.report.pipeline.STAGES` through the
Python APIs, with the model loaded once: the sympy checks, the numerics
table, the per-head analysis of the model and its random-init control,
every experiment of the registry and every figure; writes ``--out``/
``index.html`` (figures embedded, opens offline; the paper's claims at a
glance first, run metadata last), ``report.md``, the JSON of each stage
and ``figures/``. One progress line per stage on stderr.
"""

from __future__ import annotations

import argparse

from ropesplit.commands.claims import add_corpus_arguments  # light: argparse only
from ropesplit.commands.figures import add_run_arguments

HELP = "run every step on one model; write report/index.html, report.md and each step's JSON"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, out_default="report")
    add_corpus_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Check the flags, then the output folder, run every stage and print where the report is."""
    import dataclasses

    from ropesplit.commands.claims import check_corpus_arguments
    from ropesplit.commands.figures import settings_from
    from ropesplit.io import output_folder
    from ropesplit.report.pipeline import run_report

    check_corpus_arguments(args)  # bad flags and corpora fail before anything is created
    settings = dataclasses.replace(settings_from(args), corpus=args.corpus,
                                   passages=args.passages,
                                   order_passages=args.order_passages)  # fmt: skip
    index = run_report(settings, output_folder(args.out, "the report"))
    print(f"report written to {index}")
    return 0
