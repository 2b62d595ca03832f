r"""Figure 6: word-order and position-id perturbation, loss ratio against rate, per scheme.

THEORY.md section 4 (position perturbation): moving a key by ``t`` positions
leaves ``g`` unchanged and moves ``f`` and ``E`` by at most

.. math:: s\sum_l |\tilde q_l|\,|\tilde k_l|\; 2|\sin(\theta_l t/2)|,

so small perturbations of word order or position ids should barely move the
continuation loss. Panel (a): the loss ratio (perturbed / unperturbed) against
the share of context tokens moved, per scheme, with the spread over seeds as
error bars and the paper's ~5% / ~10% thresholds marked. Panel (b): the same
against the position-id shift ``t``. Panel (c), when the rows carry them: the
bound on the logit change for a key moved by ``t``, its ``f`` and ``E`` parts,
beside the measured change.
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
_BOUND_LINES = (  # (row key, legend label, colour, line style)
    ("bound_f", "bound, f part", "blue", "--"),
    ("bound_E", "bound, E part", "vermillion", "--"),
    ("bound_W", "bound on W", "black", "-"),
    ("measured_W", "measured, W", "green", "-"),
)


def _by_scheme(ax: Any, rows: Rows, x_key: str, scale: float) -> None:
    """One error-bar line per scheme: ``ratio`` ± ``spread`` against ``x_key``."""
    schemes = list(dict.fromkeys(str(r["scheme"]) for r in rows))
    for index, scheme in enumerate(schemes):
        mine = sorted((r for r in rows if str(r["scheme"]) == scheme), key=lambda r: r[x_key])
        x = np.array([float(r[x_key]) * scale for r in mine])
        y = np.array([float(r["ratio"]) for r in mine])
        spread = np.array([float(r.get("spread") or 0.0) for r in mine])
        ax.errorbar(x, y, yerr=spread, capsize=2, marker=_MARKERS[index % len(_MARKERS)],
                    color=OKABE_ITO[_SCHEME_COLOURS[index % len(_SCHEME_COLOURS)]],
                    label=scheme)  # fmt: skip
    ax.axhline(1.0, color="#999999", linewidth=0.6, zorder=0)


def perturbation_figure(
    order: Rows,
    position: Rows | None = None,
    *,
    paper_thresholds: tuple[float, float] | None = None,
    width: float | str = "double",
) -> Figure:
    r"""Loss ratio against the perturbation's size, per scheme, with the spread over seeds.

    ``order`` rows carry ``scheme``, ``rate`` (a fraction), ``ratio`` and
    ``spread``; ``position`` rows ``scheme``, ``t``, ``ratio``, ``spread`` and
    optionally ``bound_f``, ``bound_E``, ``bound_W``, ``measured_W`` (mean
    logit change, logit units). ``paper_thresholds`` (the paper's ~5% and
    ~10%, passed by the caller) are drawn as labelled vertical lines.
    """
    require_rows("order", order, ("scheme", "rate", "ratio"))
    panels = 1
    with_bounds = False
    if position is not None:
        require_rows("position", position, ("scheme", "t", "ratio"))
        panels = 2
        with_bounds = all(key in position[0] for key, *_ in _BOUND_LINES)
        panels += with_bounds
    inches = check_width(width)
    single = inches < 5.0
    with styled():
        fig = new_figure(inches, 2.2 * panels if single else 2.5)
        axes = fig.subplots(panels if single else 1, 1 if single else panels,
                            squeeze=False).ravel()  # fmt: skip
        _by_scheme(axes[0], order, "rate", 100.0)
        if paper_thresholds is not None:
            harmless, harmful = paper_thresholds
            axes[0].axvline(100 * harmless, color=OKABE_ITO["black"], linestyle=":",
                            linewidth=0.9, label=f"paper: ~{harmless:.0%} harmless")  # fmt: skip
            axes[0].axvline(100 * harmful, color=OKABE_ITO["black"], linestyle="--",
                            linewidth=0.9, label=f"paper: >{harmful:.0%} hurts")  # fmt: skip
        axes[0].set_xlabel("context tokens moved (% of context)")
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
            ax = axes[2]
            rows = [r for r in position if str(r["scheme"]) == str(position[0]["scheme"])]
            rows = sorted((r for r in rows if float(r["t"]) > 0), key=lambda r: r["t"])
            t = np.array([float(r["t"]) for r in rows])
            for key, label, colour, style in _BOUND_LINES:
                ax.plot(t, [float(r[key]) for r in rows], color=OKABE_ITO[colour],
                        linestyle=style, marker=".", label=label)  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("key moved by t (tokens)")
            ax.set_ylabel("mean logit change (logit units)")
            ax.set_title("logit change (g: 0)")
            ax.legend(loc="upper left", fontsize=6)
            panel_label(ax, "c")
    return fig
