r"""Figure 6: word-order and position-id perturbation, the loss ratio beside the logit bound.

docs/theory.md section 4 (position perturbation): a pair whose distance changes
by ``tau`` moves its logit by at most

.. math:: s\sum_l |\tilde q_l|\,|\tilde k_l|\; 2|\sin(\theta_l \tau/2)|,

``g`` not at all (with the same ``q``, ``k``). Panel (a): the continuation
loss ratio (perturbed / original) against the measured share of context
tokens moved, per scheme, with 95% bootstrap intervals over seeds and the
paper's ~5% / ~10% word-order points marked. Panel (b): the same against the
position-id shift ``t``. Panel (c), when the rows carry them: per scheme, the
mean bound on the logit change for each pair's actual distance change beside
the measured change (same ``q``, ``k``), and ``g``'s change in the perturbed
run's own capture (layers >= 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.figures._checks import panel_label, require_rows
from ropesplit.figures.style import OKABE_ITO, check_width, new_figure, styled

__all__ = ["perturbation_figure"]

Rows = Sequence[Mapping[str, Any]]
_SCHEME_COLOURS = ("blue", "vermillion", "green", "orange", "purple")
_MARKERS = ("o", "s", "^", "D", "v")
_CHANGE_LINES = (  # (row key, legend suffix, line style, marker)
    ("bound_W", "bound", "-", ""),
    ("measured_W", "measured", "", "o"),
    ("g_change", "g in own run", ":", "^"),
)


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
        fig = new_figure(inches, 2.2 * panels if single else 2.5)
        axes = fig.subplots(panels if single else 1, 1 if single else panels,
                            squeeze=False).ravel()  # fmt: skip
        _by_scheme(axes[0], order, "moved", 100.0)
        if paper_thresholds is not None:
            harmless, harmful = paper_thresholds
            axes[0].axvline(100 * harmless, color=OKABE_ITO["black"], linestyle=":",
                            linewidth=0.9, label=f"paper: ~{harmless:.0%} harmless")  # fmt: skip
            axes[0].axvline(100 * harmful, color=OKABE_ITO["black"], linestyle="--",
                            linewidth=0.9, label=f"paper: >{harmful:.0%} hurts")  # fmt: skip
        axes[0].set_xlabel("context tokens moved, measured (% of context)")
        axes[0].set_ylabel("loss ratio (perturbed / original)")
        axes[0].set_title("word order")
        axes[0].legend(loc="upper left", fontsize=6)
        panel_label(axes[0], "a")
        if position is not None:
            _by_scheme(axes[1], position, "t", 1.0)
            axes[1].set_xlabel("position-id shift t (tokens)")
            axes[1].set_ylabel("loss ratio (perturbed / original)")
            axes[1].set_title("position ids")
            axes[1].legend(loc="upper left", fontsize=6)
            panel_label(axes[1], "b")
        if with_bounds:
            assert position is not None
            _changes(axes[2], position)
    return fig


def _changes(ax: Any, position: Rows) -> None:
    """Panel (c): bound and measured logit change per scheme, and g's change in its own run."""
    schemes = list(dict.fromkeys(str(r["scheme"]) for r in position))
    for index, scheme in enumerate(schemes):
        rows = sorted((r for r in position if str(r["scheme"]) == scheme and float(r["t"]) > 0),
                      key=lambda r: r["t"])  # fmt: skip
        t = np.array([float(r["t"]) for r in rows])
        for key, suffix, style, marker in _CHANGE_LINES:
            values = np.array([float(r.get(key, np.nan)) for r in rows])
            if not np.isfinite(values).any():
                continue
            ax.plot(t, values, color=_colour(index), linestyle=style or "none",
                    marker=marker or None, markersize=3, label=f"{scheme}: {suffix}")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("position-id shift t (tokens)")
    ax.set_ylabel("mean |logit change| (logit units)")
    ax.set_title("logit change")
    ax.legend(loc="upper left", fontsize=5)
    panel_label(ax, "c")
