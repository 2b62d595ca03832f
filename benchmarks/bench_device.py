"""Capture and analysis time over forward time with the model on a GPU, with peak device memory.

For N = 1024, 2048, 4096 tokens of the default text, the default model
loaded onto ``--device`` (default ``cuda``): one plain forward pass of the
model (eager attention), then ``analyze`` with exact tightness
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
        [--device cuda] [--dtype float32] [--json PATH] [--geometry llama2-7b --layers 32]

``--geometry llama2-7b`` measures a random-init model of Llama-2-7B's shapes
(``geometry.py``) instead, on seeded random tokens: with ``--layers 32`` the
paper's own scale, on one GPU (``--dtype bfloat16`` halves the weights),
its random weights drawn on the device itself (:func:`on_device`). Measured
on a lent H200: docs/analyse-your-model.md, "On one GPU".
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[Any, float]:
    """``fn()`` and its wall time in seconds, the device synchronised before and after."""
    sync()
    tick = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - tick


def on_device(config: Any, device: Any, dtype: str) -> Any:
    """A random-init model of ``config`` built on ``device`` itself, ready for capture.

    ``load_model`` draws random weights on the host (seeded, the same on every
    device) and then moves them: for Llama-2-7B's 32 layers that took over 270 s
    of a 16-core host on the lent H200, against seconds on the GPU. Timing and
    memory do not depend on which random weights these are.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from ropesplit.empirical.models import from_model

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                 dtype=getattr(torch, dtype))  # fmt: skip
    return from_model(model, name=f"{config.model_type} (config, built on {device})")


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
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--repeats", type=int, default=3, help="medians over this many runs")
    args = parser.parse_args(argv)

    import torch

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print(f"bench_device: CUDA is not available here ({args.device}); nothing measured")
        return 0
    from ropesplit.core.io import write_json
    from ropesplit.empirical import default_text, forward, load_model, tokenize
    from ropesplit.empirical.analyze import analyze

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def peak_gib() -> float | None:
        return torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None

    start = time.perf_counter()
    if args.geometry:
        from geometry import geometry_config

        loaded = on_device(geometry_config(args.geometry, args.layers), device, args.dtype)
    else:
        loaded = load_model(args.model, args.gguf_file, device=args.device, dtype=args.dtype)
    gpu = torch.cuda.get_device_name(device) if cuda else "host"
    print(f"{loaded.name}: loaded in {time.perf_counter() - start:.1f} s on {device} ({gpu}), "
          f"{args.dtype}, {torch.get_num_threads()} host threads")  # fmt: skip
    text = default_text()

    def ids_of(n: int) -> Any:  # the default text, or seeded tokens for a model without one
        if loaded.tokenizer is not None:
            return tokenize(loaded, text, n)
        return torch.randint(int(loaded.config.vocab_size), (n,),
                             generator=torch.Generator().manual_seed(0))  # fmt: skip

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
