"""Capture and analysis time over forward time on the default model, with peak memory.

For N = 512, 1024, 2048 tokens of the default text: one plain forward pass
of the model (eager attention), then ``analyze`` with exact tightness
(the default ``Measure``: the bound on every causal pair), its capture (one
forward pass through the taps plus validation at the logit level) timed
apart from the statistics of all heads. Printed, all measured in this run
(medians over ``--repeats`` interleaved runs: the machine is noisy):
``capture/fwd``, ``analysis/fwd`` (statistics, the target <= 2 at
N = 1024) and ``total/fwd`` (capture + statistics), with the capture's
validation numbers (largest logit difference over the logit scale; largest
probability difference), and the memory of the analysis alone, measured in a
fresh process (:func:`analysis_peak`; in this one the plain forward pass's
``(B, N, vocab)`` output logits dominate the peak): its peak above the loaded
model (``extra GiB``) beside what ``check_memory`` adds for the batch
(``analyze.memory_estimate`` without the weights), and the absolute peak
beside the whole estimate on the line below (target within 6 GB at N = 2048).
Below each row, every run's own ``total/fwd`` and their median (paired:
each run's capture and analysis over the forward pass beside it), and where
one sequence's time goes (:func:`profile_shares`, cProfile outside the timed
runs): the capture's forward pass (its validation apart) and validation, the
statistics' logit sums (prefix moments, band kernel, band sums), bound check
(its float32 screen, float64 rechecks, max and median) and three-axis fit,
each a share of its stage.
The statistics' compiled kernels are loaded before the timed runs (a
small batch; once a process, its time printed), as the forward pass is
warmed up. The allocator is made steady first (``ropesplit.core.allocator``):
with glibc's default the forward pass alone varied by 1.6x within one run.

With ``--passages P`` each row is a batch: the first ``P`` passages of the
default corpus (``empirical.model.corpus``) at ``N`` tokens each, one forward pass
of the batch against ``analyze_batch`` of it (one streamed capture, the
statistics of every passage; the target: capture plus analysis
within 2x the forward pass at ``--passages 16 --tokens 512``).

With ``--split-only`` each run also analyses the batch under
``Measure(split_only=True)``, what ``claims`` computes per passage (no bound
check, FFT band sums or three-axis fit), and prints that capture plus
statistics over the same run's forward pass: the part of ``total/fwd`` that
``claims.json`` reads.

    .venv/bin/python benchmarks/bench_empirical.py [--tokens 512 1024 2048] [--passages P]
        [--json PATH] [--allocator steady|default] [--split-only]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from dataclasses import replace
from typing import Any


def peak_rss_gib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


_PEAK = """
import json, sys
import torch
from ropesplit.empirical import load_model
from ropesplit.empirical.analysis.analyze import analyze_batch, memory_estimate
from ropesplit.empirical.model.memory import peak_resident, resident
loaded = load_model({model!r}, {gguf!r})
ids = torch.load({ids!r})
analyze_batch(loaded, ids[:1, :64])  # compiles the kernels first: their peak is not the run's
rss = resident()
peak_resident(reset=True)  # the run's own peak (ru_maxrss would carry the parent's)
analyze_batch(loaded, ids)
peak = peak_resident()
weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
print(json.dumps({{"peak": peak, "extra": peak - rss,
                  "predicted": memory_estimate(loaded, ids.shape[1], ids.shape[0]),
                  "predicted_extra": memory_estimate(loaded, ids.shape[1], ids.shape[0])
                  - weights}}))
