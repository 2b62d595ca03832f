"""Full statistics of one head: the numerics layer against a straightforward reference.

For N = 512, 1024, 2048, 4096 (d = 64, base 1e4, the random synthetic head):

- ``numerics``: ``stats.head_statistics`` with ``pair_budget=8192`` (tightness
  from a seeded sample of 8192 causal pairs);
- ``numerics-exact``: the same with the default ``pair_budget=None`` (every
  causal pair);
- ``reference``: every ``(i, j, l)`` term broadcast in numpy float64 (``W, f,
  g, E`` and both bounds, in row blocks of 128 so that memory stays sane),
  the statistics by their textbook formulas, and the three-axis fit by a
  dense Cholesky solve of the gauge-fixed normal equations (timed apart:
  ``ref_fit_s``).

Each measurement runs in a fresh process so that its peak resident memory is
its own.  Targets: numerics >= 10x faster than the reference at N = 2048, and
N = 4096 within 4 GB.  The reference is skipped above ``--reference-max``
(default 2048: at 4096 it needs tens of GB).

    .venv/bin/python benchmarks/bench_numerics.py [--tokens 512 1024 2048 4096] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def peak_rss_gib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def reference(q: np.ndarray, k: np.ndarray, theta: np.ndarray, s: float) -> dict[str, float]:
    """Every term broadcast ``(rows, N, P)`` in float64, then the section 5 formulas."""
    from ropesplit.numerics.rope import to_pairs

    n, _ = q.shape
    qc, kc = to_pairs(q), to_pairs(k)  # (N, P)
    kb = kc.mean(0)  # (P,)
    dev = kc - kb  # (N, P)
    w, fg, e, bound = np.zeros((4, n, n))
    for i0 in range(0, n, 128):
        rows = slice(i0, min(n, i0 + 128))
        delta = (np.arange(n)[rows, None] - np.arange(n)[None, :])[..., None]  # (rows, N, 1)
        rot = np.exp(1j * theta * delta)  # (rows, N, P)
        qr = qc[rows, None, :]  # (rows, 1, P)
        w[rows] = s * (qr * kc.conj() * rot).real.sum(-1)
        f = s * (qr * kb.conj() * rot).real.sum(-1)
        g = s * (qr * dev.conj()).real.sum(-1)
        fg[rows] = f + g
        e[rows] = s * (qr * dev.conj() * (rot - 1)).real.sum(-1)
        mag = s * np.abs(qr) * np.abs(dev)  # (rows, N, P)
        bound[rows] = (mag * 2 * np.abs(np.sin(theta * delta / 2))).sum(-1)
    mask = np.tril(np.ones((n, n), bool))
    wm, fgm, em, bm = w[mask], fg[mask], e[mask], bound[mask]
    per_row = mask.sum(1, keepdims=True)
    wc = np.where(mask, w - (w * mask).sum(1, keepdims=True) / per_row, 0)[mask]
    fc = np.where(mask, fg - (fg * mask).sum(1, keepdims=True) / per_row, 0)[mask]
    ratio = np.abs(em[bm > 0]) / bm[bm > 0]
    out = {"r_split": float(np.corrcoef(wm, fgm)[0, 1]),
           "r_split_rowcentred": float(wc @ fc / np.sqrt((wc @ wc) * (fc @ fc))),
           "remainder_share": float(np.linalg.norm(em) / np.linalg.norm(wm - wm.mean())),
           "tightness_max": float(ratio.max()), "tightness_median": float(np.median(ratio))}
    t = time.perf_counter()
    out["r_3axis"] = _dense_three_axis(w, mask)
    out["ref_fit_s"] = time.perf_counter() - t
    return out


def _dense_three_axis(w: np.ndarray, mask: np.ndarray) -> float:
    """Dense normal equations over (a_1.., b, c_2..) (a_0, c_0, c_1 fixed at 0), Cholesky."""
    n = w.shape[0]
    rows, cols = np.nonzero(mask)
    idx = [rows - cols, n + rows, 2 * n + cols]  # unknown index of each pair's a, b, c
    gram = np.zeros((3 * n, 3 * n))
    for u in idx:
        for v in idx:
            np.add.at(gram, (u, v), 1.0)
    values = w[rows, cols] - w[rows, cols].mean()
    rhs = sum(np.bincount(u, weights=values, minlength=3 * n) for u in idx)
    keep = np.setdiff1d(np.arange(3 * n), [0, 2 * n, 2 * n + 1])
    chol = np.linalg.cholesky(gram[np.ix_(keep, keep)])
    x = np.linalg.solve(chol.T, np.linalg.solve(chol, rhs[keep]))
    return float(np.sqrt(max(x @ rhs[keep], 0.0) / (values @ values)))


def one(impl: str, n: int) -> dict[str, float]:
    """Time one implementation at ``N`` tokens in this process."""
    from ropesplit.numerics.measure import Measure
    from ropesplit.numerics.stats import head_statistics
    from ropesplit.numerics.synthetic import make_qk

    warm = make_qk("random", d=64, base=1e4, tokens=16, seed=1)  # first-call costs of both
    head_statistics(warm.q, warm.k, warm.spec)
    reference(warm.q, warm.k, warm.theta, warm.scale)
    qk = make_qk("random", d=64, base=1e4, tokens=n, seed=0)
    start = time.perf_counter()
    if impl == "reference":
        out = reference(qk.q, qk.k, qk.theta, qk.scale)
    else:
        measure = Measure(pair_budget=8192 if impl == "numerics" else None)
        out = head_statistics(qk.q, qk.k, qk.spec, measure).as_dict()
    return {"seconds": time.perf_counter() - start, "peak_gib": peak_rss_gib(), **out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--reference-max", type=int, default=2048)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--one", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]))))
        return 0
    rows = []
    print(f"{'N':>5} {'numerics s':>11} {'exact s':>9} {'reference s':>12} {'ratio':>7} "
          f"{'ratio exact':>11} {'peak GiB num/exact/ref':>24}")  # fmt: skip
    for n in args.tokens:
        res = {}
        for impl in ("numerics", "numerics-exact", "reference"):
            if impl == "reference" and n > args.reference_max:
                continue
            proc = subprocess.run([sys.executable, __file__, "--one", impl, str(n)],
                                  capture_output=True, text=True, check=True)  # fmt: skip
            res[impl] = json.loads(proc.stdout.splitlines()[-1])
        ref = res.get("reference")
        num, exact = res["numerics"], res["numerics-exact"]
        ratio = ref["seconds"] / num["seconds"] if ref else float("nan")
        ratio_exact = ref["seconds"] / exact["seconds"] if ref else float("nan")
        peaks = "/".join(f"{r['peak_gib']:.2f}" for r in res.values())
        print(f"{n:>5} {num['seconds']:>11.3f} {exact['seconds']:>9.3f} "
              f"{ref['seconds'] if ref else float('nan'):>12.3f} {ratio:>7.1f} "
              f"{ratio_exact:>11.1f} {peaks:>24}")  # fmt: skip
        rows.append({"tokens": n, **{k: v for k, v in res.items()}})
    if args.json:
        from ropesplit.core.io import write_json

        write_json(args.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
