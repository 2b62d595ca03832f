"""The one exception family for user errors.

Messages follow the einops manner: say what was wrong and what was expected,
quoting the bad value, e.g. ``head_dim must be even, got 63``.  The CLI turns
a :class:`RopesplitError` into a one-line message on stderr and its
``exit_code`` (2 for bad input, 1 for a failed check); it never shows a
traceback for one.
"""

from __future__ import annotations


class RopesplitError(ValueError):
    """Bad input or an impossible request; the CLI exits with ``exit_code``."""

    exit_code: int = 2


class ValidationError(RopesplitError):
    """A self-check on real data failed (e.g. attention reconstruction)."""

    exit_code = 1
