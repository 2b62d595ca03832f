"""Figures: each a pure function of plain data, labelled, in both widths, byte-stable.

Inputs are tiny synthetic arrays and rows with the shapes the layers produce;
no model is loaded here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from matplotlib.backends.backend_agg import FigureCanvasAgg

from ropesplit.core.errors import RopesplitError
from ropesplit.figures.bound import bound_figure, sweep_figure
from ropesplit.figures.decomposition import decomposition_figure
from ropesplit.figures.experiments import distance_figure
from ropesplit.figures.heads import r_split_figure
from ropesplit.figures.length import length_figure
from ropesplit.figures.pairs import bound_weight, pair_energy_figure
from ropesplit.figures.perturbation import perturbation_figure
from ropesplit.figures.registry import draw
from ropesplit.figures.style import DOUBLE, SINGLE, check_width, save_figure

N, P, L, H = 12, 4, 3, 2
THETA = 10000.0 ** (-np.arange(P) / P)  # (P,)


def _split(n: int = N) -> dict[str, np.ndarray]:
    """A W = f + g + E set with the right structure: f depends on i - j, g on j."""
    rng = np.random.default_rng(0)
    i, j = np.indices((n, n))
    f = np.cos(0.3 * (i - j))  # (N, N) a function of the distance only
    g = np.broadcast_to(rng.normal(size=n), (n, n)).copy()  # (N, N) a function of the key only
    E = 0.05 * rng.normal(size=(n, n))
    return {"W": f + g + E, "f": f, "g": g, "E": E}


def _heads(offset: float = 0.0) -> list[dict]:
    return [
        {"layer": layer, "head": head, "r_split": 0.5 + 0.1 * layer + 0.01 * head + offset}
        for layer in range(L)
        for head in range(H)
    ]


def _energy(seed: int = 0) -> np.ndarray:
    return np.abs(np.random.default_rng(seed).normal(size=(L, P))) + 0.1  # (L, P)


def _bound_samples() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    bound = np.abs(rng.normal(size=50)) + 1e-3
    return {"layer 0 head 0": (bound, bound * rng.uniform(0, 1, 50)),
            "synthetic: random": (bound, bound * rng.uniform(0, 1, 50))}  # fmt: skip


def _sweep_rows() -> list[dict]:
    return [
        {"base": base, "high_share": share, "r_split": 1 - share * base / 2e5}
        for base in (1e4, 1e5)
        for share in (0.0, 0.5, 1.0)
    ]


def _order_rows() -> list[dict]:
    return [
        {"scheme": scheme, "rate": rate, "moved": 0.9 * rate, "loss": 2.0 * (1 + k * rate),
         "ratio": 1 + k * rate, "ci_low": 1 + k * rate - 0.01, "ci_high": 1 + k * rate + 0.02}
        for k, scheme in ((1.0, "adjacent"), (2.0, "subset"))
        for rate in (0.02, 0.05, 0.1, 0.2)
    ]  # fmt: skip


def _position_rows() -> list[dict]:
    rows = []
    for scheme in ("jitter", "swap"):
        for t in (1, 4, 16):
            bound = 0.1 * t if scheme == "jitter" else 0.07 * t
            rows.append({"scheme": scheme, "t": t, "loss": 2.0, "ratio": 1 + 0.01 * t,
                         "ci_low": 1 + 0.009 * t, "ci_high": 1 + 0.011 * t, "bound_W": bound,
                         "bound_f": 0.6 * bound, "bound_E": 0.4 * bound,
                         "measured_W": 0.3 * bound, "g_change": 0.01 * t,
                         "tightness": 0.5})  # fmt: skip
    return rows


def _distance_rows() -> list[dict]:
    rows = [
        {"scope": "head", "layer": layer, "head": head, "distance": d,
         "key_corr": 1 - 1e-4 * d - 0.01 * head, "query_share": 1 - 1e-4 * d,
         "remainder_share": 1e-4 * d + 0.1 * layer}
        for layer in (0, 2) for head in range(H) for d in (16, 64, 1024)
    ]  # fmt: skip
    return rows + [{"scope": "all", "layer": None, "head": None, "distance": 16,
                    "key_corr": 0.0, "query_share": 9.0, "remainder_share": 9.0}]  # fmt: skip


def _length_rows() -> list[dict]:
    """The length experiment's rows: four settings, two position buckets of L = 4."""
    rows = []
    for k, setting in enumerate(("vanilla", "cap only", "mask only", "LM-Infinite")):
        for bucket, start, stop in (("1x", 0, 4), ("2x", 4, 7)):
            spread = 1.0 if start == 0 else 1.0 + 0.5 * (k == 0)
            row = {"setting": setting, "bucket": bucket, "start": start, "stop": stop, "L": 4,
                   "loss": 2.0 * spread, "ratio": spread,
                   "curve_position": [start + 0.5, start + 2.5],
                   "curve_loss": [2.0 * spread, 2.1 * spread], "curve_in_length": [2.0, 2.1]}
            for x, width in (("f", spread), ("g", 0.9)):
                row |= {f"{x}_lo": -width, f"{x}_hi": width, f"{x}_outside": (spread - 1) / 4}
            rows.append(row)  # fmt: skip
    return rows


