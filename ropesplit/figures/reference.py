r"""Figures 9 and 10: the split under each reference rotation (docs/theory.md section 6).

A position-free term replaces each pair's rotation :math:`e^{i\theta_l\Delta}` by a
constant :math:`m_l`: ``zero`` (:math:`m_l = 1`), a reference distance ``C``
(:math:`e^{i\theta_l C}`) or the mean rotation over the causal pairs, the best
Delta-free value in mean square for each query and key deviation.

Figure 9 shows the mean ``r_split`` over heads with its bootstrap 95% interval
under each reference, for the trained model and each control.  Figure 10 shows,
per RoPE pair, the mean rotation's modulus :math:`|m_l|` beside the share of
key-deviation energy in that pair (a), and what the mean reference leaves in the
remainder, energy times :math:`1 - |m_l|^2` (the mean of
:math:`|e^{i\theta_l\Delta} - m_l|^2` over the pairs), trained against control (b).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import as_array, panel_label, whole_numbers
from ropesplit.figures.style import OKABE_ITO, check_width, new_figure, styled

__all__ = ["reference_figure", "reference_pairs_figure"]

_COLOURS = (OKABE_ITO["blue"], OKABE_ITO["vermillion"], OKABE_ITO["green"], OKABE_ITO["orange"],
            OKABE_ITO["purple"], OKABE_ITO["sky"])  # fmt: skip


def reference_figure(
    series: Mapping[str, Mapping[str, Mapping[str, float] | None]],
    *,
    paper: float | None = None,
    width: float | str = "double",
) -> Figure:
    """Mean ``r_split`` with its 95% interval per reference, one line per model.

    ``series`` maps a label (``"trained"``, ``"random init"``, ...) to
    ``{spec: {"mean", "low", "high"}}`` (the ``analyze`` record's
    ``by_reference[spec]["r_split"]``), specs in the order drawn.
    """
    if not series:
        raise RopesplitError("series must hold at least one model")
    specs = list(next(iter(series.values())))
    if not specs:
        raise RopesplitError("series must hold at least one reference")
    x = np.arange(len(specs))
    with styled():
        fig = new_figure(check_width(width), 2.6)
        ax = fig.add_subplot(1, 1, 1)
        offsets = np.linspace(-0.15, 0.15, len(series)) if len(series) > 1 else [0.0]
        for (label, cis), colour, dx in zip(series.items(), _COLOURS, offsets, strict=False):
            if list(cis) != specs:
                raise RopesplitError(f"series {label!r} must have the references {specs}")
            mean, low, high = (np.array([_get(cis[s], key) for s in specs])
                               for key in ("mean", "low", "high"))  # fmt: skip
            ax.errorbar(x + dx, mean, yerr=[mean - low, high - mean], marker="o", capsize=2,
                        color=colour, label=label, linestyle="none")  # categories: no lines
        if paper is not None:
            ax.axhline(paper, color=OKABE_ITO["black"], linestyle="--", linewidth=1.0,
                       label=f"paper: {paper}")  # fmt: skip
        ax.set_xticks(x, [s.replace("distance:", "C = ") for s in specs])
        ax.set_xlabel("reference rotation $m_l$")
        ax.set_ylabel("mean $r_{split}$ over heads (95% CI)")
        ax.legend(loc="best")
    return fig


def _get(ci: Mapping[str, float] | None, key: str) -> float:
    """``ci[key]``, NaN for a reference without an interval."""
    return np.nan if ci is None else float(ci[key])


def reference_pairs_figure(
    theta: Any,
    m_abs: Any,
    energy_k: Any,
    energy_k_control: Any = None,
    *,
    width: float | str = "double",
) -> Figure:
    r"""Per pair: :math:`|m_l|` beside the key-deviation energy share, and what the mean leaves.

    ``theta (P,)`` frequencies, ``m_abs (P,)`` the mean rotation's modulus over
    the analysed causal pairs, ``energy_k (L, P)`` per-layer key-deviation
    energy (``report.figure_data.pair_energy``) and optionally the control's.
    """
    th = as_array("theta", theta, 1)
    m = as_array("m_abs", m_abs, 1)
    if m.shape != th.shape or (m < 0).any() or (m > 1 + 1e-9).any():
        raise RopesplitError(f"m_abs must be {th.size} values in [0, 1]")
    models = {"trained": energy_k, "random init": energy_k_control}
    shares = {}
    for label, energy in models.items():
        if energy is None:
            continue
        e = as_array(f"energy_k ({label})", energy, 2)
        if e.shape[1] != th.size or (e < 0).any() or (e.sum(1) <= 0).any():
            raise RopesplitError(f"energy_k must be (layers, {th.size}) >= 0, got {e.shape}")
        shares[label] = (e / e.sum(1, keepdims=True)).mean(0)  # (P,) mean share over layers
    pairs = np.arange(th.size)
    with styled():
        inches = check_width(width)
        fig = new_figure(inches, 2.6)
        ax_a, ax_b = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        for (label, share), colour in zip(shares.items(), _COLOURS, strict=False):
            ax_a.plot(pairs, share, color=colour, marker=".", label=f"key deviation, {label}")
            left = share * (1.0 - m**2)  # mean over pairs of |e^{i theta Delta} - m|^2 per pair
            ax_b.plot(pairs, left, color=colour, marker=".", label=label)
        twin = ax_a.twinx()
        twin.plot(pairs, m, color=OKABE_ITO["black"], linestyle="--", label="$|m_l|$")
        twin.set_ylim(0, 1.05)
        twin.set_ylabel("$|m_l|$ (mean rotation)")
        ax_a.set_xlabel("pair $l$ (fast to slow)")
        ax_a.set_ylabel("share of key deviation energy")
        handles = ax_a.get_legend_handles_labels()
        extra = twin.get_legend_handles_labels()
        ax_a.legend(handles[0] + extra[0], handles[1] + extra[1], loc="upper left")
        panel_label(ax_a, "a")
        ax_b.set_xlabel("pair $l$ (fast to slow)")
        ax_b.set_ylabel(r"share $\times\ (1 - |m_l|^2)$")
        ax_b.set_title("left in the remainder by the mean reference")
        for ax in (ax_a, ax_b):
            ax.xaxis.set_major_locator(whole_numbers())  # pairs are whole numbers
        ax_b.legend(loc="upper right")
        panel_label(ax_b, "b")
    return fig
