"""``ropesplit compare``: claims records of several models in one models x claims table.

Each record is a ``ropesplit claims --json`` file (one model) or a compare record
written before (its models are taken again). Prints one line per model and claim:
the headline verdict, the estimate with its 95% interval and the robustness over
the grid; ``--json`` writes the compare record (``claims.records.compare_records``,
every model's record under ``records``), which ``ropesplit report --claims-record``
also takes and whose forest plot is figure 20.
"""

from __future__ import annotations

import argparse

from ropesplit.commands._types import InputRecord, OutputPath

HELP = "one models x claims table (and forest-plot data) from claims records"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("records", nargs="+", metavar="CLAIMS.json", type=InputRecord,
                        help="claims records (ropesplit claims --json), one model each")
    parser.add_argument("--json", metavar="PATH", type=OutputPath,
                        help="write the models x claims record")


def run(args: argparse.Namespace) -> int:
    from ropesplit.claims.records import claims_records
    from ropesplit.commands.claims import write_models

    return write_models(claims_records(args.records), args.json)
