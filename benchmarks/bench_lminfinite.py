"""Peak memory of LM-Infinite's attention against dense attention at 8x the training length.

The Lambda-shaped attention (``n_local = L`` window, ``n_global``
starting tokens, distances capped at ``L``) computed blockwise should need
memory growing as ``N (2 L + n_global)``, dense causal attention as ``N^2``.
Both are :func:`ropesplit.numerics.lambda_attention.lambda_attention` (dense:
``n_local=None``, the computation of transformers' eager attention) on the
same random ``(1, H, N, d)`` float32 inputs with ``N = multiple * L``.

Each measurement runs in a fresh process: inputs allocated, the kernel's
peak-RSS counter reset (``/proc/self/clear_refs``), one call, and the peak
resident memory above the resident memory before the call read from
``/proc/self/status`` (``VmHWM - VmRSS``). Dense and Lambda runs alternate;
the medians over ``--repeats`` and their ratio are printed, beside the ratio
of logits held (``logit_elements``) and the median times.

    .venv/bin/python benchmarks/bench_lminfinite.py [--length 256] [--multiple 8] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def child(kind: str, length: int, multiple: int, heads: int, dim: int, n_global: int) -> None:
    """One measurement: print ``{"peak_mib", "seconds"}`` as JSON."""
    import torch

    from ropesplit.empirical.model.memory import peak_resident, resident
    from ropesplit.numerics.lambda_attention import LambdaSpec, lambda_attention

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    n = multiple * length
    q, k, v, qf, kf = (torch.randn(1, heads, n, dim, generator=gen) for _ in range(5))
    lambda_attention(q[:, :, :64], k[:, :, :64], v[:, :, :64], 0.125)  # warm the allocator paths
    peak_resident(reset=True)  # VmHWM restarts at the current resident size
    before = resident()
    if before is None:
        raise SystemExit("this benchmark reads /proc/self (Linux)")
    start = time.perf_counter()
    if kind == "dense":
        out = lambda_attention(q, k, v, dim**-0.5)
    else:
        out = lambda_attention(q, k, v, dim**-0.5, LambdaSpec(length, n_global, length),
                               far=(qf, kf))  # fmt: skip
    seconds = time.perf_counter() - start
    peak = peak_resident() - before
    assert out.shape == (1, heads, n, dim)
    print(json.dumps({"peak_mib": peak / 2**20, "seconds": seconds}))


def _measure(kind: str, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", kind, "--length", str(args.length),
           "--multiple", str(args.multiple), "--heads", str(args.heads), "--dim", str(args.dim),
           "--n-global", str(args.n_global)]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=256, help="training length L (default 256)")
    parser.add_argument("--multiple", type=int, default=8, help="N = multiple * L (default 8)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--n-global", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", choices=("dense", "lambda"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.length, args.multiple, args.heads, args.dim, args.n_global)
        return
    from ropesplit.numerics.lambda_attention import logit_elements

    runs: dict[str, list[dict[str, float]]] = {"dense": [], "lambda": []}
    for _ in range(args.repeats):  # interleaved, so that load on the machine hits both
        for kind in runs:
            runs[kind].append(_measure(kind, args))
    n = args.multiple * args.length
    result = {
        "tokens": n,
        "length": args.length,
        "heads": args.heads,
        "dim": args.dim,
        "n_global": args.n_global,
        **{f"{kind}_peak_mib": statistics.median(r["peak_mib"] for r in rs)
           for kind, rs in runs.items()},
        **{f"{kind}_seconds": statistics.median(r["seconds"] for r in rs)
           for kind, rs in runs.items()},
        "logit_ratio": logit_elements(n, args.length, args.n_global) / logit_elements(n, None),
    }  # fmt: skip
    result["peak_ratio"] = result["lambda_peak_mib"] / result["dense_peak_mib"]
    result["time_ratio"] = result["lambda_seconds"] / result["dense_seconds"]
    print(f"N = {n} ({args.multiple} x L = {args.length}), H = {args.heads}, d = {args.dim}, "
          f"n_global = {args.n_global}; medians of {args.repeats} interleaved runs")  # fmt: skip
    print(f"  peak memory  dense {result['dense_peak_mib']:8.1f} MiB   LM-Infinite "
          f"{result['lambda_peak_mib']:8.1f} MiB   ratio {result['peak_ratio']:.3f}")  # fmt: skip
    print(f"  logits held  ratio {result['logit_ratio']:.3f} (N (2L + n_global) / N^2)")
    print(f"  time         dense {result['dense_seconds']:8.3f} s     LM-Infinite "
          f"{result['lambda_seconds']:8.3f} s     ratio {result['time_ratio']:.3f}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
