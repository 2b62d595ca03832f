"""The types of the CLI's options: each checks one value and fails as argparse's one line.

A plain ``type=int`` option is checked by ``cli`` as :class:`IntAtLeast` ``(1)`` and a
``type=float`` one by :func:`positive_float`; an option whose values mean something else
names its type here where it is added (``type=SEED``, ``type=ListOf(int, 0)``). A path
option names what it points at by its type (:class:`PathKind`: :data:`OutputPath`,
:data:`OutputFolder`, :data:`InputFile`, :data:`InputRecord`), which ``cli`` checks once
the whole command line is parsed.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

__all__ = ["DTYPES", "SEED", "InputFile", "InputRecord", "IntAtLeast", "ListOf", "OutputFolder",
           "OutputPath", "PathKind", "attention", "device", "dtype", "positive_float"]

DTYPES = ("float32", "float64", "float16", "bfloat16")


def attention(value: str) -> str:
    """``--attention``: ``model`` (the config's own kernel), a kernel transformers' attention
    registry holds (``eager``, ``sdpa``, ``flash_attention_2``, ...) or a hub kernel
    (``owner/name``).

    >>> attention("sdpa")
    'sdpa'
    >>> attention("sdpx")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be model or one of eager, ..., sdpa, got 'sdpx'
    """
    if value in ("eager", "model") or "/" in value:
        return value  # no transformers import for these
    from ropesplit.empirical.adapter import kernel_names

    names = kernel_names()
    if value not in names:
        raise argparse.ArgumentTypeError(f"must be model or one of {', '.join(names)}, "
                                         f"got {value!r}")  # fmt: skip
    return value


def device(value: str) -> str:
    """``--device``: ``cpu``, or ``cuda[:N]`` / ``mps`` when this machine has it.

    >>> device("cpu")
    'cpu'
    >>> device("quantum")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be cpu, cuda[:N] or mps, got 'quantum'
    """
    if value == "cpu":
        return value  # no torch import for the default
    kind, _, index = value.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and not index.isdigit()):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda[:N] or mps, got {value!r}")
    import torch

    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise argparse.ArgumentTypeError(f"{value!r}: this machine has no CUDA device")
        if index and int(index) >= count:
            raise argparse.ArgumentTypeError(
                f"{value!r}: this machine has {count} CUDA device(s), 0..{count - 1}"
            )
    if kind == "mps" and not torch.backends.mps.is_available():
        raise argparse.ArgumentTypeError(f"{value!r}: this machine has no MPS device")
    return value


def dtype(value: str) -> str:
    """``--dtype``: one of :data:`DTYPES`."""
    if value not in DTYPES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(DTYPES)}, got {value!r}")
    return value


class IntAtLeast:
    """An argparse type: an integer ``>= minimum``."""

    def __init__(self, minimum: int) -> None:
        self.minimum = minimum

    def __call__(self, value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {value!r}") from None
        if number < self.minimum:
            raise argparse.ArgumentTypeError(f"must be at least {self.minimum}, got {number}")
        return number


def positive_float(value: str) -> float:
    """An argparse type: a finite float ``> 0``."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {value!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value!r}")
    return number


class ListOf:
    """An argparse type: comma-separated values, each checked like a single option of
    ``kind`` (integers ``>= minimum``; floats finite and ``> 0``), none repeated; a tuple.

    >>> ListOf(int, 0)("0,1,2")
    (0, 1, 2)
    >>> ListOf(int, 0)("1,1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: repeats 1 in '1,1'
    """

    def __init__(self, kind: type, minimum: int) -> None:
        self.one = IntAtLeast(minimum) if kind is int else positive_float

    def __call__(self, value: str) -> tuple[Any, ...]:
        parts = [p.strip() for p in str(value).split(",")]
        if not any(parts) or not all(parts):
            raise argparse.ArgumentTypeError(f"must be comma-separated values, got {value!r}")
        try:
            values = tuple(self.one(p) for p in parts)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"each value {exc} (in {value!r})") from None
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise argparse.ArgumentTypeError(f"repeats {repeated[0]:g} in {value!r}")
        return values


SEED = IntAtLeast(0)  # a seed: 0 is a seed like any other


class PathKind:
    """A path option's type: what the path names, checked by ``cli`` once the command line is
    parsed (so a bad path is reported after every flag is known, and nothing is created);
    parsing keeps the string as given."""

    def __init__(self, name: str, what: str) -> None:
        self.name, self.what = name, what  # name: the kind's key in cli.PATHS

    def __call__(self, value: str) -> str:
        return value

    def __repr__(self) -> str:
        return f"PathKind({self.name!r})"


OutputPath = PathKind("PATH", "a file written")
OutputFolder = PathKind("DIR", "a folder written")
InputFile = PathKind("FILE", "a UTF-8 text file read")
InputRecord = PathKind(".json", "a JSON record read")
