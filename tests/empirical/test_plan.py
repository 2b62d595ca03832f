"""The run's plan (empirical/measurement/plan.py) and the tokens axis that never outgrows the run.

The plan counts the forward passes before the first one runs; on a tiny model the count
is the number of passes the claims run then makes, kind by kind.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_llama

from ropesplit.claims.records import DEFAULT_GRID_TOKENS, ClaimsSettings, grid_tokens
from ropesplit.claims.registry import CONTROL_SEEDS
from ropesplit.empirical.measurement.claims_run import run_claims
from ropesplit.empirical.measurement.plan import Kind, Plan, claims_plan, warmup
from ropesplit.empirical.model.corpus import PassageIds
from ropesplit.empirical.model.loading import random_init_twin


@pytest.mark.parametrize(("tokens", "given", "axis"), [
    (128, None, [128]),
    (300, None, [256, 300]),
    (512, None, [256, 512]),
    (1024, None, [256, 512, 1024]),
    (128, [1024], [128, 1024]),  # --grid-tokens says so
])  # fmt: skip
def test_the_tokens_axis_never_goes_past_the_run_unless_asked(tokens, given, axis):
    assert DEFAULT_GRID_TOKENS == (256, 512)
    assert grid_tokens(tokens, given) == axis


@pytest.mark.slow  # a claims run
def test_the_plan_counts_the_passes_the_claims_run_makes(capsys):
    """Every forward pass of the base model is counted: the capture's and the word order's,
    trained, shuffled-frequency null and twins; the plan said the same number first."""
    loaded = tiny_llama(2)
    twins = {s: random_init_twin(loaded, s) for s in CONTROL_SEEDS}
    ids = torch.randint(0, 128, (8, 80), generator=torch.Generator().manual_seed(0))
    passages = PassageIds([f"p{k}" for k in range(8)], ids, 80, 0, "given")
    seen: list[str] = []
    for name, model in [("trained", loaded), *((f"twin {s}", t) for s, t in twins.items())]:
        model.model.base_model.register_forward_pre_hook(lambda m, a, name=name: seen.append(name))
    said: list[str] = []
    run_claims(loaded, ClaimsSettings(tokens=80, grid_tokens=(80,), passages=8, order_passages=8),
               controls=twins, passage_ids=passages, on_stage=said.append)  # fmt: skip
    plan = claims_plan([80], 1, range(8), range(8), 8)
    warm = 6  # the warm-up: an untimed and two timed plain passes, and as many captures
    assert said[0].startswith(f"plan: {plan.passes} forward passes")
    assert len(seen) - warm == plan.passes
    twin_passes = sum(name.startswith("twin") for name in seen)
    assert twin_passes == next(k.passes for k in plan.kinds if k.name == "random-init twins")


def test_the_estimate_is_affine_in_tokens_from_the_warmup():
    plan = Plan([Kind("a", 2, 4, 100, True), Kind("b", 1, 8, 50, False)],
                cost={True: (0.5, 0.01), False: (0.0, 0.001)})  # fmt: skip
    assert plan.passes == 3
    assert plan.seconds == pytest.approx(4 * (0.5 + 100 * 0.01) + 8 * 50 * 0.001)
    assert "about 0.1 min" in plan.text()
    assert math.isnan(Plan([Kind("a", 1, 1, 10, True)]).seconds)
    cost = warmup(tiny_llama(1), 32)
    for fixed, per_token in cost.values():
        assert fixed >= 0 and per_token > 0
    # a capture (with its statistics) costs more than a plain pass, at any length
    assert cost[True][0] + 64 * cost[True][1] > cost[False][0] + 64 * cost[False][1]