def _intervention_rows(labels, stat, null) -> list[dict]:
    """Two rows of an intervention experiment: edit and null intervals, paired difference."""
    rows = []
    for k, verdict in enumerate(("agrees", "disagrees")):
        row = {label: f"{label}{k}" for label in labels}
        for name, mean in ((stat, 0.3 + 0.1 * k), (null, 0.2)):
            if name:
                row |= {name: mean, f"{name}_low": mean - 0.05, f"{name}_high": mean + 0.05}
        row |= {"diff": 0.1 * (2 * k - 1), "diff_low": 0.1 * (2 * k - 1) - 0.03,
                "diff_high": 0.1 * (2 * k - 1) + 0.03, "direction": "below", "verdict": verdict}
        rows.append(row)
    return rows


def _intervention(name):
    from ropesplit.figures.interventions import INTERVENTION_FIGURES

    labels, stat, null, _ = INTERVENTION_FIGURES[name]
    return {"rows": _intervention_rows(labels, stat, null)}


# name: fresh keyword arguments of that figure (what gather builds), tiny and synthetic
KWARGS = {
    "decomposition": _split,
    "r_split": lambda: {"heads": _heads(), "control_heads": _heads(-0.4), "paper": 0.959},
    "pair_energy": lambda: {"theta": THETA, "energy_k": _energy(0), "energy_k_control": _energy(1),
                            "energy_q": _energy(2), "energy_q_control": _energy(3),
                            "distances": (1.0, 16.0)},
    "bound": lambda: {"samples": _bound_samples()},
    "sweep": lambda: {"rows": _sweep_rows()},
    "perturbation": lambda: {"order": _order_rows(), "position": _position_rows(),
                             "paper_thresholds": (0.05, 0.10)},
    "distance": lambda: {"rows": _distance_rows()},
    "length": lambda: {"rows": _length_rows()},
    **{name: (lambda name=name: _intervention(name))
       for name in ("remainder", "keys", "terms", "shuffle")},
    "tolerance": lambda: {"curves": _tolerance_curves(), "paper": [0.05, 0.10]},
    "forest": lambda: {"rows": _forest_rows()},
    "cells": lambda: {"claims": _cells_claims()},
}  # fmt: skip


def _cells_claims() -> list[dict]:
    """Two claims over a 2 x 2 grid (figure 21): the headline cell, verdicts that differ."""
    claims = []
    for claim, threshold, direction, origin in ((2, 0.9, "above", "toolkit"),
                                                (5, 0.5, "below", "paper")):
        cells = [{"label": f"{tokens} {corpus}", "headline": (tokens, corpus) == (512, "pydoc"),
                  "verdict": "agrees" if k % 2 else "weaker than the paper",
                  "estimate": {"mean": threshold + 0.02 * (k - 1), "low": threshold - 0.04,
                               "high": threshold + 0.05}}
                 for k, (tokens, corpus) in enumerate((t, c) for t in (256, 512)
                                                     for c in ("pydoc", "prose"))]
        claims.append({"claim": claim, "measure": f"stat{claim}", "threshold": threshold,
                       "origin": origin, "direction": direction, "axes": ["tokens", "corpus"],
                       "cells": cells})
    return claims