"""


def analysis_peak(model: str | None, gguf: str | None, ids: object) -> dict[str, float]:
    """Peak memory of one ``analyze_batch`` of ``ids`` alone, in a fresh process (GiB).

    ``extra``: the peak above the process after loading the model and compiling
    the kernels, beside ``predicted_extra``, ``memory_estimate`` without the
    weights (what ``check_memory`` adds for this batch); ``peak`` beside
    ``predicted`` (the interpreter, its libraries and the loader's transient
    are in the first, not the second). In this process the plain forward
    pass's ``(B, N, vocab)`` output logits would dominate the peak. The child
    reads its own peak (``VmHWM``, reset after the warm-up:
    ``capture.peak_resident``): ``ru_maxrss`` would report at least this
    process's size, carried across ``exec``.
    """
    import json
    import subprocess
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/ids.pt"
        torch.save(ids, path)
        code = _PEAK.format(model=model, gguf=gguf, ids=path)
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"the memory child failed: {run.stderr.strip().splitlines()[-1]}")
    got = json.loads(run.stdout.strip().splitlines()[-1])
    return {key: value / 2**30 for key, value in got.items()}


# what each share counts: (label, file suffix, function name) of cProfile's cumulative times;
# the validation runs inside the forward pass's hooks, so "forward pass" is model_pass less it
_CAPTURE_PARTS = (("forward pass", "empirical/model/loading.py", "model_pass"),
                  ("validation", "empirical/model/validate.py", "reconstruct"))
_STATS_PARTS = (("logit sums", "numerics/stats.py", "_logit_sums"),
                ("  prefix moments", "numerics/pairing.py", "prefix_moments"),
                ("  band kernel", "numerics/stats.py", "kernel"),
                ("  band sums (FFT)", "numerics/stats.py", "_band_sums"),
                ("bound check", "numerics/stats.py", "tightness"),
                ("  float32 screen", "numerics/bound.py", "screen"),
                ("  float64 rechecks", "numerics/bound.py", "exact"),
                ("  max and median", "numerics/stats.py", "_screened_summary"),
                ("three-axis fit", "numerics/fit.py", "solve"))  # fmt: skip


def profile_shares(loaded: object, ids: object) -> dict[str, dict[str, float]]:
    """Where one sequence's time goes (cProfile, one thread, outside the timed runs): the
    capture's forward pass (its validation apart) and validation, and the statistics'
    parts, each a share of its stage. The statistics run here layer by layer in this thread
    (the timed runs spread the sequences over the threads, which cProfile does not follow)."""
    import cProfile
    import pstats

    from ropesplit.empirical.analysis.analyze import capture_rows
    from ropesplit.empirical.model.capture import capture

    def shares(call: Any, parts: tuple[tuple[str, str, str], ...]) -> dict[str, float]:
        profile = cProfile.Profile()
        profile.runcall(call)
        table = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        total = next(ct for (_, _, name), (_, _, _, ct, _) in table.items()
                     if name == call.__name__)  # fmt: skip
        return {label: sum(ct for (path, _, name), (_, _, _, ct, _) in table.items()
                           if path.endswith(suffix) and name == func) / total
                for label, suffix, func in parts}  # fmt: skip

    got: dict[str, Any] = {}

    def capture_all() -> None:
        got["cache"] = capture(loaded, ids, keep_probs=False)  # type: ignore[arg-type]

    def measure_all() -> None:
        cache = got["cache"]
        for layer in cache.layers:
            capture_rows(layer, cache.positions.numpy())

    captured = shares(capture_all, _CAPTURE_PARTS)
    captured["forward pass"] -= captured["validation"]
    return {"capture": captured, "statistics": shares(measure_all, _STATS_PARTS)}


def batch_forward(loaded: object, ids: object) -> None:
    """One plain forward pass of the model (its output head included) over ``ids (B, N)``."""
    import torch

    with torch.no_grad():
        loaded.model(input_ids=ids, attention_mask=torch.ones_like(ids),  # type: ignore[attr-defined]
                     use_cache=False)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--model", help="Hugging Face id or folder (default: SmolLM2-135M)")
    parser.add_argument("--gguf-file")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--repeats", type=int, default=3, help="medians over this many runs")
    parser.add_argument("--passages", type=int, default=1,
                        help="passages per batch (1: the default text)")  # fmt: skip
    parser.add_argument("--split-only", action="store_true",
                        help="also analyse each batch under Measure(split_only=True), what "
                        "claims computes (no bound check, FFT band sums or fit), and print "
                        "that capture plus statistics over the same forward pass")  # fmt: skip
    parser.add_argument("--allocator", choices=("steady", "default"), default="steady",
                        help="steady: glibc keeps freed memory "
                        "(ropesplit.core.allocator)")  # fmt: skip
    args = parser.parse_args(argv)
    from ropesplit.core.allocator import steady_allocator

    steady = args.allocator == "steady" and steady_allocator()

    import torch

    from ropesplit.core.io import write_json
    from ropesplit.empirical import default_text, load_model, tokenize
    from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE, analyze_batch
    from ropesplit.empirical.model.corpus import default_corpus, passage_ids

    split_measure = replace(DEFAULT_MEASURE, split_only=True)

    start = time.perf_counter()
    loaded = load_model(args.model, args.gguf_file)
    print(f"{loaded.name}: loaded in {time.perf_counter() - start:.1f} s, "
          f"{torch.get_num_threads()} threads, peak {peak_rss_gib():.2f} GiB, allocator "
          f"{'steady (mallopt)' if steady else 'default'}")  # fmt: skip
    text = default_text()
    rows = []
    print(f"{'N':>6} {'heads':>6} {'forward s':>10} {'capture s':>10} {'analysis s':>11} "
          f"{'capture/fwd':>12} {'analysis/fwd':>13} {'total/fwd':>10} {'logit rel':>10} "
          f"{'probs abs':>10} {'extra GiB':>9} {'predicted':>10}")  # fmt: skip
    for n_tokens in sorted(args.tokens):
        if args.passages == 1:
            ids = tokenize(loaded, text, n_tokens)[None]  # (1, N)
        else:
            ids = torch.as_tensor(passage_ids(loaded, default_corpus(), n_tokens,
                                              count=args.passages).ids)  # (P, N)  # fmt: skip
        batch_forward(loaded, ids)  # warm-up: allocator, torch's kernels
        tick = time.perf_counter()  # and the statistics' compiled kernels, loaded once a process
        analyze_batch(loaded, ids[:2, :64])
        print(f"  N={n_tokens}: warm-up of the statistics' kernels "
              f"{time.perf_counter() - tick:.2f} s (once a process: not in the timed runs)",
              file=sys.stderr)  # fmt: skip
        forwards, analyses, splits = [], [], []
        for _ in range(args.repeats):  # interleaved, so load drifts hit both alike
            tick = time.perf_counter()
            batch_forward(loaded, ids)
            forwards.append(time.perf_counter() - tick)
            (result, *_) = analyze_batch(loaded, ids)  # exact tightness
            analyses.append(result.seconds)
            print(f"  N={n_tokens} run {len(forwards)}: forward {forwards[-1]:.2f} s, capture "
                  f"{result.seconds['capture']:.2f} s, analysis {result.seconds['analysis']:.2f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
            if args.split_only:
                (split, *_) = analyze_batch(loaded, ids, measure=split_measure)
                splits.append((split.seconds["capture"] + split.seconds["analysis"])
                              / forwards[-1])  # fmt: skip
                print(f"  N={n_tokens} run {len(forwards)} split only: capture "
                      f"{split.seconds['capture']:.2f} s, statistics "
                      f"{split.seconds['analysis']:.2f} s, total/fwd {splits[-1]:.2f}",
                      file=sys.stderr, flush=True)  # fmt: skip
        fwd = statistics.median(forwards)
        ratios = [(a["capture"] + a["analysis"]) / f
                  for a, f in zip(analyses, forwards, strict=True)]  # fmt: skip
        paired = statistics.median(ratios)  # each run's own total/fwd, then their median
        result.seconds = {key: statistics.median(s[key] for s in analyses) for key in analyses[0]}
        memory = analysis_peak(args.model, args.gguf_file, ids)
        profile = profile_shares(loaded, ids[0])
        row = {
            "tokens": n_tokens,
            "passages": int(ids.shape[0]),
            "heads": len(result.heads),
            "forward_s": fwd,
            "capture_s": result.seconds["capture"],
            "analysis_s": result.seconds["analysis"],
            "capture_over_forward": result.seconds["capture"] / fwd,
            "analysis_over_forward": result.seconds["analysis"] / fwd,
            "total_over_forward": (result.seconds["capture"] + result.seconds["analysis"]) / fwd,
            "total_over_forward_runs": ratios,
            "total_over_forward_paired": paired,
            "exact_tightness": all(h["sampled_pairs"] is None for h in result.heads),
            "peak_rss_gib": peak_rss_gib(),  # this process: the forward's logits included
            **{f"analysis_{key}_gib": value for key, value in memory.items()},
            "reconstruction_max_abs_diff": result.reconstruction_max_abs_diff,
            **result.validation,
            "shares": profile,
        }
        rows.append(row)
        print(f"{n_tokens:6d} {row['heads']:6d} {fwd:10.2f} {row['capture_s']:10.2f} "
              f"{row['analysis_s']:11.2f} {row['capture_over_forward']:12.2f} "
              f"{row['analysis_over_forward']:13.2f} {row['total_over_forward']:10.2f} "
              f"{row['logit_max_rel_diff']:10.1e} {row['reconstruction_max_abs_diff']:10.1e} "
              f"{row['analysis_extra_gib']:9.2f} {row['analysis_predicted_extra_gib']:10.2f}"
              )  # fmt: skip
        print(f"  N={n_tokens}: total/fwd of each run {', '.join(f'{x:.2f}' for x in ratios)}, "
              f"their median {paired:.2f}")  # fmt: skip
        if splits:
            row["split_only_total_over_forward_runs"] = splits
            print(f"  N={n_tokens}: split only (what claims computes), total/fwd of each run "
                  f"{', '.join(f'{x:.2f}' for x in splits)}, their median "
                  f"{statistics.median(splits):.2f}")  # fmt: skip
        for stage, parts in profile.items():
            print(f"  N={n_tokens}: shares of one sequence's {stage} (cProfile, one thread): "
                  + ", ".join(f"{k.strip()} {v:.0%}" for k, v in parts.items()))  # fmt: skip
        print(f"  N={n_tokens}: analysis alone (fresh process) peak "
              f"{row['analysis_peak_gib']:.2f} GiB against check_memory's "
              f"{row['analysis_predicted_gib']:.2f}; above the loaded model "
              f"{row['analysis_extra_gib']:.2f} against {row['analysis_predicted_extra_gib']:.2f}; "
              f"this process's peak {row['peak_rss_gib']:.2f}")  # fmt: skip
        sys.stdout.flush()
    if args.json:
        write_json(args.json, {"model": loaded.name, "steady_allocator": steady, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
