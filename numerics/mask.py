r"""Which pairs an attention call lets through, as data (docs/theory.md section 9).

A query at index :math:`i` reads the keys :math:`j` of its allowed set
:math:`\mathcal M_i`; the statistics run over :math:`\mathcal M = \{(i, j): j \in
\mathcal M_i\}`.  :class:`Mask` states it once, for any length:

.. math:: (i, j) \in \mathcal M \iff -\mathrm{after} \le i - j \le \mathrm{before},\quad
          \mathrm{seg}_i = \mathrm{seg}_j,\quad \mathrm{keep}_i \wedge \mathrm{keep}_j

- causal (the default, a decoder): ``before`` None (every earlier key), ``after`` 0;
  a causal sliding window ``w`` (``i - j < w``) is ``before = w - 1``;
- both ways (an encoder): ``after`` None as well; a two-sided window (ModernBERT's local
  layers: ``|i - j| <= 64``) is ``before = after = 64``;
- blocks (documents packed in one row, the patches of one image): ``segments``, one id
  per token, pairs only within a block;
- padding: ``keep``, False for a token that neither reads nor is read.

The offsets :math:`\Delta = i - j` run over both signs, :math:`[-(N-1), N-1]`.

The causal band (no blocks, no padding) has its fast prefix-sum algorithm
(:mod:`.stats`); any other mask has its own (:mod:`.masked`).  A statistic whose
algorithm knows only the causal band asks :func:`causal_window`, which refuses any
other mask in one line.

>>> Mask.causal().allowed(3).astype(int).tolist()
[[1, 0, 0], [1, 1, 0], [1, 1, 1]]
>>> Mask.both(reach=1).allowed(3).astype(int).tolist()
[[1, 1, 0], [1, 1, 1], [0, 1, 1]]
>>> Mask.causal(window=2).is_causal_band, Mask.causal(window=2).window
(True, 2)
>>> Mask.both().n_pairs(4), Mask.causal().n_pairs(4)
(16, 10)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError

__all__ = ["CAUSAL", "Mask", "causal_window"]


def _reach(name: str, value: Any) -> None:
    """Refuse a reach (positions back or ahead) that is not an int >= 0 or None (all)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 0):  # fmt: skip
        raise RopesplitError(f"{name} must be a whole number >= 0 or None, got {value!r}")


