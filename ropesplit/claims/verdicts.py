r"""Each claim's verdict from its pre-registered primary test (:mod:`.registry`), per cell.

A run hands over per-unit rows (one dict per passage, with ``corpus``,
``control_seed`` and ``cells``: each grid cell's statistics and nulls);
:func:`evaluate` applies one :class:`~ropesplit.claims.registry.PrimaryTest` to them
in one cell of :data:`~ropesplit.claims.registry.GRID`:

.. math::
    x_u = \text{statistic}_u \quad(\texttt{level}),\qquad
    x_u = \text{statistic}_u - \text{null}_u \quad(\texttt{paired}),\qquad
    \bar x \pm t_{0.975,\,n-1}\, s_x/\sqrt n

over passages, or, for a twin-paired condition, over the twin seeds (a
seed's :math:`x` is the mean paired difference over its passages), where the
trained model is one draw against the twins and the interval is the one for
one more unit, :math:`\bar x \pm t_{0.975,n-1}\, s_x\sqrt{1 + 1/n}`
(``numerics.intervals.prediction_interval``). One decision per condition against its threshold,
then :func:`graded_verdict` (the vocabulary of ``ropesplit.claims.registry.VERDICTS``:
a failed condition with the paper's threshold disagrees, one with the
toolkit's makes the claim weaker than the paper); a failed ``gate`` (the
positive control) or fewer than ``min_n`` units makes it inconclusive. Null
statistics are summarised beside the primary; secondary statistics are
tested one-sided and Holm-corrected within the claim (shown, never deciding).

:func:`evaluate_grid` evaluates a claim in every cell of the axes it depends
on and :func:`robustness` says whether the verdict survives them: *robust*
when every cell gives the same verdict, else *fragile*, naming the cells of
each verdict. Every number of the record can be recomputed from the rows it
carries.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ropesplit.claims.registry import (
    CLAIMS,
    GRID,
    LEVEL,
    MIN_SEEDS,
    VERDICTS,
    Condition,
    PrimaryTest,
    Secondary,
    cell_key,
)
from ropesplit.claims.text import condition_label
from ropesplit.numerics.intervals import (
    Outcome,
    UnitInterval,
    decide,
    holm,
    one_sided_p,
    prediction_interval,
    t_interval,
)

__all__ = [
    "default_cell",
    "evaluate",
    "evaluate_all",
    "evaluate_grid",
    "graded_verdict",
    "grid_cells",
    "robustness",
    "unit_values",
]

Row = Mapping[str, Any]
Rule = Callable[[Sequence[Mapping[str, Any]]], tuple[str, str]]
def default_cell(tokens: int, corpus: str = "pydoc") -> dict[str, Any]:
    """The headline cell: every axis at its default, ``tokens`` and ``corpus`` as run."""
    return {a.name: a.default for a in GRID} | {"tokens": int(tokens), "corpus": corpus}


def grid_cells(test: PrimaryTest, values: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every cell of the axes ``test`` depends on, over the axis ``values`` a run measured
    (an axis without values there: every value the registry gives it), in the order of
    :data:`GRID`."""
    axes = [a for a in GRID if a.name in test.axes]
    choices = [list(values.get(a.name, a.values)) for a in axes]
    return [dict(zip((a.name for a in axes), combo, strict=True))
            for combo in itertools.product(*choices)]  # fmt: skip


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def _cells(row: Row, key: str) -> Mapping[str, Any]:
    cells = row.get("cells")
    if cells is None:  # a row of plain statistics (one cell): the row itself
        return row
    return cells.get(key, {})


