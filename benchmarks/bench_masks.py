"""The section 5 statistics both ways against causal, per analysed pair (issue 54's row).

One layer of the embedded model's geometry (9 query heads, 3 KV heads, d = 64, base
1e5) on synthetic q/k of ``--tokens`` tokens (default 512), measured under

- ``causal``: the causal band, the prefix-sum algorithm (``numerics.stats``), N(N+1)/2 pairs;
- ``both``: every pair both ways, the dense row blocks (``numerics.masked``), N^2 pairs;
- ``window``: ModernBERT's two-sided local window, |i - j| <= 64 (``numerics.masked``).

Each is the full ``layer_statistics`` (split, three-axis fit, exact bound on every pair),
timed ``--repeats`` times (median) after one warm-up, all in this one process so the ratios
are of one run; ``--sequences`` layers (default 16: a 16 x 512 capture) are timed in each
repeat. The row reported: seconds per million analysed pairs, and each mask's ratio to
causal (the issue's target: both ways at most 1.2x causal per pair).

    .venv/bin/python benchmarks/bench_masks.py [--tokens 512] [--sequences 16] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def main() -> None:
    from ropesplit.numerics.mask import Mask
    from ropesplit.numerics.spec import RopeSpec
    from ropesplit.numerics.stats import layer_statistics

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    n = args.tokens
    rng = np.random.default_rng(0)
    layers = [(rng.normal(size=(9, n, 64)), rng.normal(size=(3, n, 64)))
              for _ in range(args.sequences)]  # fmt: skip
    spec = RopeSpec.from_base(64, 100000.0)
    masks = {"causal": Mask.causal(), "both": Mask.both(), "window": Mask.both(64)}
    rows = {}
    for name, mask in masks.items():
        layer_statistics(*layers[0], spec, mask=mask)  # warm-up: compiled kernels, caches
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            for q, k in layers:
                stats = layer_statistics(q, k, spec, mask=mask)
            times.append(time.perf_counter() - start)
        pairs = stats[0].n_pairs * len(layers)
        rows[name] = {"seconds": statistics.median(times), "pairs": pairs,
                      "seconds_per_million_pairs": statistics.median(times) / pairs * 1e6}
    for name, row in rows.items():
        row["per_pair_vs_causal"] = (row["seconds_per_million_pairs"]
                                     / rows["causal"]["seconds_per_million_pairs"])
        print(f"{name:<8} {row['seconds']:8.2f} s  {row['pairs']:>10} pairs  "
              f"{row['seconds_per_million_pairs']:7.3f} s / M pairs  "
              f"x{row['per_pair_vs_causal']:.2f} per pair vs causal")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tokens": n, "sequences": args.sequences, "repeats": args.repeats,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
