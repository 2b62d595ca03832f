r"""Attention both ways: encoders trained here beside the causal model (docs/theory.md 9).

Reads ``encoder.json`` (the report's ``encoder`` stage, :mod:`ropesplit.report.training`:
a EuroBERT of the causal run's blocks and base trained on masked bytes of the text and of
the bundled proteins) and shows figure 22, drawn with ``train.json``'s causal run. Per
encoder: the random init, its control and the last checkpoint, with bootstrap intervals
over heads; the last checkpoint's split beside the protein paper's three-term fit; which
of the paper's claims carry over to attention both ways, and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropesplit.numerics.statistics import names
from ropesplit.report.document import Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec, need
from ropesplit.report.sections.emergence import ci_cell

__all__ = ["CARRY_OVER", "SECTION"]

_STATS = names("training")

# what each claim needs of a model, and whether an encoder has it (docs/theory.md 9)
CARRY_OVER = (
    ("claim 4 (the learned pattern) and the split", "carry over",
     "both are statements about pairs and their offsets, of either sign: measured on every "
     "pair an encoder's attention lets through"),
    ("claims 2, 3, 5 (the split's strength, its bound, the reference)", "carry over",
     "per pair and per row; the offsets run over [-(N-1), N-1]"),
    ("claim 1 (word-order tolerance)", "changes its loss",
     "it reads a next-token loss; `ropesplit claims` scores an encoder's masked-token loss "
     "in its place, on targets that stay put while their context moves"),
    ("length generalization (LM-Infinite's cap)", "does not carry over as stated",
     "the cap is on i - j >= 0 of a causal row; both ways it caps |i - j|, which no "
     "encoder here was trained or tested with"),
)


def _runs_table(encoder: Mapping[str, Any]) -> Table:
    rows = []
    for corpus, record in encoder.items():
        run = record["runs"][0]
        first, last = run["checkpoints"][0], run["checkpoints"][-1]
        for label, c in (("init (step 0)", first), ("control", run["control"]),
                         (f"step {last['step']}", last)):  # fmt: skip
            rows.append([corpus, label, fmt(c["val_loss"]),
                         *(ci_cell(c["summary"], s) for s in _STATS)])  # fmt: skip
    return Table(["encoder", "checkpoint", "val_loss", *_STATS], rows,
                 "masked-byte loss (nats); mean over heads [95% bootstrap interval over heads]")


def _three_term_table(encoder: Mapping[str, Any]) -> Table:
    rows = []
    for corpus, record in encoder.items():
        final = need(record, "final_analysis", "encoder")
        three, split = final["summary_three_term"], final["summary"]
        for fitted in ("logits", "probs"):
            cv = three[f"three_term_cv_{fitted}"].get("heads")
            rows.append([corpus, fitted, fmt(split["r_split"]), fmt(split["r_3axis"]),
                         fmt(three[f"three_term_r_{fitted}"]),
                         fmt(three[f"three_term_log_var_ratio_{fitted}"]),
                         f"{fmt(cv['cv'])} [{fmt(cv['low'])}, {fmt(cv['high'])}]" if cv
                         else "n/a"])  # fmt: skip
    return Table(["encoder", "fitted", "r_split", "r_3axis", "three-term r",
                  "log Var(a)/Var(b)", "CV across heads [95%]"], rows,
                 "last checkpoint, first held-out window; mean over heads. The three-term fit "
                 "a[i-j] + b[j] + c[i] of arXiv 2602.20449 (its CV interval by their formula)")


def build(inputs: ReportInputs) -> list[Section]:
    encoder = inputs.records["encoder"]
    cfg = need(encoder["text"], "config", "encoder")
    masks = sorted({m for r in encoder.values() for m in r["final_analysis"]["masks"]})
    text = [
        f"A EuroBERT encoder, Llama's blocks attending both ways ({cfg['layers']} layers, "
        f"d_model {cfg['d_model']}, {cfg['heads']} heads, RoPE base "
        f"{encoder['text']['runs'][0]['rope_base']:g}), trained here for {cfg['steps']} steps on "
        "masked bytes (15% of them) of the report's text and of the 24 bundled UniProtKB "
        "proteins (ropesplit train --task mlm). Every statistic is over the pairs the "
        f"attention lets through ({'; '.join(masks)}). One seed: no verdict (a verdict needs "
        "3 seeds as units); figure 22 draws each checkpoint beside the causal model's.",
        "The three-term fit of the protein-model paper sits beside the split on the same "
        "heads. Its positional term a holds no query, unlike f(q, i-j); on the logits its r "
        "is r_3axis on the same pairs.",
    ]
    claims = Table(["claim", "on an encoder", "why"], [list(row) for row in CARRY_OVER],
                   "docs/theory.md section 9")  # fmt: skip
    return [Section("Attention both ways: encoders trained here", text,
                    [_runs_table(encoder), _three_term_table(encoder), claims],
                    figures=inputs.figures_named(SECTION.figures), anchor=SECTION.anchor)]


SECTION = SectionSpec("both-ways", ("encoder",), build, ("bothways",))
