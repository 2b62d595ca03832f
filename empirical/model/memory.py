"""The process's memory as the streamed capture watches it: resident and peak bytes from
``/proc``, and glibc's ``malloc_trim`` when a streamed run has grown. Everything here
reads None (or does nothing) where the platform has no such thing (macOS, musl)."""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

__all__ = ["GROWTH", "peak_resident", "release_growth", "resident"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


GROWTH = 2**28  # bytes a streamed run may grow past its first layer before heap is trimmed


def resident() -> int | None:
    """Bytes resident now (``/proc/self/statm``), or None where there is no such file."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def peak_resident(*, reset: bool = False) -> int | None:
    """This process image's peak resident bytes (``VmHWM``); ``reset``: start the peak anew.

    Not ``getrusage``'s ``ru_maxrss``: a child started by ``fork`` and
    ``exec`` reports at least its parent's size there (Linux carries the
    old image's peak across ``exec``), which made a fresh process measured
    from a 3.7 GiB benchmark read 3.7 GiB whatever it allocated. None where
    ``/proc`` has no such numbers.
    """
    try:
        if reset:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
                clear.write("5")  # the peak resident size restarts at the current one
        with open("/proc/self/status", encoding="ascii") as status:
            line = next(x for x in status if x.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def release_growth(first: int | None) -> int | None:
    """After a streamed layer: trim the C heap (glibc ``malloc_trim(0)``) when the process
    has grown :data:`GROWTH` past ``first``, its size after the first layer (returned).

    A streamed capture frees each layer's tensors, and the statistics their
    temporaries, from several threads; glibc keeps such memory in per-thread
    arenas, fragmented, and the process grew about 20 MiB a layer (16 x 512
    tokens of the default model: 0.6 GiB above the model after layer 1,
    1.0 GiB after layer 30). Trimming every layer kept it flat, but the
    refaulted pages slowed the capture (``benchmarks/bench_empirical.py``); trimming
    on growth bounds it at the first layer's size plus :data:`GROWTH`, which
    :func:`~ropesplit.empirical.analysis.analyze.memory_estimate` counts.
    """
    now = resident()
    if now is None or first is None:
        return now
    trim = _malloc_trim()
    if trim is not None and now > first + GROWTH:
        trim(0)
    return first
