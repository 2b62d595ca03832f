"""Figures 11 and 12: drawn from plain data, the data built from a train record."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures.emergence import (
    PANELS,
    emergence_data,
    emergence_figure,
    emergence_pairs_figure,
)

STEPS = [0, 1, 10, 100]
P = 4


def _checkpoint(step: int, value: float, energy: list[float]) -> dict:
    summary = {name: {"mean": value, "low": value - 0.05, "high": value + 0.05}
               for name, _ in PANELS if name != "val_loss"}  # fmt: skip
    return {"step": step, "val_loss": 3.0 - value, "summary": summary,
            "theta": [1.0, 0.1, 0.01, 0.001], "energy_k": [energy, energy]}  # fmt: skip


def _record(bases=(10000.0, 100.0), seeds=(0, 1)) -> dict:
    runs = []
    for base in bases:
        for seed in seeds:
            shift = 0.1 * seed + (0.2 if base == 10000.0 else 0.0)
            cks = [_checkpoint(s, 0.5 + shift + 0.01 * i, [1.0, 1.0, 1.0 + i, 1.0 + 2 * i])
                   for i, s in enumerate(STEPS)]  # fmt: skip
            runs.append({"rope_base": base, "seed": seed, "checkpoints": cks,
                         "control": _checkpoint(0, 0.4, [1.0] * P)})  # fmt: skip
    return {"runs": runs, "config": {"seq_len": 128}, "unigram_entropy": 3.26}


def test_data_averages_seeds_and_bands_their_range() -> None:
    data = emergence_data(_record())
    base = data["emergence"]["runs"][0]
    assert base["label"] == "base 10000" and base["steps"] == STEPS
    assert base["mean"]["r_split"] == pytest.approx([0.75, 0.76, 0.77, 0.78])
    assert base["low"]["r_split"] == pytest.approx([0.7, 0.71, 0.72, 0.73])
    assert base["high"]["r_split"] == pytest.approx([0.8, 0.81, 0.82, 0.83])
    assert data["emergence"]["controls"]["base 100"]["r_split"] == pytest.approx(0.4)


def test_one_seed_bands_the_bootstrap_interval() -> None:
    base = emergence_data(_record(seeds=(0,)))["emergence"]["runs"][1]
    assert base["low"]["lowfreq_share_k"] == pytest.approx([0.45, 0.46, 0.47, 0.48])


def test_pair_shares_are_layer_means_at_first_middle_last() -> None:
    panel = emergence_data(_record())["emergence_pairs"]["panels"][0]
    assert panel["steps"] == [0, 10, 100]
    shares = np.asarray(panel["shares"])
    assert np.allclose(shares.sum(1), 1.0)
    assert np.allclose(shares[0], 0.25) and np.allclose(shares[2], np.array([1, 1, 4, 7]) / 13)


def test_figures_draw_at_both_widths_with_init_marked() -> None:
    data = emergence_data(_record())
    for width in ("single", "double"):
        fig = emergence_figure(**data["emergence"], width=width)
        assert isinstance(fig, Figure) and len(fig.axes) == len(PANELS)
        labels = [t.get_text() for t in fig.axes[1].get_xticklabels()]
        assert labels[0] == "init" and fig.axes[1].get_xscale() == "log"
        line = fig.axes[1].get_lines()[0]
        assert line.get_xdata()[0] == 0.5 and list(line.get_xdata()[1:]) == STEPS[1:]
        pairs = emergence_pairs_figure(**data["emergence_pairs"], width=width)
        assert len(pairs.axes) == 2


def test_bad_input_is_one_line() -> None:
    data = emergence_data(_record())["emergence"]
    broken = dict(data["runs"][0], steps=[0, 1])
    with pytest.raises(RopesplitError, match="^run 0 must hold one value per step"):
        emergence_figure([broken])
    with pytest.raises(RopesplitError, match="^runs must hold at least one run"):
        emergence_figure([])
    panel = emergence_data(_record())["emergence_pairs"]["panels"][0]
    with pytest.raises(RopesplitError, match=r"^shares must have shape \(3, 4\)"):
        emergence_pairs_figure([dict(panel, shares=np.ones((2, 4)))])
