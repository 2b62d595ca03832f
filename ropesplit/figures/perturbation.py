r"""Figure 6: word-order and position-id perturbation, the loss ratio beside the logit bound.

docs/theory.md section 4 (position perturbation): a pair whose distance changes
by ``tau`` moves its logit by at most

.. math:: s\sum_l |\tilde q_l|\,|\tilde k_l|\; 2|\sin(\theta_l \tau/2)|,

``g`` not at all (with the same ``q``, ``k``). Panel (a): the continuation
loss ratio (perturbed / original) against the measured share of context
tokens moved, per scheme, with 95% bootstrap intervals over seeds and the
paper's ~5% / ~10% word-order points marked. Panel (b): the same against the
position-id shift ``t``. Panel (c), "how far the logits move", when the rows
carry them: per scheme, the mean bound on the change of ``W`` for each pair's
actual distance change beside the measured change (same ``q``, ``k``; there
``g`` does not change at all), and ``g``'s change in the perturbed run's own
capture (layers >= 1), where ``q`` and ``k`` themselves move. Each legend
sits under its panel, clear of the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ropesplit.figures._checks import legend_slot, panel_label, require_rows
from ropesplit.figures.style import OKABE_ITO, check_width, new_figure, styled

__all__ = ["perturbation_figure"]

Rows = Sequence[Mapping[str, Any]]
_SCHEME_COLOURS = ("blue", "vermillion", "green", "orange", "purple")
_MARKERS = ("o", "s", "^", "D", "v")
_CHANGE_LINES: tuple[tuple[str, str, Any, str], ...] = (  # (key, what, style, marker)
    ("bound_W", "bound on the change of W", "-", ""),
    ("measured_W", "measured change of W", "", "o"),
    ("g_change", "change of g (perturbed run's q, k)", ":", "^"),
)
_G_ZERO = "(same q, k: g does not change)"
_SLOTS = (0.2, 0.12, 0.36)  # one column: the height of each panel's legend slot (per panel)


def _colour(index: int) -> str:
    return OKABE_ITO[_SCHEME_COLOURS[index % len(_SCHEME_COLOURS)]]


def _by_scheme(ax: Any, rows: Rows, x_key: str, scale: float) -> None:
    """One line per scheme: ``ratio`` with its interval ``[ci_low, ci_high]`` against ``x_key``."""
    schemes = list(dict.fromkeys(str(r["scheme"]) for r in rows))
    for index, scheme in enumerate(schemes):
        mine = sorted((r for r in rows if str(r["scheme"]) == scheme), key=lambda r: r[x_key])
        x = np.array([float(r[x_key]) * scale for r in mine])
        y = np.array([float(r["ratio"]) for r in mine])
        low = np.array([float(r.get("ci_low", r["ratio"])) for r in mine])
        high = np.array([float(r.get("ci_high", r["ratio"])) for r in mine])
        ax.errorbar(x, y, yerr=np.stack([y - low, high - y]), capsize=2,
                    marker=_MARKERS[index % len(_MARKERS)], color=_colour(index),
                    label=scheme)  # fmt: skip
    ax.axhline(1.0, color="#999999", linewidth=0.6, zorder=0)


def perturbation_figure(
    order: Rows,
    position: Rows | None = None,
    *,
    paper_thresholds: tuple[float, float] | None = None,
    width: float | str = "double",
) -> Figure:
    r"""Loss ratio against the perturbation's measured size, per scheme, with intervals.

    ``order`` rows carry ``scheme``, ``moved`` (measured share of context
    tokens moved, a fraction), ``ratio`` and optionally ``ci_low``,
    ``ci_high``; ``position`` rows ``scheme``, ``t``, ``ratio`` (and the
    interval) and optionally ``bound_W``, ``measured_W``, ``g_change`` (mean
    logit change, logit units). ``paper_thresholds`` (the paper's ~5% and
    ~10%, passed by the caller) are drawn as labelled vertical lines.
    """
    require_rows("order", order, ("scheme", "moved", "ratio"))
    panels = 1
    with_bounds = False
    if position is not None:
        require_rows("position", position, ("scheme", "t", "ratio"))
        panels = 2
        with_bounds = all(key in position[0] for key in ("bound_W", "measured_W"))
        panels += with_bounds
    inches = check_width(width)
    single = inches < 5.0
    with styled():
        fig = new_figure(inches, 2.5 * panels + 0.3 if single else 3.2)
        if single:  # each panel above its legend's slot
            ratios = [x for k in range(panels) for x in (1.0, _SLOTS[k])]
            gs = fig.add_gridspec(2 * panels, 1, height_ratios=ratios)
            cells = [(gs[2 * k, 0], gs[2 * k + 1, 0]) for k in range(panels)]
        else:  # the panels in a row, the legends in a row beneath
            gs = fig.add_gridspec(2, panels, height_ratios=[1.0, 0.36])
            cells = [(gs[0, k], gs[1, k]) for k in range(panels)]
        axes = [fig.add_subplot(top) for top, _ in cells]
        slots = [fig.add_subplot(bottom) for _, bottom in cells]
        _by_scheme(axes[0], order, "moved", 100.0)
        if paper_thresholds is not None:
            harmless, harmful = paper_thresholds
            axes[0].axvline(100 * harmless, color=OKABE_ITO["black"], linestyle=":",
                            linewidth=0.9, label=f"paper: ~{harmless:.0%} harmless")  # fmt: skip
            axes[0].axvline(100 * harmful, color=OKABE_ITO["black"], linestyle="--",
                            linewidth=0.9, label=f"paper: >{harmful:.0%} hurts")  # fmt: skip
        axes[0].set_xlabel("tokens moved, measured (% of context)")
        axes[0].set_ylabel("loss ratio, perturbed / original")
        axes[0].set_title("word order")
        legend_slot(slots[0], *axes[0].get_legend_handles_labels(), ncols=2, fontsize=6)
        panel_label(axes[0], "a")
        if position is not None:
            _by_scheme(axes[1], position, "t", 1.0)
            axes[1].set_xlabel("position-id shift t (tokens)")
            axes[1].set_ylabel("loss ratio, perturbed / original")
            axes[1].set_title("position ids")
            legend_slot(slots[1], *axes[1].get_legend_handles_labels(), ncols=2, fontsize=6)
            panel_label(axes[1], "b")
        if with_bounds:
            assert position is not None
            _changes(axes[2], slots[2], position)
    return fig


def _changes(ax: Any, slot: Any, position: Rows) -> None:
    """Panel (c): bound and measured logit change per scheme, and g's change in its own run."""
    schemes = list(dict.fromkeys(str(r["scheme"]) for r in position))
    drawn: set[str] = set()  # the quantities with a value: only they enter the legend
    for index, scheme in enumerate(schemes):
        rows = sorted((r for r in position if str(r["scheme"]) == scheme and float(r["t"]) > 0),
                      key=lambda r: r["t"])  # fmt: skip
        t = np.array([float(r["t"]) for r in rows])
        for key, what, style, marker in _CHANGE_LINES:
            values = np.array([float(r.get(key, np.nan)) for r in rows])
            if not np.isfinite(values).any():
                continue
            drawn.add(key)
            ax.plot(t, values, color=_colour(index), linestyle=style or "none",
                    marker=marker or None, markersize=3, label=f"{scheme}: {what}")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("position-id shift t (tokens)")
    ax.set_ylabel("mean |logit change| (logits)")
    ax.set_title("how far the logits move")
    shown = [line for line in _CHANGE_LINES if line[0] in drawn]
    styles = [Line2D([], [], color=OKABE_ITO["black"], linestyle=style or "none",
                     marker=marker or None, markersize=3)
              for _, _, style, marker in shown]  # fmt: skip
    styles.append(Line2D([], [], linestyle="none"))  # a line of text: g's change is 0 by theory
    legend_slot(slot, styles, [what for _, what, _, _ in shown] + [_G_ZERO],
                title="colour: scheme, as in (b)", title_fontsize=6, fontsize=6)  # fmt: skip
    panel_label(ax, "c")
