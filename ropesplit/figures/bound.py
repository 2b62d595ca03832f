r"""Figures 4 and 5: the remainder against its bound, and the synthetic sweep.

Figure 4 (docs/theory.md section 3, the bound): every sampled causal pair is a
point ``(bound_ij, |E_ij|)`` with

.. math::

    |E_{ij}| \le B_{ij} = s \sum_l |\tilde q_l|\,|\tilde\delta_{j,l}|\, 2|\sin(\theta_l\Delta/2)|,

so every point lies on or below the line ``|E| = bound``; real heads and the
synthetic patterns (``random``, ``structured``, ``adversarial``) are drawn in
their own colours.

Figure 5 (docs/theory.md section 3, the pattern): ``r_split`` against the share of
key deviation energy placed in the high-frequency half of the pairs, one line
per RoPE base ``b``: the less deviation in fast pairs, the better the split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import as_array, require_rows
from ropesplit.figures.style import OKABE_ITO, Y_LABELS, check_width, fit_text, new_figure, styled

__all__ = ["bound_figure", "sweep_figure"]

_SOURCE_COLOURS = ("blue", "sky", "green", "orange", "vermillion", "purple", "black")
_MARKERS = ("o", "s", "^", "D", "v", "P")


def bound_figure(
    samples: Mapping[str, tuple[Any, Any]], *, width: float | str = "double"
) -> Figure:
    r"""Log-log scatter of ``|E_ij|`` against its bound, one colour per source.

    ``samples`` maps a label (``"layer 3 head 1"``, ``"synthetic: random"``)
    to ``(bound, abs_E)``, two 1-d arrays of the same length. Pairs where
    either is 0 cannot sit on log axes and are counted in the legend instead.
    A point above the line would be a violated bound: it raises rather than
    drawing it.
    """
    if not samples:
        raise RopesplitError("samples must hold at least one source, got none")
    clean: dict[str, tuple[np.ndarray, np.ndarray, int]] = {}
    for label, (bound, abs_e) in samples.items():
        b = as_array(f"bound of {label}", bound, 1)
        e = np.abs(as_array(f"|E| of {label}", abs_e, 1))
        if b.shape != e.shape:
            raise RopesplitError(f"bound and |E| of {label} differ in length: {b.size} vs {e.size}")
        if not (np.isfinite(b).all() and np.isfinite(e).all()):
            raise RopesplitError(f"bound and |E| of {label} must be finite")
        if (e > b * (1 + 1e-9) + 1e-12).any():
            raise RopesplitError(f"|E| exceeds its bound in {label}: the bound failed")
        keep = (b > 0) & (e > 0)
        clean[label] = (b[keep], e[keep], int((~keep).sum()))
    kept = [x for b, e, _ in clean.values() for x in (b, e) if x.size]
    if not kept:
        raise RopesplitError("samples hold no pair with a positive bound and |E|")
    low = float(min(x.min() for x in kept))
    high = float(max(x.max() for x in kept))

    inches = check_width(width)
    with styled():
        fig = new_figure(inches, 3.0 if inches < 5.0 else 3.2)
        ax = fig.add_subplot()
        for index, (label, (b, e, zeros)) in enumerate(clean.items()):
            extra = f" ({zeros} with 0 omitted)" if zeros else ""
            ax.scatter(b, e, s=3, alpha=0.45, linewidths=0, rasterized=True,
                       color=OKABE_ITO[_SOURCE_COLOURS[index % len(_SOURCE_COLOURS)]],
                       label=f"{label}{extra}")  # fmt: skip
        ax.plot([low, high], [low, high], color=OKABE_ITO["black"], linewidth=1.0,
                label="|E| = bound")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(r"bound $s\sum_l|\tilde q_l||\tilde\delta_l|\,2|\sin(\theta_l\Delta/2)|$"
                      " (logit units)")  # fmt: skip
        ax.set_ylabel(r"remainder $|E_{ij}|$ (logit units)")
        legend = ax.legend(loc="upper left", markerscale=3, fontsize=6)
        for handle in legend.legend_handles:
            if handle is not None:
                handle.set_alpha(1.0)
    return fig


def sweep_figure(rows: Sequence[Mapping[str, Any]], *, width: float | str = "double") -> Figure:
    r"""``r_split`` against the high-frequency share of key deviation, one line per base.

    ``rows`` carry ``base``, ``high_share`` (share of key deviation energy in
    the high-frequency half of the pairs, 0..1) and ``r_split``; an optional
    ``r_split_spread`` (e.g. the std over seeds) is drawn as a band.
    """
    require_rows("rows", rows, ("base", "high_share", "r_split"))
    bases = sorted({float(r["base"]) for r in rows})
    inches = check_width(width)
    with styled():
        fig = new_figure(inches, 2.6 if inches < 5.0 else 2.8)
        ax = fig.add_subplot()
        for index, base in enumerate(bases):
            mine = sorted((r for r in rows if float(r["base"]) == base),
                          key=lambda r: float(r["high_share"]))  # fmt: skip
            x = np.array([float(r["high_share"]) for r in mine])
            y = np.array([np.nan if r["r_split"] is None else float(r["r_split"]) for r in mine])
            colour = OKABE_ITO[_SOURCE_COLOURS[index % len(_SOURCE_COLOURS)]]
            if all("r_split_spread" in r for r in mine):
                spread = np.array([float(r["r_split_spread"] or 0.0) for r in mine])
                ax.fill_between(x, y - spread, y + spread, color=colour, alpha=0.2, linewidth=0)
            ax.plot(x, y, color=colour, marker=_MARKERS[index % len(_MARKERS)],
                    label=f"base b = {base:g}")  # fmt: skip
        ax.set_xlabel(fit_text("share of key deviation energy in high-frequency pairs",
                               inches - Y_LABELS))  # fmt: skip
        ax.set_ylabel(r"$r_{split}$ = corr$(W, f+g)$")
        ax.set_xlim(-0.02, 1.02)
        ax.legend(loc="best")
    return fig
