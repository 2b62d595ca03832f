r"""Figures 19-20: claim 1's tolerance curve, and every claim across models (a forest plot).

- :func:`tolerance_figure`: the damage :math:`D(r)` (``numerics.tolerance``:
  the log perplexity ratio over every target after the first moved token)
  against the share of tokens moved, one curve per corpus and length with its
  95% t interval over passages, beside the chord from 0 to :math:`D(50\%)`
  (a damage linear in the dose) and the paper's 5% and 10% marks.
- :func:`forest_figure`: per claim and primary condition (a panel), each
  model's headline estimate with its 95% interval, its threshold (solid: the
  paper's; dashed: the toolkit's), and beside the first condition the paper's
  own number where it gives one and the first null's interval in grey; each
  row names its verdict and robustness.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import panel_label, require_rows
from ropesplit.figures.style import OKABE_ITO, Y_LABELS, check_width, fit_text, new_figure, styled

__all__ = ["forest_figure", "interval_point", "threshold_line", "tolerance_figure"]

_COLOURS = ("blue", "vermillion", "green", "orange", "purple", "sky")


def tolerance_figure(curves: Sequence[Mapping[str, Any]], paper: Sequence[float] = (0.05, 0.10),
                     *, width: float | str = "double") -> Figure:  # fmt: skip
    """Damage against the share moved (percent), one curve per ``curves`` entry (``label``,
    ``rates`` in percent, ``mean``, ``low``, ``high``, ``n``), with the chord to 50%."""
    require_rows("tolerance curves", curves, ("label", "rates", "mean", "low", "high", "n"))
    with styled():
        fig = new_figure(width, 2.6)
        ax = fig.subplots()
        for k, curve in enumerate(curves):
            rates = np.concatenate([[0.0], np.asarray(curve["rates"], dtype=float)])
            mean = np.concatenate([[0.0], np.asarray(curve["mean"], dtype=float)])
            low = np.concatenate([[0.0], np.asarray(curve["low"], dtype=float)])
            high = np.concatenate([[0.0], np.asarray(curve["high"], dtype=float)])
            if not (rates.size == mean.size == low.size == high.size):
                raise RopesplitError(f"curve {curve['label']!r}: rates and damages differ "
                                     "in length")
            colour = OKABE_ITO[_COLOURS[k % len(_COLOURS)]]
            ax.plot(rates, mean, "o-", color=colour, ms=3,
                    label=f"{curve['label']} (n = {curve['n']} passages)")  # fmt: skip
            ax.fill_between(rates, low, high, color=colour, alpha=0.2, lw=0)
            ax.plot([0.0, rates[-1]], [0.0, mean[-1]], ":", color=colour, lw=0.8)
        for rate in paper:
            ax.axvline(100 * rate, color="black", lw=0.6, ls="--")
            ax.annotate(f"paper: {100 * rate:g}%", (100 * rate, 1.0),
                        xycoords=("data", "axes fraction"), ha="left", va="top",
                        fontsize=6, xytext=(2, -2), textcoords="offset points")  # fmt: skip
        ax.axhline(0.0, color="black", lw=0.6)
        ax.set_xlabel(fit_text("tokens moved by nested adjacent swaps (% of the passage)",
                               check_width(width) - Y_LABELS))
        ax.set_ylabel("damage D (log perplexity ratio)")
        ax.legend(loc="lower right", frameon=False, fontsize=6)  # clear of the rate labels
        panel_label(ax, "a")
    return fig


def forest_figure(rows: Sequence[Mapping[str, Any]], *, width: float | str = "double") -> Figure:
    """One panel per claim and primary condition (``condition``, 1 when absent): each
    model's estimate and interval, the threshold, the paper's value, the null.

    At one column's width (below :data:`_NARROW` in) each row's verdict goes under its
    model's name and the titles wrap: beside the panel they would squeeze it to nothing."""
    require_rows("forest rows", rows, ("model", "claim", "measure", "estimate", "threshold",
                                       "origin", "verdict", "robustness", "paper", "null"))
    panels = sorted({(int(r["claim"]), int(r.get("condition", 1))) for r in rows})
    models = list(dict.fromkeys(str(r["model"]) for r in rows))
    y = {m: float(len(models) - 1 - k) for k, m in enumerate(models)}
    inches = check_width(width)
    narrow = inches < _NARROW
    room = inches - _LABELS if narrow else math.inf  # inches of a panel's title and x label
    by_panel = [[r for r in rows if (int(r["claim"]), int(r.get("condition", 1))) == panel]
                for panel in panels]  # fmt: skip
    titles = [fit_text(_forest_title(mine), room, 7.0) for mine in by_panel]
    xlabels = [fit_text(str(mine[0]["measure"]), room) for mine in by_panel]
    lines = sum(t.count("\n") for t in titles + xlabels)  # wrapped lines beyond the first
    per_model = 0.45 if narrow else 0.3  # a narrow row's label holds its verdict too
    with styled():
        fig = new_figure(width, 0.55 + len(panels) * (0.35 + per_model * len(models))
                         + 0.12 * lines)  # fmt: skip
        axes = np.atleast_1d(fig.subplots(len(panels), 1, squeeze=False)[:, 0])
        for ax, panel, title, xlabel in zip(axes, by_panel, titles, xlabels, strict=True):
            labels = dict.fromkeys(models, "")
            for r in panel:
                yi = y[str(r["model"])]
                est, null = r["estimate"], r["null"]
                if null and null.get("interval"):
                    interval_point(ax, null["interval"], yi - 0.22, colour="grey", marker="o",
                                   size=3)  # fmt: skip
                if est:
                    interval_point(ax, est, yi)
                verdict = f"{r['verdict']}, {r['robustness']}"
                if narrow:
                    labels[str(r["model"])] = "\n" + verdict
                else:
                    ax.annotate(verdict, (1.0, yi), xycoords=("axes fraction", "data"),
                                ha="left", va="center", fontsize=6, xytext=(3, 0),
                                textcoords="offset points")  # fmt: skip
            first = panel[0]
            threshold_line(ax, first["threshold"], first["origin"])
            if first["paper"] is not None:
                ax.axvline(float(first["paper"]), color=OKABE_ITO["vermillion"], lw=0.9)
            ax.set_yticks([y[m] for m in models], [m + labels[m] for m in models],
                          **({"fontsize": 6} if narrow else {}))  # fmt: skip
            if narrow:  # few ticks: a short axis would print them over each other
                ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
            ax.set_ylabel("model")
            ax.set_xlabel(xlabel)
            ax.set_ylim(-0.7, len(models) - 0.3)
            ax.set_title(title, fontsize=7, loc="left")
        panel_label(axes[0], "a")
    return fig


