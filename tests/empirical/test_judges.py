"""Each intervention's judge and verdict on rows of known answer.

The judges of remainder, keys, shuffle and terms used to run only end to end, inside the
report's fixture. Here each gets rows built by ``edits.paired`` from per-passage values
whose paired difference lies wholly on the predicted side, wholly on the other, or across
0, and its verdict picks the row the experiment pre-registered as primary.
"""

from __future__ import annotations

import numpy as np
import pytest

from ropesplit.empirical.experiments import EXPERIMENTS, edits

N = edits.PASSAGES
BASE = np.linspace(0.2, 0.4, N)  # per-passage values of the null
NOISE = np.tile([0.01, -0.01], N // 2 + 1)[:N]
SHIFTS = {"below": -0.3, "above": 0.3, "across": 0.0}  # the edit minus its null


def _row(direction: str, side: str, n: int = N, **labels) -> dict:
    """A row whose paired difference lies on ``side`` of 0 ("predicted", "other", "across")
    for an experiment predicting ``direction`` ("below" or "above")."""
    shift = {"predicted": SHIFTS[direction], "other": -SHIFTS[direction], "across": 0.0}[side]
    edit = BASE[:n] + shift + NOISE[:n]
    return {**labels, **edits.paired(edit, BASE[:n], direction)}


OUTCOME = {"predicted": "agrees", "other": "disagrees", "across": "inconclusive"}
LABELS = {
    "remainder": ({"run": "trained", "reference": "zero"}, "below"),
    "keys": ({"edit": "fast_keys", "null": "slow_matched"}, "below"),
    "shuffle": ({"run": "trained", "null": "within halves"}, "above"),
    "terms": ({"setting": "cap_f", "L": 128, "null": "0.5 x vanilla rise"}, "below"),
}


@pytest.mark.parametrize("name", sorted(LABELS))
@pytest.mark.parametrize("side", sorted(OUTCOME))
def test_each_judge_reads_the_paired_interval(name, side):
    labels, direction = LABELS[name]
    verdict = EXPERIMENTS[name].judge(_row(direction, side, **labels))
    assert verdict.outcome == OUTCOME[side], verdict.reason


@pytest.mark.parametrize("name", sorted(LABELS))
def test_too_few_passages_is_inconclusive(name):
    labels, direction = LABELS[name]
    verdict = EXPERIMENTS[name].judge(_row(direction, "predicted", n=N - 2, **labels))
    assert verdict.outcome == "inconclusive"


def test_remainder_decides_on_the_trained_model_under_the_papers_split():
    rows = [_row("below", "other", run="random-init", reference="zero"),
            _row("below", "other", run="trained", reference="mean"),
            _row("below", "predicted", run="trained", reference="zero")]  # fmt: skip
    assert EXPERIMENTS["remainder"].verdict(rows).outcome == "agrees"


def test_keys_decides_on_the_damage_matched_null():
    rows = [_row("below", "across", edit="fast_keys", null="slow_matched"),
            _row("below", "other", edit="fast_keys", null="slow_keys"),
            _row("below", "predicted", edit="fast_keys", null="none")]  # fmt: skip
    assert EXPERIMENTS["keys"].verdict(rows).outcome == "inconclusive"


def test_terms_needs_a_rise_before_it_judges_the_caps():
    vanilla = {"setting": "vanilla", "L": 128, "null": "in-length loss"}
    cap = {"setting": "cap_f", "L": 128, "null": "0.5 x vanilla rise"}
    verdict = EXPERIMENTS["terms"].verdict
    assert verdict([_row("above", "predicted", **vanilla),
                    _row("below", "predicted", **cap)]).outcome == "agrees"  # fmt: skip
    assert verdict([_row("above", "predicted", **vanilla),
                    _row("below", "other", **cap)]).outcome == "disagrees"  # fmt: skip
    no_rise = verdict([_row("above", "across", **vanilla), _row("below", "predicted", **cap)])
    assert no_rise.outcome == "inconclusive" and "no rise beyond L" in no_rise.reason
    assert verdict([]).outcome == "inconclusive"
