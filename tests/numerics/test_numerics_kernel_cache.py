"""The compiled kernels load from numba's disk cache: a new process compiles none of them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_CHILD = """
import gc, json
import numpy as np
from numba.core.registry import CPUDispatcher
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.rope import frequencies
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.stats import layer_statistics
from ropesplit.numerics.workers import map_each

rng = np.random.default_rng(0)
q, k = rng.normal(size=(4, 40, 8)), rng.normal(size=(2, 40, 8))
def run(_):
    return layer_statistics(q, k, RopeSpec.from_arrays(frequencies(8), 0.35),
                            Measure(references=("mean",)))
run(0)  # the parallel builds
map_each(run, [0, 1], workers=2)  # the serial builds, in workers
kernels = [d for d in gc.get_objects() if type(d) is CPUDispatcher and d.signatures
           and d.py_func.__module__.startswith('ropesplit')]  # the project's own
print(json.dumps({d.py_func.__qualname__ + str(i): [len(d.stats.cache_hits),
                  len(d.stats.cache_misses)] for i, d in enumerate(kernels)}))
"""


def _kernels() -> dict[str, list[int]]:
    run = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         check=True)  # fmt: skip
    return json.loads(run.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow  # end to end, seconds: make test runs it, test-fast does not
def test_every_kernel_of_the_statistics_loads_from_the_disk_cache():
    _kernels()  # the first process may compile (a fresh checkout) and save
    kernels = _kernels()
    names = " ".join(kernels)
    assert "solve" in names and "kernel" in names  # the CG and the pair loops were used
    compiled = {name: hits for name, (hits, misses) in kernels.items() if misses or not hits}
    assert not compiled, f"compiled again in a new process: {compiled}"
