r"""Figure 21: every claim in every cell of the grid (a forest plot: the report's first screen).

One panel per claim: each cell of the grid the claim depends on is a row, its
primary statistic (the first primary condition) as the mean with its 95%
interval, coloured by the cell's verdict; the threshold is the vertical line
(solid: the paper's; dashed: the toolkit's), the predicted side is shaded, and
the headline cell's label is bold. Panels run down two columns at two-column
width, one at one column's. Every number comes from ``claims.json``
(:func:`ropesplit.report.figure_data.cells_data`); the points and the threshold
are drawn as figure 20 draws them (:func:`ropesplit.figures.claims.interval_point`,
:func:`~ropesplit.figures.claims.threshold_line`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import require_rows
from ropesplit.figures.claims import interval_point, threshold_line
from ropesplit.figures.style import OKABE_ITO, check_width, fit_text, new_figure, styled

__all__ = ["VERDICT_COLOURS", "cells_figure"]

# a cell's verdict (ropesplit.claims.registry.VERDICTS) as a colour-blind-safe colour
VERDICT_COLOURS = {"agrees": OKABE_ITO["green"], "weaker than the paper": OKABE_ITO["orange"],
                   "disagrees": OKABE_ITO["vermillion"], "inconclusive": "#8c8c8c"}  # fmt: skip
_ROW = 0.105  # inches per cell
_PANEL = 5  # rows' worth of height a panel's title, x ticks and x label take
_MIN_ROWS = 5  # a panel of few cells is drawn this tall (its y label wraps to its height)
_LEGEND = 0.45  # inches for the legend (verdicts, headline, thresholds) at the bottom
_TWO_COLUMNS = 5.0  # inches: from this width on the panels run down two columns


def cells_figure(claims: Sequence[Mapping[str, Any]], *, width: float | str = "double") -> Figure:
    """One panel per entry of ``claims`` (``claim``, ``measure``, ``threshold``, ``origin``,
    ``direction``, ``axes``, ``cells``: each ``label``, ``estimate`` (mean, low, high, or
    None), ``verdict`` and ``headline``)."""
    require_rows("grid claims", claims, ("claim", "measure", "threshold", "origin", "direction",
                                         "axes", "cells"))  # fmt: skip
    for entry in claims:
        require_rows(f"claim {entry['claim']}'s cells", entry["cells"],
                     ("label", "estimate", "verdict", "headline"))  # fmt: skip
    inches = check_width(width)
    spans = [max(len(entry["cells"]), _MIN_ROWS) + _PANEL for entry in claims]
    columns = _columns(spans, 2 if inches >= _TWO_COLUMNS and len(claims) > 1 else 1)
    units = max(sum(spans[k] for k in column) for column in columns)
    with styled():
        fig = new_figure(width, units * _ROW + _LEGEND)
        outer = fig.add_gridspec(1, len(columns))
        for col, column in enumerate(columns):
            heights = [spans[k] for k in column]
            rest = units - sum(heights)  # a shorter column leaves the rest empty at its foot
            inner = outer[0, col].subgridspec(
                len(column) + (rest > 0), 1, height_ratios=heights + ([rest] if rest else [])
            )
            for row, k in enumerate(column):
                _panel(fig.add_subplot(inner[row, 0]), claims[k])
        seen = list(dict.fromkeys(c["verdict"] for entry in claims for c in entry["cells"]))
        handles = [
            Line2D(
                [],
                [],
                ls="none",
                marker="s",
                ms=4,
                color=VERDICT_COLOURS.get(v, OKABE_ITO["black"]),
            )
            for v in seen
        ]
        labels = [f"cell: {v}" for v in seen] + ["headline cell (bold label)"]
        handles.append(Line2D([], [], ls="none", marker="D", ms=4, mfc="none",
                              color=OKABE_ITO["black"]))  # fmt: skip
        for origin in dict.fromkeys(str(entry["origin"]) for entry in claims):
            paper = origin == "paper"
            handles.append(Line2D([], [], color="black", lw=0.7, ls="-" if paper else "--"))
            labels.append(f"threshold: the {'paper' if paper else 'toolkit'}'s")
        fig.legend(handles, labels, loc="outside lower center",
                   ncols=min(len(handles), 2 if inches < _TWO_COLUMNS else 4), fontsize=6,
                   handletextpad=0.3, columnspacing=1.0)  # fmt: skip
    return fig


def _columns(spans: Sequence[int], count: int) -> list[list[int]]:
    """The panels' indices split in order into ``count`` columns as even in height as can be."""
    if count == 1:
        return [list(range(len(spans)))]
    best = min(range(1, len(spans)), key=lambda k: max(sum(spans[:k]), sum(spans[k:])))
    return [list(range(best)), list(range(best, len(spans)))]


def _panel(ax: Any, entry: Mapping[str, Any]) -> None:
    """One claim: a row per cell, top to bottom in the record's order."""
    cells = entry["cells"]
    rows = max(len(cells), _MIN_ROWS)
    lows, highs = [float(entry["threshold"])], [float(entry["threshold"])]
    for k, cell in enumerate(cells):
        y = float(len(cells) - 1 - k)
        est = cell["estimate"]
        if not est:
            continue
        colour = VERDICT_COLOURS.get(str(cell["verdict"]), OKABE_ITO["black"])
        if cell["headline"]:
            interval_point(ax, est, y, colour=colour, marker="D", size=4)
            ax.plot(est["mean"], y, "D", ms=4, mfc="none", mec=OKABE_ITO["black"], mew=0.8)
        else:
            interval_point(ax, est, y, colour=colour, size=3)
        lows.append(float(est["low"]))
        highs.append(float(est["high"]))
    if len(lows) == 1:  # no cell has an estimate: the threshold alone
        lows.append(lows[0] - 1.0)
        highs.append(highs[0] + 1.0)
    pad = 0.08 * (max(highs) - min(lows)) or 0.05
    left, right = min(lows) - pad, max(highs) + pad
    threshold = float(entry["threshold"])
    if entry["direction"] not in ("above", "below"):
        raise RopesplitError(f"claim {entry['claim']}: direction must be above or below, "
                             f"got {entry['direction']!r}")  # fmt: skip
    side = (threshold, right) if entry["direction"] == "above" else (left, threshold)
    ax.axvspan(*side, color="#eeeeee", lw=0, zorder=0)
    threshold_line(ax, threshold, str(entry["origin"]))
    ax.set_xlim(left, right)
    ax.set_ylim(len(cells) - rows - 0.5 if rows > len(cells) else -0.7, len(cells) - 0.3)
    labels = [str(c["label"]) + ("" if c["estimate"] else " (n/a)") for c in cells]
    ax.set_yticks([float(len(cells) - 1 - k) for k in range(len(cells))], labels, fontsize=6)
    for tick, cell in zip(ax.get_yticklabels(), cells, strict=True):
        if cell["headline"]:
            tick.set_fontweight("bold")
    ax.tick_params(axis="y", length=0, pad=2)
    ax.tick_params(axis="x", labelsize=6)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
    axes = " · ".join(map(str, entry["axes"])) or "cell"
    ax.set_ylabel(fit_text(axes, rows * _ROW, 6.0), fontsize=6)  # the cells' axes, in order
    ax.set_xlabel(str(entry["measure"]), fontsize=6, labelpad=1)
    sign = ">" if entry["direction"] == "above" else "<"
    # right-aligned: a title longer than the data area reaches over the cell labels, never
    # past the figure's right edge
    ax.set_title(f"claim {entry['claim']} (predicted {sign} {threshold:g})", fontsize=7,
                 loc="right")  # fmt: skip
