r"""Figure 7: the controlled-distance experiment.

Figure 7 (the paper's claim 3): the same query/key pairs re-evaluated at a
dummy distance ``D``, ``W^D = f(q, D) + g + E^D``. Panel (a): per ``D``, the
correlation of the key effect of the two-axis fit ``u_i + v_j`` of ``W^D``
with that of the same fit of ``g`` (exactly 1 when ``E = 0``). Panel (b):
the share of ``W^D - W^0`` that a query-only term explains (exactly 1 when
``E = 0``) beside the remainder's share ``||E^D|| / ||W^D - mean||``. Lines
are means over heads, bands the 10-90% range; the prediction is the
caller's to state, the figure shows the measurement.

Figure 8 (length extrapolation) lives in :mod:`ropesplit.figures.length`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import panel_label, require_rows
from ropesplit.figures.style import OKABE_ITO, check_width, new_figure, styled

__all__ = ["distance_figure"]

Rows = Sequence[Mapping[str, Any]]


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
