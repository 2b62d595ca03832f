"""``ropesplit perturb``: the paper's experiments on a real model, each with its verdict.

The experiments come from the registry ``ropesplit.empirical.experiments.EXPERIMENTS``
(``--experiment``, default ``all``): controlled distance, word order, position
ids and length extrapolation. For each, the prediction (stated before it
runs), a table of the measured rows with each row's verdict, and the
experiment's verdict with its reason. ``--json`` writes the record:
``header``, ``experiments`` (per experiment: prediction, needs, verdict,
reason, ``own_capture``: the captures it read, each from its own forward
pass) and the rows of each experiment run. Exit codes: 2 bad input, 1 a
failed validation.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from ropesplit.commands import (
    add_device_arguments,
    add_model_arguments,
    as_options,
    built,
    given,
    placement,
    write_output,
)
from ropesplit.commands._types import SEED, InputFile, ListOf, OutputPath
from ropesplit.empirical.experiments.settings import ExperimentSettings  # plain data, no torch

HELP = "reproduce the paper's perturbation and extrapolation experiments on a real model"

# the experiments' names, kept import-free so that --help stays fast (a test pins it
# to the registry)
NAMES = ("distance", "order", "position", "length", "remainder", "keys", "terms", "shuffle")
# columns shown only in the JSON: identical in every row, or a check the verdict already reads
HIDDEN = {"verdict", "reason", "baseline_loss", "g_change_layer0", "draws",
          "curve_position", "curve_loss", "curve_in_length",  # length: figure 8's curves
          "L", "n_local", "n_global", "cap", "rope_max_rel_diff"}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--experiment", choices=(*NAMES, "all"), default="all",
                        help="which experiment (default: all)")  # fmt: skip
    add_model_arguments(parser)
    parser.add_argument("--text", metavar="FILE", type=InputFile,
                        help="UTF-8 text (default: Python's docs)")
    parser.add_argument("--tokens", type=int, default=512, help="tokens of the text (default 512)")
    parser.add_argument("--draws", type=int, help="perturbation draws per setting "
                        f"(default {ExperimentSettings.draws})")  # fmt: skip
    parser.add_argument("--seed", type=SEED,
                        help=f"base seed of every draw (default {ExperimentSettings.seed})")
    parser.add_argument(
        "--layers",
        type=ListOf(int, 0),
        help="comma-separated layers the distance fits use "
        "(default: 6 evenly spaced; the position measures use every layer)",
    )
    parser.add_argument("--batch-size", type=int, help="inputs per forward pass "
                        f"(default {ExperimentSettings.batch_size})")  # fmt: skip
    add_device_arguments(parser)
    parser.add_argument("--json", metavar="PATH", type=OutputPath,
                        help="write the record (rows and verdicts)")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from tqdm import tqdm

    from ropesplit.claims.records import check_tokens
    from ropesplit.core.errors import RopesplitError
    from ropesplit.empirical.experiments import EXPERIMENTS, forward_count, run_experiments
    from ropesplit.empirical.measurement.plan import experiments_plan, warmup
    from ropesplit.empirical.model.loading import load_model
    from ropesplit.empirical.model.text import default_text, read_text, tokenize

    with as_options():
        check_tokens(args.tokens)
    settings = built(ExperimentSettings, **given(args, "draws", "seed", "layers", "batch_size"))
    text = read_text(args.text) if args.text else default_text()
    start = time.perf_counter()
    if sys.stderr.isatty():  # progress for a person; errors stay one line for scripts
        print("loading the model ...", file=sys.stderr, flush=True)
    loaded = load_model(args.model, args.gguf_file, placement=placement(args))
    if args.experiment in ("length", "terms"):  # refuse before its forward passes
        from ropesplit.empirical.experiments.length import training_length

        length = training_length(loaded)
        if length is not None and args.tokens <= length + (args.experiment == "terms"):
            raise RopesplitError(
                f"--experiment {args.experiment} needs text beyond the training length "
                f"{length}, got --tokens {args.tokens} (use a model trained here: ropesplit train)"
            )
    ids = tokenize(loaded, text, args.tokens)
    chosen = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]

    def show_plan(counts: dict[str, int]) -> None:  # the checks passed, no pass run yet
        plan = experiments_plan({name: n for name, n in counts.items() if n}, args.tokens)
        bar.write(replace(plan, cost=warmup(loaded)).text(), file=sys.stderr)

    with tqdm(total=forward_count(chosen, settings), desc="forward passes", unit="input",
              file=sys.stderr, disable=None) as bar:  # fmt: skip
        record = run_experiments(loaded, ids, experiments=chosen, settings=settings,
                                 on_forward=bar.update, on_plan=show_plan,
                                 on_stage=lambda name: bar.set_postfix_str(name))  # fmt: skip
    record["header"]["seconds"] = round(time.perf_counter() - start, 1)
    print(tables(record))
    write_output(args.json, record)
    return 0


def tables(record: dict[str, Any]) -> str:
    """Every experiment in the record: prediction, rows with verdicts, the verdict and why."""
    head = record["header"]
    lines = [_wrap(
        f"{head['model']}: {head['tokens']} tokens (context {head['context_tokens']}), "
        f"seed {head['seed']}, {head['draws']} draws, fitted layers {head['layers']}"
    )]
    for name, about in record.get("experiments", {}).items():
        rows = [r for r in record[name] if r.get("scope", "all") != "head"]  # means only
        lines += ["", f"== {name}: {about['title']}", _wrap(f"prediction: {about['prediction']}"),
                  *_grid(rows),
                  _wrap(f"verdict: {about['verdict'].upper()}: {about['reason']}")]  # fmt: skip
        if about.get("own_capture"):
            lines.append(_wrap(f"captured: {', '.join(about['own_capture'])}"))
        if len(rows) < len(record[name]):
            lines.append(f"({len(record[name]) - len(rows)} per-head rows in the JSON)")
    return "\n".join(lines)


def _wrap(text: str) -> str:
    """Prose at most :data:`WIDTH` columns wide, continuation lines indented."""
    import textwrap

    return textwrap.fill(text, WIDTH, subsequent_indent="    ", break_on_hyphens=False)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return "-" if value is None else str(value)


WIDTH = 100  # the widest line printed; wider tables wrap into blocks of columns


def _grid(rows: list[dict[str, Any]], width: int = WIDTH) -> list[str]:
    """Every shown column of the rows (first-seen order) and the verdict, right-aligned, in
    blocks no wider than ``width``: the first two columns (what the row is) start each block,
    the verdict ends the last."""
    if not rows:
        return ["(no rows)"]
    columns = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in HIDDEN]
    columns.append("verdict")
    cells = {c: [_cell(r.get(c)) if c != "verdict" else str(r.get("verdict", "-")) for r in rows]
             for c in columns}  # fmt: skip
    size = {c: max(len(c), *(len(v) for v in cells[c])) for c in columns}
    keys, rest = columns[:2], columns[2:]
    blocks: list[list[str]] = []
    for c in rest:
        used = sum(size[k] + 2 for k in keys + (blocks[-1] if blocks else []))
        if not blocks or used + size[c] > width:
            blocks.append([])
        blocks[-1].append(c)
    lines: list[str] = []
    for k, block in enumerate(blocks):
        shown = keys + block
        fmt = "  ".join(f"{{:>{size[c]}}}" for c in shown)
        if k:
            lines.append("")
        lines.append(fmt.format(*shown))
        lines += [fmt.format(*(cells[c][i] for c in shown)) for i in range(len(rows))]
    return lines
