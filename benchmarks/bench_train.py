"""Benchmark ``ropesplit train``: training tokens per second and the share of time spent measuring.

One process, the default :class:`TrainConfig` (or ``--steps`` etc. as flags
below): a short training run with its checkpoints measured as ``train`` does,
interleaved so that machine load hits both alike. Prints medians:

- training speed (tokens/s) over the timed optimizer steps;
- one checkpoint's measurement (load + val loss + statistics + energies);
- the measure share of a full default run: ``checkpoints x measure /
  (steps x step + checkpoints x measure)``, from those medians.

Usage: ``python benchmarks/bench_train.py [--steps 20] [--repeats 3] [--threads 2]``
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from ropesplit.empirical.training.train import TrainConfig, checkpoint_steps, train
    from ropesplit.empirical.training.train_measure import Measurer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=TrainConfig().threads)
    args = parser.parse_args(argv)
    default = TrainConfig(threads=args.threads)
    step_seconds, measure_seconds = [], []
    with tempfile.TemporaryDirectory() as root:
        for repeat in range(args.repeats):
            cfg = dataclasses.replace(default, out=str(Path(root) / f"r{repeat}"),
                                      steps=args.steps, checkpoints=2, seed=repeat)  # fmt: skip
            measurer = Measurer(cfg)
            timings: list[float] = []

            def measure(folder: Path, step: int, m: Measurer = measurer,
                        t: list[float] = timings) -> dict:  # fmt: skip
                start = time.perf_counter()
                record = m(folder, step)
                t.append(time.perf_counter() - start)
                return record

            records = train(cfg, measure=measure, progress=False)
            # seconds_train of the last checkpoint: the steps after step 1, training only
            trained = records[-1]["seconds_train"] / (args.steps - 1)
            step_seconds.append(trained)
            measure_seconds.extend(timings)
    step = statistics.median(step_seconds)
    measure = statistics.median(measure_seconds)
    tokens = default.batch * default.seq_len
    n_ck = len(checkpoint_steps(default.steps, default.checkpoints))
    share = n_ck * measure / (default.steps * step + n_ck * measure)
    print(f"config: {default.layers} layers, d_model {default.d_model}, {default.heads} heads, "
          f"batch {default.batch} x L_train {default.seq_len}, threads {args.threads}")  # fmt: skip
    print(f"training: {step * 1e3:.0f} ms/step median -> {tokens / step:,.0f} tokens/s")
    print(f"measuring one checkpoint: {measure:.2f} s median ({len(measure_seconds)} measured)")
    print(f"default run ({default.steps} steps, {n_ck} checkpoints): estimated "
          f"{default.steps * step + n_ck * measure:.0f} s, measuring {100 * share:.1f}% of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
