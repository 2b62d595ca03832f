"""One module per ``ropesplit`` subcommand.

Each module defines::

    HELP: str                                   one-line help
    def add_arguments(parser) -> None           its flags
    def run(args) -> int                        the work; returns the exit code

Modules keep heavy imports (sympy, numpy, torch, transformers) inside ``run``
so that ``ropesplit --help`` and unrelated subcommands start fast.  The CLI
discovers the modules here; ``ORDER`` fixes how ``--help`` lists them.

A path option says what it names by its type (:mod:`._types`: ``OutputPath`` a file
written, ``OutputFolder`` a folder written, ``InputFile`` a UTF-8 file read,
``InputRecord`` a JSON file read): the CLI checks it before ``run`` (``cli.PATHS``). A
check over several options is registered with :func:`check_after_parsing`, as
:func:`add_model_arguments` does; settings check themselves when built (:func:`built`).

An option that a settings object (``ClaimsSettings``, ``RunSettings``, ``ExperimentSettings``,
``Placement``) defaults has the default None here and the field's name as its ``dest``:
:func:`given` passes on only the options given, so each default is stated once, on the
settings object (``tests/commands/test_cli_defaults.py`` holds every subcommand to it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ropesplit.empirical.model.loading import Placement

ORDER = ["derive", "bound", "analyze", "claims", "merge", "compare", "perturb", "figures", "report"]

MODEL_HELP = "Hugging Face id or local folder (default: SmolLM2-135M)"


def check_after_parsing(
    parser: argparse.ArgumentParser, check: Callable[[argparse.Namespace], None]
) -> None:
    """Run ``check(args)`` once ``parser``'s command line is parsed, before ``run``: for a check
    over several options. Its :class:`~ropesplit.core.errors.RopesplitError` is the one-line
    parse error (exit code 2); checks run in the order they were registered."""
    checks = parser.get_default("_checks") or ()
    parser.set_defaults(_checks=(*checks, check))


def add_model_arguments(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    """``--model`` and ``--gguf-file``; ``many``: repeatable, one models x claims table.
    Local ones are checked once parsed (:func:`check_models`)."""
    action = "append" if many else "store"
    parser.add_argument("--model", action=action, help=MODEL_HELP + (
        "; repeat for one models x claims table" if many else ""))  # fmt: skip
    parser.add_argument("--gguf-file", action=action, help="a GGUF file inside --model's folder"
                        + (" (once per --model)" if many else ""))  # fmt: skip
    check_after_parsing(parser, check_models)


def check_models(args: argparse.Namespace) -> None:
    """Every ``--model`` that names a local path, with its ``--gguf-file``, is one a model can
    load from, checked before any model loads (with several models, before the first): it
    exists (``empirical.model.loading`` tells a path from a Hugging Face id), and is a folder with a
    ``config.json`` that is JSON, a folder holding the ``--gguf-file``, or a ``.gguf`` file."""
    from pathlib import Path

    from ropesplit.core.errors import RopesplitError
    from ropesplit.core.io import input_file, read_json

    models = args.model if isinstance(args.model, list) else [args.model]
    files = args.gguf_file if isinstance(args.gguf_file, list) else [args.gguf_file] * len(models)
    if models == [None] or len(files) != len(models):
        return  # the embedded model; or claims' own message (once per --model)
    from ropesplit.empirical.model.loading import resolve_source  # the loader's own reading

    for model, gguf in zip(models, files, strict=True):
        source, name, _ = resolve_source(model, gguf)  # a missing path or GGUF file fails
        folder = Path(source)
        if not folder.exists():
            continue  # a Hugging Face id
        if not folder.is_dir():
            also = " (--gguf-file names a file in a model folder)" if gguf else ""
            raise RopesplitError(f"model path {model} is a file; give a model folder or a "
                                 f".gguf file{also}")  # fmt: skip
        if name:
            input_file(folder / name, "GGUF file", text=False)
        elif not (folder / "config.json").exists():
            raise RopesplitError(f"model folder {model} has no config.json (a GGUF file in it "
                                 "needs --gguf-file)")  # fmt: skip
        else:
            read_json(folder / "config.json", "model config")


def add_device_arguments(parser: argparse.ArgumentParser, *, device_map: bool = False) -> None:
    """``--device``, ``--dtype`` (checked by ``_types.device`` and ``_types.dtype``) and
    ``--attention``, and ``--device-map`` where a command can spread a model over devices:
    the fields of
    ``empirical.model.loading.Placement`` (:func:`placement`), whose loader defaults them."""
    from ropesplit.commands._types import attention, device, dtype

    parser.add_argument("--device", type=device, help="torch device (default cpu)")
    parser.add_argument("--dtype", type=dtype, help="float32 (default), bfloat16, ...")
    parser.add_argument("--attention", metavar="KERNEL", type=attention,
                        help="the attention kernel the model runs: eager (default: its logits "
                             "and probabilities are validated), sdpa, flash_attention_2, ... "
                             "(its output is), or model (its config's own)")  # fmt: skip
    if device_map:
        parser.add_argument("--device-map", help="e.g. 'auto' to spread layers over GPUs")


def placement(args: argparse.Namespace) -> Placement:
    """``--device``, ``--dtype``, ``--device-map`` and ``--attention``
    (:func:`add_device_arguments`) as the ``Placement`` that ``load_model`` takes (those not
    given: its defaults)."""
    from ropesplit.empirical.model.loading import Placement

    return Placement(**given(args, "device", "dtype", "device_map", "attention"))


def write_output(path: str | None, record: Any = None, *, text: str | None = None) -> None:
    """Write ``record`` as JSON (or ``text`` as it is) to ``path`` and say so on stderr;
    nothing when ``path`` is None or empty."""
    import sys

    from ropesplit.core.io import write_json, write_text

    if not path:
        return
    if text is not None:
        write_text(path, text)
    else:
        write_json(path, record)
    print(f"wrote {path}", file=sys.stderr)


def given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options among ``names`` (settings fields, each its option's ``dest``) that the
    command line gave: those not None. Built from these, a settings object keeps its own
    default for every other field."""
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


@contextmanager
def as_options() -> Iterator[None]:
    """Inside it a failed setting check (:class:`~ropesplit.core.errors.SettingError`, which
    names its field) is worded as the command line's option: ``grid_tokens must ...`` reads
    ``--grid-tokens must ...``. A settings field's name is its option's name, so the option
    named is the one that gave the bad value."""
    from ropesplit.core.errors import RopesplitError, SettingError

    try:
        yield
    except SettingError as exc:
        raise RopesplitError(exc.as_option()) from None


def built(make: Callable[..., Any], **fields: Any) -> Any:
    """``make(**fields)``: a settings object that checks itself when built, its one-line
    error worded as the option that gave the bad value (:func:`as_options`), so each check
    lives once, in the settings, for the CLI and for Python alike."""
    with as_options():
        return make(**fields)