def unit_values(
    rows: Sequence[Row],
    condition: Condition | Secondary,
    cell: Mapping[str, Any] | None = None,
    source: str = "passages",
) -> np.ndarray:
    """Per-unit values of a condition in ``cell``, ``(n,)`` float64: the statistic
    (``level``) or statistic minus null (``paired``) per passage, or, with
    ``unit="seeds"``, each twin seed's mean of the per-passage values (units where
    either is undefined left out; a passage with an undefined value is left out of
    its seed's mean)."""
    key = cell_key(cell or {}, source)
    got = [_cells(r, key) for r in rows]
    for name in (condition.measure, condition.null):
        if name is not None and any(c and name not in c for c in got):  # a name, not a NaN
            raise KeyError(f"measure {name!r} is not in the {source} rows' cell {key}")
    x = np.array([_number(c.get(condition.measure)) for c in got], dtype=np.float64)
    if condition.compare == "paired":
        if condition.null is None:
            raise ValueError(f"paired condition on {condition.measure} names no null")
        x = x - np.array([_number(c.get(condition.null)) for c in got], dtype=np.float64)
    elif condition.compare != "level":
        raise ValueError(f"compare must be 'level' or 'paired', got {condition.compare!r}")
    if condition.unit == "seeds":
        seeds = np.array([int(r.get("control_seed", -1)) for r in rows])
        keep = np.isfinite(x)
        x = np.array([x[keep & (seeds == s)].mean() for s in sorted(set(seeds[keep].tolist()))])
    elif condition.unit != "passages":
        raise ValueError(f"unit must be 'passages' or 'seeds', got {condition.unit!r}")
    return x[np.isfinite(x)]


def _interval(values: np.ndarray, unit: str) -> UnitInterval:
    """Passages: the t interval of the mean. Twin seeds: the interval for one trained model
    against them (``intervals.prediction_interval``)."""
    if unit == "seeds":
        return prediction_interval(values, level=LEVEL, unit=unit)
    return t_interval(values, level=LEVEL, unit=unit)


def _one_sided_p(values: np.ndarray, threshold: float, direction: str, unit: str) -> float:
    """The one-sided p-value matching :func:`_interval` (the prediction form for seeds)."""
    return one_sided_p(values, threshold, direction, prediction=unit == "seeds")


def _min_n(c: Condition | Secondary, test: PrimaryTest) -> int:
    return MIN_SEEDS if c.unit == "seeds" else test.min_n


def _condition(rows: Sequence[Row], c: Condition, test: PrimaryTest, cell: Mapping[str, Any]
               ) -> dict[str, Any]:  # fmt: skip
    values = unit_values(rows, c, cell, test.source)
    entry: dict[str, Any] = {**c.as_dict(), "why": c.why, "origin": c.origin, "quote": c.quote,
                             "n": int(values.size), "min_n": _min_n(c, test)}  # fmt: skip
    if values.size < 2:
        decision = Outcome("inconclusive", f"too few replicates: n={values.size} {c.unit}, "
                            f"minimum {_min_n(c, test)}")  # fmt: skip
        entry |= {"interval": None}
    else:
        interval = _interval(values, c.unit)
        decision = decide(interval, c.threshold, c.direction, min_n=_min_n(c, test),
                          what=condition_label(c))  # fmt: skip
        entry |= {"interval": interval.as_dict(), "margin": margin(interval, c.threshold)}
    return entry | {"outcome": decision.outcome, "reason": decision.reason}


def margin(interval: Any, threshold: float) -> float:
    """How far a condition's numbers must move before its decision changes: the distance from
    ``threshold`` to the interval's nearest end (docs/architecture.md, the numeric contract:
    records agree to 1e-9, so a margin above that cannot flip)."""
    return float(min(abs(interval.low - threshold), abs(interval.high - threshold)))