def interval_point(
    ax: Any,
    interval: Mapping[str, Any],
    y: float,
    *,
    colour: str = OKABE_ITO["blue"],
    marker: str = "s",
    size: float = 4,
) -> None:
    """One forest row: ``interval``'s mean (a ``marker``) with its 95% interval, at ``y``
    (figures 20 and 21)."""
    mean = interval["mean"]
    ax.errorbar(mean, y, xerr=[[mean - interval["low"]], [interval["high"] - mean]],
                fmt=marker, ms=size, color=colour, capsize=2)  # fmt: skip


def threshold_line(ax: Any, threshold: float, origin: str) -> None:
    """A forest panel's threshold: solid when it is the paper's, dashed when the toolkit's."""
    ax.axvline(float(threshold), color="black", lw=0.7, ls="-" if origin == "paper" else "--")


_NARROW = 5.0  # inches: below this the forest's verdicts and titles are laid out for a column
_LABELS = 1.4  # inches: a narrow forest's tick labels (model and verdict) left of the panels


def _forest_title(mine: Sequence[Mapping[str, Any]]) -> str:
    """A forest panel's title from its rows."""
    first = mine[0]
    nulls = [r["null"]["measure"] for r in mine if r["null"] and r["null"].get("interval")]
    return (f"claim {first['claim']}.{first.get('condition', 1)}: {first['measure']} "
            f"(threshold {first['threshold']:g}, {first['origin']}'s"
            + (f"; grey: {nulls[0]}" if nulls else "")
            + (f"; vermillion: the paper's {first['paper']:g}"
               if first["paper"] is not None else "")
            + ")")  # fmt: skip
