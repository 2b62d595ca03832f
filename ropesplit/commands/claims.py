"""``ropesplit claims``: every claim of the paper judged by its pre-registered primary test.

The tests are fixed in ``ropesplit.claims.registry`` before anything runs (statistic,
unit, minimum replicates, nulls, thresholds and their origin, and the grid of
analysis choices the paper leaves open). The run reads the passages of two
corpora (default: the topics of Python's language reference, and narrative
prose; ``--corpus`` swissprot for 24 real proteins, a folder of .txt files, a JSONL
file with a "text" per line, a FASTA file (a passage per sequence), or a plain text file
split at double blank lines), measures each
passage on the model, its shuffled-frequency null and its random-init twins,
and prints one line per claim: the verdict in the headline cell (``--tokens``,
every other choice at its default) with each condition's 95% interval, the
nulls beside it, and whether the verdict is robust over the grid or fragile
(naming the cells that differ). ``--json`` writes ``claims.json``.

With several ``--model`` the run is repeated per model and ``--json`` writes one
models x claims record (``claims.records.compare_records``, with every
model's own record under ``records``); ``ropesplit compare`` builds the same from
claims records written before. Exit codes: 2 bad input, 1 a failed validation.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ropesplit.claims.records import DEFAULT_GRID_TOKENS, ClaimsSettings
from ropesplit.claims.registry import MIN_PASSAGES, PAIRED
from ropesplit.claims.text import compare_table, summary
from ropesplit.commands import (
    add_device_arguments,
    add_model_arguments,
    built,
    check_after_parsing,
    given,
    placement,
    write_output,
)
from ropesplit.commands._types import SEED, ListOf, OutputPath

# the defaults of the claims options: ClaimsSettings' own (each option is None until given)
_DEFAULT = ClaimsSettings()
_GRID = ",".join(map(str, DEFAULT_GRID_TOKENS))

HELP = "judge each claim of the paper by its pre-registered primary test over a grid of choices"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser, many=True)
    parser.add_argument("--tokens", type=int, help="tokens per passage of the headline cell "
                        f"(default {_DEFAULT.tokens})")  # fmt: skip
    add_corpus_arguments(parser)
    parser.add_argument("--seed", type=SEED,
                        help=f"base seed of every draw (default {_DEFAULT.seed})")
    parser.add_argument("--shard", metavar="A:B",
                        help="measure only the run's passages A..B-1 (one job of a SLURM array "
                        "or one torchrun process); 'ropesplit merge' joins the shards")  # fmt: skip
    parser.add_argument("--batch-size", type=int,
                        help=f"inputs per forward pass (default {_DEFAULT.batch_size})")
    add_device_arguments(parser)
    parser.add_argument("--json", metavar="PATH", type=OutputPath,
                        help="write claims.json (rows and tests)")


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """The claims run's corpora, grid and passage counts (``claims`` and ``report`` share them);
    the corpora are read once parsed (:func:`check_corpora`)."""
    parser.add_argument("--corpus", metavar="CORPUS",
                        help="pydoc (default: Python's language reference, a passage per "
                        "topic), prose (the King James Bible, a passage per book), swissprot "
                        "(24 real proteins, a passage per sequence), a folder of .txt files, "
                        "a .jsonl file, a FASTA file or a text file")  # fmt: skip
    parser.add_argument("--second-corpus", metavar="CORPUS",
                        help=f"the grid's other corpus (default {PAIRED}: prose, or pydoc when "
                        "--corpus is prose; 'none' for the run's corpus alone)")  # fmt: skip
    parser.add_argument("--grid-tokens", metavar="N,N,...", type=ListOf(int, 1),
                        help=f"the grid's passage lengths (default: {_GRID} up to --tokens; "
                        "--tokens is added)")  # fmt: skip
    parser.add_argument("--passages", type=int, help="passages per corpus for claims 2-5 "
                        f"(default {_DEFAULT.passages}, at least {MIN_PASSAGES})")  # fmt: skip
    parser.add_argument("--order-passages", type=int,
                        help="passages per corpus for the word-order test, claim 1 "
                        f"(default {_DEFAULT.order_passages}, at least {MIN_PASSAGES})")
    check_after_parsing(parser, check_corpora)


def check_corpora(args: argparse.Namespace) -> None:
    """``--corpus`` and ``--second-corpus`` read (``corpus_from_spec``) before any model loads:
    a missing path, a file that is not UTF-8, a folder without .txt files or a JSONL line
    without its text is a one-line error."""
    from ropesplit.empirical.model.corpus import DEFAULT_CORPUS, corpus_from_spec

    for spec in claims_settings(args, shard=False).corpora(DEFAULT_CORPUS):
        corpus_from_spec(spec)


def given_second_corpus(args: argparse.Namespace) -> dict[str, str | None]:
    """``--second-corpus`` as the ``ClaimsSettings`` field, where given (``none``: None, the
    run's corpus alone); empty where not (the settings' default, ``claims.registry.PAIRED``)."""
    value = getattr(args, "second_corpus", None)
    return {} if value is None else {"second_corpus": None if value == "none" else value}


def claims_settings(args: argparse.Namespace, *, shard: bool = True) -> ClaimsSettings:
    """The claims options given (:func:`add_corpus_arguments`, ``--tokens``, ``--seed`` and, for
    ``ropesplit claims``, ``--batch-size`` and ``--shard``) as the one
    :class:`~ropesplit.claims.records.ClaimsSettings` that ``claims`` and ``report`` run, the
    rest at its defaults, checked as it is built: the counts, the grid and the shard fail
    here, naming the option given, before any model loads (the corpora were read once
    parsed, :func:`check_corpora`)."""
    names = ("corpus", "tokens", "grid_tokens", "passages", "order_passages", "seed")
    fields = given(args, *names, *(("batch_size",) if shard else ()))
    if shard and args.shard is not None:
        fields["shard"] = _shard(args.shard)
    return built(ClaimsSettings, **fields, **given_second_corpus(args))


def _models(args: argparse.Namespace) -> list[tuple[str | None, str | None]]:
    """``(model, gguf_file)`` per ``--model`` (one None: the embedded model)."""
    from ropesplit.core.errors import RopesplitError

    models = args.model or [None]
    files = args.gguf_file or []
    if files and len(files) != len(models):
        raise RopesplitError(f"--gguf-file must be given once per --model ({len(models)}), got "
                             f"{len(files)}")  # fmt: skip
    if len(set(map(str, models))) != len(models):
        raise RopesplitError("--model repeats a model")
    return [(m, files[k] if files else None) for k, m in enumerate(models)]


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ropesplit.empirical.measurement.claims_run import run_claims
    from ropesplit.empirical.model.corpus import DEFAULT_CORPUS
    from ropesplit.empirical.model.loading import load_model

    run = claims_settings(args)  # bad input fails now, before any model loads (about 20 s)
    measured, ordered = run.ranges()
    models = _models(args)
    records = []
    for model, gguf in models:
        start = time.perf_counter()
        if sys.stderr.isatty():  # progress for a person; errors stay one line for scripts
            print(f"loading {model or 'the embedded model'} ...", file=sys.stderr, flush=True)
        loaded = load_model(model, gguf, placement=placement(args))
        corpora = len(run.corpora(DEFAULT_CORPUS))
        with tqdm(total=corpora * (len(measured) + len(ordered)), desc="passages",
                  unit="passage", file=sys.stderr, disable=None) as bar:  # fmt: skip
            record = run_claims(loaded, run, on_passage=bar.update,
                                on_stage=lambda text: bar.write(text, file=sys.stderr))  # fmt: skip
        record["header"]["seconds"] = round(time.perf_counter() - start, 1)
        print(summary(record))
        records.append(record)
        del loaded
    if len(records) > 1:
        return write_models(records, args.json)
    write_output(args.json, records[0])
    return 0


def write_models(records: list[dict[str, Any]], path: str | None) -> int:
    """Print the models x claims table of ``records`` and write its record to ``path``."""
    from ropesplit.claims.records import compare_records

    out = compare_records(records) | {"records": records}
    print(compare_table(out))
    write_output(path, out)
    return 0


def _shard(text: str | None) -> tuple[int, int] | None:
    from ropesplit.core.errors import RopesplitError

    if text is None:
        return None
    a, sep, b = text.partition(":")
    if not (sep and a.strip().isdigit() and b.strip().isdigit()):
        raise RopesplitError(f"--shard must be A:B (passage indices), got {text!r}")
    return int(a), int(b)
