r"""Figure 2: ``r_split`` for every layer and head, trained against the random-init control.

docs/theory.md section 5: ``r_split`` is the Pearson correlation of ``W`` with
``f + g`` over causal pairs; the seed paper reports 0.959 for a Llama-family
model. Panel (a) maps it per ``(layer, head)`` for the trained model; panel
(b) shows its distribution over heads for the trained model and for the same
architecture at random initialisation, with the paper's value marked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import finite, panel_label, require_rows, whole_numbers
from ropesplit.figures.style import OKABE_ITO, SEQUENTIAL, check_width, new_figure, styled

__all__ = ["r_split_figure"]

Rows = Sequence[Mapping[str, Any]]


def _layer_head_map(heads: Rows, stat: str) -> np.ndarray:
    """``(L, H)`` array of ``stat`` from rows with ``layer``, ``head``; NaN where absent."""
    L = 1 + max(int(r["layer"]) for r in heads)
    H = 1 + max(int(r["head"]) for r in heads)
    values = np.full((L, H), np.nan)
    for row in heads:
        value = row[stat]
        values[int(row["layer"]), int(row["head"])] = np.nan if value is None else float(value)
    return values


def r_split_figure(
    heads: Rows,
    control_heads: Rows | None = None,
    *,
    paper: float | None = None,
    stat: str = "r_split",
    width: float | str = "double",
) -> Figure:
    r"""Heatmap of ``stat`` over (layer, head) and its distribution, trained vs control.

    ``heads`` and ``control_heads`` are ``analyze`` JSON rows (``layer``,
    ``head`` and ``stat``, default ``r_split`` :math:`=\mathrm{corr}(W, f+g)`).
    ``paper`` (the seed paper's 0.959, passed by the caller) is drawn as a
    labelled vertical line.
    """
    require_rows("heads", heads, ("layer", "head", stat))
    if control_heads is not None:
        require_rows("control_heads", control_heads, ("layer", "head", stat))
    values = _layer_head_map(heads, stat)  # (L, H)
    L, H = values.shape
    trained = finite(values)
    if trained.size == 0:
        raise RopesplitError(f"heads hold no finite {stat}")
    control = finite([r[stat] for r in control_heads]) if control_heads is not None else None
    pooled = trained if control is None else np.concatenate([trained, control])
    # the colour scale and the bins span the data (a fixed 0-1 scale painted the
    # map one colour and put every head in one bin)
    low, high = float(pooled.min()), float(pooled.max())
    pad = max(0.02 * (high - low), 1e-3)
    low, high = low - pad, high + pad

    inches = check_width(width)
    single = inches < 5.0
    with styled():
        fig = new_figure(inches, 4.6 if single else 2.6)
        gs = fig.add_gridspec(2, 1) if single else fig.add_gridspec(1, 2)
        ax_map, ax_hist = fig.add_subplot(gs[0]), fig.add_subplot(gs[1])
        image = ax_map.imshow(
            values.T, cmap=SEQUENTIAL, vmin=low, vmax=high, aspect="auto", interpolation="nearest",
            origin="lower", extent=(-0.5, L - 0.5, -0.5, H - 0.5),
        )  # fmt: skip  # heads on y, layers on x: (H, L) after the transpose
        ax_map.set_xlabel("layer")
        ax_map.set_ylabel("query head")
        for axis in (ax_map.xaxis, ax_map.yaxis):  # layers and heads are whole numbers: a
            axis.set_major_locator(whole_numbers())  # 2-layer model ticks 0, 1 only
        fig.colorbar(image, ax=ax_map, label=f"{stat} (correlation)")
        panel_label(ax_map, "a")

        bins = np.linspace(low, high, 31).tolist()
        ax_hist.hist(trained, bins=bins, color=OKABE_ITO["blue"], alpha=0.75,
                     label=f"trained (mean {trained.mean():.3f})")  # fmt: skip
        if control is not None and control.size:
            ax_hist.hist(control, bins=bins, histtype="step", linewidth=1.4,
                         color=OKABE_ITO["vermillion"],
                         label=f"random init (mean {control.mean():.3f})")  # fmt: skip
        if paper is not None:
            ax_hist.axvline(paper, color=OKABE_ITO["black"], linestyle="--", linewidth=1.0,
                            label=f"paper (Han & Ji 2025): {paper}")  # fmt: skip
        ax_hist.set_xlabel(f"{stat} per head (correlation)")
        ax_hist.set_ylabel("heads")
        ax_hist.yaxis.set_major_locator(whole_numbers())  # a count of heads
        ax_hist.legend(loc="upper left")
        panel_label(ax_hist, "b")
    return fig
