"""Figures 9 and 10: r_split under each reference, and |m_l| beside key deviation per pair."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import llama_config

from ropesplit.core.errors import RopesplitError
from ropesplit.figures.reference import reference_figure, reference_pairs_figure
from ropesplit.figures.registry import FIGURES
from ropesplit.numerics.reference import mean_rotation
from ropesplit.numerics.rope import frequencies
from ropesplit.report import figure_data

SPECS = ("zero", "distance:256", "distance:1000", "mean")


def _ci(mean):
    return {"mean": mean, "low": mean - 0.01, "high": mean + 0.02}


def test_reference_figure_draws_every_model_and_reference():
    record = {"by_reference": {s: {"r_split": _ci(0.8 + 0.05 * i)} for i, s in enumerate(SPECS)},
              "control": {"by_reference": {s: {"r_split": _ci(0.5)} for s in SPECS}},
              "protocol": {"controls": {"shuffled-theta": {"runs": 3, "by_reference": {
                  s: {"control": _ci(0.6)} for s in SPECS}}}}}  # fmt: skip
    data = figure_data.reference_data(record)
    assert list(data["series"]) == ["trained", "random init", "shuffled-theta (3 run(s))"]
    fig = reference_figure(**data, width="single")
    ax = fig.axes[0]
    lines = [c for c in ax.containers]  # one errorbar container per model
    assert len(lines) == 3
    np.testing.assert_allclose(lines[0].lines[0].get_ydata(), [0.8, 0.85, 0.9, 0.95])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["zero", "C = 256", "C = 1000", "mean"]
    with pytest.raises(RopesplitError, match="must have the references"):
        reference_figure({"a": {"zero": _ci(1)}, "b": {"mean": _ci(1)}})


def test_reference_pairs_figure_shows_the_energy_the_mean_leaves():
    theta = frequencies(16, 1e4)
    m = np.abs(mean_rotation(theta, 256).m)
    energy = np.random.default_rng(0).uniform(0.1, 1.0, size=(3, 8))
    fig = reference_pairs_figure(theta, m, energy, energy[::-1], width="double")
    share = (energy / energy.sum(1, keepdims=True)).mean(0)
    left = fig.axes[1].get_lines()[0].get_ydata()
    np.testing.assert_allclose(left, share * (1 - m**2), rtol=1e-12)
    assert left[0] > left[-1] * 10  # fast pairs: |m| ~ 0, their energy stays in the remainder
    with pytest.raises(RopesplitError, match="m_abs must be 8 values in"):
        reference_pairs_figure(theta, m + 1.0, energy)


def test_registered_as_figures_9_and_10():
    by_number = {spec.number: spec.name for spec in FIGURES}
    assert by_number[9] == "reference" and by_number[10] == "reference_pairs"


def test_reference_pairs_data_from_a_capture():
    import torch

    from ropesplit.empirical import capture, load_model

    config = llama_config(hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                           num_hidden_layers=2, intermediate_size=32, vocab_size=64,
                           max_position_embeddings=64)  # fmt: skip
    loaded = load_model(config, seed=0)
    cache = capture(loaded, torch.arange(20) % 64)
    data = figure_data.reference_pairs_data(cache, cache)
    theta = cache.layers[0].theta
    np.testing.assert_allclose(data["m_abs"], np.abs(mean_rotation(theta, 20).m))
    assert data["energy_k"].shape == (2, len(theta))
    np.testing.assert_array_equal(data["energy_k"], data["energy_k_control"])
    reference_pairs_figure(**data, width="single")
