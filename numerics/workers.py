r"""Independent statistics side by side: one thread per item, each library held to one thread.

The statistics of one layer of one sequence (:func:`.stats.layer_statistics`)
are many small operations: on two cores their own threads speed them up
about 1.4 times, not 2.  Sequences are independent, so :func:`map_each`
measures ``T`` of them at once, one per thread, each thread computing alone:

- torch's intra-op pool is set to one thread for the duration (and back);
- the compiled kernels (:mod:`.bound`, :mod:`.stats`) run their serial
  builds in a worker (:func:`serial`): no numba threading layer is entered
  from two threads (its ``workqueue`` layer is not thread-safe);
- OpenBLAS, which numpy's matrix products call, is held to one thread
  (:func:`one_blas_thread`): its own pool would otherwise spin beside
  torch's.

Every item is computed by exactly the code and the thread count it would
see alone in a worker, so the results do not depend on how the items are
spread or scheduled: ``map_each(fn, items) == [fn(x) for x in items]``
whenever ``fn`` itself is run in a worker.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import torch

__all__ = ["map_each", "one_blas_thread", "serial", "side_by_side"]

T = TypeVar("T")
_local = threading.local()


def serial() -> bool:
    """True inside a worker of :func:`map_each`: kernels take their single-threaded build."""
    return bool(getattr(_local, "serial", False))


@functools.cache
def _controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries (found once a process)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Within the block numpy's BLAS (OpenBLAS) uses one thread; a no-op inside a worker,
    where :func:`map_each` has set it already (its limit is process-wide)."""
    if serial():
        yield
        return
    with _controller().limit(limits=1, user_api="blas"):
        yield


def _enter_worker() -> None:
    _local.serial = True


@functools.cache
def _pool(count: int, pid: int) -> ThreadPoolExecutor:
    """The ``count`` worker threads of process ``pid``, kept: the same threads for every call
    (a forked child, which has none of its parent's threads, starts its own).

    Fresh threads for each call (one per layer of a streamed capture) each
    took a new glibc heap arena, which kept its freed memory: with the
    benchmark's steady allocator the capture trimmed the heap
    (``capture.release_growth``) in 20 of 30 layers of 16 x 512 tokens, with
    the same threads in 8-10 (with glibc's default, 5 either way).  A thread
    reads torch's thread count at its first operation, which
    :func:`map_each` runs with the count at 1, and keeps it.
    """
    return ThreadPoolExecutor(count, thread_name_prefix="ropesplit", initializer=_enter_worker)


def side_by_side(device: Any = None) -> int:
    """How many items :func:`map_each` runs at once by default: torch's CPU threads, and 1
    for tensors on another ``device`` (a GPU's kernels are parallel already)."""
    on_cpu = device is None or torch.device(device).type == "cpu"
    return torch.get_num_threads() if on_cpu else 1


def map_each(fn: Callable[[Any], T], items: Sequence[Any], workers: int | None = None, *,
             in_worker: bool = False) -> list[T]:
    r"""``[fn(x) for x in items]`` with the items spread over ``workers`` threads.

    ``workers`` defaults to :func:`side_by_side` (torch's thread count); with fewer than two items
    or workers, ``fn`` runs here with every library's threads as they are,
    and inside a worker it runs there, one item after another.
    Otherwise the items go to the process's worker threads (the same ones
    for every call), each computing with one thread (module docstring); the
    results come back in the order of ``items``, and the first exception
    raised by ``fn`` is raised here. With ``in_worker`` a single item goes to a worker
    too (where ``workers`` allows two or more), so that its numbers are those it gets
    beside other items: a claims shard may measure alone a passage that the whole run
    measured beside another (``measurement.passages``).
    """
    limit = workers if workers is not None else side_by_side()
    count = min(len(items), limit)
    alone = count < 2 and not (in_worker and len(items) == 1 and limit >= 2)
    if alone or serial():  # inside a worker: here (the workers may all be waiting)
        return [fn(x) for x in items]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers, started on demand, read it at their first operation
    try:
        with one_blas_thread():
            return list(_pool(max(count, 2), os.getpid()).map(fn, items))
    finally:
        torch.set_num_threads(threads)