@dataclass(frozen=True)
class Mask:
    """The pairs ``(i, j)`` an attention call allows (see the module docstring)."""

    before: int | None = None  # keys up to this many positions back (None: every earlier)
    after: int | None = 0  # keys up to this many positions ahead (0: causal; None: all)
    segments: tuple[int, ...] | None = None  # block id per token: pairs within a block only
    keep: tuple[bool, ...] | None = None  # padding: False tokens neither read nor are read

    def __post_init__(self) -> None:
        _reach("before", self.before)
        _reach("after", self.after)
        for name in ("segments", "keep"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                raise RopesplitError(f"{name} must be a tuple (one entry per token) or None")

    @classmethod
    def causal(cls, window: int | None = None) -> Mask:
        """Every key at or before the query, within ``window`` (``i - j < window``) if given."""
        if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                                   or window < 1):  # fmt: skip
            raise RopesplitError(f"window must be a positive integer or None, got {window!r}")
        return cls(before=None if window is None else window - 1, after=0)

    @classmethod
    def both(cls, reach: int | None = None) -> Mask:
        """Every key on either side, within ``reach`` positions (``|i - j| <= reach``) if given."""
        return cls(before=reach, after=reach)

    @classmethod
    def of(cls, allowed: Any) -> Mask:
        """The mask whose pairs are ``allowed (N, N)`` (an attention call's, read off its mask
        tensor): its reach back and ahead, its blocks and its padding (a token no query reads);
        the rows of padding are not compared.  A pattern that is no band, blocks and padding
        is refused in one line (the statistics would run on pairs the model does not attend).

        >>> Mask.of(np.tril(np.ones((4, 4), bool)))
        Mask(before=None, after=0, segments=None, keep=None)
        >>> Mask.of(np.ones((3, 3), bool) & ~np.eye(3, k=-2, dtype=bool)
        ...         & ~np.eye(3, k=2, dtype=bool))
        Mask(before=1, after=1, segments=None, keep=None)
        """
        a = np.asarray(allowed, dtype=bool)
        n = a.shape[0]
        if a.shape != (n, n) or not a.any():
            raise RopesplitError(f"an attention mask must be (N, N) with a pair let through, "
                                 f"got shape {a.shape}")  # fmt: skip
        read: np.ndarray = np.asarray(a.any(0))  # a key some query reads; others: padding
        kept = np.flatnonzero(read)
        i, j = np.nonzero(a & read[:, None])
        span = int(kept[-1] - kept[0])
        before, after = (int(x) if x < span else None for x in ((i - j).max(), (j - i).max()))
        keep = None if read.all() else tuple(bool(x) for x in read)
        rows = read  # compared on the rows of tokens that are read
        band = cls(max(before, 0) if before is not None else None,
                   max(after, 0) if after is not None else None, None, keep)  # fmt: skip
        if np.array_equal(band.allowed(n)[rows], a[rows]):
            return band
        near = a[kept[1:], kept[:-1]] | a[kept[:-1], kept[1:]]  # each kept token and the last
        segments = np.zeros(n, dtype=np.int64)
        segments[kept[1:]] = np.cumsum(~near)  # a new block where neighbours see neither way
        seg = segments[kept]
        longest = max(int(np.ptp(kept[seg == x])) for x in np.unique(seg))  # a block's span
        back, ahead = (x if x is not None and x < longest else None
                       for x in (band.before, band.after))  # fmt: skip
        blocks = cls(back, ahead, tuple(int(x) for x in segments), keep)
        if np.array_equal(blocks.allowed(n)[rows], a[rows]):
            return blocks
        raise RopesplitError("the attention mask lets through pairs that no band, blocks and "
                             "padding describe")  # fmt: skip

    @property
    def is_causal_band(self) -> bool:
        """``j <= i`` within a band, no blocks and no padding: what the prefix algorithm takes."""
        return self.after == 0 and self.segments is None and self.keep is None

    @property
    def window(self) -> int | None:
        """The causal window ``w`` (``i - j < w``) of a causal band; None for no window."""
        if not self.is_causal_band:
            raise RopesplitError(f"a window belongs to a causal band; this mask is {self}")
        return None if self.before is None else self.before + 1

    def allowed(self, n: int) -> np.ndarray:
        """``(n, n)`` bool: ``True`` where query ``i`` reads key ``j``."""
        i, j = np.indices((n, n))
        ok = np.ones((n, n), dtype=bool)
        if self.before is not None:
            ok &= i - j <= self.before
        if self.after is not None:
            ok &= j - i <= self.after
        if self.segments is not None:
            seg = np.asarray(self._per_token("segments", self.segments, n))
            ok &= seg[:, None] == seg[None, :]
        if self.keep is not None:
            keep = np.asarray(self._per_token("keep", self.keep, n), dtype=bool)
            ok &= keep[:, None] & keep[None, :]
        return ok

    def n_pairs(self, n: int) -> int:
        """The number of allowed pairs on ``n`` tokens."""
        return int(np.count_nonzero(self.allowed(n)))

    def offsets(self, n: int) -> np.ndarray:
        r"""The offsets :math:`\Delta = i - j` that occur on ``n`` tokens, ascending."""
        i, j = np.nonzero(self.allowed(n))
        return np.unique(i - j)

    def __str__(self) -> str:
        way = "causal" if self.after == 0 else "both ways"
        reach = [f"{x} {side}" for x, side in ((self.before, "back"), (self.after, "ahead"))
                 if x is not None and not (side == "ahead" and x == 0)]  # fmt: skip
        parts = [way + (f" within {' and '.join(reach)}" if reach else "")]
        parts += [what for what, on in (("in blocks", self.segments is not None),
                                        ("with padding", self.keep is not None)) if on]  # fmt: skip
        return ", ".join(parts)

    @staticmethod
    def _per_token(name: str, values: tuple[Any, ...], n: int) -> tuple[Any, ...]:
        if len(values) != n:
            raise RopesplitError(f"the mask's {name} has {len(values)} entries, the sequence "
                                 f"{n} tokens")  # fmt: skip
        return values


CAUSAL = Mask()  # every earlier key: the default of every statistic


def causal_window(window: int | Mask | None, what: str) -> int | None:
    """The causal window a causal-only algorithm ``what`` runs on: ``window`` itself (an int
    or None), or a :class:`Mask`'s when it is a causal band; any other mask is refused.

    >>> causal_window(Mask.causal(4), "row_moments")
    4
    >>> causal_window(Mask.both(), "row_moments")
    Traceback (most recent call last):
    ...
    ropesplit.core.errors.RopesplitError: row_moments knows only causal pairs (j <= i), not a mask that is both ways
    """  # noqa: E501
    if not isinstance(window, Mask):
        return window
    if not window.is_causal_band:
        raise RopesplitError(f"{what} knows only causal pairs (j <= i), not a mask that is "
                             f"{window}")  # fmt: skip
    return window.window
