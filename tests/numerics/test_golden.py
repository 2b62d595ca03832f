"""The numeric contract (docs/architecture.md): every statistic of the committed golden q/k
(tests/golden.py) agrees with its recorded value to 1e-12 relative, and every count
exactly, on the compiled CPU path and on the torch path run on the CPU (the code a GPU
runs: ``Measure(device=...)``)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

import golden  # noqa: E402  (tests/ is not a package)

RTOL = 1e-12
WANT = json.loads(golden.STATS.read_text())


@pytest.fixture(scope="module")
def qk():
    with np.load(golden.QK) as f:
        return f["q"], f["k"]


def assert_agrees(got, want, where):
    """Numbers to RTOL relative (NaN where NaN), counts and names exactly, nested dicts too."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for key in want:
            assert_agrees(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, float):
        assert isinstance(got, float), where
        assert (math.isnan(got) and math.isnan(want)) or abs(got - want) <= RTOL * abs(want), (
            where, got, want)
    else:
        assert got == want and type(got) is type(want), (where, got, want)


def test_the_fixture_covers_every_path():
    """The cases reach the exact and sampled checks, whole-step and real positions, a window,
    both layouts, partial rotary, references and the split alone."""
    assert set(WANT) == set(golden.CASES)
    tight = [h for case in WANT.values() for h in case if not math.isnan(h["tightness_max"])]
    assert {h["sampled_pairs"] for h in tight} == {None, 1000}
    assert all(h["violations"] == 0 for case in WANT.values() for h in case)


@pytest.mark.parametrize("device", [None, "cpu"], ids=["compiled", "torch"])
@pytest.mark.parametrize("case", list(golden.CASES))
def test_every_statistic_holds_to_the_golden_fixture(qk, case, device):
    got = golden.case_stats(*qk, case, device=device)
    assert len(got) == golden.H
    for head, (g, w) in enumerate(zip(got, WANT[case], strict=True)):
        assert_agrees(g, w, f"{case}[{head}]")


def test_the_check_fails_on_a_change_past_the_tolerance(qk):
    """A perturbation of one query entry by 1e-6 of its size moves a statistic past 1e-12."""
    q, k = qk
    q = q.copy()
    q[0, 5, 3] *= 1 + 1e-6
    got = golden.case_stats(q, k, "exact")
    with pytest.raises(AssertionError):
        assert_agrees(got[0], WANT["exact"][0], "exact[0]")
