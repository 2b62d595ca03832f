"""``ropesplit claims``: every claim of the paper judged by its pre-registered primary test.

The tests are fixed in ``ropesplit.claims`` before anything runs (statistic,
split, unit, minimum replicates, nulls, thresholds). The run reads a corpus
of passages (default: the topics of Python's language reference that reach
``--tokens``; ``--corpus`` a folder of .txt files, a JSONL file with a "text"
per line, or a plain text file split at double blank lines), measures each
passage on the model and its random-init twins, and prints one line per
claim: the primary statistic with its 95% t interval over passages, the
null beside it, and the verdict. ``--json`` writes ``claims.json``: the
header, every passage's row, the order rows and each claim's test.
Exit codes: 2 bad input, 1 a failed validation.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

HELP = "judge each claim of the paper by its pre-registered primary test over a corpus"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="Hugging Face id or local folder (default: SmolLM2-135M)")
    parser.add_argument("--gguf-file", help="a GGUF file inside --model's folder")
    parser.add_argument("--tokens", type=int, default=512,
                        help="tokens per passage (default 512)")  # fmt: skip
    add_corpus_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="base seed of every draw (default 0)")
    parser.add_argument("--shard", metavar="A:B",
                        help="measure only the run's passages A..B-1 (one job of a SLURM array "
                        "or one torchrun process); 'ropesplit merge' joins the shards")  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=8, help="inputs per forward pass")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16, ...")
    parser.add_argument("--json", metavar="PATH", help="write claims.json (rows and tests)")


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """The claims run's corpus and passage counts (``claims`` and ``report`` share them)."""
    parser.add_argument("--corpus", metavar="PATH",
                        help="a folder of .txt files, a .jsonl file or a text file "
                        "(default: Python's language reference, a passage per topic)")  # fmt: skip
    parser.add_argument("--passages", type=int, default=12,
                        help="passages for claims 2-5 (default 12, at least 8)")  # fmt: skip
    parser.add_argument("--order-passages", type=int, default=8,
                        help="passages for the word-order test, claim 1 (default 8, at least 8)")


def check_corpus_arguments(args: argparse.Namespace) -> tuple[range, range]:
    """:func:`add_corpus_arguments`' flags (and ``--shard`` where given) checked before any
    model loads; the passages the run measures (``claims_run.passage_ranges``)."""
    from ropesplit.empirical.claims_run import passage_ranges
    from ropesplit.empirical.corpus import corpus_from_spec

    ranges = passage_ranges(args.passages, args.order_passages,
                            _shard(getattr(args, "shard", None)), prefix="--")  # fmt: skip
    corpus_from_spec(args.corpus)  # a bad corpus fails now, not after the model loaded
    return ranges


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ropesplit.empirical.claims_run import run_claims
    from ropesplit.empirical.models import load_model
    from ropesplit.errors import RopesplitError
    from ropesplit.io import output_path, write_json

    # bad input fails now, before the model loads (about 20 s)
    if args.tokens < 16:
        raise RopesplitError(f"--tokens must be at least 16, got {args.tokens}")
    measured, ordered = check_corpus_arguments(args)
    if args.json:
        output_path(args.json)
    start = time.perf_counter()
    if sys.stderr.isatty():  # progress for a person; errors stay one line for scripts
        print("loading the model ...", file=sys.stderr, flush=True)
    loaded = load_model(args.model, args.gguf_file, device=args.device, dtype=args.dtype)
    with tqdm(total=len(measured) + len(ordered), desc="passages", unit="passage",
              file=sys.stderr, disable=None) as bar:  # fmt: skip
        record = run_claims(loaded, corpus=args.corpus, tokens=args.tokens,
                            passages=args.passages, order_passages=args.order_passages,
                            seed=args.seed, batch_size=args.batch_size,
                            shard=_shard(args.shard),
                            on_passage=bar.update,
                            on_stage=lambda text: bar.write(text, file=sys.stderr))  # fmt: skip
    record["header"]["seconds"] = round(time.perf_counter() - start, 1)
    print(summary(record))
    if args.json:
        write_json(args.json, record)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def _shard(text: str | None) -> tuple[int, int] | None:
    from ropesplit.errors import RopesplitError

    if text is None:
        return None
    a, sep, b = text.partition(":")
    if not (sep and a.strip().isdigit() and b.strip().isdigit()):
        raise RopesplitError(f"--shard must be A:B (passage indices), got {text!r}")
    return int(a), int(b)


def _interval(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "n/a"
    return f"{entry['mean']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"


def claim_line(claim: dict[str, Any]) -> str:
    """One claim in a line or two: each condition's interval, the nulls, the verdict."""
    parts = []
    for c in claim["conditions"]:
        what = c["measure"] if c["compare"] == "level" else f"{c['measure']} - {c['null']}"
        side = ">" if c["direction"] == "above" else "<"
        parts.append(f"{what} {_interval(c['interval'])} (predicted {side} {c['threshold']:g})")
    nulls = ", ".join(f"{n['measure']} {_interval(n['interval'])}" for n in claim["nulls"])
    line = (f"claim {claim['claim']}: {claim['verdict'].upper()} (n = {claim['n']} "
            f"{claim['unit']}): " + "; ".join(parts))  # fmt: skip
    return line + (f"\n    null: {nulls}" if nulls else "")


def summary(record: dict[str, Any]) -> str:
    head = record["header"]
    shards = ", ".join(f"{a}:{b}" for a, b in head.get("shards", []))
    lines = [f"{head['model']}: corpus {head['corpus']}, {head['passages']} passages of "
             f"{head['tokens']} tokens ({head['order_passages']} for word order), control "
             f"seeds {head['control_seeds']}; passages measured here {shards}",
             f"power: {head['power']}"]  # fmt: skip
    lines += [claim_line(c) for c in record["claims"]]
    return "\n".join(lines)
