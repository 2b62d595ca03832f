"""``ropesplit merge``: shards of one ``ropesplit claims`` run joined into the run's record.

Each shard (``ropesplit claims --shard A:B --json shard-K.json``, one per
SLURM array task or ``torchrun``/``accelerate launch`` process) measures
its passages exactly as the whole run would (global passage indices, seeds
and control twins); the merge concatenates their per-passage rows and
recomputes every claim's test and the grid from them,
so the merge of shards covering the run equals the single run. Records of
different runs, overlapping shards and shards that leave passages out (a
failed array job) are refused (exit 2, no file written); ``--partial`` merges
the shards there are, and the record, this summary and the report say
``partial: passages A:B of N missing``.
"""

from __future__ import annotations

import argparse

from ropesplit.commands import write_output
from ropesplit.commands._types import InputRecord, OutputPath

HELP = "join the shards of one 'ropesplit claims' run into that run's claims.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("records", nargs="+", metavar="SHARD.json", type=InputRecord,
                        help="claims.json records of disjoint shards of one run")  # fmt: skip
    parser.add_argument("--json", metavar="PATH", type=OutputPath,
                        help="write the merged claims.json")
    parser.add_argument("--partial", action="store_true",
                        help="merge shards that leave some of the run's passages out, the "
                        "record marked partial (refused otherwise)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from ropesplit.claims.records import merge_records
    from ropesplit.claims.text import summary
    from ropesplit.core.errors import RopesplitError
    from ropesplit.core.io import read_json

    records = []
    for name in args.records:
        record = read_json(name, "record")
        if not isinstance(record, dict) or "shards" not in record.get("header", {}):
            raise RopesplitError(f"record {name} is not a 'ropesplit claims' record")
        records.append(record)
    merged = merge_records(records, partial=args.partial)
    print(summary(merged))
    write_output(args.json, merged)
    return 0
