"""Claim 1's damage (numerics.tolerance) and a passage's value from its heads (numerics.pooling):
float64 loop twins and the closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.pooling import head_mean, pooled_share
from ropesplit.numerics.tolerance import (
    curvature,
    dose,
    first_moved,
    relative_damage,
    suffix_damage,
)

LOSSES = arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(2, 30)),
                elements=st.floats(0.0, 10.0))  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(rows=LOSSES, data=st.data())
def test_suffix_damage_is_the_mean_loss_difference_after_start(rows, data):
    base = data.draw(arrays(np.float64, rows.shape[1], elements=st.floats(0.0, 10.0)))
    start = data.draw(st.integers(0, rows.shape[1] - 1))
    got = suffix_damage(base, rows, start)
    for r in range(rows.shape[0]):  # the loop twin
        diffs = [rows[r, t] - base[t] for t in range(start, rows.shape[1])]
        assert got[r] == pytest.approx(sum(diffs) / len(diffs), abs=1e-12)
    assert np.all(suffix_damage(base, np.tile(base, (2, 1)), start) == 0.0)  # nothing moved


def test_first_moved_and_dose_by_hand():
    x, y = np.arange(10), np.arange(10)
    y[[4, 5]] = [5, 4]
    assert first_moved(x, y) == 4 and dose(x, y) == 0.2 and first_moved(x, x) == 10
    with pytest.raises(RopesplitError, match="one shape"):
        first_moved(x, y[:5])


def test_curvature_is_zero_for_a_damage_linear_in_the_dose_and_positive_above_it():
    doses = np.array([0.05, 0.1])
    assert curvature(0.3 * doses[0], 0.3 * doses[1], *doses) == pytest.approx(0.0)
    assert curvature(0.01, 0.1, *doses) > 0 > curvature(0.1, 0.1, *doses)
    with pytest.raises(RopesplitError, match="dose must be above 0"):
        curvature(0.1, 0.2, 0.0, 0.1)


def test_relative_damage_is_undefined_without_damage_at_the_reference():
    got = relative_damage([0.05, 0.05, 0.05], [0.5, 0.0, -0.1])
    assert got[0] == pytest.approx(0.1) and np.isnan(got[1]) and np.isnan(got[2])


def test_head_mean_and_pooled_share_by_hand():
    assert head_mean([1.0, np.nan, 3.0]) == 2.0 and np.isnan(head_mean([np.nan]))
    # pooled: the share of the summed parts, not the mean of the shares
    assert pooled_share([1.0, 0.0], [1.0, 3.0]) == 0.25 and head_mean([1.0, 0.0]) == 0.5
    assert np.isnan(pooled_share([0.0], [0.0]))
    with pytest.raises(RopesplitError, match="one shape"):
        pooled_share([1.0], [1.0, 2.0])
