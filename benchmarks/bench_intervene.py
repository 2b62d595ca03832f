"""One intervened forward pass over an unmodified one, on the default model.

The target: attention from ``f + g`` (the remainder dropped, every
layer and head; ``empirical.experiments.intervene``) costs at most 2x the model's own
forward pass at N = 512. For each edit: interleaved runs of the clean
forward pass and the edited one on the same tokens (one sequence, the
default text), medians, their ratio, all measured in this run.

    .venv/bin/python benchmarks/bench_intervene.py [--tokens 512] [--repeats 5]
        [--edits remainder fast_keys shuffle] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5, help="medians over this many runs")
    parser.add_argument("--edits", nargs="+", default=["remainder", "fast_keys", "shuffle"])
    parser.add_argument("--model", help="Hugging Face id or folder (default: SmolLM2-135M)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)

    import torch

    from ropesplit.core.io import write_json
    from ropesplit.empirical import default_text, load_model, tokenize
    from ropesplit.empirical.experiments.intervene import Edit, calibrate_kbars, intervened_nll

    loaded = load_model(args.model)
    ids = tokenize(loaded, default_text(), args.tokens)[None]  # (1, N)
    kbars = calibrate_kbars(loaded, ids)
    layers = tuple(loaded.layers)
    print(f"{loaded.name}: N={args.tokens}, {loaded.n_layers} layers edited, "
          f"{torch.get_num_threads()} threads, medians of {args.repeats} interleaved runs")
    print(f"{'edit':>10} {'clean s':>8} {'edited s':>9} {'ratio':>6}")
    rows = []
    for kind in args.edits:
        edit = Edit(kind, layers, kbars=kbars, seed=0)
        intervened_nll(loaded, ids, edit)  # warm-up
        clean, edited = [], []
        for _ in range(args.repeats):
            tick = time.perf_counter()
            intervened_nll(loaded, ids, None)
            clean.append(time.perf_counter() - tick)
            tick = time.perf_counter()
            intervened_nll(loaded, ids, edit)
            edited.append(time.perf_counter() - tick)
        row = {"edit": kind, "clean_s": statistics.median(clean),
               "edited_s": statistics.median(edited)}  # fmt: skip
        row["ratio"] = row["edited_s"] / row["clean_s"]
        rows.append(row)
        print(f"{kind:>10} {row['clean_s']:8.2f} {row['edited_s']:9.2f} {row['ratio']:6.2f}")
        sys.stdout.flush()
    if args.json:
        write_json(args.json, {"model": loaded.name, "tokens": args.tokens, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
