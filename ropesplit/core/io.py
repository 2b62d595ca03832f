"""Reading the CLI's inputs and writing its outputs (JSON, CSV, text), with one-line errors.

The checks here are the ones the CLI runs on every path option before any work
(``cli._Parser``): :func:`input_file` (a UTF-8 file that can be read),
:func:`read_json`, :func:`output_path` (a file that can be written) and
:func:`check_output_folder` (a folder that can be written, or made). A file is
written whole or not at all (:func:`write_text`): an existing file is never
left half-written.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

from ropesplit.core.errors import RopesplitError


def _regular(path: str | Path, what: str) -> Path:
    """``path`` as a Path to a regular file, or a one-line error naming ``what``."""
    p = Path(path)
    if p.is_dir():
        raise RopesplitError(f"{what} {p} is a folder, not a file")
    if not p.exists():
        raise RopesplitError(f"{what} {p} does not exist")
    if not p.is_file():  # a pipe or a device: reading it here would use it up
        raise RopesplitError(f"{what} {p} is not a regular file")
    return p


def read_text(path: str | Path, what: str = "text file") -> str:
    """The UTF-8 text of the regular file ``path``, or a one-line error naming ``what``."""
    p = _regular(path, what)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RopesplitError(f"{what} {p} is not UTF-8 text") from None
    except OSError as exc:
        raise RopesplitError(f"cannot read {what} {p}: {exc.strerror or exc}") from None


def input_file(path: str | Path, what: str = "file", *, text: bool = True) -> Path:
    """``path`` as a Path to a file that exists and can be read (with ``text``, as UTF-8), or
    a one-line error naming ``what`` it should be (missing, a folder, unreadable, not UTF-8).

    >>> input_file("/nonexistent/x.txt", "text file")
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: text file /nonexistent/x.txt does not exist
    """
    if text:
        read_text(path, what)
        return Path(path)
    p = _regular(path, what)
    try:
        with p.open("rb"):
            pass
    except OSError as exc:
        raise RopesplitError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    return p


def read_json(path: str | Path, what: str = "file") -> Any:
    """The JSON value in ``path``, or a one-line error naming ``what`` it should be.

    >>> read_json("/nonexistent/x.json", "record")
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: record /nonexistent/x.json does not exist
    """
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RopesplitError(f"{what} {Path(path)} is not JSON: {exc}") from None


def _cannot_create(folder: Path) -> str | None:
    """Why no new file can be made in ``folder`` (None: one can). A trial, not the mode bits:
    root passes every permission check yet cannot write in ``/proc``. The trial file has no
    name (``O_TMPFILE``) where the system allows, and is gone when this returns."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _folder_of(p: Path, shown: str) -> Path:
    """The folder ``p`` goes into, which must exist and take new files."""
    parent = p.parent
    if not parent.is_dir():
        if parent.exists():
            raise RopesplitError(f"cannot write {shown}: {parent} is a file, not a folder")
        raise RopesplitError(f"cannot write {shown}: folder {parent} does not exist")
    why = _cannot_create(parent)
    if why:
        raise RopesplitError(f"cannot write {shown}: folder {parent} takes no new files ({why})")
    return parent


def output_path(path: str | Path) -> Path:
    """Return ``path`` as a Path that :func:`write_text` can write, or raise: its folder exists
    and takes new files, it is not a folder, and an existing file there may be written.
    Nothing is created or changed.

    >>> output_path("/nonexistent/x.md")
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: cannot write /nonexistent/x.md: folder /nonexistent ...
    """
    p = Path(path)
    if p.is_dir():
        raise RopesplitError(f"cannot write {p}: it is a folder")
    if p.exists() and not p.is_file():  # a device or a pipe (/dev/null): written in place
        if not os.access(p, os.W_OK):
            raise RopesplitError(f"cannot write {p}: permission denied")
        return p
    if p.exists() and not os.access(p, os.W_OK):
        raise RopesplitError(f"cannot write {p}: the file is read-only")
    _folder_of(p.resolve() if p.is_symlink() else p, str(p))
    return p


def check_output_folder(path: str | Path, what: str | None = None) -> Path:
    """``path`` as a Path to a folder that can be written: one that takes new files, or a
    missing one whose parent folder does (it is not made here); a one-line error otherwise.

    >>> check_output_folder("/nonexistent/report", "the report")
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: cannot write the report to /nonexistent/report: folder ...
    """
    out = Path(path)
    shown = f"{what} to {out}" if what else str(out)
    if out.is_dir():
        why = _cannot_create(out)
        if why:
            raise RopesplitError(f"cannot write {shown}: the folder takes no new files ({why})")
        return out
    if out.exists():
        raise RopesplitError(f"cannot write {shown}: it is a file, not a folder")
    _folder_of(out, shown)
    return out


def output_folder(path: str | Path, what: str) -> Path:
    """The output folder ``path``, created when only it is missing; a one-line error otherwise
    (:func:`check_output_folder`).

    >>> output_folder("/nonexistent/report", "the report")
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: cannot write the report to /nonexistent/report: folder ...
    """
    out = check_output_folder(path, what)
    try:
        out.mkdir(exist_ok=True)
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


def _replace(target: Path, text: str) -> None:
    """Write ``text`` to a new file beside ``target``, then rename it over ``target``: a write
    that fails leaves an existing ``target`` as it was, and no file behind."""
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if target.exists():  # keep the file's permissions
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8), checked first (:func:`output_path`); the file is
    written whole or not at all (a device such as ``/dev/null`` is written in place)."""
    p = output_path(path)
    try:
        if p.exists() and not p.is_file():
            with p.open("w", encoding="utf-8") as f:
                f.write(text)
        else:
            _replace(p.resolve() if p.is_symlink() else p, text)
    except OSError as exc:
        raise RopesplitError(f"cannot write {p}: {exc.strerror or exc}") from None
    return p


def write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented, key-ordered-as-given JSON to ``path``."""
    return write_text(path, json.dumps(_jsonable(obj), indent=2) + "\n")
