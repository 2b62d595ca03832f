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


def one_line(exc: BaseException, limit: int = 160, *, typed: bool = False) -> str:
    r"""The first line of an exception's message, shortened to ``limit`` characters, for a
    one-line error (its type's name when it says nothing); ``typed``: ``Type: message``.

    >>> one_line(IndexError("tuple index out of range\nmore"), typed=True)
    'IndexError: tuple index out of range'
    """
    message = str(exc).strip()
    text = message.splitlines()[0] if message else type(exc).__name__
    if typed and message:
        text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
