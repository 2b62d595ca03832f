"""numerics.workers: items side by side, one thread each, the same numbers as alone."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.numerics.measure import Measure
from ropesplit.numerics.rope import frequencies
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.stats import layer_statistics
from ropesplit.numerics.workers import map_each, serial


def test_map_each_is_the_items_in_order_and_restores_the_threads():
    threads = torch.get_num_threads()
    seen = []

    def square(x):
        seen.append((serial(), torch.get_num_threads()))
        return x * x

    assert map_each(square, list(range(7)), workers=2) == [x * x for x in range(7)]
    assert seen and all(s and t == 1 for s, t in seen)  # in a worker, one thread
    assert torch.get_num_threads() == threads and not serial()
    seen.clear()
    assert map_each(square, [3], workers=2) == [9]  # one item: computed here, as it is
    assert seen == [(False, threads)]
    seen.clear()  # in_worker: one item as beside others (a claims shard's lone passage)
    assert map_each(square, [3], workers=2, in_worker=True) == [9]
    assert seen == [(True, 1)] and torch.get_num_threads() == threads
    seen.clear()
    assert map_each(square, [3], workers=1, in_worker=True) == [9]  # no workers: here
    assert seen == [(False, threads)]

    def fails(x):
        raise ValueError(f"item {x}")

    with pytest.raises(ValueError, match=r"^item \d$"):
        map_each(fails, [1, 2], workers=2)
    assert torch.get_num_threads() == threads and not serial()


def test_the_workers_are_the_same_threads_and_a_nested_call_runs_in_place():
    # fresh threads per call each opened a heap arena that kept its memory (numerics.workers)
    def thread(x):
        return threading.current_thread()  # the objects: a dead thread's ident may be reused

    seen = set().union(*(map_each(thread, range(6), workers=2) for _ in range(3)))
    # fresh pools would give at least one new thread per call: three or more in all
    assert threading.current_thread() not in seen and len(seen) <= 2

    def nested(x):  # both workers busy: a nested call must not wait for them
        return map_each(lambda y: (serial(), threading.get_ident()), range(3), workers=2)

    box = []
    runner = threading.Thread(target=lambda: box.append(map_each(nested, range(2), workers=2)))
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "a nested map_each waited for the busy workers"
    for calls in box[0]:
        assert all(s for s, _ in calls) and len({t for _, t in calls}) == 1  # one worker, here


@settings(max_examples=10, deadline=None)
@given(q=arrays(np.float64, (2, 4, 24, 8), elements=st.floats(-3, 3)),
       k=arrays(np.float64, (2, 2, 24, 8), elements=st.floats(-3, 3)))  # fmt: skip
def test_statistics_in_a_worker_are_those_computed_alone(q, k):
    """The serial kernel builds, one torch thread and one BLAS thread give the numbers of
    the parallel path (the order of a few sums aside)."""
    theta = frequencies(8, 100.0)

    def stats(b):
        return layer_statistics(q[b], k[b], RopeSpec.from_arrays(theta, 8**-0.5),
                                Measure(references=("distance:4", "mean")))  # fmt: skip

    alone = [stats(b) for b in range(2)]
    side_by_side = map_each(stats, range(2), workers=2)
    for one, other in zip(alone, side_by_side, strict=True):
        for x, y in zip(one, other, strict=True):
            assert x.n_pairs == y.n_pairs and x.violations == y.violations == 0
            for name in ("r_split", "r_3axis", "remainder_share", "tightness_max",
                         "tightness_median", "lowfreq_share_k"):  # fmt: skip
                assert getattr(x, name) == pytest.approx(getattr(y, name), rel=1e-9, abs=1e-12,
                                                         nan_ok=True), name  # fmt: skip
