r"""Figures 7 and 8: the controlled-distance and length-extrapolation experiments.

Figure 7 (the paper's claim 3): the same query/key pairs re-evaluated at a
dummy distance ``D``, ``W^D = f(q, D) + g + E^D``. Panel (a): per ``D``, the
correlation of the key effect of the two-axis fit ``u_i + v_j`` of ``W^D``
with that of the same fit of ``g`` (exactly 1 when ``E = 0``). Panel (b):
the share of ``W^D - W^0`` that a query-only term explains (exactly 1 when
``E = 0``) beside the remainder's share ``||E^D|| / ||W^D - mean||``. Lines
are means over heads, bands the 10-90% range; the prediction is the
caller's to state, the figure shows the measurement.

Figure 8 (THEORY.md section 4, length extrapolation): with positions spaced
so distances exceed the training length ``L``, ``g = s<q, delta>`` is the same
array (position-free) while ``f = s<q, R(-Delta) kbar>`` meets unseen angles;
capping ``Delta -> min(Delta, L)`` (LM-Infinite) keeps ``f`` in its trained
range. Each component's range per setting: a thin line from min to max and a
thick bar over the central 1-99% range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.errors import RopesplitError
from ropesplit.figures._checks import panel_label, require_rows
from ropesplit.figures.style import OKABE_ITO, check_width, new_figure, styled

__all__ = ["distance_figure", "length_figure"]

Rows = Sequence[Mapping[str, Any]]
_SETTING_COLOURS = {"original": "black", "spaced": "vermillion", "capped": "blue"}
_COMPONENTS = (("f", "f: positional"), ("g", "g: semantic"), ("E", "E: remainder"))


def _setting_label(row: Mapping[str, Any]) -> str:
    """``spaced x8 (loss x1.31)``: the setting, its stride and its loss ratio."""
    label = str(row["setting"])
    if row.get("stride") not in (None, 1):
        label += f" x{row['stride']}"
    if row.get("cap") is not None:
        label += f", cap {row['cap']}"
    if row.get("ratio") is not None:
        label += f"\n(loss x{float(row['ratio']):.2f})"
    return label


def length_figure(rows: Rows, *, width: float | str = "double") -> Figure:
    r"""Ranges of ``f``, ``g``, ``E`` per setting (original, spaced, capped), one panel each.

    ``rows`` are the ``length`` experiment's rows: ``setting`` and, for
    ``X`` in ``f, g, E``, ``X_min, X_max, X_q01, X_q99`` (logit units);
    optional ``stride``, ``cap``, ``ratio`` (continuation-loss ratio) and
    ``f_outside`` (share of pairs whose ``f`` leaves its trained range) are
    written beside the bars.
    """
    keys = [f"{x}_{k}" for x, _ in _COMPONENTS for k in ("min", "max", "q01", "q99")]
    require_rows("length rows", rows, ("setting", *keys))
    inches = check_width(width)
    single = inches < 5.0
    y = np.arange(len(rows))[::-1]  # first setting on top
    with styled():
        fig = new_figure(inches, 4.4 if single else 2.3)
        axes = fig.subplots(3 if single else 1, 1 if single else 3, sharex=True, sharey=True,
                            squeeze=False).ravel()  # fmt: skip
        for ax, letter, (x, title) in zip(axes, "abc", _COMPONENTS, strict=True):
            for yi, row in zip(y, rows, strict=True):
                colour = OKABE_ITO[_SETTING_COLOURS.get(str(row["setting"]), "green")]
                ax.plot([row[f"{x}_min"], row[f"{x}_max"]], [yi, yi], color=colour,
                        linewidth=0.8)  # fmt: skip
                ax.plot([row[f"{x}_q01"], row[f"{x}_q99"]], [yi, yi], color=colour,
                        linewidth=5, solid_capstyle="butt")  # fmt: skip
                if x == "f" and row.get("f_outside") is not None:
                    ax.annotate(f"{float(row['f_outside']):.0%} outside trained range", (1.0, yi),
                                xycoords=("axes fraction", "data"), ha="right", va="bottom",
                                fontsize=6, xytext=(0, 4), textcoords="offset points")  # fmt: skip
            ax.set_title(title)
            ax.set_xlabel("value (logit units)")
            ax.set_ylim(-0.6, len(rows) - 0.4)
            panel_label(ax, letter)
        axes[0].set_yticks(y, [_setting_label(r) for r in rows])  # shared by every panel
        for ax in axes:
            ax.set_ylabel("setting")
            ax.label_outer()  # labels only where the ticks are shown
    return fig


def _band(ax: Any, x: np.ndarray, per_head: np.ndarray, colour: str, label: str) -> None:
    """Mean over heads with the 10-90% range shaded; ``per_head`` is ``(heads, D)``."""
    low, high = np.quantile(per_head, [0.1, 0.9], axis=0)  # (D,), (D,)
    ax.fill_between(x, low, high, color=colour, alpha=0.2, linewidth=0)
    ax.plot(x, per_head.mean(axis=0), color=colour, marker="o", label=label)


def distance_figure(rows: Rows, *, width: float | str = "double") -> Figure:
    r"""Key-effect correlation and query-only share across dummy distances ``D``, per head.

    ``rows`` are the ``distance`` experiment's rows: ``distance`` (the dummy
    ``D``), ``key_corr``, ``query_share``, optionally ``remainder_share``, and
    ``scope`` (only ``"head"`` rows are drawn; rows without ``scope`` count
    as heads). Lines are means over heads, bands the 10-90% range.
    """
    require_rows("distance rows", rows, ("distance", "key_corr", "query_share"))
    heads = [r for r in rows if r.get("scope", "head") == "head"]
    if not heads:
        raise RopesplitError("distance rows hold no per-head row (scope 'head')")
    distances = np.array(sorted({float(r["distance"]) for r in heads}))  # (D,)
    keys = sorted({(r.get("layer"), r.get("head")) for r in heads}, key=str)

    def table(stat: str) -> np.ndarray:
        """``(heads, D)`` of ``stat``; NaN where a head lacks a distance."""
        out = np.full((len(keys), distances.size), np.nan)
        for r in heads:
            out[keys.index((r.get("layer"), r.get("head"))),
                int(np.searchsorted(distances, float(r["distance"])))] = r[stat]  # fmt: skip
        if np.isnan(out).any():
            raise RopesplitError(f"distance rows miss {stat} for some head and distance")
        return out

    inches = check_width(width)
    single = inches < 5.0
    with styled():
        fig = new_figure(inches, 4.2 if single else 2.5)
        axes = fig.subplots(2 if single else 1, 1 if single else 2, squeeze=False).ravel()
        _band(axes[0], distances, table("key_corr"), OKABE_ITO["blue"],
              f"key effect of W^D vs of g ({len(keys)} heads)")  # fmt: skip
        axes[0].set_ylabel("correlation")
        axes[0].set_title("key effect: W^D against g")
        _band(axes[1], distances, table("query_share"), OKABE_ITO["vermillion"],
              "query-only share of W^D - W^0")  # fmt: skip
        if all("remainder_share" in r for r in heads):
            _band(axes[1], distances, table("remainder_share"), OKABE_ITO["black"],
                  "||E^D|| / ||W^D - mean||")  # fmt: skip
        axes[1].set_ylabel("share")
        axes[1].set_title("what moves with D")
        for ax, letter in zip(axes, "ab", strict=True):
            ax.axhline(1.0, color="#999999", linewidth=0.6, zorder=0, label="E = 0: exactly 1")
            ax.set_xscale("log", base=2)
            ax.set_xticks(distances, [f"{d:g}" for d in distances])  # the distances measured
            ax.set_xlabel("dummy distance D (tokens)")
            ax.legend(loc="best", fontsize=6)
            panel_label(ax, letter)
    return fig
