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

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import panel_label, require_rows
from ropesplit.figures.style import OKABE_ITO, new_figure, styled

__all__ = ["forest_figure", "tolerance_figure"]

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
        ax.set_xlabel("tokens moved by nested adjacent swaps (% of the passage)")
        ax.set_ylabel("damage D (log perplexity ratio)")
        ax.legend(loc="lower right", frameon=False, fontsize=6)  # clear of the rate labels
        panel_label(ax, "a")
    return fig


def forest_figure(rows: Sequence[Mapping[str, Any]], *, width: float | str = "double") -> Figure:
    """One panel per claim and primary condition (``condition``, 1 when absent): each
    model's estimate and interval, the threshold, the paper's value, the null."""
    require_rows("forest rows", rows, ("model", "claim", "measure", "estimate", "threshold",
                                       "origin", "verdict", "robustness", "paper", "null"))
    panels = sorted({(int(r["claim"]), int(r.get("condition", 1))) for r in rows})
    models = list(dict.fromkeys(str(r["model"]) for r in rows))
    y = {m: float(len(models) - 1 - k) for k, m in enumerate(models)}
    with styled():
        fig = new_figure(width, 0.55 + len(panels) * (0.35 + 0.3 * len(models)))
        axes = np.atleast_1d(fig.subplots(len(panels), 1, squeeze=False)[:, 0])
        for ax, (claim, condition) in zip(axes, panels, strict=True):
            mine = [r for r in rows if int(r["claim"]) == claim
                    and int(r.get("condition", 1)) == condition]  # fmt: skip
            for r in mine:
                yi = y[str(r["model"])]
                est, null = r["estimate"], r["null"]
                if null and null.get("interval"):
                    iv = null["interval"]
                    ax.errorbar(iv["mean"], yi - 0.22, xerr=[[iv["mean"] - iv["low"]],
                                                             [iv["high"] - iv["mean"]]],
                                fmt="o", ms=3, color="grey", capsize=2)  # fmt: skip
                if est:
                    ax.errorbar(est["mean"], yi, xerr=[[est["mean"] - est["low"]],
                                                       [est["high"] - est["mean"]]],
                                fmt="s", ms=4, color=OKABE_ITO["blue"], capsize=2)  # fmt: skip
                ax.annotate(f"{r['verdict']}, {r['robustness']}", (1.0, yi),
                            xycoords=("axes fraction", "data"), ha="left", va="center",
                            fontsize=6, xytext=(3, 0), textcoords="offset points")  # fmt: skip
            first = mine[0]
            style = "-" if first["origin"] == "paper" else "--"
            ax.axvline(float(first["threshold"]), color="black", lw=0.7, ls=style)
            if first["paper"] is not None:
                ax.axvline(float(first["paper"]), color=OKABE_ITO["vermillion"], lw=0.9)
            ax.set_yticks([y[m] for m in models], models)
            ax.set_ylabel("model")
            ax.set_xlabel(first["measure"])
            ax.set_ylim(-0.7, len(models) - 0.3)
            nulls = [r["null"]["measure"] for r in mine if r["null"] and r["null"].get("interval")]
            ax.set_title(f"claim {claim}.{condition}: {first['measure']} (threshold "
                         f"{first['threshold']:g}, "
                         f"{first['origin']}'s"
                         + (f"; grey: {nulls[0]}" if nulls else "")
                         + (f"; vermillion: the paper's {first['paper']:g}"
                            if first["paper"] is not None else "")
                         + ")", fontsize=7, loc="left")  # fmt: skip
        panel_label(axes[0], "a")
    return fig
