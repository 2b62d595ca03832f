"""The golden fixture of the section 5 statistics: a small q/k and every number they give.

tests/data/golden_qk.npz holds one layer's pre-RoPE ``q (4, 80, 16)`` and ``k (2, 80, 16)``
(grouped-query, two query heads a KV head), built once with structure like a trained
layer's: keys with a large mean in the low-frequency pairs, queries that lean on them, a
spread in the fast pairs. tests/data/golden_stats.json holds, for each case of
:data:`CASES` (a geometry, a ``Measure`` and positions), every field of every head's
``HeadStats`` as the numerics computed them when the fixture was written. The test
(tests/numerics/test_golden.py) holds every statistic to them at 1e-12 relative and
every count exactly, on the compiled CPU path and on the torch path
(``Measure(device="cpu")``).

``python tests/golden.py`` rewrites the JSON from the committed q/k (run only when a
statistic's definition changes, and say so in the commit).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).parent / "data"
QK, STATS = HERE / "golden_qk.npz", HERE / "golden_stats.json"
H, HKV, N, D = 4, 2, 80, 16

# name -> (spec keywords, Measure keywords, positions: "index", "spaced", "jittered") and,
# for the pairs of a mask other than the causal band (docs/theory.md section 9), MASKS
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "exact": ({}, {}, "index"),
    "window": ({"window": 24}, {}, "index"),
    "interleaved": ({"layout": "interleaved"}, {}, "index"),
    "partial_rotary": ({"rotary_dim": 8}, {}, "index"),
    "references": ({}, {"reference": "mean", "references": ("distance:16", "zero")}, "index"),
    "spaced": ({}, {}, "spaced"),
    "jittered": ({}, {}, "jittered"),
    "sampled": ({}, {"pair_budget": 1000, "seed": 3}, "index"),
    "split_only": ({}, {"split_only": True, "references": ("mean",)}, "index"),
    "skip_first": ({"window": 40}, {"kbar_rule": "mean-skip-first"}, "spaced"),
    "both": ({}, {}, "index"),
    "both_window": ({}, {"reference": "mean", "references": ("zero",)}, "index"),
    "ahead": ({"layout": "interleaved"}, {"reference": "mean"}, "spaced"),
    "blocks_padding": ({}, {"references": ("distance:16",)}, "jittered"),
    "both_sampled": ({}, {"pair_budget": 1000, "seed": 3}, "index"),
}
# Mask keywords of the cases measured over another mask than the causal band
MASKS: dict[str, dict[str, Any]] = {
    "both": {"before": None, "after": None},
    "both_window": {"before": 12, "after": 12},
    "ahead": {"before": 5, "after": 20},  # one-sided reach: offsets mostly negative
    "blocks_padding": {"before": None, "after": None, "segments": (0,) * 30 + (1,) * 50,
                       "keep": (True,) * 75 + (False,) * 5},
    "both_sampled": {"before": None, "after": None},
}


def make_qk(seed: int = 20261205) -> tuple[np.ndarray, np.ndarray]:
    """The fixture's q and k (only to write it: the test reads the committed arrays)."""
    rng = np.random.default_rng(seed)
    low = np.r_[np.zeros(D // 4), np.ones(D // 4)]  # half layout: pairs 4..7 are the slow ones
    scale = np.tile(0.3 + 1.7 * low, 2)  # (D,) the slow pairs carry the energy
    k_mean = rng.normal(size=(HKV, 1, D)) * 3.0 * np.tile(low, 2)
    k = k_mean + rng.normal(size=(HKV, N, D)) * scale
    q = rng.normal(size=(H, N, D)) * scale + 0.5 * np.repeat(k_mean, H // HKV, axis=0)
    return q, k


def positions(kind: str) -> np.ndarray:
    p = np.arange(N, dtype=np.float64)
    if kind == "spaced":
        return 0.5 * p
    if kind == "jittered":  # not whole numbers: the row-chunked bound check
        return p + 0.25 * np.sin(p)
    return p


def case_stats(q: np.ndarray, k: np.ndarray, name: str, device: Any = None) -> list[dict[str, Any]]:
    """Every head's ``HeadStats`` of case ``name`` as a JSON-ready dict."""
    from ropesplit.numerics.mask import Mask
    from ropesplit.numerics.measure import Measure
    from ropesplit.numerics.spec import RopeSpec
    from ropesplit.numerics.stats import layer_statistics

    spec_kw, measure_kw, kind = CASES[name]
    spec = RopeSpec.from_base(D, 10000.0, **spec_kw)
    measure = Measure(**measure_kw, device=device)
    mask = Mask(**MASKS[name]) if name in MASKS else None
    stats = layer_statistics(q, k, spec, measure, positions=positions(kind), mask=mask)
    return [s.as_dict() for s in stats]


def write() -> None:
    q, k = make_qk()
    np.savez(QK, q=q, k=k)
    with np.load(QK) as f:
        q, k = f["q"], f["k"]
    out = {name: case_stats(q, k, name) for name in CASES}
    STATS.write_text(json.dumps(out, indent=1, allow_nan=True) + "\n")
    print(f"wrote {QK.name} and {STATS.name}: {len(CASES)} cases x {H} heads")


if __name__ == "__main__":
    sys.exit(write())