def graded_verdict(conditions: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """The verdict of the ``conditions`` (each with ``outcome``, ``origin``, ``reason``):
    ``ropesplit.claims.registry.VERDICTS``, in that order of precedence, with the reason."""
    failed = [c for c in conditions if c["outcome"] == "disagrees"]
    paper = [c for c in failed if c["origin"] == "paper"]
    if paper:
        return "disagrees", "; ".join(f"{c['reason']} (the paper's threshold)" for c in paper)
    if failed:
        return "weaker than the paper", "; ".join(f"{c['reason']} (the toolkit's threshold)"
                                                  for c in failed)  # fmt: skip
    if conditions and all(c["outcome"] == "agrees" for c in conditions):
        return "agrees", "every condition holds: " + "; ".join(c["reason"] for c in conditions)
    open_ = [c for c in conditions if c["outcome"] != "agrees"]
    return "inconclusive", "; ".join(c["reason"] for c in open_) or "no condition"


def _null(rows: Sequence[Row], key: str, test: PrimaryTest, cell: Mapping[str, Any]
          ) -> dict[str, Any]:  # fmt: skip
    k = cell_key(cell, test.source)
    values = np.array([_number(_cells(r, k).get(key)) for r in rows], dtype=np.float64)
    values = values[np.isfinite(values)]
    interval = t_interval(values, level=LEVEL, unit="passages") if values.size >= 2 else None
    return {"measure": key, "n": int(values.size),
            "interval": None if interval is None else interval.as_dict()}  # fmt: skip


def _secondaries(rows: Sequence[Row], test: PrimaryTest, cell: Mapping[str, Any]
                 ) -> list[dict[str, Any]]:  # fmt: skip
    out, pvalues = [], []
    for s in test.secondary:
        values = unit_values(rows, s, cell, test.source)
        usable = values.size >= 2 and float(np.std(values)) > 0
        p = _one_sided_p(values, s.threshold, s.direction, s.unit) if usable else math.nan
        interval = _interval(values, s.unit) if values.size >= 2 else None
        out.append({**s.as_dict(), "what": s.what, "n": int(values.size), "p": p,
                    "interval": None if interval is None else interval.as_dict()})  # fmt: skip
        pvalues.append(p)
    finite = [k for k, p in enumerate(pvalues) if math.isfinite(p)]
    adjusted = holm([pvalues[k] for k in finite]) if finite else []
    for entry in out:
        entry["p_holm"] = math.nan
    for k, p in zip(finite, adjusted, strict=True):
        out[k]["p_holm"] = float(p)
    return out


def _rows_of(rows: Sequence[Row], cell: Mapping[str, Any]) -> list[Row]:
    """The rows of ``cell``'s corpus (rows naming no corpus belong to every cell)."""
    corpus = cell.get("corpus")
    return [r for r in rows if corpus is None or r.get("corpus", corpus) == corpus]


def evaluate(test: PrimaryTest, rows: Sequence[Row], cell: Mapping[str, Any] | None = None,
             *, rule: Rule = graded_verdict) -> dict[str, Any]:  # fmt: skip
    """The claim's record in ``cell`` (default: the default cell at the rows' own values):
    primary conditions, gate, nulls, secondaries, verdict and reason."""
    cell = dict(cell or {})
    mine = _rows_of(rows, cell)
    conditions = [_condition(mine, c, test, cell) for c in test.conditions]
    outcome, reason = rule(conditions)
    gate = _condition(mine, test.gate, test, cell) if test.gate is not None else None
    if gate is not None and gate["outcome"] != "agrees":
        outcome = "inconclusive"
        reason = f"the positive control did not pass ({gate['reason']}); {reason}"
    units = [c["n"] for c in conditions if c["unit"] == test.unit]
    return {
        "claim": test.claim,
        "statement": test.statement,
        "prediction": test.prediction,
        "statistic": test.statistic,
        "cell": cell,
        "unit": test.unit,
        "n": min(units, default=0),
        "min_n": test.min_n,
        "conditions": conditions,
        "gate": gate,
        "nulls": [_null(mine, key, test, cell) for key in test.nulls],
        "secondary": _secondaries(mine, test, cell),
        "verdict": outcome,
        "reason": reason,
    }


def _product(cells: Sequence[Mapping[str, Any]], everything: Sequence[Mapping[str, Any]]
             ) -> str | None:  # fmt: skip
    """``cells`` named by the axis values they restrict (``"tokens=256, heads=pooled"``) when
    they are every combination of those values; None when they are not."""
    names = list(everything[0]) if everything else []
    spans = {n: sorted({str(c[n]) for c in cells}) for n in names}
    full = {n: sorted({str(c[n]) for c in everything}) for n in names}
    if math.prod(len(v) for v in spans.values()) != len(cells):
        return None
    return ", ".join(f"{n}={'/'.join(spans[n])}" for n in names if spans[n] != full[n]) or "all"


def _by_axis(cells: Sequence[Mapping[str, Any]], order: Sequence[str]) -> str:
    """Per axis that varies, each verdict's count at each of its values, and the values
    where a single verdict holds: ``"heads mean/pooled: agrees 10/24, ... of 24 each"``."""
    names = list(cells[0]["cell"]) if cells else []
    parts, pure = [], []
    for name in names:
        values = list(dict.fromkeys(str(c["cell"][name]) for c in cells))
        if len(values) < 2:
            continue
        mine = {v: [c["verdict"] for c in cells if str(c["cell"][name]) == v] for v in values}
        counts = ", ".join(f"{verdict} " + "/".join(str(mine[v].count(verdict)) for v in values)
                           for verdict in order)  # fmt: skip
        sizes = {len(x) for x in mine.values()}
        size = f"of {sizes.pop()} each" if len(sizes) == 1 else "of " + "/".join(
            str(len(mine[v])) for v in values)
        parts.append(f"by {name} {'/'.join(values)}: {counts} {size}")
        pure += [f"{mine[v][0]} wherever {name}={v}" for v in values if len(set(mine[v])) == 1]
    return "; ".join(pure + parts)


def _describe(groups: Mapping[str, Sequence[Mapping[str, Any]]],
              everything: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:  # fmt: skip
    """A few words per verdict naming its cells: the axis values they restrict where they are
    a product, "the other cells" where every other verdict's are; None when neither holds
    (then :func:`robustness` counts the verdicts by axis)."""
    named = {v: _product(cells, everything) for v, cells in groups.items()}
    out: dict[str, str] = {}
    for v in groups:
        name = named[v]
        if name is not None:
            out[v] = name
        elif all(named[o] is not None for o in groups if o != v):
            out[v] = "the other cells"
        else:
            return None
    return out


def robustness(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``robust`` when every evaluated cell (``{"cell", "verdict"}``) has one verdict, else
    ``fragile``, with a statement naming the cells of each verdict (independent of which
    cell is the headline, so runs of one grid say the same) and its ``line``: the statement
    itself where it is one line, else the most common verdict's count ("fragile: agrees in
    22 of 32 cells"; the first of equals in :data:`VERDICTS`' order)."""
    verdicts = [c["verdict"] for c in cells]
    if not cells:
        none = "no cell was evaluated"
        return {"robustness": "fragile", "statement": none, "line": none, "n_cells": 0}
    if len(set(verdicts)) == 1:
        robust = f"robust: {verdicts[0]} in all {len(cells)} cells"
        return {"robustness": "robust", "n_cells": len(cells), "statement": robust,
                "line": robust}  # fmt: skip
    order = [v for v in VERDICTS if v in verdicts]
    groups = {v: [c["cell"] for c in cells if c["verdict"] == v] for v in order}
    top = max(order, key=lambda v: len(groups[v]))  # the first of the most common
    line = f"fragile: {top} in {len(groups[top])} of {len(cells)} cells"
    words = _describe(groups, [c["cell"] for c in cells])
    if words is not None:
        statement = "; ".join(f"{v} in {len(groups[v])} of {len(cells)} ({words[v]})"
                              for v in order)  # fmt: skip
    else:
        statement = (", ".join(f"{v} in {len(groups[v])}" for v in order) + f" of {len(cells)}"
                     f" cells; {_by_axis(cells, order)}")  # fmt: skip
    return {"robustness": "fragile", "n_cells": len(cells), "statement": "fragile: " + statement,
            "line": line}  # fmt: skip


def _estimate(claim: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first primary condition's interval: the claim's estimate in a cell."""
    first = claim["conditions"][0] if claim["conditions"] else None
    return None if first is None else first["interval"]


def evaluate_grid(test: PrimaryTest, rows: Sequence[Row], values: Mapping[str, Sequence[Any]],
                  *, rule: Rule = graded_verdict) -> dict[str, Any]:  # fmt: skip
    """Every cell of ``test`` over the axis ``values`` measured: each cell's verdict and
    estimate (its first condition's interval), and :func:`robustness` over them."""
    cells = []
    for cell in grid_cells(test, values):
        record = evaluate(test, rows, cell, rule=rule)
        cells.append({"cell": cell, "verdict": record["verdict"], "estimate": _estimate(record),
                      "n": record["n"]})  # fmt: skip
    return {"claim": test.claim, "axes": list(test.axes), "cells": cells,
            **robustness(cells)}  # fmt: skip


def evaluate_all(rows_by_source: Mapping[str, Sequence[Row]],
                 cell: Mapping[str, Any] | None = None, *, rule: Rule = graded_verdict,
                 ) -> list[dict[str, Any]]:  # fmt: skip
    """Every claim of :data:`~ropesplit.claims.registry.CLAIMS` in ``cell`` on the rows of its
    ``source`` (a source not run gives the claim no units: inconclusive, too few replicates)."""
    return [evaluate(test, rows_by_source.get(test.source, []), cell, rule=rule)
            for test in CLAIMS]  # fmt: skip