def _tolerance_curves() -> list[dict]:
    """Two corpora's damage curves, rising with the share moved (figure 19)."""
    rates = [2.5, 5.0, 10.0, 20.0, 50.0]
    return [{"label": f"{name}, 512 tokens", "n": 8, "rates": rates,
             "mean": [scale * r / 50 for r in rates], "low": [scale * r / 60 for r in rates],
             "high": [scale * r / 40 for r in rates]}
            for name, scale in (("pydoc", 0.6), ("prose", 0.4))]  # fmt: skip


def _forest_rows() -> list[dict]:
    """Two models x two claims (figure 20), one with a null and the paper's value."""
    rows = []
    for model, shift in (("SmolLM2", 0.0), ("tiny", -0.2)):
        for claim, threshold, origin, paper in ((2, 0.9, "toolkit", 0.959), (4, 0.5, "toolkit",
                                                                               None)):
            mean = 0.85 + shift if claim == 2 else 0.65 + shift
            rows.append({"model": model, "claim": claim, "measure": f"stat{claim}",
                         "estimate": {"mean": mean, "low": mean - 0.02, "high": mean + 0.02},
                         "threshold": threshold, "origin": origin, "verdict": "agrees",
                         "robustness": "robust", "paper": paper,
                         "null": {"measure": "null", "interval": {"mean": 0.5, "low": 0.49,
                                                                  "high": 0.51}}})  # fmt: skip
    return rows


def figure_kwargs(name: str) -> dict:
    """Fresh keyword arguments of figure ``name`` (arrays are never shared between tests)."""
    return KWARGS[name]()


# name: a call drawing that figure at a given width (through the registry, as the report does)
FIGURES = {name: (lambda w, name=name: draw(name, figure_kwargs(name), w)) for name in KWARGS}


def test_intervention_figures_refuse_rows_without_their_numbers():
    from ropesplit.figures.interventions import intervention_figure

    rows = _intervention_rows(("run",), "lr_shuffle", "lr_null")
    with pytest.raises(RopesplitError, match="^shuffle rows"):
        intervention_figure([{k: v for k, v in r.items() if k != "diff_low"} for r in rows],
                            experiment="shuffle")  # fmt: skip
    with pytest.raises(RopesplitError, match="^experiment must be one of"):
        intervention_figure(rows, experiment="melt")


def assert_labelled(fig) -> None:
    """Every axis that shows tick labels has an axis label; colour bars too."""
    fig.canvas.draw()
    for ax in fig.axes:
        for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
            shown = axis.get_visible() and any(t.get_text() for t in axis.get_ticklabels())
            assert not shown or label.strip(), f"unlabelled axis in {ax.get_title()!r}"
    data_axes = [ax for ax in fig.axes if not hasattr(ax, "_colorbar")]
    assert data_axes
    assert any(ax.get_xlabel() for ax in data_axes)
    assert any(ax.get_ylabel() for ax in data_axes)


def data_axes(fig) -> list:
    """The panels that show data: not colour bars, not the empty slots legends sit in."""
    return [ax for ax in fig.axes if ax.axison and not hasattr(ax, "_colorbar")]


def all_legends(fig) -> list:
    """Every legend of ``fig``: the figure's own and each axes'."""
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]


def assert_legends_clear(fig) -> None:
    """No legend overlaps a panel that shows data (a reviewer: legends on top of curves)."""
    canvas = FigureCanvasAgg(fig)  # a renderer: where each legend and panel really sits
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = all_legends(fig)
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in data_axes(fig):
            assert not box.overlaps(ax.get_window_extent(renderer)), (
                f"a legend covers panel {ax.get_title()!r}")
            for text in (ax.xaxis.label, ax.yaxis.label, ax.title, *ax.get_xticklabels()):
                if text.get_text():  # nor any panel's labels and titles
                    assert not box.overlaps(text.get_window_extent(renderer)), text.get_text()


