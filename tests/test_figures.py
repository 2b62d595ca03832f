"""Figures (issue 6): each a pure function of plain data, labelled, in both widths, byte-stable.

Inputs are tiny synthetic arrays and rows with the shapes the layers produce;
no model is loaded here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ropesplit.errors import RopesplitError
from ropesplit.figures.bound import bound_figure, sweep_figure
from ropesplit.figures.decomposition import decomposition_figure
from ropesplit.figures.experiments import distance_figure
from ropesplit.figures.heads import r_split_figure
from ropesplit.figures.length import length_figure
from ropesplit.figures.pairs import bound_weight, pair_energy_figure
from ropesplit.figures.perturbation import perturbation_figure
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


def _intervention(name, width):
    from ropesplit.figures.interventions import INTERVENTION_FIGURES, intervention_figure

    labels, stat, null, _ = INTERVENTION_FIGURES[name]
    return intervention_figure(_intervention_rows(labels, stat, null), experiment=name,
                               width=width)  # fmt: skip


# name: a call drawing that figure at a given width
FIGURES = {
    "decomposition": lambda w: decomposition_figure(**_split(), width=w),
    "r_split": lambda w: r_split_figure(_heads(), _heads(-0.4), paper=0.959, width=w),
    "pair_energy": lambda w: pair_energy_figure(
        THETA, _energy(0), _energy(1), _energy(2), _energy(3), distances=(1, 16), width=w
    ),
    "bound": lambda w: bound_figure(_bound_samples(), width=w),
    "sweep": lambda w: sweep_figure(_sweep_rows(), width=w),
    "perturbation": lambda w: perturbation_figure(
        _order_rows(), _position_rows(), paper_thresholds=(0.05, 0.10), width=w
    ),
    "distance": lambda w: distance_figure(_distance_rows(), width=w),
    "length": lambda w: length_figure(_length_rows(), width=w),
    **{name: (lambda w, name=name: _intervention(name, w))
       for name in ("remainder", "keys", "terms", "shuffle")},
}


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


@pytest.mark.parametrize("name", FIGURES)
@pytest.mark.parametrize("width", ["single", "double"])
def test_figure_is_labelled_and_sized(name, width):
    fig = FIGURES[name](width)
    assert fig.get_size_inches()[0] == pytest.approx(check_width(width))
    assert_labelled(fig)


@pytest.mark.parametrize("name", FIGURES)
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
    assert len(images) == 4
    limits = {im.get_clim() for im in images}
    assert len(limits) == 1
    low, high = limits.pop()
    assert low == -high > -np.inf
    causal = np.tril(np.ones((N, N), dtype=bool))
    shown = np.concatenate([parts[k][causal] for k in "WfgE"])
    assert high == pytest.approx(np.quantile(np.abs(shown), 0.995))
    for im, key in zip(images, "WfgE", strict=True):
        drawn = np.ma.filled(im.get_array(), np.nan)
        assert np.isnan(drawn[~causal]).all()
        np.testing.assert_array_equal(drawn[causal], parts[key][causal])


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
    order_ax, position_ax, bound_ax = fig.axes
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
    np.testing.assert_allclose(lines["jitter: bound"].get_ydata(), [0.1, 0.4, 1.6])
    np.testing.assert_allclose(lines["swap: bound"].get_ydata(), [0.07, 0.28, 1.12])
    assert "jitter: g in own run" in lines and "swap: measured" in lines


def test_perturbation_without_position_rows_has_one_panel():
    fig = perturbation_figure(_order_rows())
    assert len(fig.axes) == 1
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
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["vanilla", "cap only", "mask only", "LM-Infinite", "in-length (windows of L)"]
    with pytest.raises(RopesplitError, match="^length rows row 0 has no 'g_hi'"):
        length_figure([{k: v for k, v in rows[0].items() if k != "g_hi"}])

