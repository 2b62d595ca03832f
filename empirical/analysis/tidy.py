r"""Tidy tables of results: one row per head (or setting), one column per statistic.

The records are the JSON of ``ropesplit analyze --json`` (docs/theory.md section 5
statistics per head, with the random-init control) and of ``ropesplit perturb
--json`` (docs/theory.md section 4 experiments). :func:`tidy` turns one into a
table, with everything that is not a row (model, tokens, seed, summary,
prediction, verdict, ...) attached as metadata:

- a ``pandas.DataFrame`` with the metadata in ``DataFrame.attrs`` where pandas
  is installed (the optional extra ``ropesplit[tidy]``);
- otherwise :class:`Records`, a list of flat ``dict`` rows with ``.attrs``.

An experiment's metadata holds the record's ``header`` and, under
``about``, the experiment's title, prediction and verdict.

The table round-trips through JSON: :func:`to_json` writes the record it came
from and :func:`from_json` reads any such record (or a ``--json`` file) back
into the same table. No statistic is computed here.

    >>> table = tidy(analysis_record)                           # doctest: +SKIP
    >>> table.groupby(["run", "layer"])["r_split"].mean()       # doctest: +SKIP
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.statistics import names

__all__ = ["Records", "experiment_names", "from_json", "long", "tidy", "to_json", "untidy"]

RUN = "run"  # the column that tells a model's rows from its control's
TRAINED, CONTROL = "trained", "control"


class Records(list):  # type: ignore[type-arg]
    """A tidy table without pandas: flat ``dict`` rows, the run's metadata in ``attrs``."""

    def __init__(self, rows: Any = (), attrs: Mapping[str, Any] | None = None) -> None:
        super().__init__(rows)
        self.attrs: dict[str, Any] = dict(attrs or {})

    @property
    def columns(self) -> list[str]:
        """Every column name, in first-seen order."""
        seen: dict[str, None] = {}
        for row in self:
            seen |= dict.fromkeys(row)
        return list(seen)


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:  # the optional extra is not installed
        return None
    return pandas


def _as_record(result: Any) -> dict[str, Any]:
    """A record dict from a record, an ``Analysis``, or a path to its JSON."""
    if isinstance(result, str | Path):
        from ropesplit.core.io import read_json

        result = read_json(result, "result file")
    elif hasattr(result, "to_dict") and not isinstance(result, Mapping):
        result = result.to_dict()
    if not isinstance(result, Mapping):
        raise RopesplitError(
            f"result must be an analysis or experiment record, got {type(result).__name__}"
        )
    return dict(result)


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(r, Mapping) for r in value)


def experiment_names(record: Mapping[str, Any]) -> list[str]:
    """The experiments a ``perturb`` record holds rows for, in record order."""
    return [k for k, v in record.items() if k not in ("header", "experiments") and _is_rows(v)]


def _kind(record: Mapping[str, Any]) -> str:
    if "heads" in record:
        return "analysis"
    if "header" in record:
        return "experiments"
    raise RopesplitError(
        f"record is neither an analysis (heads) nor an experiment record (header); "
        f"keys: {', '.join(map(str, record)) or 'none'}"
    )


def _table(rows: list[dict[str, Any]], attrs: dict[str, Any], frame: bool | None) -> Any:
    pandas = _pandas() if frame is not False else None
    if frame and pandas is None:
        raise RopesplitError("pandas is not installed: pip install 'ropesplit[tidy]'")
    if pandas is None:
        return Records(rows, attrs)
    table = pandas.DataFrame.from_records(rows)
    table.attrs = attrs
    return table


def tidy(result: Any, experiment: str | None = None, *, frame: bool | None = None) -> Any:
    r"""The tidy table of one result, its metadata attached.

    ``result`` is an analysis record (``ropesplit analyze --json``, or an
    ``Analysis``), an experiment record (``ropesplit perturb --json``) or the
    path of either's JSON. An analysis gives one row per (run, layer, head),
    ``run`` being ``"trained"`` or ``"control"``; an experiment record gives
    the rows of ``experiment`` (needed when the record holds several).
    ``frame``: ``None`` a ``DataFrame`` where pandas is installed, else
    :class:`Records`; ``True``/``False`` to insist on one.
    """
    record = _as_record(result)
    attrs = copy.deepcopy(record)
    if _kind(record) == "analysis":
        if experiment is not None:
            raise RopesplitError(f"an analysis record has no experiments, got {experiment!r}")
        rows = [{RUN: TRAINED, **_flat(row)} for row in attrs.pop("heads")]
        control = attrs.get("control")
        if isinstance(control, dict) and "heads" in control:
            rows += [{RUN: CONTROL, **_flat(row)} for row in control.pop("heads")]
        attrs["result"] = "analysis"
        return _table(rows, attrs, frame)
    names = experiment_names(record)
    if experiment is None:
        if len(names) != 1:
            raise RopesplitError(
                f"experiment must be one of {', '.join(names) or '(none)'}, got None"
            )
        experiment = names[0]
    if experiment not in names:
        raise RopesplitError(
            f"experiment must be one of {', '.join(names) or '(none)'}, got {experiment!r}"
        )
    rows = [dict(row) for row in attrs.pop(experiment)]
    for other in names:  # the other experiments' rows are theirs, not metadata
        attrs.pop(other, None)
    about = attrs.pop("experiments", {}).get(experiment, {})  # title, prediction, verdict, ...
    attrs = {"result": "experiment", "experiment": experiment, "about": about, **attrs}
    return _table(rows, attrs, frame)


