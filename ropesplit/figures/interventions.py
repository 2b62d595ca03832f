r"""Figures 13-16: the interventions, each edit beside its null, and the paired difference.

One drawing for the four intervention experiments (edits inside the forward pass;
``empirical.experiments.remainder``, ``keys``, ``terms``, ``shuffle``): per
row of the experiment (a setting), panel (a) shows the edit's statistic and
its null's, each a mean over passages with its 95% t interval; panel (b)
the paired difference over passages with its interval against 0, the
decision the verdict reads (the predicted side shaded), each row's verdict
beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import panel_label, require_rows
from ropesplit.figures.style import OKABE_ITO, check_width, fit_text, new_figure, styled

__all__ = ["INTERVENTION_FIGURES", "intervention_figure"]

Rows = Sequence[Mapping[str, Any]]

# experiment -> (row label fields, statistic, null statistic or None, axis label)
INTERVENTION_FIGURES: dict[str, tuple[tuple[str, ...], str, str | None, str]] = {
    "remainder": (("run", "reference"), "lr_remainder", "lr_structured",
                  "log loss ratio (E dropped; null: the structured term of its size)"),
    "keys": (("edit", "null"), "S", "S_null", "jitter sensitivity S (edit; null)"),
    "terms": (("setting",), "rise", None, "rise of the loss beyond L (log ratio)"),
    "shuffle": (("run", "null"), "lr_shuffle", "lr_null",
                "log loss ratio (shuffled; null: shuffled within halves)"),
}  # fmt: skip


_TICK_LABELS = 1.2  # inches: the rows' names and the axis label left of panel (a)


def intervention_figure(rows: Rows, *, experiment: str, width: float | str = "double") -> Figure:
    """Edit and null per row (a) and the paired difference against 0 (b), with verdicts."""
    if experiment not in INTERVENTION_FIGURES:
        raise RopesplitError(f"experiment must be one of {', '.join(INTERVENTION_FIGURES)}, "
                             f"got {experiment!r}")  # fmt: skip
    labels, stat, null, axis = INTERVENTION_FIGURES[experiment]
    need = [*labels, stat, f"{stat}_low", f"{stat}_high", "diff", "diff_low", "diff_high",
            "direction", "verdict"]  # fmt: skip
    require_rows(f"{experiment} rows", rows, need + ([null] if null else []))
    names = [", ".join(str(r[k]) for k in labels) for r in rows]
    y = np.arange(len(rows))[::-1].astype(float)
    panels = check_width(width) - _TICK_LABELS  # inches left for the two panels, 3 : 2
    with styled():
        fig = new_figure(width, 0.5 + 0.42 * len(rows) + 0.6)
        ax_a, ax_b = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3, 2]})
        pairs = ((stat, OKABE_ITO["blue"], 0.12), (null, OKABE_ITO["orange"], -0.12))
        for name, colour, shift in pairs:
            if name is None:
                continue
            mean = np.array([r[name] for r in rows], dtype=float)
            low = np.array([r[f"{name}_low"] for r in rows], dtype=float)
            high = np.array([r[f"{name}_high"] for r in rows], dtype=float)
            ax_a.errorbar(mean, y + shift, xerr=[mean - low, high - mean], fmt="o", ms=4,
                          color=colour, capsize=2,
                          label="edit" if name == stat else "null")  # fmt: skip
        ax_a.axvline(0.0, color="black", lw=0.6)
        ax_a.set_yticks(y, names)
        ax_a.set_xlabel(fit_text(axis, 0.6 * panels))
        ax_a.set_ylabel(", ".join(labels))
        if null is not None:
            ax_a.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False,
                        borderaxespad=0.1)  # above the panel, clear of every row
        panel_label(ax_a, "a")
        diff = np.array([r["diff"] for r in rows], dtype=float)
        low = np.array([r["diff_low"] for r in rows], dtype=float)
        high = np.array([r["diff_high"] for r in rows], dtype=float)
        ax_b.errorbar(diff, y, xerr=[diff - low, high - diff], fmt="s", ms=4,
                      color=OKABE_ITO["vermillion"], capsize=2)  # fmt: skip
        ax_b.axvline(0.0, color="black", lw=0.6)
        for yi, r in zip(y, rows, strict=True):
            ax_b.annotate(str(r["verdict"]), (0.98, yi + 0.3), xycoords=("axes fraction", "data"),
                          ha="right", va="center", fontsize=6)  # fmt: skip
        ax_b.set_xlabel(fit_text("paired difference\n(predicted side shaded)", 0.4 * panels))
        lo, hi = ax_b.get_xlim()
        for yi, r in zip(y, rows, strict=True):
            side = (lo, 0.0) if r["direction"] == "below" else (0.0, hi)
            ax_b.fill_betweenx([yi - 0.4, yi + 0.4], *side, color=OKABE_ITO["green"], alpha=0.12,
                               linewidth=0)  # fmt: skip
        ax_b.set_xlim(lo, hi)
        ax_b.set_ylim(y.min() - 0.6, y.max() + 0.6)
        panel_label(ax_b, "b")
    return fig
