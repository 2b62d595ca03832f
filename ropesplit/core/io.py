"""Writing the CLI's outputs: JSON, CSV and text files, with clear errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ropesplit.core.errors import RopesplitError


def read_json(path: str | Path, what: str = "file") -> Any:
    """The JSON value in ``path``, or a one-line error naming ``what`` it should be.

    >>> read_json("/nonexistent/x.json", "record")
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: record /nonexistent/x.json does not exist
    """
    p = Path(path)
    if not p.is_file():
        raise RopesplitError(f"{what} {p} does not exist")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RopesplitError(f"{what} {p} is not JSON: {exc}") from None


def output_path(path: str | Path) -> Path:
    """Return ``path`` as a Path whose parent folder exists, or raise.

    >>> output_path("/nonexistent/x.md")
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: cannot write /nonexistent/x.md: folder /nonexistent ...
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise RopesplitError(f"cannot write {p}: folder {parent} does not exist")
    if p.is_dir():
        raise RopesplitError(f"cannot write {p}: it is a folder")
    return p


def output_folder(path: str | Path, what: str) -> Path:
    """The output folder ``path``, created when only it is missing; a one-line error otherwise.

    >>> output_folder("/nonexistent/report", "the report")
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: cannot write the report to /nonexistent/report: folder ...
    """
    out = Path(path)
    if out.is_dir():
        return out
    if out.exists():
        raise RopesplitError(f"cannot write {what} to {out}: it is a file, not a folder")
    if not out.parent.is_dir():
        raise RopesplitError(f"cannot write {what} to {out}: folder {out.parent} does not exist")
    try:
        out.mkdir()
    except OSError as exc:
        raise RopesplitError(f"cannot write {what} to {out}: {exc.strerror}") from None
    return out


def _jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays and non-finite floats to plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy / torch scalars and arrays
        return _jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # JSON has no NaN/inf; null says "not defined"
    return obj


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8), checking the folder exists first."""
    p = output_path(path)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise RopesplitError(f"cannot write {p}: {exc.strerror}") from None
    return p


def write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented, key-ordered-as-given JSON to ``path``."""
    return write_text(path, json.dumps(_jsonable(obj), indent=2) + "\n")