def _flat(row: Mapping[str, Any]) -> dict[str, Any]:
    """A head's row with ``by_reference`` as flat columns ``NAME[SPEC]`` (as the CSV has them)."""
    out = {k: v for k, v in row.items() if k != "by_reference"}
    for spec, stats in (row.get("by_reference") or {}).items():
        out |= {f"{name}[{spec}]": value for name, value in stats.items()}
    return out


def _nested(row: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`_flat`: ``NAME[SPEC]`` columns back into ``by_reference``."""
    out: dict[str, Any] = {}
    by: dict[str, dict[str, Any]] = {}
    for key, value in row.items():
        name, bracket, spec = key.partition("[")
        if bracket and spec.endswith("]"):
            by.setdefault(spec[:-1], {})[name] = value
        else:
            out[key] = value
    if by:
        out["by_reference"] = by
    return out


def long(result: Any, *, frame: bool | None = None) -> Any:
    r"""An analysis in long format: one row per (run, layer, head, reference, statistic).

    Columns ``run, layer, head, kv_head, reference, statistic, value``: the
    split statistics (and the pair moments) under every reference of
    ``by_reference``, the others once, with the reference of the row's
    columns for the tightness (which depends on it) and ``None`` for those
    that do not (``r_3axis``, ``lowfreq_share_k``, ``lowfreq_share_q``).
    """
    record = _as_record(result)
    if _kind(record) != "analysis":
        raise RopesplitError("long takes an analysis record (heads), not an experiment record")
    runs = [(TRAINED, record["heads"])]
    control = record.get("control")
    if isinstance(control, Mapping) and "heads" in control:
        runs.append((CONTROL, control["heads"]))
    rows: list[dict[str, Any]] = []
    for run, heads in runs:
        for head in heads:
            key = {RUN: run, "layer": head["layer"], "head": head["head"],
                   "kv_head": head.get("kv_head")}  # fmt: skip
            by = head.get("by_reference") or {}
            split = set().union(*(stats.keys() for stats in by.values())) if by else set()
            for name in names():
                if name in head and name not in split:
                    ref = head.get("reference") if name.startswith("tightness") else None
                    rows.append({**key, "reference": ref, "statistic": name, "value": head[name]})
            for spec, stats in by.items():
                rows += [{**key, "reference": spec, "statistic": name, "value": value}
                         for name, value in stats.items()]  # fmt: skip
    attrs = {k: v for k, v in record.items() if k not in ("heads", "control")}
    return _table(rows, {"result": "long", **attrs}, frame)


def _plain(value: Any) -> Any:
    """A JSON value from a table cell: numpy scalars to Python, NaN to null."""
    if hasattr(value, "item") and not isinstance(value, list | dict):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _rows(table: Any) -> list[dict[str, Any]]:
    if isinstance(table, Records):
        return [dict(row) for row in table]
    return [{k: _plain(v) for k, v in row.items()} for row in table.to_dict("records")]


def untidy(table: Any) -> dict[str, Any]:
    """The record a tidy table came from (the inverse of :func:`tidy`)."""
    attrs = copy.deepcopy(dict(table.attrs))
    kind = attrs.pop("result", None)
    rows = _rows(table)
    if kind == "analysis":
        split: dict[str, list[dict[str, Any]]] = {TRAINED: [], CONTROL: []}
        for row in rows:
            split[row.pop(RUN)].append(_nested(row))
        record = attrs
        if "control" in record:
            record["control"]["heads"] = split[CONTROL]
        # the rows go back where the record keeps them (before the summary)
        order = ["model", "tokens", "token_ids", "reconstruction_max_abs_diff"]
        head = {k: record.pop(k) for k in order if k in record}
        return {**head, "heads": split[TRAINED], **record}
    if kind == "experiment":
        name, about = attrs.pop("experiment"), attrs.pop("about")
        return {**attrs, "experiments": {name: about}, name: rows}
    raise RopesplitError(f"table has no ropesplit metadata (attrs['result'] is {kind!r})")


def to_json(table: Any, path: str | Path) -> Path:
    """Write the record behind ``table`` as JSON (read back by :func:`from_json`)."""
    from ropesplit.core.io import write_json

    return write_json(path, untidy(table))


def from_json(path: str | Path, experiment: str | None = None, *, frame: bool | None = None) -> Any:
    """The tidy table of a result's JSON file (``--json`` output or :func:`to_json`)."""
    return tidy(Path(path), experiment, frame=frame)
