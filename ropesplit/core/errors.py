"""The one exception family for user errors.

Messages follow the einops manner: say what was wrong and what was expected,
quoting the bad value, e.g. ``head_dim must be even, got 63``.  The CLI turns
a :class:`RopesplitError` into a one-line message on stderr and its
``exit_code`` (2 for bad input, 1 for a failed check); it never shows a
traceback for one.
"""

from __future__ import annotations

from collections.abc import Callable


class RopesplitError(ValueError):
    """Bad input or an impossible request; the CLI exits with ``exit_code``."""

    exit_code: int = 2


class SettingError(RopesplitError):
    """A setting out of range, named by ``field``: a settings object's field, which is also its
    command-line option (``grid_tokens`` is ``--grid-tokens``). ``problem`` says what is wrong
    without the name (``must be at least 16, got 8``); where it names other fields, each is a
    ``{}`` there and listed in ``mentions``. The message names the fields; the CLI names the
    options instead (:meth:`as_option`).

    >>> str(SettingError("grid_tokens", "must be at least 16, got 8"))
    'grid_tokens must be at least 16, got 8'
    >>> SettingError("grid_tokens", "must be at least 16, got 8").as_option()
    '--grid-tokens must be at least 16, got 8'
    >>> SettingError("figure_tokens", "must lie in [2, {} = 64], got 96", ("tokens",)).as_option()
    '--figure-tokens must lie in [2, --tokens = 64], got 96'
    """

    def __init__(self, field: str, problem: str, mentions: tuple[str, ...] = ()) -> None:
        self.field, self.problem, self.mentions = field, problem, mentions
        super().__init__(self._worded(str))

    def __reduce__(self) -> tuple[type, tuple[str, str, tuple[str, ...]]]:  # a worker's error
        return type(self), (self.field, self.problem, self.mentions)

    def as_option(self) -> str:
        """The message with each field spelt as the command line's option."""
        return self._worded(lambda name: "--" + name.replace("_", "-"))

    def _worded(self, spell: Callable[[str], str]) -> str:
        problem = self.problem.format(*map(spell, self.mentions)) if self.mentions else self.problem
        return f"{spell(self.field)} {problem}"


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
