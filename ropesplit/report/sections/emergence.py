r"""Training: the split's pattern watched as it forms (``ropesplit train``).

Reads ``train.json``, the record of the report's ``train`` stage
(:mod:`ropesplit.report.training`: the small Llama of
:mod:`ropesplit.empirical.training.train` trained at two RoPE bases), and shows
figures 11 and 12, drawn from the same record. This section states the
theory's prediction, then per base the random init, its control and the last
checkpoint with bootstrap intervals over heads, then the verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropesplit.numerics.statistics import names
from ropesplit.report.document import Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec, need

__all__ = ["SECTION", "ci_cell", "verdict_table"]

_STATS = names("training")  # the statistics training watches (numerics.statistics)


def ci_cell(summary: Mapping[str, Any], name: str) -> str:
    value = summary[name]
    if "low" not in value:
        return "n/a"
    return f"{fmt(value['mean'])} [{fmt(value['low'])}, {fmt(value['high'])}]"


def verdict_table(verdicts: Mapping[str, Mapping[str, Any]]) -> Table:
    """One row per prediction of a ``ropesplit train --json`` record's ``verdict``: its paired
    difference, the mean with its t interval over seeds, and the verdict."""
    rows = [[name, v["what"], fmt(v.get("mean")), f"[{fmt(v.get('low'))}, {fmt(v.get('high'))}]",
             str(v["seeds"]), v["verdict"]] for name, v in verdicts.items()]  # fmt: skip
    return Table(["test", "paired difference", "mean", "95% t interval", "seeds", "verdict"],
                 rows, "each training seed one unit (paired across bases or init vs final); a "
                 "verdict needs 3 seeds")  # fmt: skip


def build(inputs: ReportInputs) -> list[Section]:
    record = inputs.records["train"]
    runs = need(record, "runs", "train")
    cfg = need(record, "config", "train")
    entropy = float(need(record, "unigram_entropy", "train"))
    pred = record.get("prediction", {})
    text = [
        f"A Llama with {cfg['layers']} layers, d_model {cfg['d_model']} and {cfg['heads']} heads "
        f"trained here on bytes of the default text for {cfg['steps']} steps of "
        f"{cfg['batch']} x {cfg['seq_len']} tokens (L_train = {cfg['seq_len']}), measured on "
        "held-out text at log-spaced checkpoints; step 0 is the random initialisation and the "
        "control a second random initialisation of the same config. Values: mean over heads "
        "[95% bootstrap interval over heads].",
    ]
    if "statement" in pred:
        text.append("Prediction, computed before training: " + pred["statement"])
    columns = ["base", "checkpoint", "val_loss", *_STATS]
    rows = []
    for run in runs:
        first, last = run["checkpoints"][0], run["checkpoints"][-1]
        for label, c in (("init (step 0)", first), ("control", run["control"]),
                         (f"step {last['step']}", last)):  # fmt: skip
            rows.append([f"{run['rope_base']:g} (seed {run['seed']})", label, fmt(c["val_loss"]),
                         *(ci_cell(c["summary"], s) for s in _STATS)])  # fmt: skip
        loss = last["val_loss"]  # null in the JSON when it was not a number
        below = "below" if loss is not None and loss < entropy else "NOT below"
        text.append(f"Base {run['rope_base']:g}, seed {run['seed']}: final validation loss "
                    f"{fmt(last['val_loss'])} nats/byte, {below} the corpus's unigram entropy "
                    f"{fmt(entropy)}.")  # fmt: skip
    tables = [Table(columns, rows, "random init, its control, and the last checkpoint per run")]
    if "verdict" in record:
        tables.append(verdict_table(record["verdict"]))
    text.append("Figures 11 and 12 show every checkpoint.")
    return [Section("Training: the pattern as it forms", text, tables,
                    figures=inputs.figures_named(SECTION.figures), anchor=SECTION.anchor)]


SECTION = SectionSpec("training", ("train",), build, ("emergence", "emergence_pairs"))
