r"""Figure 1: one head's logits and their split, side by side on one colour scale.

docs/theory.md section 3, the central result, drawn for one head:

.. math::

    W_{ij} = f(q_i, i-j) + g(q_i, k_j) + E_{ij},\qquad
    f = s\langle q, R(-\Delta)\bar k\rangle,\;
    g = s\langle q, \delta\rangle,\;
    E = s\langle q, (R(-\Delta) - I)\delta\rangle

The four ``(N, N)`` matrices share one symmetric diverging colour scale (zero
white) so that their magnitudes compare at a glance; non-causal entries
(``j > i``) are left blank.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ropesplit.errors import RopesplitError
from ropesplit.figures._checks import as_array
from ropesplit.figures.style import DIVERGING, check_width, new_figure, styled

__all__ = ["decomposition_figure"]

_PANELS = (
    ("W", r"$W_{ij}$: logit"),
    ("f", r"$f(q_i, i-j)$: positional"),
    ("g", r"$g(q_i, k_j)$: semantic"),
    ("E", r"$E_{ij}$: remainder"),
)


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
    r"""Four heatmaps ``W, f, g, E`` (each ``(N, N)``) on one colour scale.

    ``mask`` ``(N, N)`` bool marks the pairs shown (default causal,
    ``j <= i``). The colour limit is the 99.5th percentile of ``|x|`` over the
    shown entries of all four, symmetric about 0, so one outlier cannot wash
    out the rest (the colour bar's arrows say values go beyond). One column
    (``width="single"``) stacks the panels 2 x 2; two columns put them in a
    row.
    """
    mats = {name: as_array(name, x, 2) for name, x in zip("WfgE", (W, f, g, E), strict=True)}
    N, N2 = mats["W"].shape
    if N != N2:
        raise RopesplitError(f"W must be square (N, N), got shape {mats['W'].shape}")
    for name, x in mats.items():
        if x.shape != (N, N):
            raise RopesplitError(f"{name} must have the shape of W {(N, N)}, got {x.shape}")
    show = np.tril(np.ones((N, N), dtype=bool)) if mask is None else np.asarray(mask, dtype=bool)
    if show.shape != (N, N) or not show.any():
        raise RopesplitError(f"mask must be (N, N) = {(N, N)} with a True entry, got {show.shape}")
    shown = np.concatenate([x[show] for x in mats.values()])  # (4 n_shown,)
    if not np.isfinite(shown).all():
        raise RopesplitError("W, f, g, E must be finite on the shown (causal) pairs")
    limit = float(np.quantile(np.abs(shown), 0.995)) or 1.0  # all-zero input: any scale

    inches = check_width(width)
    single = inches < 5.0
    rows, cols = (2, 2) if single else (1, 4)
    with styled():
        fig = new_figure(inches, 3.5 if single else 2.05)
        axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
        for ax, (name, label) in zip(axes, _PANELS, strict=True):
            image = ax.imshow(
                np.where(show, mats[name], np.nan), cmap=DIVERGING, vmin=-limit, vmax=limit,
                interpolation="nearest", extent=(-0.5, N - 0.5, N - 0.5, -0.5),
            )  # fmt: skip
            ax.set_title(label)
            ax.set_xlabel("key position j (tokens)")
            ax.set_ylabel("query position i (tokens)")
            ax.set_facecolor("#EEEEEE")  # the blank non-causal half
            ax.label_outer()
        bar = fig.colorbar(image, ax=list(axes), extend="both", shrink=0.9)
        bar.set_label("logit value (nats)")
        if title:
            fig.suptitle(title)
    return fig
