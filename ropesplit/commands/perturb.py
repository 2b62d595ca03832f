"""``ropesplit perturb``: the paper's experiments on a real model, beside THEORY.md's predictions.

Four experiments (``--experiment``, default ``all``): controlled distance,
word-order perturbation, position-id perturbation and length extrapolation
with LM-Infinite's distance cap. Each prints a table with the prediction of
THEORY.md section 4 beside the measurement; ``--json`` writes the rows
(top-level keys ``distance``, ``order``, ``position``, ``length``, only those
run, plus a ``header``). Exit codes: 2 bad input, 1 a failed validation.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

HELP = "reproduce the paper's perturbation and extrapolation experiments on a real model"

CHOICES = ("distance", "order", "position", "length", "all")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--experiment", choices=CHOICES, default="all", help="which experiment (default: all)"
    )
    parser.add_argument("--model", help="Hugging Face id or local folder (default: SmolLM2-135M)")
    parser.add_argument("--gguf-file", help="a GGUF file inside --model's folder")
    parser.add_argument("--text", metavar="FILE", help="UTF-8 text (default: Python's docs)")
    parser.add_argument("--tokens", type=int, default=512, help="tokens of the text (default 512)")
    parser.add_argument("--seeds", type=int, default=3, help="perturbation seeds (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of every draw (default 0)")
    parser.add_argument(
        "--layers",
        help="comma-separated layers the distance and length fits use "
        "(default: 6 evenly spaced; the position bound uses every layer)",
    )
    parser.add_argument("--batch-size", type=int, default=8, help="inputs per forward pass")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16, ...")
    parser.add_argument("--json", metavar="PATH", help="write the rows of every table as JSON")


def _layers(text: str | None) -> list[int] | None:
    from ropesplit.errors import RopesplitError

    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise RopesplitError(f"--layers must be comma-separated integers, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ropesplit.empirical.experiments import EXPERIMENTS, forward_count, run_experiments
    from ropesplit.empirical.models import load_model
    from ropesplit.empirical.text import default_text, read_text, tokenize
    from ropesplit.errors import RopesplitError
    from ropesplit.io import output_path, write_json

    for flag, value, low in (("--tokens", args.tokens, 8), ("--seeds", args.seeds, 1),
                             ("--batch-size", args.batch_size, 1)):  # fmt: skip
        if value < low:
            raise RopesplitError(f"{flag} must be at least {low}, got {value}")
    layers = _layers(args.layers)
    if args.json:
        output_path(args.json)  # a bad output folder fails now, not after the model ran
    text = read_text(args.text) if args.text else default_text()
    start = time.perf_counter()
    loaded = load_model(args.model, args.gguf_file, device=args.device, dtype=args.dtype)
    ids = tokenize(loaded, text, args.tokens)
    chosen = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    with tqdm(total=forward_count(chosen, args.seeds), desc="forward passes", unit="input",
              file=sys.stderr, disable=None) as bar:  # fmt: skip
        record = run_experiments(
            loaded, ids, experiments=chosen, seeds=args.seeds, seed=args.seed, layers=layers,
            batch_size=args.batch_size, on_forward=bar.update,
            on_stage=lambda name: bar.set_postfix_str(name),
        )  # fmt: skip
    record["header"]["seconds"] = round(time.perf_counter() - start, 1)
    print(tables(record))
    if args.json:
        write_json(args.json, record)
    return 0


def tables(record: dict[str, Any]) -> str:
    """Every experiment's table in the record, each under its prediction."""
    from ropesplit.empirical.experiments import PREDICTIONS

    head = record["header"]
    lines = [
        f"{head['model']}: {head['tokens']} tokens (context {head['context_tokens']}), "
        f"seed {head['seed']}, {head['seeds']} seeds, fitted layers {head['layers']}"
    ]
    for name, render in (("distance", _distance), ("order", _order), ("position", _position),
                         ("length", _length)):  # fmt: skip
        if name in record:
            lines += ["", f"== {name}: prediction: {PREDICTIONS[name]}", *render(record[name])]
    return "\n".join(lines)


def _grid(columns: list[str], rows: list[list[Any]]) -> list[str]:
    """Right-aligned columns; floats with 4 significant digits."""
    cells = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[k]) for r in cells)) for k, c in enumerate(columns)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return [fmt.format(*columns), *(fmt.format(*r) for r in cells)]


def _distance(rows: list[dict[str, Any]]) -> list[str]:
    shown = [r for r in rows if r["scope"] != "head"]
    return _grid(
        ["layer", "D", "key_corr", "key_corr_d0", "key_shift", "distance_shift", "predicted"],
        [[r["layer"] if r["layer"] is not None else "all", r["distance"], r["key_corr"],
          r["key_corr_d0"], r["key_shift"], r["distance_shift"], "corr ~1"] for r in shown],
    )  # fmt: skip


def _order(rows: list[dict[str, Any]]) -> list[str]:
    return _grid(
        ["scheme", "rate", "ratio", "spread(std)", "loss", "moved", "ratio predicted"],
        [[r["scheme"], f"{r['rate']:.0%}", r["ratio"], r["spread"], r["loss"], r["moved"],
          "~1" if r["rate"] <= 0.05 else ">1"] for r in rows],
    )  # fmt: skip


def _position(rows: list[dict[str, Any]]) -> list[str]:
    return _grid(
        ["scheme", "t", "ratio", "spread(std)", "bound_f", "bound_g", "bound_E", "bound_W",
         "measured_W", "tightness", "tightness predicted"],
        [[r["scheme"], r["t"], r["ratio"], r["spread"], r["bound_f"], r["bound_g"], r["bound_E"],
          r["bound_W"], r["measured_W"], r["tightness"], "<=1"] for r in rows],
    )  # fmt: skip


def _length(rows: list[dict[str, Any]]) -> list[str]:
    predicted = {"original": "-", "spaced": "f_outside > 0", "capped": "f_outside = 0"}
    return _grid(
        ["setting", "max_dist", "loss", "ratio", "f q01..q99", "g q01..q99", "E q01..q99",
         "f_outside", "predicted"],
        [[r["setting"], r["max_distance"], r["loss"], r["ratio"],
          f"{r['f_q01']:.3g}..{r['f_q99']:.3g}", f"{r['g_q01']:.3g}..{r['g_q99']:.3g}",
          f"{r['E_q01']:.3g}..{r['E_q99']:.3g}", r["f_outside"], predicted[r["setting"]]]
         for r in rows],
    )  # fmt: skip
