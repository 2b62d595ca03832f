r"""Figure 3: where the deviation energy sits, per RoPE pair, against the bound's weight.

docs/theory.md section 3: with ``delta_j = k_j - kbar`` the remainder obeys

.. math::

    |E_{ij}| \le s \sum_l |\tilde q_l|\,|\tilde\delta_{j,l}|\; 2|\sin(\theta_l \Delta / 2)|,

so deviation in pair ``l`` costs in proportion to the weight
``2|sin(theta_l Delta/2)|``: near 0 for slow (high ``l``) pairs at typical
distances, up to 2 for fast ones. The pattern the split needs is key
deviation energy ``sum_j |delta~_{j,l}|^2`` concentrated where that weight is
small. One panel per side (keys; queries when given) shows, per pair ``l``, the
share of that energy (mean over layers, with the 10-90% range across layers
shaded) for the trained model and the random-init control; a last panel, on
its own axis, shows the weight for a few distances. One legend for all,
below the panels.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import as_array, panel_label, whole_numbers
from ropesplit.figures.style import OKABE_ITO, check_width, new_figure, styled

__all__ = ["bound_weight", "energy_shares", "pair_energy_figure"]

_TITLES = {
    "key": r"keys: $\sum_j |\tilde k_{j,l} - \bar{\tilde k}_l|^2$ per pair",
    "query": r"queries: $\sum_i |\tilde q_{i,l} - \bar{\tilde q}_l|^2$ per pair",
}
_WEIGHT_GREYS = ("#000000", "#555555", "#999999", "#BBBBBB")
_WEIGHT_STYLES = ("-", "--", ":", "-.")


def bound_weight(theta: Any, distance: float) -> np.ndarray:
    r"""The bound's per-pair weight :math:`2|\sin(\theta_l \Delta / 2)|` ``(P,)``.

    >>> bound_weight([1.0, 0.0], 3.141592653589793).round(6).tolist()
    [2.0, 0.0]
    """
    return 2.0 * np.abs(np.sin(np.asarray(theta, dtype=np.float64) * distance / 2.0))


def energy_shares(name: str, energy: Any, P: int | None = None) -> np.ndarray:
    """Per-layer energy ``(L, P)`` normalised to shares summing to 1 over pairs (``P``, when
    given, the pairs it must have); ``name`` words the errors."""
    e = as_array(name, energy, 2)
    if P is not None and e.shape[1] != P:
        raise RopesplitError(f"{name} must have one column per pair ({P}), got shape {e.shape}")
    if not np.isfinite(e).all() or (e < 0).any():
        raise RopesplitError(f"{name} must be finite and non-negative")
    total = e.sum(axis=1, keepdims=True)  # (L, 1)
    if (total <= 0).any():
        raise RopesplitError(f"{name} has a layer with zero deviation energy")
    return e / total


def _draw(ax: Any, shares: dict[str, np.ndarray], colours: dict[str, str]) -> None:
    """Mean share over layers per pair with the 10-90% band across layers."""
    for label, s in shares.items():
        pairs = np.arange(s.shape[1])
        low, high = np.quantile(s, [0.1, 0.9], axis=0)  # (P,), (P,)
        ax.fill_between(pairs, low, high, color=colours[label], alpha=0.2, linewidth=0)
        ax.plot(pairs, s.mean(axis=0), color=colours[label], label=label)


def pair_energy_figure(
    theta: Any,
    energy_k: Any,
    energy_k_control: Any = None,
    energy_q: Any = None,
    energy_q_control: Any = None,
    *,
    distances: tuple[float, ...] = (1.0, 16.0, 256.0),
    width: float | str = "double",
) -> Figure:
    r"""Deviation-energy share per pair ``l`` (keys; queries if given), trained vs control.

    ``theta`` ``(P,)`` are the frequencies (pair 0 the fastest); each energy is
    ``(L, P)``: per layer, :math:`\sum_j |\tilde\delta_{j,l}|^2` summed over the
    layer's heads. Shares are taken per layer; the weight
    :math:`2|\sin(\theta_l\Delta/2)|` is overlaid for each of ``distances``.
    """
    th = as_array("theta", theta, 1)
    (P,) = th.shape
    if not distances:
        raise RopesplitError("distances must hold at least one distance, got none")
    panels = {"key": (energy_k, energy_k_control)}
    if energy_q is not None:
        panels["query"] = (energy_q, energy_q_control)
    colours = {"trained": OKABE_ITO["blue"], "random init": OKABE_ITO["vermillion"]}

    inches = check_width(width)
    single = inches < 5.0
    n = len(panels) + 1  # the energy panels, then the weight
    pairs = np.arange(P)
    with styled():
        fig = new_figure(inches, (2.0 * n + 0.4 if single else 2.9))
        axes = fig.subplots(n if single else 1, 1 if single else n, squeeze=False).ravel()
        for ax, (what, (trained, control)) in zip(axes, panels.items(), strict=False):
            shares = {"trained": energy_shares(f"energy_{what[0]}", trained, P)}
            if control is not None:
                shares["random init"] = energy_shares(f"energy_{what[0]}_control", control, P)
            _draw(ax, shares, colours)
            ax.set_yscale("log")
            ax.set_ylabel(f"share of {what}-deviation energy")
            ax.set_title(_TITLES[what])
        weight_ax = axes[n - 1]
        for distance, grey, style in zip(distances, _WEIGHT_GREYS, _WEIGHT_STYLES, strict=False):
            weight_ax.plot(pairs, bound_weight(th, distance), color=grey, linestyle=style,
                           linewidth=1.0,
                           label=rf"weight at $\Delta$ = {distance:g} tokens")  # fmt: skip
        weight_ax.set_ylim(0, 2.1)
        weight_ax.set_ylabel(r"bound weight $2|\sin(\theta_l\Delta/2)|$")
        weight_ax.set_title("the bound's weight per pair")
        x_label = "RoPE pair l (0: fastest" + (", 1 rad/token)" if single else ")")
        for ax, letter in zip(axes, "abc", strict=False):
            ax.set_xlabel(x_label)
            ax.xaxis.set_major_locator(whole_numbers())
            panel_label(ax, letter)
        handles, labels = axes[0].get_legend_handles_labels()
        more = weight_ax.get_legend_handles_labels()
        fig.legend(handles + more[0], labels + more[1], loc="outside lower center",
                   ncols=2 if single else len(labels) + len(more[1]))  # fmt: skip
    return fig
