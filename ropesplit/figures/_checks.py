"""Input checks shared by the figure functions: one-line errors, never a wrong picture."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from ropesplit.core.errors import RopesplitError


def as_array(name: str, x: Any, ndim: int) -> np.ndarray:
    """``x`` as a float64 array of ``ndim`` dimensions, or a one-line error."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise RopesplitError(f"{name} must be numeric, got {type(x).__name__}") from None
    if arr.ndim != ndim:
        raise RopesplitError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    if arr.size == 0:
        raise RopesplitError(f"{name} must not be empty, got shape {arr.shape}")
    return arr


def require_rows(name: str, rows: Sequence[Mapping[str, Any]], keys: Iterable[str]) -> None:
    """Every row of ``rows`` holds every key of ``keys``; there is at least one row."""
    if len(rows) == 0:
        raise RopesplitError(f"{name} must hold at least one row, got 0")
    for key in keys:
        missing = [i for i, row in enumerate(rows) if key not in row]
        if missing:
            raise RopesplitError(f"{name} row {missing[0]} has no {key!r}")


def finite(values: Any) -> np.ndarray:
    """The finite entries of ``values`` (JSON ``null`` read as NaN) as float64."""
    arr = np.asarray([np.nan if v is None else v for v in np.ravel(values)], dtype=np.float64)
    return arr[np.isfinite(arr)]


def panel_label(ax: Any, letter: str) -> None:
    """Put ``(a)``, ``(b)``, ... at the top left of a panel, outside the data."""
    ax.text(-0.02, 1.02, f"({letter})", transform=ax.transAxes, ha="right", va="bottom",
            fontweight="bold")  # fmt: skip


def legend_slot(slot: Any, handles: Sequence[Any], labels: Sequence[str], **options: Any) -> None:
    """A legend at the top of ``slot``, an axes kept empty for it (no frame, ticks or labels),
    so the legend sits clear of every panel's data."""
    slot.set_axis_off()
    slot.xaxis.set_visible(False)
    slot.yaxis.set_visible(False)
    slot.legend(handles, labels, loc="upper center", borderaxespad=0.0, **options)


def whole_numbers(nbins: int = 10) -> MaxNLocator:
    """A tick locator for counts and indices (layers, heads, pairs, positions): whole
    numbers only, even when the view holds a single one (a 1-layer model ticks 0 alone;
    ``MaxNLocator(integer=True)`` alone falls back to -0.5, 0, 0.5 there); at most
    ``nbins`` intervals."""
    return MaxNLocator(nbins=nbins, integer=True, min_n_ticks=1)
