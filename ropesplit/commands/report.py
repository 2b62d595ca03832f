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

from ropesplit.commands.figures import add_run_arguments  # light: argparse only

HELP = "run every step on one model; write report/index.html, report.md and each step's JSON"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, out_default="report")
    parser.add_argument("--corpus", metavar="PATH",
                        help="the claims' passages: a folder of .txt files, a .jsonl file or a "
                        "text file (default: Python's language reference)")  # fmt: skip
    parser.add_argument("--passages", type=int, default=12,
                        help="passages for claims 2-5 (default 12, at least 8)")  # fmt: skip
    parser.add_argument("--order-passages", type=int, default=8,
                        help="passages for the word-order test, claim 1 (default 8, at least 8)")


def run(args: argparse.Namespace) -> int:
    """Check the flags, then the output folder, run every stage and print where the report is."""
    import dataclasses

    from ropesplit.claims import MIN_PASSAGES
    from ropesplit.commands.figures import settings_from
    from ropesplit.empirical.corpus import corpus_from_spec
    from ropesplit.errors import RopesplitError
    from ropesplit.io import output_folder
    from ropesplit.report.pipeline import run_report

    for flag, value in (("--passages", args.passages), ("--order-passages", args.order_passages)):
        if value < MIN_PASSAGES:
            raise RopesplitError(f"{flag} must be at least {MIN_PASSAGES}, got {value}")
    corpus_from_spec(args.corpus)  # a bad corpus fails now, not after the model loaded
    settings = dataclasses.replace(settings_from(args), corpus=args.corpus,
                                   passages=args.passages,
                                   order_passages=args.order_passages)  # fmt: skip
    index = run_report(settings, output_folder(args.out, "the report"))
    print(f"report written to {index}")
    return 0
