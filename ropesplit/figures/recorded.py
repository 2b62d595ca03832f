r"""The gallery from a recorded run: each figure's data kept as JSON, and the figures drawn from it.

A figure is a pure function of its keyword arguments (what
:mod:`ropesplit.report.figure_data` builds), so the data one run drew from is all
a reader needs to redraw its figures. :func:`write_records` keeps that data,
one JSON record per figure (``NAME.json``), through :func:`ropesplit.core.io.write_json`;
:func:`read_records` gives it back exactly and :func:`draw_recorded` draws every
figure whose record exists. The gallery in ``docs/figures`` is drawn this way:

    .venv/bin/python -m ropesplit.figures.recorded docs/figures/records docs/figures

and ``tests/docs/test_docs.py`` fails when a PNG there is not what this draws.

A record is ``{"format", "figure", "number", "source", "data"}``: ``source``
says which run the data comes from (free-form JSON), ``data`` holds the
keyword arguments in plain JSON with three tagged forms, so that what is read
back equals what was written, value for value:

- a numpy array: ``{"__ndarray__": nested lists, "dtype": "float64", "shape": [..]}``
  (``tolist`` floats, which JSON writes shortest-round-trip: bit-exact);
- a tuple: ``{"__tuple__": [...]}``;
- a float that JSON cannot hold: ``{"__float__": "nan" | "inf" | "-inf"}``
  (:func:`ropesplit.core.io.write_json` alone writes NaN as ``null``, which a figure
  would read as a missing value, not as NaN).

numpy scalars are written as the Python ``float``, ``int`` or ``bool`` of the
same value. Anything else (another object, a key that is not a string, a
dict holding a tag as a key) is refused with a one-line error.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.core.io import output_folder, read_json, write_json
from ropesplit.figures.registry import FIGURES, write_figures

__all__ = ["FORMAT", "decode", "draw_recorded", "encode", "read_records", "write_records"]

FORMAT = "ropesplit figure data 1"
_TAGS = ("__ndarray__", "__tuple__", "__float__")
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_NUMBERS = {spec.name: spec.number for spec in FIGURES}


def _float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return {"__float__": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def _plain(x: Any) -> Any:
    """Nested ``tolist`` output with its non-finite floats tagged."""
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return _float(x) if isinstance(x, float) else x


def encode(value: Any, where: str = "data") -> Any:
    """``value`` as plain JSON (see the module docstring), or a one-line error naming ``where``.

    >>> encode({"x": (1.5, float("nan"))})
    {'x': {'__tuple__': [1.5, {'__float__': 'nan'}]}}
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (float, np.floating)):
        return _float(float(value))
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise RopesplitError(f"{where}: cannot record an array of dtype {value.dtype}")
        return {"__ndarray__": _plain(value.tolist()), "dtype": value.dtype.name,
                "shape": list(value.shape)}  # fmt: skip
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise RopesplitError(f"{where}: keys must be strings, got {key!r}")
            if key in _TAGS:
                raise RopesplitError(f"{where}: the key {key!r} is reserved for the record's tags")
            out[key] = encode(v, f"{where}[{key!r}]")
        return out
    raise RopesplitError(f"{where}: cannot record a {type(value).__name__}")


def _numbers(x: Any) -> Any:
    """Nested lists with the tagged non-finite floats read back."""
    if isinstance(x, list):
        return [_numbers(v) for v in x]
    if isinstance(x, dict):
        return _NONFINITE[x["__float__"]]
    return x


def decode(value: Any) -> Any:
    """The value :func:`encode` wrote, read back from JSON.

    >>> decode({"x": {"__tuple__": [1.5, {"__float__": "nan"}]}})
    {'x': (1.5, nan)}
    """
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__ndarray__" in value:
        arr = np.array(_numbers(value["__ndarray__"]), dtype=np.dtype(value["dtype"]))
        return arr.reshape(value["shape"])  # the shape, even of an empty or 0-d array
    if "__tuple__" in value:
        return tuple(decode(v) for v in value["__tuple__"])
    if "__float__" in value:
        return _NONFINITE[value["__float__"]]
    return {key: decode(v) for key, v in value.items()}


def write_records(
    data: Mapping[str, Mapping[str, Any]],
    folder: str | Path,
    *,
    source: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``data[name]`` (figure ``name``'s keyword arguments) as ``folder/NAME.json`` each.

    ``source`` (JSON) says where the data comes from: model, text, seed,
    command. ``folder`` is created when only it is missing. Returns the paths
    written, in figure order; a figure name the registry does not know, or a
    value a record cannot give back exactly, is refused before anything is
    written.
    """
    unknown = sorted(set(data) - set(_NUMBERS))
    if unknown:
        raise RopesplitError(f"unknown figure {unknown[0]!r}; known: {', '.join(_NUMBERS)}")
    records = {name: {"format": FORMAT, "figure": name, "number": _NUMBERS[name],
                      "source": encode(dict(source or {}), "source"),
                      "data": encode(dict(data[name]), name)}
               for name in _NUMBERS if name in data}  # fmt: skip  # all encoded, then written
    out = output_folder(folder, "figure records")
    return [write_json(out / f"{name}.json", record) for name, record in records.items()]


def read_records(folder: str | Path) -> dict[str, dict[str, Any]]:
    """Every figure's keyword arguments recorded in ``folder`` (``NAME.json``), in figure order.

    Figures without a record are absent; a record of another format, or of
    another figure than its file name says, is a one-line error.
    """
    base = Path(folder)
    if not base.is_dir():
        raise RopesplitError(f"records folder {base} does not exist")
    data = {}
    for name in _NUMBERS:
        path = base / f"{name}.json"
        if not path.is_file():
            continue
        record = read_json(path, "figure record")
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise RopesplitError(f"figure record {path} is not of format {FORMAT!r}")
        if record.get("figure") != name:
            raise RopesplitError(f"figure record {path} holds figure {record.get('figure')!r}")
        data[name] = decode(record["data"])
    return data


def draw_recorded(records: str | Path, out: str | Path) -> list[Path]:
    """Each figure whose record ``records/NAME.json`` exists, drawn into ``out`` at two-column
    width as PNG (the gallery's form); the paths written, in figure order."""
    return write_figures(read_records(records), out, widths=("double",), formats=("png",))


def main(argv: list[str]) -> int:
    """``python -m ropesplit.figures.recorded RECORDS OUT``: the gallery redrawn from records."""
    if len(argv) != 2:
        print("usage: python -m ropesplit.figures.recorded RECORDS OUT", file=sys.stderr)
        return 2
    try:
        data = read_records(argv[0])
        written = write_figures(data, argv[1], widths=("double",), formats=("png",))
    except RopesplitError as exc:
        print(f"ropesplit.figures.recorded: error: {exc}", file=sys.stderr)
        return exc.exit_code
    missing = [name for name in _NUMBERS if name not in data]
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    if missing:
        print(f"no record of {', '.join(missing)}: not drawn", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
