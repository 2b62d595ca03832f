r"""Each claim's verdict from its pre-registered primary test (``ropesplit.claims``).

A run hands over per-unit rows (one dict per passage: the primary
statistics, their nulls); :func:`evaluate` applies one
:class:`~ropesplit.claims.PrimaryTest` to them:

.. math::
    x_u = \text{statistic}_u \quad(\texttt{level}),\qquad
    x_u = \text{statistic}_u - \text{null}_u \quad(\texttt{paired}),\qquad
    \bar x \pm t_{0.975,\,n-1}\, s_x/\sqrt n

(``numerics.intervals``), one decision per condition against its threshold,
then the intersection-union test over the conditions; a failed ``gate``
(the positive control) makes the verdict inconclusive; fewer than ``min_n``
units, inconclusive too. Null statistics are summarised beside the primary
with their own intervals; secondary statistics are tested one-sided and
Holm-corrected within the claim (shown, never deciding).

Every number of the record can be recomputed from the rows it carries:
``units`` lists each unit's values of every key the test reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from ropesplit.numerics.intervals import (
    Decision,
    decide,
    holm,
    intersection_union,
    one_sided_p,
    t_interval,
)

from ropesplit.claims import CLAIMS, LEVEL, Condition, PrimaryTest, Secondary

__all__ = ["evaluate", "evaluate_all", "unit_values"]

Row = Mapping[str, Any]


def unit_values(rows: Sequence[Row], condition: Condition | Secondary) -> np.ndarray:
    """Per-unit values of a condition: the statistic (``level``) or statistic minus null
    (``paired``), ``(n,)`` float64, units where either is undefined left out."""
    x = np.array([_number(r.get(condition.measure)) for r in rows], dtype=np.float64)
    if condition.compare == "paired":
        if condition.null is None:
            raise ValueError(f"paired condition on {condition.measure} names no null")
        x = x - np.array([_number(r.get(condition.null)) for r in rows], dtype=np.float64)
    elif condition.compare != "level":
        raise ValueError(f"compare must be 'level' or 'paired', got {condition.compare!r}")
    return x[np.isfinite(x)]


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _label(c: Condition | Secondary) -> str:
    return c.measure if c.compare == "level" else f"{c.measure} - {c.null}"


def _condition(rows: Sequence[Row], c: Condition, test: PrimaryTest) -> dict[str, Any]:
    values = unit_values(rows, c)
    entry: dict[str, Any] = {"measure": c.measure, "compare": c.compare, "null": c.null,
                             "direction": c.direction, "threshold": c.threshold, "why": c.why,
                             "n": int(values.size)}  # fmt: skip
    if values.size < 2:
        decision = Decision("inconclusive", f"too few replicates: n={values.size} {test.unit}, "
                            f"minimum {test.min_n}")  # fmt: skip
        entry |= {"interval": None}
    else:
        interval = t_interval(values, level=LEVEL, unit=test.unit)
        decision = decide(interval, c.threshold, c.direction, min_n=test.min_n, what=_label(c))
        entry |= {"interval": interval.as_dict()}
    return entry | {"outcome": decision.outcome, "reason": decision.reason}


def _null(rows: Sequence[Row], key: str, test: PrimaryTest) -> dict[str, Any]:
    values = np.array([_number(r.get(key)) for r in rows], dtype=np.float64)
    values = values[np.isfinite(values)]
    interval = t_interval(values, level=LEVEL, unit=test.unit) if values.size >= 2 else None
    return {"measure": key, "n": int(values.size),
            "interval": None if interval is None else interval.as_dict()}  # fmt: skip


def _secondaries(rows: Sequence[Row], test: PrimaryTest) -> list[dict[str, Any]]:
    out, pvalues = [], []
    for s in test.secondary:
        values = unit_values(rows, s)
        usable = values.size >= 2 and float(np.std(values)) > 0
        p = one_sided_p(values, s.threshold, s.direction) if usable else math.nan
        interval = t_interval(values, level=LEVEL, unit=test.unit) if values.size >= 2 else None
        out.append({"measure": s.measure, "compare": s.compare, "null": s.null,
                    "direction": s.direction, "threshold": s.threshold, "what": s.what,
                    "n": int(values.size), "p": p,
                    "interval": None if interval is None else interval.as_dict()})  # fmt: skip
        pvalues.append(p)
    finite = [k for k, p in enumerate(pvalues) if math.isfinite(p)]
    adjusted = holm([pvalues[k] for k in finite]) if finite else []
    for entry in out:
        entry["p_holm"] = math.nan
    for k, p in zip(finite, adjusted, strict=True):
        out[k]["p_holm"] = float(p)
    return out


def evaluate(test: PrimaryTest, rows: Sequence[Row]) -> dict[str, Any]:
    """The claim's record: primary conditions, gate, nulls, secondaries, verdict and reason."""
    conditions = [_condition(rows, c, test) for c in test.conditions]
    verdict = intersection_union(
        [Decision(c["outcome"], c["reason"]) for c in conditions], f"claim {test.claim}"
    )
    outcome, reason = verdict.outcome, verdict.reason
    gate = _condition(rows, test.gate, test) if test.gate is not None else None
    if gate is not None and gate["outcome"] != "agrees":
        outcome = "inconclusive"
        reason = f"the positive control did not pass ({gate['reason']}); {reason}"
    return {
        "claim": test.claim,
        "statement": test.statement,
        "prediction": test.prediction,
        "statistic": test.statistic,
        "split": test.split,
        "unit": test.unit,
        "n": min((c["n"] for c in conditions), default=0),
        "min_n": test.min_n,
        "conditions": conditions,
        "gate": gate,
        "nulls": [_null(rows, key, test) for key in test.nulls],
        "secondary": _secondaries(rows, test),
        "verdict": outcome,
        "reason": reason,
    }


def evaluate_all(rows_by_source: Mapping[str, Sequence[Row]]) -> list[dict[str, Any]]:
    """Every claim of :data:`~ropesplit.claims.CLAIMS` on the rows of its ``source``
    (a source not run gives the claim no units: inconclusive, too few replicates)."""
    return [evaluate(test, rows_by_source.get(test.source, [])) for test in CLAIMS]