def visible_ticks(axis) -> list[float]:
    """The major tick positions of ``axis`` inside its view (the ones drawn)."""
    low, high = sorted(axis.get_view_interval())
    return [float(t) for t in axis.get_majorticklocs() if low - 1e-9 <= t <= high + 1e-9]


def assert_integer_ticks(axis) -> None:
    ticks = visible_ticks(axis)
    assert ticks and all(t == round(t) for t in ticks), ticks


@pytest.mark.parametrize("name", FIGURES)
@pytest.mark.parametrize("width", ["single", "double"])
def test_figure_is_labelled_and_sized(name, width):
    fig = FIGURES[name](width)
    assert fig.get_size_inches()[0] == pytest.approx(check_width(width))
    assert_labelled(fig)


# the byte-for-byte rerun, 1 to 4 s a figure: these four (a heatmap, lines, intervals, a
# grid of cells) in make test-fast, every figure in make test
RERUN_FAST = ("r_split", "sweep", "remainder", "cells")


@pytest.mark.parametrize("name", [name if name in RERUN_FAST else
                                  pytest.param(name, marks=pytest.mark.slow)
                                  for name in FIGURES])  # fmt: skip
def test_pdf_and_png_written_byte_identical_on_rerun(name, tmp_path):
    digests = []
    for run in range(2):
        out = tmp_path / str(run)
        out.mkdir()
        fig = FIGURES[name]("single")
        files = [save_figure(fig, out / f"{name}.{fmt}") for fmt in ("pdf", "png")]
        digests.append([p.read_bytes() for p in files])
    assert digests[0] == digests[1]
    pdf, png = digests[0]
    assert pdf.startswith(b"%PDF") and png.startswith(b"\x89PNG")
    assert b"CreationDate" not in pdf and b"Matplotlib" not in pdf and b"Software" not in png


def test_widths_are_the_paper_columns():
    assert (check_width("single"), check_width("double")) == (SINGLE, DOUBLE) == (3.3, 6.9)
    for bad in ("triple", 0, -2.0, math.nan):
        with pytest.raises(RopesplitError, match="^width must be"):
            check_width(bad)


def test_unknown_format_and_missing_folder_are_one_line_errors(tmp_path):
    fig = FIGURES["sweep"]("single")
    with pytest.raises(RopesplitError, match="^figure format must be one of pdf, png, svg, got"):
        save_figure(fig, tmp_path / "x.gif")
    with pytest.raises(RopesplitError, match="^cannot write .*: folder .* does not exist"):
        save_figure(fig, tmp_path / "missing" / "x.png")


def test_decomposition_shares_one_symmetric_colour_scale_and_blanks_non_causal():
    parts = _split()
    fig = decomposition_figure(**parts)
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == 5  # W, f, g, E on one scale, then f row-centred on its own
    limits = {im.get_clim() for im in images[:4]}
    assert len(limits) == 1
    low, high = limits.pop()
    assert low == -high > -np.inf
    causal = np.tril(np.ones((N, N), dtype=bool))
    shown = np.concatenate([parts[k][causal] for k in "WfgE"])
    assert high == pytest.approx(np.quantile(np.abs(shown), 0.995))
    for im, key in zip(images, "WfgE", strict=False):
        drawn = np.ma.filled(im.get_array(), np.nan)
        assert np.isnan(drawn[~causal]).all()
        np.testing.assert_array_equal(drawn[causal], parts[key][causal])


