"""The length experiment: rows, verdicts and figure 8 on known truth.

The subject is ``test_lminfinite.periodic_model``: a positional head whose logit returns to
its peak at distance 2L, so its loss must rise beyond 2L without the cap and not with it,
while f never leaves its trained range (f is A cos(pi Delta / L), which spans [-A, A]
within L already). The verdict must say so: the loss claims agree, the claim that the rise
goes with f leaving its range disagrees. Nothing here is true by construction of the rows.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import llama_config
from test_lminfinite import periodic_model, sticky_tokens

from ropesplit.commands.perturb import tables
from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.experiments import EXPERIMENTS, ExperimentSettings, run_experiments
from ropesplit.empirical.experiments.length import (
    EXPERIMENT,
    checks,
    judge,
    length_rows,
    training_length,
    verdict,
)
from ropesplit.empirical.experiments.lminfinite import LAMBDA_SETTINGS
from ropesplit.empirical.model.loading import load_model
from ropesplit.figures.length import length_figure

L = 16


@pytest.fixture(scope="module")
def periodic():
    return periodic_model(L)


@pytest.fixture(scope="module")
def rows(periodic):
    return length_rows(periodic, sticky_tokens(8 * L), layers=[0], length=L, n_global=2)


def by(rows, setting, bucket):
    (row,) = [r for r in rows if r["setting"] == setting and r["bucket"] == bucket]
    return row


def test_rows_cover_every_setting_and_length(rows):
    assert [(r["setting"], r["bucket"]) for r in rows] == [
        (s, b) for s in LAMBDA_SETTINGS for b in ("1x", "2x", "4x", "8x")
    ]
    assert by(rows, "vanilla", "8x")["stop"] == 8 * L - 1  # N - 1 predicting positions
    for r in rows:  # the curve lies inside its bucket; the row's loss is the bucket mean
        assert all(r["start"] <= c < r["stop"] for c in r["curve_position"])
        assert len(r["curve_loss"]) == len(r["curve_position"]) == len(r["curve_in_length"])
    for s in LAMBDA_SETTINGS:  # every setting is the same computation inside L (causal)
        assert by(rows, s, "1x")["loss"] == pytest.approx(by(rows, "vanilla", "1x")["loss"])
    json.dumps(rows)  # JSON-ready


def test_the_periodic_model_rises_only_without_the_cap(rows):
    assert by(rows, "vanilla", "8x")["ratio"] > 1.3
    assert by(rows, "cap only", "8x")["ratio"] < 1.05
    assert by(rows, "LM-Infinite", "8x")["ratio"] < 1.05
    # f = A cos(pi Delta / L) never leaves [-A, A], the range seen at distances <= L
    assert all(r["f_outside"] == 0.0 for r in rows)
    assert all(r["f_outside_query"] == 0.0 for r in rows)  # per query too: the range is [-A, A]
    assert all(0.0 <= r["g_outside_null"] <= 1.0 for r in rows)


def test_the_verdict_reports_what_happened(rows):
    judged = checks(rows)
    assert judged["vanilla rises"].outcome == "agrees"
    assert judged["LM-Infinite near"].outcome == "agrees"
    assert judged["f goes with the rise"].outcome == "disagrees"  # the rise came with f in range
    assert "rose all the same" in judged["f goes with the rise"].reason
    overall = verdict(rows)
    assert overall.outcome == "disagrees" and "[vanilla rises: agrees]" in overall.reason
    assert judge(by(rows, "vanilla", "1x")).outcome == "inconclusive"
    assert judge(by(rows, "vanilla", "8x")).outcome == "agrees"


def _row(setting, bucket, start, ratio, f_out, g_out=0.0, g_null=0.0):
    return {"setting": setting, "bucket": bucket, "start": start, "L": 10, "ratio": ratio,
            "f_outside": f_out, "f_outside_query": f_out, "g_outside": g_out,
            "g_outside_null": g_null}  # fmt: skip


def _table(vanilla, lminf, mask=(1.0, 0.2), cap=(1.0, 0.0), g_out=0.0, g_null=0.0):
    out = []
    for setting, (ratio, f_out) in (("vanilla", vanilla), ("cap only", cap),
                                    ("mask only", mask), ("LM-Infinite", lminf)):  # fmt: skip
        out.append(_row(setting, "1x", 0, 1.0, 0.0))
        out.append(_row(setting, "2x", 10, ratio, f_out, g_out, g_null))
    return out


@pytest.mark.parametrize(
    "table, expected",
    [
        (_table((2.0, 0.5), (1.0, 0.0)), {"vanilla rises": "agrees",
                                          "LM-Infinite near": "agrees",
                                          "f goes with the rise": "agrees",
                                          "g in range": "agrees"}),
        (_table((1.0, 0.5), (1.5, 0.0)), {"vanilla rises": "disagrees",
                                          "LM-Infinite near": "disagrees",
                                          "f goes with the rise": "disagrees"}),
        (_table((2.0, 0.5), (1.0, 0.0), g_out=0.2), {"g in range": "disagrees"}),
        # g judged against its in-length null, not against 0
        (_table((2.0, 0.5), (1.0, 0.0), g_out=0.2, g_null=0.195), {"g in range": "agrees"}),
    ],
)  # fmt: skip
def test_each_check_can_go_either_way(table, expected):
    judged = checks(table)
    for name, outcome in expected.items():
        assert judged[name].outcome == outcome, (name, judged[name].reason)


def test_text_within_l_is_inconclusive(periodic):
    short = length_rows(periodic, sticky_tokens(L), layers=[0], length=L)
    assert {r["bucket"] for r in short} == {"1x"}
    assert verdict(short).outcome == "inconclusive"


def test_g_shift_is_zero_in_layer_0_and_measured_beyond():
    config = llama_config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                           num_hidden_layers=2, intermediate_size=48, vocab_size=64,
                           max_position_embeddings=128, head_dim=8,
                           ropesplit_train_length=16)  # fmt: skip
    loaded = load_model(config, seed=0)
    ids = np.random.default_rng(0).integers(0, 64, 128)
    first = length_rows(loaded, ids, layers=[0], length=16)
    second = length_rows(loaded, ids, layers=[1], length=16)
    assert all(r["g_shift"] == 0.0 for r in first)  # layer 0's q/k precede any attention
    assert by(second, "LM-Infinite", "8x")["g_shift"] > 1e-3
    assert by(second, "LM-Infinite", "1x")["g_shift"] < 1e-5  # causal: same inside L


def test_registry_runs_it_each_setting_from_its_own_pass(periodic):
    assert EXPERIMENTS["length"] is EXPERIMENT
    assert training_length(periodic) == L
    record = run_experiments(periodic, torch.as_tensor(sticky_tokens(8 * L)),
                             experiments=["length"], settings=ExperimentSettings(layers=(0,)))
    about = record["experiments"]["length"]
    assert about["own_capture"] == [f"length: {s}" for s in LAMBDA_SETTINGS]
    assert about["verdict"] == "disagrees"
    assert all(r["verdict"] in ("agrees", "disagrees", "inconclusive") for r in record["length"])
    text = tables(record)
    assert "LM-Infinite" in text and "curve_loss" not in text  # the curves stay in the JSON
    json.dumps(record)


@pytest.mark.parametrize("width", ["single", "double"])
def test_figure_8_draws_from_the_rows(rows, width):
    fig = length_figure(rows, width=width)
    assert len(fig.axes) == 3
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == [*LAMBDA_SETTINGS, "in-length (windows of L)"]


def test_figure_8_refuses_rows_without_curves(rows):
    with pytest.raises(RopesplitError, match="has no 'curve_loss'"):
        length_figure([{k: v for k, v in r.items() if k != "curve_loss"} for r in rows])
