"""Peak memory and time of ``analyze`` against depth: Llama-2-7B's geometry at random init.

For each number of layers (``--layers``, default 2 and 4) and each length
(``--tokens``, default 512, 2048, 4096), a fresh process builds the geometry
(``geometry.py``: hidden 4096, 32 heads of 128, MLP 11008, random init in
float32), asks the peak ``check_memory`` predicts
(what is resident now, ``memory.resident``, plus what
``analyze.memory_estimate`` says the run adds to the weights), then runs
``analyze`` on one sequence of that many seeded random tokens (exact
tightness, every head) and reads its own peak resident memory (``VmHWM``,
reset before the run; under the CLI's steady allocator,
``ropesplit.core.allocator``). Printed per row: the weights, the peak, the peak
above the weights, the estimate and its ratio to the peak, and the capture's
and the statistics' seconds per layer.

Two verdicts follow, each from the rows at the longest length: the peak
above the weights does not grow with depth (the rows' largest over their
smallest, at most 1.10: the capture and the statistics stream layer by
layer), and the estimate lies within 25% of every measured peak. The exit
status is 1 when either fails.

    .venv/bin/python benchmarks/bench_memory.py [--layers 2 4] [--tokens 512 2048 4096]
        [--geometry llama2-7b] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

DEPTH_LIMIT = 1.10  # ours: the peak above the weights may differ by 10% between depths
ESTIMATE_LIMIT = 0.25  # ours: check_memory's estimate within 25% of the measured peak

_CHILD = """
import json, sys, time
sys.path.insert(0, {here!r})
from ropesplit.core.allocator import steady_allocator
steady_allocator()  # as the CLI runs
import torch
from geometry import geometry_config
from ropesplit.empirical import load_model
from ropesplit.empirical.analysis.analyze import analyze, memory_estimate
from ropesplit.empirical.model.memory import peak_resident, resident
tick = time.perf_counter()
loaded = load_model(geometry_config({geometry!r}, {layers}))
built = time.perf_counter() - tick
ids = torch.randint(int(loaded.config.vocab_size), ({tokens},),
                    generator=torch.Generator().manual_seed(0))
weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
before = resident()  # the loaded model, the interpreter and its libraries
estimate = before + memory_estimate(loaded, {tokens}) - weights  # check_memory's: + the run's
peak_resident(reset=True)
result = analyze(loaded, ids)
print(json.dumps({{"weights": weights, "before": before, "peak": peak_resident(),
                  "estimate": estimate, "build_s": built, **result.seconds,
                  "heads": len(result.heads)}}))
"""


def measure(geometry: str, layers: int, tokens: int) -> dict[str, float]:
    """One row, measured in a fresh process (its own peak; nothing left from the last row)."""
    from pathlib import Path

    code = _CHILD.format(here=str(Path(__file__).parent), geometry=geometry, layers=layers,
                         tokens=tokens)  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"the {layers}-layer, {tokens}-token child failed: "
                         f"{(run.stderr.strip().splitlines() or ['no output'])[-1]}")  # fmt: skip
    got = json.loads(run.stdout.strip().splitlines()[-1])
    gib = {key: got[key] / 2**30 for key in ("weights", "before", "peak", "estimate")}
    return {"layers": layers, "tokens": tokens, "heads": got["heads"], **{
        f"{key}_gib": value for key, value in gib.items()},
        "above_weights_gib": gib["peak"] - gib["weights"],
        "estimate_over_peak": gib["estimate"] / gib["peak"],
        "capture_s_per_layer": got["capture"] / layers,
        "analysis_s_per_layer": got["analysis"] / layers, "build_s": got["build_s"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--geometry", default="llama2-7b")
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048, 4096])
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    print(f"{'layers':>6} {'N':>6} {'weights':>8} {'before':>7} {'peak':>7} {'above w':>8} "
          f"{'estimate':>9} {'est/peak':>9} {'capture s/layer':>16} {'stats s/layer':>14}"
          "   (GiB)")  # fmt: skip
    rows = []
    for tokens in sorted(args.tokens):
        for layers in sorted(args.layers):
            tick = time.perf_counter()
            row = measure(args.geometry, layers, tokens)
            rows.append(row)
            print(f"{layers:6d} {tokens:6d} {row['weights_gib']:8.2f} {row['before_gib']:7.2f} "
                  f"{row['peak_gib']:7.2f} "
                  f"{row['above_weights_gib']:8.2f} {row['estimate_gib']:9.2f} "
                  f"{row['estimate_over_peak']:9.2f} {row['capture_s_per_layer']:16.1f} "
                  f"{row['analysis_s_per_layer']:14.1f}   ({time.perf_counter() - tick:.0f} s)",
                  flush=True)  # fmt: skip
    longest = [r for r in rows if r["tokens"] == max(args.tokens)]
    above = [r["above_weights_gib"] for r in longest]
    depth = max(above) / min(above)
    worst = max(abs(r["estimate_over_peak"] - 1) for r in rows)
    verdicts = {
        "depth_ratio": depth, "depth_ok": depth <= DEPTH_LIMIT,
        "estimate_worst_rel": worst, "estimate_ok": worst <= ESTIMATE_LIMIT,
    }  # fmt: skip
    print(f"peak above the weights at {max(args.tokens)} tokens, layers "
          f"{', '.join(str(r['layers']) for r in longest)}: largest / smallest {depth:.3f} "
          f"(limit {DEPTH_LIMIT}, ours): {'flat' if verdicts['depth_ok'] else 'GROWS'}")
    print(f"check_memory's estimate against the measured peaks: worst {worst:.1%} off "
          f"(limit {ESTIMATE_LIMIT:.0%}, ours): "
          f"{'within' if verdicts['estimate_ok'] else 'OUTSIDE'}")
    if args.json:
        from ropesplit.core.io import write_json

        write_json(args.json, {"geometry": args.geometry, "rows": rows, **verdicts})
    return 0 if verdicts["depth_ok"] and verdicts["estimate_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
