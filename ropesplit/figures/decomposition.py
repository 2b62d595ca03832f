r"""Figure 1: one head's logits and their split, side by side on one colour scale.

docs/theory.md section 3, the central result, drawn for one head:

.. math::

    W_{ij} = f(q_i, i-j) + g(q_i, k_j) + E_{ij},\qquad
    f = s\langle q, R(-\Delta)\bar k\rangle,\;
    g = s\langle q, \delta\rangle,\;
    E = s\langle q, (R(-\Delta) - I)\delta\rangle

The four ``(N, N)`` matrices share one symmetric diverging colour scale (zero
white) so that their magnitudes compare at a glance; non-causal entries
(``j > i``) are left blank. A fifth panel shows ``f`` row-centred,

.. math:: f_{ij} - \frac{1}{|\{j' \le i\}|}\sum_{j' \le i} f_{ij'},

on its own colour scale: the per-query offset (constant along a row, which
softmax ignores) dominates ``f`` and paints it as horizontal stripes; what is
left once it is removed is the part of ``f`` that moves attention between keys,
its dependence on the distance ``i - j``.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import as_array, whole_numbers
from ropesplit.figures.style import DIVERGING, check_width, new_figure, styled

__all__ = ["decomposition_figure", "row_centred"]

_PANELS = (
    ("W", "$W$: logit"),
    ("f", "$f$: positional"),
    ("g", "$g$: semantic"),
    ("E", "$E$: remainder"),
)
_CENTRED = "$f$ minus row mean:\nthe positional part"


def row_centred(x: Any, mask: Any) -> np.ndarray:
    """``x`` minus, in each row, its mean over that row's ``mask``ed entries; NaN off the mask.

    >>> row_centred([[1.0, 9.0], [2.0, 4.0]], [[True, False], [True, True]]).tolist()
    [[0.0, nan], [-1.0, 1.0]]
    """
    arr = np.asarray(x, dtype=np.float64)  # (N, N)
    show = np.asarray(mask, dtype=bool)  # (N, N)
    counts = show.sum(axis=1, keepdims=True)  # (N, 1)
    sums = np.where(show, arr, 0.0).sum(axis=1, keepdims=True)  # (N, 1)
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    return np.where(show, arr - means, np.nan)


def _checked(mats: dict[str, np.ndarray], mask: Any) -> np.ndarray:
    """The shown pairs ``(N, N)`` bool, once ``W, f, g, E`` are square, alike and finite there."""
    N, N2 = mats["W"].shape
    if N != N2:
        raise RopesplitError(f"W must be square (N, N), got shape {mats['W'].shape}")
    for name, x in mats.items():
        if x.shape != (N, N):
            raise RopesplitError(f"{name} must have the shape of W {(N, N)}, got {x.shape}")
    show = np.tril(np.ones((N, N), dtype=bool)) if mask is None else np.asarray(mask, dtype=bool)
    if show.shape != (N, N) or not show.any():
        raise RopesplitError(f"mask must be (N, N) = {(N, N)} with a True entry, got {show.shape}")
    if not all(np.isfinite(x[show]).all() for x in mats.values()):
        raise RopesplitError("W, f, g, E must be finite on the shown (causal) pairs")
    return show


def _limit(shown: np.ndarray) -> float:
    """The colour limit: the 99.5th percentile of ``|x|`` over the shown entries (1 if all 0)."""
    return float(np.quantile(np.abs(shown), 0.995)) or 1.0


def _axes(fig: Figure, single: bool) -> tuple[Any, Any, Any]:
    """The four panels on one scale, the row-centred ``f``'s panel and the subfigure over the
    four (for the title): one column 2 x 2 above the fifth, two columns all five in a row."""
    if single:  # the four on one scale, 2 x 2, above the row-centred f
        top, bottom = cast(Any, fig.subfigures(2, 1, height_ratios=(2.0, 1.2)))
        shared = top.subplots(2, 2, sharex=True, sharey=True).ravel()
        ax_c = bottom.add_subplot(bottom.add_gridspec(1, 3, width_ratios=(0.5, 1.0, 0.5))[1])
        return shared, ax_c, top
    # one row: the four on one scale, then the row-centred f on its own
    left, right = cast(Any, fig.subfigures(1, 2, width_ratios=(4.0, 1.3), wspace=0.0))
    return left.subplots(1, 4, sharex=True, sharey=True), right.subplots(), left


def _heatmap(ax: Any, values: np.ndarray, show: np.ndarray, label: str, lim: float) -> Any:
    """``values`` on the shown pairs, symmetric colour limits ``+-lim``; the image."""
    N = show.shape[0]
    image = ax.imshow(
        np.where(show, values, np.nan), cmap=DIVERGING, vmin=-lim, vmax=lim,
        interpolation="nearest", extent=(-0.5, N - 0.5, N - 0.5, -0.5),
    )  # fmt: skip
    ax.set_title(label)
    ax.set_facecolor("#EEEEEE")  # the blank non-causal half
    ax.xaxis.set_major_locator(whole_numbers(4))  # token positions, a few
    ax.yaxis.set_major_locator(whole_numbers(5))
    return image


def _label_axes(ax: Any, index: int, single: bool) -> None:
    """Axis labels and tick labels on the outer panels only (``index`` 4: the row-centred f)."""
    cols = 2 if single else 4
    inner = single and index < 2  # a panel drawn under this one
    ax.set_xlabel("" if inner else "key j (tokens)")
    ax.tick_params(labelbottom=not inner)
    first = index == 4 or index % cols == 0  # first in its row
    ax.set_ylabel("query i (tokens)" if first else "")
    ax.tick_params(labelleft=first)


def decomposition_figure(
    W: Any,
    f: Any,
    g: Any,
    E: Any,
    *,
    mask: Any = None,
    title: str | None = None,
    width: float | str = "double",
) -> Figure:
    r"""Heatmaps of ``W, f, g, E`` (each ``(N, N)``) on one colour scale, and ``f`` row-centred.

    ``mask`` ``(N, N)`` bool marks the pairs shown (default causal,
    ``j <= i``). The colour limit of the four is the 99.5th percentile of
    ``|x|`` over the shown entries of all four, symmetric about 0, so one
    outlier cannot wash out the rest (the colour bar's arrows say values go
    beyond). The fifth panel, :func:`row_centred` ``f`` (each row's mean over
    its shown pairs removed: the offset softmax ignores), has its own limit,
    the same percentile of its own entries, and its own colour bar. One
    column (``width="single"``) puts the four 2 x 2 above the fifth; two
    columns put all five in a row.
    """
    mats = {name: as_array(name, x, 2) for name, x in zip("WfgE", (W, f, g, E), strict=True)}
    show = _checked(mats, mask)
    limit = _limit(np.concatenate([x[show] for x in mats.values()]))  # (4 n_shown,)
    centred = row_centred(mats["f"], show)  # (N, N), NaN off the mask
    own = _limit(centred[show])

    inches = check_width(width)
    single = inches < 5.0
    panels = [(mats[name], label, limit) for name, label in _PANELS]
    with styled():
        fig = new_figure(inches, 5.5 if single else 2.5)
        shared, ax_c, over = _axes(fig, single)
        images = []
        for index, (ax, (values, label, lim)) in enumerate(
            zip([*shared, ax_c], [*panels, (centred, _CENTRED, own)], strict=True)
        ):
            images.append(_heatmap(ax, values, show, label, lim))
            _label_axes(ax, index, single)
        location = "right" if single else "bottom"
        bar = fig.colorbar(images[0], ax=list(shared), extend="both", location=location,
                           shrink=0.8 if single else 0.5, aspect=30)  # fmt: skip
        bar.set_label("logit value (nats)")
        centred_bar = fig.colorbar(images[4], ax=ax_c, extend="both", location=location,
                                   shrink=0.8 if single else 0.9,
                                   aspect=15 if single else 20)  # fmt: skip
        centred_bar.set_label("nats (own scale)")
        if title:  # over the four on one scale (a figure-wide one would overlap the panels')
            over.suptitle(title, fontsize=7 if single else 8)
    return fig
