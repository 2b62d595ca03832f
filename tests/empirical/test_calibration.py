"""The decision rule on models whose answer is known: null, planted, planted twins.

At random initialisation nothing is learned: every claim must read "agrees" in at
most 5% of the runs (20 tiny Llamas and 3 random inits of the embedded model's
architecture). With the keys' deviation planted in the slow pairs the split
holds by construction: claims 2-4 must agree in at least 80% of the runs, and
must not (at most 5%) when the twins are planted too. The same runs judged by a
rule that accepts a claim on any one condition fail the null and the planted
twins: the tests can fail.
"""

from __future__ import annotations

import pytest

from ropesplit.empirical.measurement.calibration import (
    agree_rates,
    any_condition_verdict,
    calibration,
    plant_lowfreq_keys,
    tiny_config,
)

pytestmark = pytest.mark.slow  # the calibration: 43 claims runs (make test-fast leaves it out)

NULL_MAX = 0.05  # at most 5% "agrees" where nothing was learned (the rule's level: 2.5%)
PLANTED_MIN = 0.80  # at least 80% where the split holds by construction
SPLIT_CLAIMS = (2, 3, 4)


@pytest.fixture(scope="module")
def runs():
    return calibration(seeds=20, planted=10, embedded=3, families=("llama",))


def _violations(rates) -> list[str]:
    bad = [f"null claim {c}: {r['k']}/{r['n']}" for c, r in rates["null"].items()
           if r["rate"] > NULL_MAX]  # fmt: skip
    bad += [f"planted claim {c}: {rates['planted'][c]['k']}/{rates['planted'][c]['n']}"
            for c in SPLIT_CLAIMS if rates["planted"][c]["rate"] < PLANTED_MIN]  # fmt: skip
    bad += [f"planted twins claim {c}: {rates['planted twins'][c]['k']}" for c in SPLIT_CLAIMS
            if rates["planted twins"][c]["rate"] > NULL_MAX]  # fmt: skip
    return bad


def test_the_arms_hold_the_runs_asked_for(runs):
    arms = [r["arm"] for r in runs]
    assert arms.count("null") == 23 and arms.count("planted") == 10
    assert arms.count("planted twins") == 10
    assert sum(r["model"] == "SmolLM2-135M architecture" for r in runs) == 3


def test_random_init_agrees_rarely_and_planted_models_usually(runs):
    rates = agree_rates(runs)
    assert not _violations(rates), _violations(rates)
    for claim, rate in rates["null"].items():  # each rate with its exact interval
        assert rate["n"] == 23 and rate["low"] <= rate["rate"] <= rate["high"], claim


def test_a_rule_accepting_any_one_condition_fails_both_checks(runs):
    bad = _violations(agree_rates(runs, any_condition_verdict))
    assert any(v.startswith("null") for v in bad), bad
    assert any(v.startswith("planted twins") for v in bad), bad


def test_planting_makes_the_fast_half_of_every_key_constant():
    """The planted model's keys deviate only in the low-frequency half (known truth for the arm)."""
    import torch

    from ropesplit.empirical import capture, load_model
    from ropesplit.numerics.emergence import pair_energy
    from ropesplit.numerics.rope import low_half

    cfg = tiny_config("llama", base=1e9, bias=True)
    model = plant_lowfreq_keys(load_model(cfg, seed=3), 3)
    cache = capture(model, torch.randint(0, 128, (40,), generator=torch.Generator().manual_seed(1)))
    for layer in cache.layers:
        energy = pair_energy(layer.k.double().numpy())  # (Hkv, P)
        fast = low_half(layer.theta) == 0.0
        assert energy[:, fast].max() < 1e-9 * energy[:, ~fast].max()
    with pytest.raises(ValueError, match="needs a key bias"):
        plant_lowfreq_keys(load_model(tiny_config("llama"), seed=0), 0)