@pytest.mark.parametrize("window", [None, 4])
def test_decomposition_row_centred_panel_has_zero_row_means_over_the_shown_pairs(window):
    """Reviewer: f alone is horizontal stripes (a per-query offset softmax ignores); the fifth
    panel removes each row's mean over its causal pairs, so the positional part shows."""
    parts = _split()
    i, j = np.indices((N, N))
    mask = (j <= i) if window is None else (j <= i) & (i - j < window)
    parts["f"] = parts["f"] + 5.0 * np.arange(N)[:, None]  # a large per-query offset
    fig = decomposition_figure(**parts, mask=mask)
    images = [im for ax in fig.axes for im in ax.get_images()]
    centred = np.ma.filled(images[4].get_array(), np.nan)  # (N, N)
    assert "row mean" in images[4].axes.get_title()
    assert np.isnan(centred[~mask]).all() and np.isfinite(centred[mask]).all()
    row_means = np.nansum(np.where(mask, centred, np.nan), axis=1) / mask.sum(axis=1)
    np.testing.assert_allclose(row_means, 0.0, atol=1e-12)
    expected = parts["f"] - np.array([parts["f"][r][mask[r]].mean() for r in range(N)])[:, None]
    np.testing.assert_allclose(centred[mask], expected[mask], rtol=1e-12, atol=1e-12)
    # its own symmetric colour scale, from its own entries: the offset no longer sets it
    own = float(np.quantile(np.abs(centred[mask]), 0.995))
    assert images[4].get_clim() == pytest.approx((-own, own))
    assert images[4].get_clim() != images[0].get_clim()


def test_row_centred_leaves_rows_without_shown_pairs_blank():
    from ropesplit.figures.decomposition import row_centred

    mask = np.array([[False, False], [True, True]])
    out = row_centred([[3.0, 4.0], [1.0, 5.0]], mask)
    assert np.isnan(out[0]).all() and out[1].tolist() == [-2.0, 2.0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.update(W=p["W"][:-1]), "^W must be square"),
        (lambda p: p.update(E=p["E"][:, :-1]), "^E must have the shape of W"),
        (lambda p: p["g"].__setitem__((3, 1), np.nan), "^W, f, g, E must be finite"),
        (lambda p: p.update(f=np.zeros(N)), "^f must have 2 dimensions"),
    ],
)
def test_decomposition_rejects_bad_input(change, message):
    parts = _split()
    change(parts)
    with pytest.raises(RopesplitError, match=message):
        decomposition_figure(**parts)


def test_r_split_heatmap_puts_each_head_in_its_cell_and_marks_the_paper():
    heads = _heads()
    fig = r_split_figure(heads, _heads(-0.4), paper=0.959)
    (image,) = fig.axes[0].get_images()
    grid = np.asarray(image.get_array())  # (H, L): heads on y, layers on x
    for row in heads:
        assert grid[row["head"], row["layer"]] == row["r_split"]
    hist = fig.axes[1]
    assert any(list(line.get_xdata()) == [0.959, 0.959] for line in hist.get_lines())
    assert "paper (Han & Ji 2025): 0.959" in hist.get_legend_handles_labels()[1]


def test_r_split_rejects_rows_without_the_statistic():
    with pytest.raises(RopesplitError, match="^heads row 0 has no 'r_split'"):
        r_split_figure([{"layer": 0, "head": 0}])
    with pytest.raises(RopesplitError, match="^heads must hold at least one row"):
        r_split_figure([])


@settings(max_examples=50, deadline=None)
@given(
    theta=st.lists(st.floats(0, 4, allow_nan=False), min_size=1, max_size=8),
    distance=st.floats(-1e4, 1e4, allow_nan=False),
)
@example(theta=[math.pi], distance=1.0)  # sin(pi/2) = 1: the weight's maximum 2
def test_bound_weight_matches_loop_twin(theta, distance):
    fast = bound_weight(theta, distance)
    slow = [2.0 * abs(math.sin(t * distance / 2.0)) for t in theta]  # float64 loop twin
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-12)
    assert ((fast >= 0) & (fast <= 2 + 1e-12)).all()


def test_pair_energy_plots_per_layer_shares_averaged():
    energy = _energy()
    fig = pair_energy_figure(THETA, energy, distances=(4,))
    ax = fig.axes[0]
    (trained,) = [line for line in ax.get_lines() if line.get_label() == "trained"]
    expected = (energy / energy.sum(axis=1, keepdims=True)).mean(axis=0)
    np.testing.assert_allclose(trained.get_ydata(), expected, rtol=1e-12)
    (weight,) = fig.axes[1].get_lines()
    np.testing.assert_allclose(weight.get_ydata(), bound_weight(THETA, 4), rtol=1e-12)


