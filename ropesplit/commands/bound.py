"""``ropesplit bound``: the remainder bound checked on synthetic heads (docs/theory.md section 3).

For each pattern (``structured``: key variation in slow pairs; ``random``;
``adversarial``: variation in the fastest pairs) one synthetic head is
generated and its section 5 statistics computed, the bound
``|E_ij| <= s sum_l |q~_l||delta~_l| 2|sin(theta_l Delta/2)|`` checked on
every causal pair (unless ``--pair-budget`` asks for a sample).  Prints one
row per case; exits 1 if any pair violates the bound.  Then, per pattern,
``r_split`` and the mean-square remainder under each reference rotation of
docs/theory.md section 6 (``zero``, reference distances ``C``, the ``mean``).
``--json`` writes ``{"cases": [...], "violations": int, "references": [...]}``.
"""

from __future__ import annotations

import argparse
import math

from ropesplit.commands import as_options, write_output
from ropesplit.commands._types import SEED, OutputPath

HELP = "check the remainder bound and the split statistics on synthetic queries and keys"

_COLUMNS = ("r_split", "r_split_rowcentred", "r_3axis", "remainder_share", "tightness_max",
            "tightness_median", "lowfreq_share_k")  # fmt: skip
_TITLES = ("r_split", "r_rowcen", "r_3axis", "remainder", "tight_max", "tight_med", "lowfreq_k")
LEGEND = ("r_rowcen: r_split on row-centred logits; remainder: ||E|| / ||W - mean W||; "
          "tight_max, tight_med:\n|E| / bound, max and median; lowfreq_k: key-deviation energy "
          "in the low-frequency half of the pairs")  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags: pattern, head size, base, tokens, seed, pair budget, JSON output."""
    parser.add_argument("--pattern", choices=["structured", "random", "adversarial", "all"],
                        default="all", help="synthetic pattern (default: all three)")
    parser.add_argument("--d", type=int, default=64, help="head dimension (default 64)")
    parser.add_argument("--base", type=float, default=10000.0, help="RoPE base (default 10000)")
    parser.add_argument("--tokens", type=int, default=512, help="sequence length (default 512)")
    parser.add_argument("--seed", type=SEED, default=0, help="random seed (default 0)")
    parser.add_argument("--pair-budget", type=int, metavar="PAIRS",
                        help="check the bound on a seeded sample of this many causal pairs "
                             "(default: every causal pair)")
    parser.add_argument("--json", metavar="PATH", type=OutputPath,
                        help="write the cases as JSON")  # fmt: skip


def _cell(value: float) -> str:
    return "nan" if not math.isfinite(value) else f"{value:.4f}"


def run(args: argparse.Namespace) -> int:
    """Generate, measure and print each case; return 1 if the bound is violated anywhere."""
    from ropesplit.claims.records import check_tokens

    with as_options():  # no statistic is defined on fewer pairs: all-NaN tables
        check_tokens(args.tokens)

    from ropesplit.numerics.synthetic import PATTERNS, bound_record

    patterns = PATTERNS if args.pattern == "all" else (args.pattern,)
    record = bound_record(patterns=patterns, d=args.d, base=args.base, tokens=args.tokens,
                          seed=args.seed, pair_budget=args.pair_budget)  # fmt: skip
    cases, total = record["cases"], record["violations"]
    print(f"{'pattern':<12}" + "".join(f"{t:>10}" for t in _TITLES) + f"{'violations':>11}")
    for case in cases:
        print(f"{case['pattern']:<12}" + "".join(f"{_cell(case[c]):>10}" for c in _COLUMNS)
              + f"{case['violations']:>11}")  # fmt: skip
    sampled = cases[0]["sampled_pairs"]
    checked = (f"on {sampled} sampled causal pairs of {cases[0]['n_pairs']} (--pair-budget)"
               if sampled is not None else "on every causal pair")  # fmt: skip
    print(f"{total} bound violations {checked}" + ("" if total == 0 else ": the bound FAILED"))
    print(LEGEND)
    print(_reference_table(record["references"]))
    write_output(args.json, record)
    return 0 if total == 0 else 1


def _reference_table(rows: list[dict]) -> str:
    """``r_split``, then the mean-square remainder, per pattern under each reference: two
    blocks of one column per reference, within 100 columns."""
    specs = list(dict.fromkeys(row["reference"] for row in rows))
    patterns = list(dict.fromkeys(row["pattern"] for row in rows))
    cells = {(row["pattern"], row["reference"]): row for row in rows}
    names = [s.replace("distance:", "C=") for s in specs]  # distance:C -> C=C
    lines = []
    for key, title in (("r_split", "r_split"), ("mean_square_remainder", "mean-square remainder")):
        lines += [f"{title} under each reference m_l (C=c: reference distance c):",
                  f"{'pattern':<12}" + "".join(f"{n:>10}" for n in names)]  # fmt: skip
        lines += [f"{p:<12}" + "".join(f"{_cell(cells[p, s][key]):>10}" for s in specs)
                  for p in patterns]  # fmt: skip
    return "\n".join(lines)
