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

from ropesplit.commands._types import InputRecord
from ropesplit.commands.claims import add_corpus_arguments
from ropesplit.commands.figures import add_run_arguments

HELP = "run every step on one model; write report/index.html, report.md and each step's JSON"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, out_default="report")
    add_corpus_arguments(parser)
    parser.add_argument("--claims-record", action="append", metavar="CLAIMS.json",
                        type=InputRecord,
                        help="another model's claims.json (ropesplit claims --json): the "
                        "report's models x claims table and forest plot show it")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Check the flags, then the output folder, run every stage and print where the report is."""
    from ropesplit.claims.records import claims_records
    from ropesplit.commands.claims import claims_settings
    from ropesplit.commands.figures import settings_from
    from ropesplit.core.io import output_folder
    from ropesplit.report.pipeline import run_report

    claims = claims_settings(args, shard=False)  # bad flags fail before anything is created
    records = tuple(args.claims_record or ())  # RunSettings.claims_records: none by default
    claims_records(records)  # so do records that are not claims records
    settings = settings_from(args, claims=claims, claims_records=records)
    index = run_report(settings, output_folder(args.out, "the report"))
    print(f"report written to {index}")
    return 0