def test_pair_energy_rejects_mismatched_or_empty_energy():
    with pytest.raises(RopesplitError, match=r"^energy_k must have one column per pair \(4\)"):
        pair_energy_figure(THETA, np.ones((L, P + 1)))
    with pytest.raises(RopesplitError, match="^energy_k has a layer with zero deviation energy"):
        pair_energy_figure(THETA, np.zeros((L, P)))


def test_bound_figure_refuses_a_point_above_the_line():
    bound = np.array([1.0, 2.0])
    with pytest.raises(RopesplitError, match="^|E| exceeds its bound in bad"):
        bound_figure({"bad": (bound, np.array([0.5, 2.5]))})


def test_bound_figure_omits_zero_pairs_and_says_so():
    fig = bound_figure({"head": (np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.5, 0.0]))})
    ax = fig.axes[0]
    (points,) = ax.collections
    np.testing.assert_array_equal(points.get_offsets(), [[1.0, 0.5]])
    assert "head (2 with 0 omitted)" in ax.get_legend_handles_labels()[1]


def test_sweep_draws_one_line_per_base_sorted_by_share():
    rows = _sweep_rows()[::-1]
    fig = sweep_figure(rows)
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["base b = 10000", "base b = 100000"]
    for line, base in zip(lines, (1e4, 1e5), strict=True):
        np.testing.assert_array_equal(line.get_xdata(), [0.0, 0.5, 1.0])
        np.testing.assert_allclose(line.get_ydata(), [1 - s * base / 2e5 for s in (0, 0.5, 1)])


def test_perturbation_plots_ratio_against_measured_share_with_intervals_and_thresholds():
    fig = perturbation_figure(_order_rows(), _position_rows(), paper_thresholds=(0.05, 0.10))
    order_ax, position_ax, bound_ax = data_axes(fig)
    adjacent = next(c for c in order_ax.containers if c.get_label() == "adjacent")
    np.testing.assert_allclose(adjacent.lines[0].get_xdata(), [1.8, 4.5, 9, 18])  # measured %
    np.testing.assert_allclose(adjacent.lines[0].get_ydata(), [1.02, 1.05, 1.1, 1.2])
    (bars,) = adjacent.lines[2]  # the interval [ci_low, ci_high], not a symmetric spread
    low_high = np.array([seg[:, 1] for seg in bars.get_segments()])
    np.testing.assert_allclose(low_high, [[r - 0.01, r + 0.02] for r in (1.02, 1.05, 1.1, 1.2)])
    assert "measured" in order_ax.get_xlabel()
    labels = order_ax.get_legend_handles_labels()[1]
    assert "paper: ~5% harmless" in labels and "paper: >10% hurts" in labels
    assert [c.get_label() for c in position_ax.containers] == ["jitter", "swap"]
    lines = {line.get_label(): line for line in bound_ax.get_lines()}
    np.testing.assert_allclose(lines["jitter: bound on the change of W"].get_ydata(),
                               [0.1, 0.4, 1.6])  # fmt: skip
    np.testing.assert_allclose(lines["swap: bound on the change of W"].get_ydata(),
                               [0.07, 0.28, 1.12])  # fmt: skip
    assert "jitter: change of g (perturbed run's q, k)" in lines
    assert "swap: measured change of W" in lines


def test_perturbation_panel_c_says_in_plain_words_what_it_shows():
    """Reviewer: "(g: 0)" was cryptic; the title and legend now say it in words."""
    fig = perturbation_figure(_order_rows(), _position_rows(), paper_thresholds=(0.05, 0.10))
    bound_ax = data_axes(fig)[2]
    assert bound_ax.get_title() == "how far the logits move"
    texts = [t.get_text() for legend in all_legends(fig) for t in legend.get_texts()]
    assert "(same q, k: g does not change)" in texts
    assert "bound on the change of W" in texts and "measured change of W" in texts
    assert not any("(g:" in ax.get_title() or "(g:" in t for ax in fig.axes for t in texts)


def test_perturbation_without_position_rows_has_one_panel():
    fig = perturbation_figure(_order_rows())
    assert len(data_axes(fig)) == 1
    with pytest.raises(RopesplitError, match="^order row 0 has no 'ratio'"):
        perturbation_figure([{"scheme": "adjacent", "moved": 0.0}])


