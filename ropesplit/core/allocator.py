"""The C heap of a long run: freed memory kept in the process, not mapped afresh per tensor.

By default glibc maps every block above a threshold afresh and gives it back
when freed, and it moves that threshold as blocks come and go. A run of
forward passes and statistics allocates and frees tensors of tens to hundreds
of MiB many times a second, so the default costs page faults: the same
forward pass of 1024 tokens took 3.3 s, 2.6 s or 2.1 s in one process,
depending on what ran before it, and ``ropesplit claims`` (8 passages, 512
tokens) spent 44 s of its 190 in the kernel. With both thresholds at 1 GiB
(:func:`steady_allocator`) the forward pass takes about 2.0 s every time and
that claims run 163 s (19 s in the kernel), with the same numbers bit for bit.
A streamed capture still hands its growth back (``empirical.memory.release_growth``
calls ``malloc_trim``, which no threshold holds back).
"""

from __future__ import annotations

import ctypes

__all__ = ["steady_allocator"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h
STEADY = 1 << 30  # bytes: both thresholds


def steady_allocator() -> bool:
    """Keep freed memory in the process (glibc ``mallopt``); False where the C library has
    no ``mallopt`` (macOS, musl): then its default stands. Process-wide: the CLI sets it
    once, before any model is loaded."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, STEADY)
                    and libc.mallopt(_M_TRIM_THRESHOLD, STEADY))  # fmt: skip
    except (OSError, AttributeError):
        return False
