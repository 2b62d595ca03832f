"""The text the activations are read on: a fixed default, or the user's file.

The default is real English that every Python ships, the language reference
in ``pydoc_data.topics.topics``: all topics in sorted key order, joined by
blank lines, so the selection is the same on every machine with the same
Python. The first ``N`` tokens of the text are analysed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ropesplit.core.errors import RopesplitError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ropesplit.empirical.model.loaded import LoadedModel

__all__ = ["check_context", "default_text", "read_text", "tokenize"]


TEXT_KINDS = ("docs", "code")  # default_text(kind=): English prose, or Python source
_CODE_MODULES = ("textwrap", "heapq", "fractions", "difflib")  # stdlib sources, in this order


def default_text(kind: str = "docs") -> str:
    """A text every Python ships: ``docs`` (default) or ``code``, a second domain.

    ``docs``: the language reference (``pydoc_data.topics``), topics in sorted
    order. ``code``: the source of the standard library modules
    ``textwrap, heapq, fractions, difflib`` joined by blank lines.

    >>> default_text()[:22]
    'The "assert" statement'
    """
    if kind == "code":
        import importlib.util

        sources = []
        for name in _CODE_MODULES:
            spec = importlib.util.find_spec(name)
            if spec is None or not spec.origin or not spec.origin.endswith(".py"):
                raise RopesplitError(f"the standard library source of {name} is not installed")
            sources.append(Path(spec.origin).read_text(encoding="utf-8"))
        return "\n\n".join(sources)
    if kind != "docs":
        raise RopesplitError(f"text kind must be one of {', '.join(TEXT_KINDS)}, got {kind!r}")
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key].strip() for key in sorted(topics))


def read_text(path: str | Path, what: str = "text file") -> str:
    """A UTF-8 file's contents, with a one-line error naming ``what`` when it cannot be read
    (:func:`ropesplit.core.io.read_text`)."""
    from ropesplit.core.io import read_text as read

    return read(path, what)


def check_context(loaded: LoadedModel, n_tokens: int) -> None:
    """Raise a one-line error unless ``2 <= n_tokens <=`` the model's context."""
    if n_tokens < 2:
        raise RopesplitError(f"tokens must be at least 2, got {n_tokens}")
    limit = loaded.max_positions
    if limit is not None and n_tokens > limit:
        raise RopesplitError(
            f"--tokens {n_tokens} exceeds the model's context of {limit} (max_position_embeddings)"
        )


def tokenize(loaded: LoadedModel, text: str, n_tokens: int) -> torch.Tensor:
    """The first ``n_tokens`` token ids ``(N,)`` of ``text`` under the model's tokenizer.

    The tokenizer adds its usual special tokens (a BOS where the model has
    one), as in ordinary use. Only a prefix of a long text is tokenized, long
    enough that its cut cannot reach the first ``n_tokens``. Raises when the
    text is shorter than ``n_tokens`` or ``n_tokens`` exceeds the model's context.
    """
    import torch

    check_context(loaded, n_tokens)
    if loaded.tokenizer is None:
        raise RopesplitError(f"{loaded.name} has no tokenizer; pass token ids instead")
    ids = loaded.tokenizer(text[: 8 * n_tokens + 256])["input_ids"]
    if len(ids) < n_tokens + 16:  # the prefix was short of tokens: the whole text
        ids = loaded.tokenizer(text)["input_ids"]
    if len(ids) < n_tokens:
        raise RopesplitError(
            f"text has only {len(ids)} tokens, fewer than the {n_tokens} asked for (--tokens)"
        )
    return torch.tensor(ids[:n_tokens], dtype=torch.long)  # (N,)