def test_distance_draws_head_means_and_ignores_summary_rows():
    rows = _distance_rows()
    fig = distance_figure(rows)
    (key_corr,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("key")]
    assert key_corr.get_label() == "key effect of W^D vs of g (4 heads)"
    heads = [r for r in rows if r["scope"] == "head"]
    for x, y in zip(key_corr.get_xdata(), key_corr.get_ydata(), strict=True):
        expected = np.mean([r["key_corr"] for r in heads if r["distance"] == x])
        assert y == pytest.approx(expected)
    with pytest.raises(RopesplitError, match="^distance rows miss key_corr"):
        distance_figure(heads[:-1])


def test_length_bars_span_the_measured_ranges():
    rows = _length_rows()
    fig = length_figure(rows)
    f_ax = fig.axes[1]
    spans = sorted(tuple(line.get_ydata()) for line in f_ax.get_lines())
    assert spans == sorted((r["f_lo"], r["f_hi"]) for r in rows)
    (legend,) = all_legends(fig)
    assert [t.get_text() for t in legend.get_texts()] == [
        "vanilla", "cap only", "mask only", "LM-Infinite", "in-length (windows of L)"]
    with pytest.raises(RopesplitError, match="^length rows row 0 has no 'g_hi'"):
        length_figure([{k: v for k, v in rows[0].items() if k != "g_hi"}])



@pytest.mark.parametrize("name", ["pair_energy", "perturbation", "length"])
@pytest.mark.parametrize("width", ["single", "double"])
def test_legends_sit_clear_of_the_curves(name, width):
    assert_legends_clear(FIGURES[name](width))


def test_pair_energy_has_one_y_axis_per_panel_and_the_weight_on_its_own():
    """Reviewer: two y-axes on one panel confused; the bound's weight is its own panel."""
    fig = FIGURES["pair_energy"]("double")
    FigureCanvasAgg(fig).draw()  # positions after the layout
    panels = data_axes(fig)
    assert len(panels) == 3  # keys, queries, weight
    assert len({tuple(ax.get_position().bounds) for ax in panels}) == 3  # no twin axes
    keys, queries, weight = panels
    assert "key" in keys.get_ylabel() and "query" in queries.get_ylabel()
    assert "bound weight" in weight.get_ylabel()
    for ax in (keys, queries):
        assert {line.get_label() for line in ax.get_lines()} <= {"trained", "random init"}
    np.testing.assert_allclose(weight.get_lines()[1].get_ydata(), bound_weight(THETA, 16.0))
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1


def _long_rows() -> list[dict]:
    """Length rows of L = 128 over 1024 tokens: buckets starting at 0, L, 2L and 4L."""
    rows = []
    for setting in ("vanilla", "LM-Infinite"):
        for bucket, start, stop in (("1x", 0, 128), ("2x", 128, 256), ("4x", 256, 512),
                                    ("8x", 512, 1024)):  # fmt: skip
            row = {"setting": setting, "bucket": bucket, "start": start, "stop": stop, "L": 128,
                   "loss": 2.0, "ratio": 1.0, "curve_position": [start + 1.0, stop - 1.0],
                   "curve_loss": [2.0, 2.0 + stop / 1024], "curve_in_length": [2.0, 2.0]}
            for x in "fg":
                row |= {f"{x}_lo": -1.0, f"{x}_hi": 1.0, f"{x}_outside": 0.0}
            rows.append(row)  # fmt: skip
    return rows


