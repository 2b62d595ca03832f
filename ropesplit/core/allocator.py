"""The C heap of a long run: freed memory kept in the process, not mapped afresh per tensor.

By default glibc serves blocks above a threshold with a fresh ``mmap`` and gives
them back when freed, and it moves that threshold as blocks come and go. A run of
forward passes and statistics allocates and frees tensors of a few to hundreds of
MiB many times a second, so the default costs page faults: the same forward pass
varied by 1.6x in one process, depending on what ran before it, and ``ropesplit
claims`` spent a quarter of its time in the kernel. :func:`steady_allocator` fixes
the ``mmap`` threshold at 32 MiB (the default's own ceiling) and keeps up to 1 GiB
of freed memory at the heap's top: that claims run was a quarter faster, with the
same numbers (``benchmarks/bench_empirical.py --allocator`` measures both). Blocks
above 32 MiB still go back when freed: with the threshold at 1 GiB as well (every
block from the heap) the run was no faster and the heap fragmented, so a streamed
capture's peak grew with depth (2048 tokens of Llama-2-7B's geometry: 4.6 GiB above
the weights with 2 layers, 5.7 GiB with 8; 3.6 and 3.8 GiB here). A streamed capture
still hands its growth back (``empirical.model.memory.release_growth`` calls
``malloc_trim``).
"""

from __future__ import annotations

import ctypes

__all__ = ["steady_allocator"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h
MMAP = 1 << 25  # bytes: larger blocks are mapped afresh, and handed back when freed
TRIM = 1 << 30  # bytes: free memory kept at the heap's top before it is handed back


def steady_allocator() -> bool:
    """Keep freed memory in the process (glibc ``mallopt``); False where the C library has
    no ``mallopt`` (macOS, musl): then its default stands. Process-wide: the CLI sets it
    once, before any model is loaded."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP)
                    and libc.mallopt(_M_TRIM_THRESHOLD, TRIM))  # fmt: skip
    except (OSError, AttributeError):
        return False
