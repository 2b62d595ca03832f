r"""Empirical: docs/theory.md section 5's statistics on every head, trained vs random init.

Per-layer means over heads and the model-wide row, all from ``analyze.json``.
The paper's mean ``r_split`` is compared once, in the claims table
(:mod:`.summary`), beside this model-wide mean: the paper gives no per-layer
values, so no layer row is compared with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ropesplit.numerics.statistics import names
from ropesplit.report.document import Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec, need

STATS = names("table")  # the per-layer table's statistics (numerics.statistics)


def _mean(values: Sequence[Any]) -> float:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(finite) / len(finite) if finite else math.nan


def per_layer(heads: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean of each statistic over the heads of each layer: ``{layer: {stat: mean}}``."""
    layers = sorted({int(h["layer"]) for h in heads})
    return {
        str(layer): {s: _mean([h.get(s) for h in heads if int(h["layer"]) == layer])
                     for s in STATS}
        for layer in layers
    }  # fmt: skip


def _validation(record: Mapping[str, Any]) -> str:
    parts = [f"probabilities to {fmt(record.get('reconstruction_max_abs_diff'))} (max abs)"]
    if record.get("logit_max_rel_diff") is not None:
        parts.insert(0, f"pre-softmax logits to {fmt(record['logit_max_rel_diff'])} of the logit "
                     f"scale {fmt(record.get('logit_scale'))}")  # fmt: skip
    return ", ".join(parts)


def _layers_and_subhead(analyze: Mapping[str, Any], control: Mapping[str, Any]) -> list[str]:
    """What a hybrid's or an MLA model's record adds: which layers the means pool, and the
    RoPE sub-head's numbers where the whole head is mostly coordinates no RoPE turns."""
    text = []
    skipped = analyze.get("layers_not_analysed") or []
    if skipped:
        kinds = ", ".join(f"{x['layer']} ({x['kind']})" for x in skipped)
        text.append(f"Layers analysed: {', '.join(map(str, analyze['layers_analysed']))}; not "
                    f"analysed: {kinds}. Every mean pools the analysed layers.")  # fmt: skip
    sub = analyze.get("summary_rope_subhead")
    if sub:
        theirs = (control.get("summary_rope_subhead") or {}) if control else {}
        cells = "; ".join(f"{name} {fmt(value)}" + (f" (control {fmt(theirs[name])})"
                                                    if name in theirs else "")
                          for name, value in sub.items())  # fmt: skip
        text.append("Multi-head latent attention: most of each head's coordinates carry no "
                    "position, so the whole-head r_split is high by construction "
                    "(docs/theory.md section 7). The informative numbers are the RoPE "
                    f"sub-head's: {cells}.")  # fmt: skip
    return text


def build(inputs: ReportInputs) -> list[Section]:
    analyze = inputs.records["analyze"]
    heads = need(analyze, "heads", "analyze")
    summary = need(analyze, "summary", "analyze")
    control = analyze.get("control") or {}
    trained_rows = per_layer(heads) | {"all heads": dict(summary)}
    control_rows = (per_layer(control["heads"]) | {"all heads": dict(control["summary"])}
                    if control else {})  # fmt: skip
    others = [s for s in STATS if s != "r_split"]
    columns = ["layer", "r_split", "r_split (control)", *others, "lowfreq_share_k (control)"]
    rows = [[label, fmt(values.get("r_split")), fmt(control_rows.get(label, {}).get("r_split")),
             *(fmt(values.get(s)) for s in others),
             fmt(control_rows.get(label, {}).get("lowfreq_share_k"))]
            for label, values in trained_rows.items()]  # fmt: skip
    text = [
        f"{analyze.get('model', 'model')}: {analyze.get('tokens')} tokens, {len(heads)} heads. "
        f"The capture's rebuild matches the model's own {_validation(analyze)}: the captured "
        "tensors reproduce this forward pass's attention (it checks the capture, not the theory).",
        f"Model-wide mean r_split {fmt(summary['r_split'])}"
        + (f", {fmt(control['summary']['r_split'])} for the random-init control" if control
           else "") + " (the paper's value is compared in the claims table at the top).",
        *_layers_and_subhead(analyze, control),
    ]  # fmt: skip
    return [Section("Empirical: the split on every head, trained vs random init", text,
                    [Table(columns, rows, "per-layer means over heads; last row: all heads")],
                    figures=inputs.figures_named(SECTION.figures),
                    anchor=SECTION.anchor)]  # fmt: skip


SECTION = SectionSpec("empirical", ("analyze",), build, ("decomposition", "r_split", "pair_energy"))
