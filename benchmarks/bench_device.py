"""Capture and analysis time over forward time with the model on a GPU, with peak device memory.

For N = 1024, 2048, 4096 tokens of the default text, the default model
loaded onto ``--device`` (default ``cuda``) under ``--attention`` (default eager; ``sdpa``
or ``flash_attention_2``: the model's own kernel, the capture held to its output): one plain
forward pass of the model, then ``analyze`` with exact tightness
(the default ``Measure``: the bound on every causal pair), whose capture (one
forward pass through the taps plus validation) is timed apart from the
statistics of all heads; with the model on CUDA the statistics' ``O(N^2)``
parts run there (:mod:`ropesplit.numerics.stats_torch`).  Printed, all
measured in this run (medians over ``--repeats`` interleaved runs, the device
synchronised around every timing): ``capture/fwd``, ``analysis/fwd``,
``total/fwd`` (capture + statistics) and the peak device memory of each N
(``torch.cuda.max_memory_allocated``, reset before it).  Where CUDA is not
available it says so in one line and exits 0 (``--device cpu`` runs the same
measurements on the host, without a peak).

    .venv/bin/python benchmarks/bench_device.py [--tokens 1024 2048 4096] [--repeats 3]
        [--device cuda] [--dtype float32] [--attention eager] [--json PATH]
        [--geometry llama2-7b --layers 32]

``--geometry llama2-7b`` measures a random-init model of Llama-2-7B's shapes
(``geometry.py``) instead, on seeded random tokens: with ``--layers 32`` the
paper's own scale, on one GPU (``--dtype bfloat16`` halves the weights),
its random weights drawn on the device itself (``load_model`` builds a
config's model there). ``--torch-stats`` runs the statistics through the torch
path on ``--device`` even where it is the CPU (what a GPU runs, timed without
one). ``--claims TOKENS PASSAGES`` measures instead ``claims`` end to end, its
five random-init twins drawn on the device, every stage timed
(:func:`claims_row`). Measured: docs/analyse-your-model.md, "On one GPU".

    .venv/bin/python benchmarks/bench_device.py --device cpu --geometry llama2-7b \
        --layers 2 --claims 128 8
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any


def timed(fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[Any, float]:
    """``fn()`` and its wall time in seconds, the device synchronised before and after."""
    sync()
    tick = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - tick


def claims_row(loaded: Any, tokens: int, passages: int, sync: Callable[[], None]
               ) -> dict[str, Any]:  # fmt: skip
    """``claims`` end to end on ``loaded`` at ``tokens`` tokens over ``passages`` passages of
    seeded random token ids (the word order over as many), every stage timed: the five
    random-init twins (drawn on the model's device: ``load_model``), the plan's warm-up, each
    corpus' passages (trained, shuffled frequencies, twins) and word order, and judging."""
    import hashlib

    import torch

    from ropesplit.claims.records import ClaimsSettings
    from ropesplit.claims.registry import CONTROL_SEEDS
    from ropesplit.empirical.measurement.claims_run import run_claims
    from ropesplit.empirical.model.corpus import PassageIds
    from ropesplit.empirical.model.loading import random_init_twin

    ids = torch.randint(int(loaded.config.vocab_size), (passages, tokens),
                        generator=torch.Generator().manual_seed(0))  # fmt: skip
    given = PassageIds([f"random {p}" for p in range(passages)], ids, tokens, 0,
                       hashlib.sha256(ids.numpy().tobytes()).hexdigest())  # fmt: skip
    twins, twins_s = timed(lambda: {s: random_init_twin(loaded, s) for s in CONTROL_SEEDS}, sync)
    marks: list[tuple[str, float]] = []

    def stage(text: str) -> None:
        sync()
        marks.append((text.splitlines()[0][:60], time.perf_counter()))

    settings = ClaimsSettings(tokens=tokens, grid_tokens=(tokens,), passages=passages,
                              order_passages=passages, second_corpus=None)  # fmt: skip
    marks.append(("setup and the plan's timed warm-up", time.perf_counter()))
    record, wall = timed(lambda: run_claims(loaded, settings, controls=twins,
                                            passage_ids=given, on_stage=stage), sync)  # fmt: skip
    marks.append(("judged", time.perf_counter()))
    stages = {"twins (5, drawn on the device)": twins_s}
    for (text, t0), (_, t1) in zip(marks[:-1], marks[1:], strict=True):
        stages[text] = t1 - t0  # each stage until the next one starts
    return {"tokens": tokens, "passages": passages, "twins_s": twins_s, "claims_s": wall,
            "total_s": twins_s + wall, "stages_s": stages,
            "verdicts": {c["claim"]: c["verdict"] for c in record["claims"]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--model", help="Hugging Face id or folder (default: SmolLM2-135M)")
    parser.add_argument("--gguf-file")
    parser.add_argument("--geometry", help="a random-init model of this geometry instead "
                        "(geometry.py: llama2-7b)")  # fmt: skip
    parser.add_argument("--layers", type=int, help="--geometry's layers (default: its own)")
    parser.add_argument("--device", default="cuda", help="torch device of the model")
    parser.add_argument("--dtype", default="float32", help="the model's dtype (load_model's)")
    parser.add_argument("--attention", default="eager",
                        help="the attention kernel the model runs (eager, sdpa, "
                             "flash_attention_2, ...: Placement's)")  # fmt: skip
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--repeats", type=int, default=3, help="medians over this many runs")
    parser.add_argument("--torch-stats", action="store_true",
                        help="the statistics through the torch path on --device even on a CPU "
                        "(Measure(device=...): what a GPU runs), not the compiled one")  # fmt: skip
    parser.add_argument("--claims", nargs=2, type=int, metavar=("TOKENS", "PASSAGES"),
                        help="instead of the rows per N: claims end to end at TOKENS tokens "
                        "over PASSAGES passages of random ids, with its five twins, every "
                        "stage timed")  # fmt: skip
    args = parser.parse_args(argv)

    import torch

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print(f"bench_device: CUDA is not available here ({args.device}); nothing measured")
        return 0
    from ropesplit.core.io import write_json
    from ropesplit.empirical import default_text, forward, load_model, tokenize
    from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE
    from ropesplit.empirical.analysis.analyze import analyze as analyze_one
    from ropesplit.empirical.model.loading import Placement

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def peak_gib() -> float | None:
        return torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None

    start = time.perf_counter()
    if args.geometry:
        from geometry import geometry_config

        config = geometry_config(args.geometry, args.layers)  # drawn on the device itself
        loaded = load_model(config, placement=Placement(args.device, args.dtype,
                                                        attention=args.attention))
    else:
        loaded = load_model(args.model, args.gguf_file,
                            placement=Placement(args.device, args.dtype,
                                                attention=args.attention))  # fmt: skip
    gpu = torch.cuda.get_device_name(device) if cuda else "host"
    print(f"{loaded.name}: loaded in {time.perf_counter() - start:.1f} s on {device} ({gpu}), "
          f"{args.dtype}, {torch.get_num_threads()} host threads")  # fmt: skip
    text = default_text()

    def ids_of(n: int) -> Any:  # the default text, or seeded tokens for a model without one
        if loaded.tokenizer is not None:
            return tokenize(loaded, text, n)
        return torch.randint(int(loaded.config.vocab_size), (n,),
                             generator=torch.Generator().manual_seed(0))  # fmt: skip

    if args.claims:
        row = claims_row(loaded, *args.claims, sync)
        print(f"claims at {row['tokens']} tokens x {row['passages']} passages: "
              f"{row['total_s']:.1f} s in all ({row['total_s'] / 60:.2f} min), twins "
              f"{row['twins_s']:.1f} s; verdicts {row['verdicts']}")  # fmt: skip
        for name, seconds in row["stages_s"].items():
            print(f"  {seconds:8.1f} s  {name}")
        if args.json:
            write_json(args.json, {"model": loaded.name, "device": str(device), "name": gpu,
                                   "dtype": args.dtype, "geometry": args.geometry,
                                   "claims": row})  # fmt: skip
        return 0
    measure = replace(DEFAULT_MEASURE, device=device) if args.torch_stats else DEFAULT_MEASURE
    analyze = functools.partial(analyze_one, measure=measure)
    analyze(loaded, ids_of(min(64, *args.tokens)))  # warm-up
    rows = []
    print(f"{'N':>6} {'heads':>6} {'forward s':>10} {'capture s':>10} {'analysis s':>11} "
          f"{'capture/fwd':>12} {'analysis/fwd':>13} {'total/fwd':>10} "
          f"{'peak GiB':>9}")  # fmt: skip
    for n_tokens in sorted(args.tokens):
        ids = ids_of(n_tokens)
        forward(loaded, ids)  # warm-up: allocator, kernels at this N
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        forwards, analyses = [], []
        for _ in range(args.repeats):  # interleaved, so load drifts hit both alike
            forwards.append(timed(functools.partial(forward, loaded, ids), sync)[1])
            result, wall = timed(functools.partial(analyze, loaded, ids), sync)
            analyses.append({**result.seconds, "wall": wall})  # exact tightness
            print(f"  N={n_tokens} run {len(forwards)}: forward {forwards[-1]:.3f} s, capture "
                  f"{result.seconds['capture']:.3f} s, analysis {result.seconds['analysis']:.3f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
        fwd = statistics.median(forwards)
        seconds = {key: statistics.median(s[key] for s in analyses) for key in analyses[0]}
        peak = peak_gib()
        row = {
            "tokens": n_tokens,
            "heads": len(result.heads),
            "forward_s": fwd,
            "capture_s": seconds["capture"],
            "analysis_s": seconds["analysis"],
            "analyze_wall_s": seconds["wall"],  # analyze() as a whole, synchronised
            "capture_over_forward": seconds["capture"] / fwd,
            "analysis_over_forward": seconds["analysis"] / fwd,
            "total_over_forward": (seconds["capture"] + seconds["analysis"]) / fwd,
            "exact_tightness": all(h["sampled_pairs"] is None for h in result.heads),
            "peak_device_gib": peak,  # this N's forward passes and analyses
        }
        rows.append(row)
        print(f"{n_tokens:6d} {row['heads']:6d} {fwd:10.3f} {row['capture_s']:10.3f} "
              f"{row['analysis_s']:11.3f} {row['capture_over_forward']:12.2f} "
              f"{row['analysis_over_forward']:13.2f} {row['total_over_forward']:10.2f} "
              f"{'-' if peak is None else f'{peak:.2f}':>9}")  # fmt: skip
        sys.stdout.flush()
    if args.json:
        write_json(args.json, {"model": loaded.name, "device": str(device), "name": gpu,
                               "dtype": args.dtype, "geometry": args.geometry,
                               "rows": rows})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
