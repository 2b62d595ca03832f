"""``ropesplit train``: train a small RoPE language model and watch the split's pattern emerge.

Trains a Llama-architecture causal LM (byte-level tokenizer) on the default
text (or ``--text``) at training length ``--seq-len`` and RoPE base
``--bases``, saves log-spaced checkpoints (step 0 = random init) that
``ropesplit analyze --model`` loads, and measures at each: validation loss
and docs/theory.md section 5 per head, with bootstrap intervals over heads. With
two or more bases the theory's prediction is printed before training and
judged after it. Re-running with the same flags resumes. Exit code 2 on bad
input.
"""

from __future__ import annotations

import argparse
from typing import Any

from ropesplit.commands import write_output
from ropesplit.commands._types import InputFile, IntAtLeast, ListOf, OutputFolder, OutputPath

HELP = "train a small RoPE LM here; measure the split at log-spaced checkpoints"

_COLUMNS = (("r_split", "r_split"), ("remainder", "remainder_share"),
            ("tight_max", "tightness_max"), ("lowfreq_k", "lowfreq_share_k"),
            ("lowfreq_q", "lowfreq_share_q"))  # fmt: skip


# the synthetic tasks' scale (vocabulary 64, L = 128, 2 layers, d_model 64); a
# flag given on the command line wins
TASK_DEFAULTS = {"steps": 800, "d_model": 64, "d_ff": 256, "batch": 32, "lr": 3e-3,
                 "init_std": 0.1}  # recall at init 0.02: chance at step 300; at 0.1: 99.6% by 600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ropesplit.empirical.training.train import TrainConfig
    from ropesplit.numerics.tasks import TASKS

    d = TrainConfig()
    parser.add_argument("--task", choices=TASKS, default="lm",
                        help="lm: next byte of the text (default, a Llama); mlm: masked bytes "
                        "of the text, attending both ways (a EuroBERT encoder of the same "
                        "blocks); recall: associative recall at any distance; offset: the "
                        "answer a fixed offset back (the control)")
    parser.add_argument("--vocab", type=int, default=d.vocab,
                        help=f"content tokens of recall/offset, 3/4 keys and 1/4 values "
                        f"(default {d.vocab})")  # fmt: skip
    parser.add_argument("--out", metavar="DIR", type=OutputFolder,
                        default=d.out, help=f"run folder (default {d.out})")
    parser.add_argument("--text", metavar="FILE", type=InputFile,
                        help="UTF-8 corpus (default: Python's docs); a FASTA file trains on "
                        "its sequences, one a line")
    parser.add_argument("--bases", type=ListOf(float, 0), default=f"{d.rope_base:g}",
                        help="RoPE base(s), comma-separated, e.g. 10000,100 (default 10000)")
    parser.add_argument("--seeds", type=ListOf(int, 0), default=str(d.seed),
                        help="seed(s), comma-separated (default 0)")
    parser.add_argument("--steps", type=int,
                        help=f"steps (default {d.steps}; tasks {TASK_DEFAULTS['steps']})")
    parser.add_argument("--seq-len", type=int, default=d.seq_len,
                        help=f"training length L_train in tokens (default {d.seq_len})")
    parser.add_argument("--layers", type=int, default=d.layers, help=f"default {d.layers}")
    parser.add_argument("--d-model", type=int,
                        help=f"default {d.d_model} (tasks {TASK_DEFAULTS['d_model']})")
    parser.add_argument("--heads", type=int, default=d.heads, help=f"default {d.heads}")
    parser.add_argument("--d-ff", type=int,
                        help=f"default {d.d_ff} (tasks {TASK_DEFAULTS['d_ff']})")
    parser.add_argument("--batch", type=int,
                        help=f"default {d.batch} (tasks {TASK_DEFAULTS['batch']})")
    parser.add_argument("--lr", type=float,
                        help=f"peak learning rate ({d.lr}; tasks {TASK_DEFAULTS['lr']})")
    parser.add_argument("--warmup", type=IntAtLeast(0), default=d.warmup,
                        help=f"default {d.warmup}")  # fmt: skip
    parser.add_argument("--init-std", type=float,
                        help=f"std of the initial weights ({d.init_std}; tasks "
                        f"{TASK_DEFAULTS['init_std']})")  # fmt: skip
    parser.add_argument("--threads", type=int, default=d.threads,
                        help=f"torch threads; part of reproducibility (default {d.threads})")
    parser.add_argument("--checkpoints", type=int, default=d.checkpoints,
                        help=f"log-spaced checkpoints incl. step 0 (default {d.checkpoints})")
    parser.add_argument("--n-boot", type=int, default=d.n_boot,
                        help=f"bootstrap resamples over heads (default {d.n_boot})")
    parser.add_argument("--json", metavar="PATH", type=OutputPath,
                        help="write the full record as JSON")
    parser.add_argument("--remeasure", action="store_true",
                        help="measure finished checkpoints again with this code")  # fmt: skip
    parser.add_argument("--figures", metavar="DIR", type=OutputFolder,
                        help="also draw the emergence figures (11, 12) into DIR")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from ropesplit.empirical.training.emergence import run_emergence
    from ropesplit.empirical.training.train import TrainConfig
    from ropesplit.numerics.tasks import TEXT_TASKS

    base = TASK_DEFAULTS if args.task not in TEXT_TASKS else TrainConfig().to_dict()
    sized = {name: getattr(args, name) if getattr(args, name) is not None else base[name]
             for name in TASK_DEFAULTS}  # fmt: skip
    cfg = TrainConfig(
        out=args.out, seq_len=args.seq_len, layers=args.layers, heads=args.heads,
        warmup=args.warmup, threads=args.threads, checkpoints=args.checkpoints,
        n_boot=args.n_boot, text=args.text, task=args.task, vocab=args.vocab, **sized,
    )  # fmt: skip
    record = run_emergence(cfg, list(args.bases), list(args.seeds), remeasure=args.remeasure,
                           say=lambda text: print(_wrap(text)))  # fmt: skip
    print(report_text(record))
    write_output(args.json, record)
    if args.figures:
        from ropesplit.core.io import output_folder
        from ropesplit.figures.emergence import emergence_data
        from ropesplit.figures.registry import write_figures

        write_figures(emergence_data(record), output_folder(args.figures, "figures"))
    return 0


