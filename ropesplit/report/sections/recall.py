r"""Associative recall: a task where the pattern must appear.

Reads ``recall.json``, the record of the report's ``recall`` stage
(:func:`ropesplit.report.training.recall_stage`: ``ropesplit train --task
recall`` at two RoPE bases over three seeds). States the predictions made
before training, then per base the answers' accuracy (all and by distance)
and the retrieval head at init and at the end, mean over seeds, then each
prediction's verdict with the seed as the unit; figures 17 and 18. The
finding is stated whichever way the verdicts come out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ropesplit.report.document import Details, Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec, need
from ropesplit.report.sections.emergence import verdict_table

__all__ = ["SECTION"]

_HEAD = ("retrieval", "r_split", "weighted_slow_share")


def _mean(values: Sequence[Any]) -> float:
    """The mean of the values that are numbers (null in the JSON: left out); NaN if none."""
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else float("nan")


def _at(run: Mapping[str, Any], index: int, name: str) -> Any:
    """Statistic ``name`` of the final retrieval head at checkpoint ``index``."""
    best = run["checkpoints"][-1]["retrieval_head"]
    head = next(h for h in run["checkpoints"][index]["heads"]
                if (h["layer"], h["head"]) == (best["layer"], best["head"]))  # fmt: skip
    return head.get(name)


def build(inputs: ReportInputs) -> list[Section]:
    record = inputs.records["recall"]
    runs = need(record, "runs", "recall")
    cfg = need(record, "config", "recall")
    pred = record.get("prediction", {})
    verdict = record.get("verdict", {})
    chance = float(need(record, "unigram_entropy", "recall"))
    text = [
        f"A Llama with {cfg['layers']} layers, d_model {cfg['d_model']} and {cfg['heads']} heads "
        f"trained here on associative recall (ropesplit train --task recall; docs/train.md): "
        f"a store of key-value pairs, one token each, then queries whose key sits 8 to "
        f"{cfg['seq_len']} tokens back, so only matching the key's content finds the answer. "
        f"{cfg['steps']} steps of {cfg['batch']} x {cfg['seq_len']} tokens, "
        f"{len({r['seed'] for r in runs})} seeds per base; the answers' entropy (chance) is "
        f"{fmt(chance)} nats.",
    ]
    if "statement" in pred:
        text.append("Prediction, computed before training: " + pred["statement"])
    rows = []
    for base in dict.fromkeys(float(r["rope_base"]) for r in runs):
        mine = [r for r in runs if float(r["rope_base"]) == base]
        last = [r["checkpoints"][-1] for r in mine]
        accuracy = fmt(_mean([c["accuracy"] for c in last]))
        buckets = [_mean(column) for column in zip(*(c["accuracy_by_distance"] for c in last),
                                                   strict=True)]  # fmt: skip  # over seeds
        edges = last[0].get("distance_edges", [])
        rows.append([
            f"{base:g}", accuracy,
            ", ".join(fmt(x) for x in buckets),
            *(f"{fmt(_mean([_at(r, 0, s) for r in mine]))} -> "
              f"{fmt(_mean([_at(r, -1, s) for r in mine]))}" for s in _HEAD),
        ])  # fmt: skip
        text.append(f"Base {base:g}: final accuracy {accuracy} "
                    f"(distance bucket edges {', '.join(f'{e:g}' for e in edges)}).")  # fmt: skip
    table = Table(["base", "accuracy", "accuracy by distance, near to far",
                   "retrieval score init -> final", "r_split init -> final",
                   "weighted slow share init -> final"], rows,
                  "mean over seeds; the retrieval head is each run's final one")  # fmt: skip
    agree = [name for name, v in verdict.items() if v["verdict"] == "agrees"]
    others = [f"{name} {v['verdict']}" for name, v in verdict.items() if name not in agree]
    text.append("Finding: " + (f"{len(agree)} of {len(verdict)} predictions agree"
                               if verdict else "no verdicts (fewer than 3 seeds)")
                + (f" ({', '.join(agree)})" if agree else "")
                + (f"; {', '.join(others)}." if others else "."))  # fmt: skip
    details = [Details("Each prediction's paired test over seeds",
                       tables=[verdict_table(verdict)])]
    return [Section("Associative recall: where the pattern must appear", text, [table],
                    figures=inputs.figures_named(SECTION.figures), anchor=SECTION.anchor,
                    details=details)]  # fmt: skip


SECTION = SectionSpec("recall", ("recall",), build, ("recall_emergence", "recall_pairs"))
