r"""Figure 8: length extrapolation with LM-Infinite's attention, four settings.

docs/theory.md section 4 (length extrapolation): beyond the training length ``L``
only ``f = s<q, R(-Delta) kbar>`` (and ``E``) meet unseen angles; ``g =
s<q, delta>`` is position-free; LM-Infinite's Lambda mask and distance cap
``Delta -> min(Delta, L)`` keep ``f`` in its trained range. Drawn from the
``length`` experiment's rows (:mod:`ropesplit.empirical.experiments.length`):

- (a) the next-token loss against position for the four settings (vanilla,
  cap only, mask only, LM-Infinite) and, black dashed and drawn on top, the
  in-length loss of the same tokens read in windows of ``L``; each bucket's
  start marked, and the position axis ticked there, named as a multiple of
  ``L`` with its token count (``L`` over ``128``, ``2L`` over ``256``, ...);
  its legend beneath the panel, clear of the curves;
- (b), (c) the central 1-99% range of ``f`` and of ``g`` per setting and
  position bucket, in trained-range units (the range the model saw at
  distances ``<= L`` is ``[-1, 1]``, shaded), with the share of pairs outside
  it written above each bar where there is one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.transforms import ScaledTranslation

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import panel_label, require_rows
from ropesplit.figures.style import OKABE_ITO, check_width, new_figure, styled

__all__ = ["length_figure"]

Rows = Sequence[Mapping[str, Any]]
_COLOURS = {"vanilla": "vermillion", "cap only": "orange", "mask only": "sky",
            "LM-Infinite": "blue"}  # fmt: skip
_KEYS = ("setting", "bucket", "start", "stop", "L", "loss", "ratio", "f_lo", "f_hi",
         "f_outside", "g_lo", "g_hi", "g_outside", "curve_position", "curve_loss",
         "curve_in_length")  # fmt: skip


_BELOW_PT = 38.0  # points from panel (a)'s bottom to its legend: ticks, 2-line labels, label


def _colour(setting: str) -> str:
    return OKABE_ITO[_COLOURS.get(setting, "green")]


def _multiple(start: float, length: int) -> str:
    """A position as a multiple of ``L``: ``"L"``, ``"2L"``, ``"4L"``, ``"1.5L"``."""
    k = start / length
    return "L" if k == 1 else f"{k:g}L"


def _loss_panel(ax: Any, rows: Rows, settings: list[str], ncols: int) -> None:
    """Loss against position, one line per setting; the in-length loss dashed, on top; the
    legend beneath the panel's axis label, clear of every curve."""
    for setting in settings:
        mine = sorted((r for r in rows if r["setting"] == setting), key=lambda r: r["start"])
        x = np.concatenate([np.asarray(r["curve_position"], dtype=float) for r in mine])
        y = np.concatenate([np.asarray(r["curve_loss"], dtype=float) for r in mine])
        ax.plot(x, y, color=_colour(setting), label=setting, linewidth=1.0, zorder=2)
    first = sorted((r for r in rows if r["setting"] == settings[0]), key=lambda r: r["start"])
    x = np.concatenate([np.asarray(r["curve_position"], dtype=float) for r in first])
    y = np.concatenate([np.asarray(r["curve_in_length"], dtype=float) for r in first])
    ax.plot(x, y, color=OKABE_ITO["black"], linestyle=(0, (4, 2)), linewidth=1.4, zorder=3,
            label="in-length (windows of L)")  # fmt: skip
    length = int(first[0]["L"])
    for r in first[1:]:  # each bucket's start, a multiple of L
        ax.axvline(r["start"], color="#999999", linewidth=0.6, linestyle=":", zorder=1)
    # ticks at 0, each bucket's start (and the end, if a multiple of L), named as multiples
    # of L with their token counts
    edges = [0] + [int(r["start"]) for r in first[1:]]
    if int(first[-1]["stop"]) % length == 0:
        edges.append(int(first[-1]["stop"]))
    ax.set_xticks(edges, ["0"] + [f"{_multiple(e, length)}\n{e}" for e in edges[1:]])
    ax.set_xlabel(f"position (tokens; L = {length}, the training length)")
    ax.set_ylabel("next-token loss (nats)")
    ax.set_title("loss against position")
    # under the two-line tick labels and the axis label (fonts in points: a fixed offset);
    # the layout keeps the room, the legend stays the panel's own
    below = ax.transAxes + ScaledTranslation(0, -_BELOW_PT / 72, ax.figure.dpi_scale_trans)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below, ncols=ncols,
              fontsize=6, borderaxespad=0.0, handlelength=2.5)  # fmt: skip


def _range_panel(ax: Any, rows: Rows, settings: list[str], x: str, title: str) -> None:
    """The 1-99% range of component ``x`` per bucket and setting, trained range shaded."""
    buckets = list(dict.fromkeys(str(r["bucket"]) for r in rows))
    ax.axhspan(-1.0, 1.0, color="#dddddd", zorder=0, linewidth=0)
    offsets = np.linspace(-0.3, 0.3, len(settings))
    for offset, setting in zip(offsets, settings, strict=True):
        for r in (r for r in rows if r["setting"] == setting):
            pos = buckets.index(str(r["bucket"])) + offset
            ax.plot([pos, pos], [r[f"{x}_lo"], r[f"{x}_hi"]], color=_colour(setting),
                    linewidth=4, solid_capstyle="butt")  # fmt: skip
            if float(r[f"{x}_outside"]) >= 0.005:  # the share outside, where there is one
                ax.annotate(f"{float(r[f'{x}_outside']):.0%}", (pos, r[f"{x}_hi"]), ha="center",
                            va="bottom", fontsize=5, rotation=90, xytext=(0, 1),
                            textcoords="offset points")  # fmt: skip
    ax.set_xticks(range(len(buckets)), buckets)
    ax.set_xlabel("positions up to (x L)")
    ax.set_ylabel("1-99% range (trained: [-1, 1])")
    ax.set_title(title)


def length_figure(rows: Rows, *, width: float | str = "double") -> Figure:
    r"""Loss against position for the four settings (a), the ranges of ``f`` (b) and ``g`` (c).

    ``rows`` are the ``length`` experiment's rows, one per setting and bucket
    (keys: ``setting, bucket, start, stop, L, loss, ratio``, ``X_lo, X_hi,
    X_outside`` for ``X = f, g`` and the curve lists ``curve_position,
    curve_loss, curve_in_length``).
    """
    require_rows("length rows", rows, _KEYS)
    settings = list(dict.fromkeys(str(r["setting"]) for r in rows))
    for setting in settings:
        if not any(r["setting"] == setting and r["curve_position"] for r in rows):
            raise RopesplitError(f"length rows of {setting!r} hold no loss curve")
    inches = check_width(width)
    single = inches < 5.0
    with styled():
        fig = new_figure(inches, 6.6 if single else 2.8)
        if single:
            axes = fig.subplots(3, 1, squeeze=False).ravel()
        else:
            gs = fig.add_gridspec(1, 4)
            axes = np.array([fig.add_subplot(gs[0, :2]), fig.add_subplot(gs[0, 2]),
                             fig.add_subplot(gs[0, 3])])  # fmt: skip
        _loss_panel(axes[0], rows, settings, 3)
        _range_panel(axes[1], rows, settings, "f", "f: positional")
        _range_panel(axes[2], rows, settings, "g", "g: semantic")
        axes[2].sharey(axes[1])
        for ax, letter in zip(axes, "abc", strict=True):
            panel_label(ax, letter)
    return fig