def _cell(summary: dict[str, Any], name: str) -> str:
    value = summary[name]
    if "low" not in value:
        return f"{'nan':>21}"
    return f"{value['mean']:6.3f} [{value['low']:5.3f},{value['high']:5.3f}]"


WIDTH = 100  # the widest line printed


def _wrap(text: str) -> str:
    import textwrap

    return textwrap.fill(text, WIDTH, subsequent_indent="    ", break_on_hyphens=False)


def report_text(record: dict[str, Any]) -> str:
    """The terminal report: per run a table over checkpoints, step 0 vs control, final, verdict.

    The table comes in two blocks of columns so that no line passes :data:`WIDTH`.
    """
    entropy = record["unigram_entropy"]
    lines = []
    for run in record["runs"]:
        lines.append(_wrap(f"base {run['rope_base']:g}, seed {run['seed']}: {run['out']}  "
                           "(means over heads [95% bootstrap CI])"))  # fmt: skip
        rows = [("init" if c["step"] == 0 else c["step"], c) for c in run["checkpoints"]]
        rows.append(("control", run["control"]))
        for block in (_COLUMNS[:3], _COLUMNS[3:]):
            lines.append(f"{'step':>7} {'val_loss':>8} " + " ".join(f"{t:>21}" for t, _ in block))
            for label, c in rows:
                cells = " ".join(_cell(c["summary"], name) for _, name in block)
                lines.append(f"{label!s:>7} {c['val_loss']:8.3f} {cells}")
        same = [n for n, v in run["step0_vs_control"].items() if v["overlap"]]
        differ = [n for n, v in run["step0_vs_control"].items() if not v["overlap"]]
        lines.append(_wrap(f"step 0 vs random-init control (seed {run['control']['seed']}): CIs "
                           f"overlap for {', '.join(same) or 'none'}"
                           + (f"; differ for {', '.join(differ)}" if differ else "")))  # fmt: skip
        final = run["checkpoints"][-1]
        below = final["val_loss"] < entropy
        lines.append(_wrap(f"final step {final['step']}: val loss {final['val_loss']:.3f} nats vs "
                           f"unigram entropy {entropy:.3f} ({'below' if below else 'NOT below'}, "
                           f"ratio {final['val_loss'] / entropy:.2f}); "
                           f"wall {run['wall_seconds']:.0f} s"))  # fmt: skip
        if "accuracy" in final:
            best = final["retrieval_head"]
            lines.append(_wrap(
                f"accuracy {final['accuracy']:.3f} (by distance bucket "
                f"{', '.join(f'{a:.2f}' for a in final['accuracy_by_distance'])}); retrieval head "
                f"layer {best['layer']} head {best['head']}: attention to the source "
                f"{best['retrieval']:.3f}, r_split {best['r_split']:.3f}, weighted slow share "
                f"{best['weighted_slow_share']:.3f}"))  # fmt: skip
        lines.append("")
    if "verdict" in record:
        lines.append(_wrap("PREDICTION " + record["prediction"]["statement"]))
        for name, v in record["verdict"].items():
            lines.append(_wrap(f"  {name} (seeds as units): {v['reason']} -> "
                               f"{v['verdict'].upper()}"))  # fmt: skip
    return "\n".join(lines).rstrip()