@pytest.mark.parametrize("width", ["single", "double"])
def test_length_marks_name_each_multiple_of_l_and_the_in_length_line_stands_out(width):
    fig = length_figure(_long_rows(), width=width)
    loss = data_axes(fig)[0]
    FigureCanvasAgg(fig).draw()
    ticks = [t.get_text() for t in loss.get_xticklabels()]  # each multiple of L, named
    assert ticks == ["0", "L\n128", "2L\n256", "4L\n512", "8L\n1024"]
    marked = sorted(line.get_xdata()[0] for line in loss.get_lines() if line.get_linestyle() == ":")
    assert marked == [128, 256, 512]  # the dotted lines sit on named ticks
    lines = {line.get_label(): line for line in loss.get_lines() if line.get_label()[0] != "_"}
    in_length = lines.pop("in-length (windows of L)")
    assert set(lines) == {"vanilla", "LM-Infinite"}
    for line in lines.values():  # drawn above, wider, and in a colour no setting has
        assert in_length.get_zorder() > line.get_zorder()
        assert in_length.get_linewidth() > line.get_linewidth()
        assert in_length.get_color() != line.get_color()
    assert_legends_clear(fig)


def test_layer_and_head_axes_tick_whole_numbers_only():
    """Reviewer: a 2-layer model's layer axis showed ticks at -0.5 and 0.5."""
    for layers, heads in ((2, 3), (1, 1), (30, 9)):
        rows = [{"layer": layer, "head": head, "r_split": 0.5 + 0.01 * layer + 0.001 * head}
                for layer in range(layers) for head in range(heads)]  # fmt: skip
        for width in ("single", "double"):
            fig = r_split_figure(rows, rows, paper=0.959, width=width)
            fig.canvas.draw()
            heat, hist = data_axes(fig)
            for axis in (heat.xaxis, heat.yaxis, hist.yaxis):  # layers, heads, head counts
                assert_integer_ticks(axis)
            assert set(visible_ticks(heat.xaxis)) <= set(range(layers))
            if layers == 2:
                assert visible_ticks(heat.xaxis) == [0.0, 1.0]


@pytest.mark.parametrize("name", ["pair_energy", "decomposition"])
def test_pair_and_token_axes_tick_whole_numbers_only(name):
    fig = FIGURES[name]("double")
    fig.canvas.draw()
    for ax in data_axes(fig):
        if "pair" in ax.get_xlabel() or "key j" in ax.get_xlabel():
            assert_integer_ticks(ax.xaxis)


def _report_forest_rows() -> list[dict]:
    """Figure 20 as the report draws it: ten panels, a long model name, long measure names."""
    rows = []
    for claim in range(1, 6):
        for condition, measure in ((1, "lowfreq_share_k"), (2, "lowfreq_share_k - "
                                                               "lowfreq_share_k_control")):
            rows.append({"model": "SmolLM2-135M-Instruct", "claim": claim,
                         "condition": condition, "measure": measure,
                         "estimate": {"mean": 0.895, "low": 0.89, "high": 0.9},
                         "threshold": 0.9, "origin": "toolkit", "paper": 0.959,
                         "verdict": "weaker than the paper", "robustness": "fragile",
                         "null": {"measure": "lowfreq_share_k_control",
                                  "interval": {"mean": 0.82, "low": 0.81, "high": 0.83}}})
    return rows


_LAID_OUT = {**FIGURES, "forest (as in the report)":
             lambda w: draw("forest", {"rows": _report_forest_rows()}, w)}


@pytest.mark.parametrize("name", _LAID_OUT)
@pytest.mark.parametrize("width", ["single", "double"])
def test_text_stays_inside_the_figure_and_the_layout_holds(name, width, recwarn):
    """No title, axis label, tick label or annotation is cut by the figure's edge, and the
    constrained layout is applied (it warns when text squeezes the panels to nothing)."""
    fig = _LAID_OUT[name](width)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer, edge = canvas.get_renderer(), fig.bbox
    for ax in data_axes(fig):
        low, high = sorted(ax.get_xlim())
        ticks = [t.label1 for t in ax.xaxis.get_major_ticks() if low <= t.get_loc() <= high]
        for text in (ax.title, ax.xaxis.label, ax.yaxis.label, *ticks, *ax.get_yticklabels(),
                     *ax.texts):
            if text.get_visible() and text.get_text():
                box = text.get_window_extent(renderer)
                assert edge.x0 - 1 <= box.x0 and box.x1 <= edge.x1 + 1, text.get_text()
    layout = [w for w in recwarn if "constrained_layout not applied" in str(w.message)]
    assert not layout, layout[0].message
