"""The extra references and exact tightness: their cost in one layer's statistics.

One layer shaped like SmolLM2-135M (9 query heads on 3 KV heads, d = 64, base
1e5, random queries and keys), ``numerics.stats.layer_statistics`` three ways:

- ``sampled``: no extra reference, the bound checked on a seeded sample of
  8192 causal pairs per head (what ``analyze`` used to do);
- ``exact``: no extra reference, the bound checked on every causal pair (the
  default now);
- ``exact+refs``: the default analysis: exact, and ``r_split`` under every
  reference of ``reference.COMPARED`` (distance:256, distance:1000, mean).

Repeats are interleaved and the medians compared within this one run.
Target: the extra references cost below 30% of the analysis.
``--model`` also times the whole analysis of the embedded SmolLM2-135M (the
validated capture, then every layer's statistics, ``analyze_capture``) with
and without the extra references, the tightness exact in both.

    .venv/bin/python benchmarks/bench_reference.py [--tokens 1024] [--repeats 5] [--model]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    from ropesplit.numerics.measure import Measure
    from ropesplit.numerics.reference import COMPARED
    from ropesplit.numerics.rope import frequencies
    from ropesplit.numerics.spec import RopeSpec
    from ropesplit.numerics.stats import layer_statistics

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--model", action="store_true", help="also time the real analysis")
    args = parser.parse_args(argv)
    spec = RopeSpec.from_arrays(frequencies(64, 1e5), 0.125, kv_map=[0, 0, 0, 1, 1, 1, 2, 2, 2])
    others = tuple(spec for spec in COMPARED if spec != "zero")
    ways = {"sampled": Measure(pair_budget=8192), "exact": Measure(),
            "exact+refs": Measure(references=others)}  # fmt: skip
    rows = []
    print(f"{'N':>5} " + " ".join(f"{w + ' s':>13}" for w in ways)
          + f" {'refs/exact':>11} {'exact/sampled':>14} {'all/sampled':>12}")  # fmt: skip
    for n in args.tokens:
        rng = np.random.default_rng(0)
        q, k = rng.normal(size=(9, n, 64)), rng.normal(size=(3, n, 64)) + rng.normal(size=64)
        layer_statistics(q[:, :32], k[:, :32], spec, ways["exact+refs"])  # warm
        times: dict[str, list[float]] = {w: [] for w in ways}
        for _ in range(args.repeats):  # interleaved: drifting load hits every way alike
            for way, measure in ways.items():
                start = time.perf_counter()
                layer_statistics(q, k, spec, measure)
                times[way].append(time.perf_counter() - start)
        med = {w: float(np.median(t)) for w, t in times.items()}
        row = {"tokens": n, "seconds": med, "refs_over_exact": med["exact+refs"] / med["exact"],
               "exact_over_sampled": med["exact"] / med["sampled"],
               "all_over_sampled": med["exact+refs"] / med["sampled"]}  # fmt: skip
        rows.append(row)
        print(f"{n:>5} " + " ".join(f"{med[w]:>13.3f}" for w in ways)
              + f" {row['refs_over_exact']:>11.2f} {row['exact_over_sampled']:>14.2f}"
              f" {row['all_over_sampled']:>12.2f}")  # fmt: skip
    model_rows = _model(args.tokens, args.repeats, others) if args.model else []
    if args.json:
        from ropesplit.core.io import write_json

        write_json(args.json, {"rows": rows, "model": model_rows, "repeats": args.repeats})
    return 0


def _model(tokens: list[int], repeats: int, others: tuple[str, ...]) -> list[dict]:
    """Capture + statistics of the embedded model, without and with the extra references."""
    from dataclasses import replace

    from ropesplit.empirical import capture, default_text, load_model, tokenize
    from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE, analyze_capture

    loaded = load_model()
    out = []
    print(f"{'N':>5} {'capture s':>10} {'stats s':>9} {'stats+refs s':>13} {'analysis ratio':>15}")
    for n in tokens:
        ids = tokenize(loaded, default_text(), n)
        times: dict[str, list[float]] = {"capture": [], "stats": [], "stats+refs": []}
        for _ in range(repeats):
            start = time.perf_counter()
            cache = capture(loaded, ids, keep_probs=False)
            times["capture"].append(time.perf_counter() - start)
            for way, refs in (("stats", ()), ("stats+refs", others)):
                start = time.perf_counter()
                analyze_capture(cache, replace(DEFAULT_MEASURE, references=refs))
                times[way].append(time.perf_counter() - start)
        med = {w: float(np.median(t)) for w, t in times.items()}
        ratio = (med["capture"] + med["stats+refs"]) / (med["capture"] + med["stats"])
        out.append({"tokens": n, "seconds": med, "analysis_ratio": ratio})
        print(f"{n:>5} {med['capture']:>10.2f} {med['stats']:>9.2f} {med['stats+refs']:>13.2f}"
              f" {ratio:>15.2f}")  # fmt: skip
    return out


if __name__ == "__main__":
    sys.exit(main())
