r"""The one figure style: colour-blind-safe colours, paper widths, byte-identical files.

Every figure of the toolkit is drawn inside :func:`styled` and written by
:func:`save_figure`, so all twenty-one share one look and re-running them gives
the same bytes:

- colours: the Okabe-Ito palette for categories (trained, control,
  synthetic patterns, schemes), ``cividis`` for sequential maps (e.g.
  ``r_split`` per head) and ColorBrewer ``RdBu_r`` (colour-blind safe,
  zero at its white centre) for signed logits ``W, f, g, E``;
- widths: :data:`SINGLE` = 3.3 in (one column) and :data:`DOUBLE` = 6.9 in
  (two columns), font sizes fixed in points so text reads the same in both;
- determinism: the Agg backend, no timestamps or tool versions in the files
  (PDF ``CreationDate``/``Producer``, PNG ``Software``, SVG ``Date``
  removed), a fixed ``svg.hashsalt``, TrueType fonts embedded in PDFs.
"""

from __future__ import annotations

import contextlib
import math
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")  # no display; the same rasteriser everywhere

from cycler import cycler  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ropesplit.core.errors import RopesplitError  # noqa: E402

__all__ = [
    "DIVERGING",
    "DOUBLE",
    "FORMATS",
    "OKABE_ITO",
    "SEQUENTIAL",
    "SINGLE",
    "WIDTHS",
    "Y_LABELS",
    "check_width",
    "fit_text",
    "new_figure",
    "save_figure",
    "styled",
]

SINGLE = 3.3  # inches: one column of a two-column paper
DOUBLE = 6.9  # inches: the full text width
WIDTHS = {"single": SINGLE, "double": DOUBLE}
Y_LABELS = 0.7  # inches a panel's numeric y tick labels and y axis label take at its left
FORMATS = ("pdf", "png")  # vector for papers, raster for docs

# Okabe & Ito (2008), "Color Universal Design": distinguishable under every
# common colour-vision deficiency; black first.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
}
SEQUENTIAL = "cividis"  # perceptually uniform, readable with deuteranopia
DIVERGING = "RdBu_r"  # signed logits: blue negative, white 0, red positive

_RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",  # ships with matplotlib: the same glyphs everywhere
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "axes.prop_cycle": cycler(
        color=[OKABE_ITO[c] for c in ("blue", "vermillion", "green", "orange", "purple", "sky")]
    ),
    "image.cmap": SEQUENTIAL,
    "figure.dpi": 150,
    "savefig.dpi": 150,
    "savefig.bbox": "standard",  # "tight" would make the width depend on the labels
    "pdf.fonttype": 42,  # TrueType: text stays editable in the PDF
    "svg.fonttype": "path",
    "svg.hashsalt": "ropesplit",  # fixed ids: SVG output without random salt
    "path.simplify": True,
}

# Metadata that would otherwise stamp a date or a tool version into the file.
_METADATA = {
    "pdf": {"Creator": "ropesplit", "Producer": "ropesplit", "CreationDate": None},
    "png": {"Software": None},
    "svg": {"Creator": "ropesplit", "Date": None},
}


@contextlib.contextmanager
def styled() -> Iterator[None]:
    """Draw or save inside the toolkit's style (rcParams restored on exit)."""
    with matplotlib.rc_context(cast(Any, _RC)):
        yield


def check_width(width: float | str) -> float:
    """A figure width in inches from ``"single"``, ``"double"`` or a positive number.

    >>> check_width("single")
    3.3
    >>> check_width(-1)
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: width must be 'single', 'double' or inches > 0, got -1
    """
    if isinstance(width, str):
        if width not in WIDTHS:
            raise RopesplitError(f"width must be 'single', 'double' or inches > 0, got {width!r}")
        return WIDTHS[width]
    if not width > 0:
        raise RopesplitError(f"width must be 'single', 'double' or inches > 0, got {width}")
    return float(width)


def fit_text(text: str, inches: float, points: float = 8.0) -> str:
    """``text`` wrapped at spaces into lines about ``inches`` wide at ``points`` (a
    character taken as 0.6 em, DejaVu Sans' widest common run); its own line breaks kept
    (``inches`` infinite: as it is).

    >>> fit_text("share of key deviation energy in high-frequency pairs", 2.0)
    'share of key deviation energy\\nin high-frequency pairs'
    """
    if inches == math.inf:
        return text
    chars = max(8, int(inches * 72.0 / (0.6 * points)))
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def new_figure(width: float | str, height: float) -> Figure:
    """A bare :class:`~matplotlib.figure.Figure` (no pyplot state) of ``width`` x ``height`` in.

    Call it inside :func:`styled`; figures made without pyplot are freed by
    the garbage collector like any object and never leak between calls.
    """
    return Figure(figsize=(check_width(width), height), layout="constrained")


def save_figure(fig: Figure, path: str | Path, *, dpi: int = 150) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) with no timestamps: byte-identical.

    Raises a one-line :class:`~ropesplit.core.errors.RopesplitError` for an
    unknown format or a missing folder.
    """
    from ropesplit.core.io import output_path

    p = output_path(path)
    fmt = p.suffix.lstrip(".").lower()
    if fmt not in _METADATA:
        raise RopesplitError(f"figure format must be one of pdf, png, svg, got {fmt or p.name!r}")
    with styled():
        try:
            fig.savefig(p, format=fmt, dpi=dpi, metadata=_METADATA[fmt])
        except OSError as exc:
            raise RopesplitError(f"cannot write {p}: {exc.strerror}") from None
    return p
