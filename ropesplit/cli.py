"""The ``ropesplit`` command: one subcommand per capability.

Every subcommand that produces numbers accepts ``--json PATH``.  User errors
(:class:`ropesplit.core.errors.RopesplitError`) become one line on stderr and a
non-zero exit code, never a traceback.

Bad flags fail while parsing, before any work, as one line
``ropesplit CMD: error: MESSAGE`` and exit code 2 (:class:`_Parser`): every option
declared ``type=int`` must be at least 1 and every ``type=float`` finite and positive
(attached centrally in :func:`build_parser`, so a new subcommand's options get them without
code of its own); an option that means something else declares its type where it is added
(:mod:`ropesplit.commands._types`: ``SEED`` an integer at least 0, ``ListOf`` comma-separated
values without repeats, ``device`` a device this machine has, ``dtype`` one of
``DTYPES``); an option given twice, or two options setting the same thing, are refused
(:class:`_Parser`).

Paths are checked the same way, once the command line is parsed, by what the option's
type says it names (:data:`PATHS`, :class:`~ropesplit.commands._types.PathKind`):
``OutputPath`` a file written, ``OutputFolder`` a folder written, ``InputFile`` a UTF-8
file read, ``InputRecord`` a JSON file read (:func:`path_kind`); two options
writing one file are refused; then the checks a subcommand's argument helpers registered
over several options (``commands.check_after_parsing``: the ``--model``/``--gguf-file``
pairs, the corpora). Nothing is created or written by a check.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from ropesplit import __version__
from ropesplit import commands as _commands
from ropesplit.commands._types import (
    InputFile,
    InputRecord,
    IntAtLeast,
    OutputFolder,
    OutputPath,
    PathKind,
    positive_float,
)
from ropesplit.core import io
from ropesplit.core.allocator import steady_allocator
from ropesplit.core.errors import RopesplitError, one_line


def _command_modules() -> dict[str, ModuleType]:
    """Import every subcommand module, in ``commands.ORDER`` then by name."""
    names = [m.name for m in pkgutil.iter_modules(_commands.__path__) if not m.name.startswith("_")]
    order = {n: i for i, n in enumerate(_commands.ORDER)}
    names.sort(key=lambda n: (order.get(n, len(order)), n))
    return {n: importlib.import_module(f"ropesplit.commands.{n}") for n in names}


REPEATABLE = (argparse._AppendAction, argparse._CountAction)  # may be given more than once
# path options, by their type (commands._types.PathKind), and their checks (core.io)
PATHS: dict[str, Callable[[str], Any]] = {
    OutputPath.name: io.output_path,
    OutputFolder.name: io.check_output_folder,
    InputFile.name: lambda path: io.input_file(path, "text file"),
    InputRecord.name: lambda path: io.read_json(path, "record"),
}


def path_kind(action: argparse.Action) -> str | None:
    """The key of :data:`PATHS` of the path an option names (its ``PathKind`` type), or None.

    >>> path_kind(argparse.Action(["--json"], "json", type=OutputPath))
    'PATH'
    >>> path_kind(argparse.Action([], "records", type=InputRecord))
    '.json'
    >>> path_kind(argparse.Action(["--tokens"], "tokens", type=int)) is None
    True
    """
    return action.type.name if isinstance(action.type, PathKind) else None


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``PROG: error: MESSAGE``, exit code 2.

    :meth:`parse_args` then checks the subcommand's paths (:meth:`check_paths`).

    Besides each option's own check (:func:`_checked_type`), a command line that gives one
    option twice (unless it collects, like ``--model A --model B``) or two options that
    set the same thing (``--control none --no-control``) is refused: the later one would
    silently win."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        self._check_conflicts(argv)
        return super().parse_known_args(argv, namespace)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed = super().parse_args(args, namespace)
        command = getattr(parsed, "_parser", None)
        if isinstance(command, _Parser):
            command.check_paths(parsed)
        return parsed

    def check_paths(self, args: argparse.Namespace) -> None:
        """Every path option of this (sub)command, given or by default, by :func:`path_kind`;
        no two options writing one file; then the checks registered over several options
        (``args._checks``). The first failure is the one-line error; nothing is written."""
        written: dict[Path, str] = {}
        for action in self._actions:
            kind = path_kind(action)
            value = getattr(args, action.dest, None)
            if kind is None or value is None:
                continue
            name = action.option_strings[-1] if action.option_strings else str(action.metavar)
            for path in value if isinstance(value, list) else [value]:
                if not path:  # an empty --json: nothing is written
                    continue
                try:
                    PATHS[kind](path)
                except RopesplitError as exc:
                    self.error(str(exc))
                target = Path(path)
                if kind == "PATH" and (target.is_file() or not target.exists()):  # not /dev/null
                    same = written.setdefault(target.resolve(), name)
                    if same != name:
                        self.error(f"{same} and {name} both write {path}; give each its own file")
        for check in getattr(args, "_checks", ()):
            try:
                check(args)
            except RopesplitError as exc:
                self.error(str(exc))

    def _check_conflicts(self, argv: list[str]) -> None:
        by_string = {s: a for a in self._actions for s in a.option_strings}
        subcommands = self._subcommands()
        given: dict[str, list[str]] = {}  # dest -> the option strings given, in order
        seen: dict[argparse.Action, str] = {}
        for token in argv:
            if token == "--":
                break
            if isinstance(by_string.get(token), argparse._SubParsersAction):
                break
            action = by_string.get(token.split("=", 1)[0]) if token.startswith("-") else None
            if action is None or action.dest in ("help", "version"):
                if token in subcommands:
                    break  # the subcommand's own parser checks the rest
                continue
            if action in seen and not isinstance(action, REPEATABLE):
                self.error(f"{seen[action]} is given twice")
            seen[action] = token.split("=", 1)[0]
            given.setdefault(action.dest, [])
            if seen[action] not in given[action.dest]:
                given[action.dest].append(seen[action])
            if len({by_string[o] for o in given[action.dest]}) > 1:
                first, second = given[action.dest][:2]
                self.error(f"{first} and {second} set the same thing; give one")

    def _subcommands(self) -> set[str]:
        return {name for a in self._actions if isinstance(a, argparse._SubParsersAction)
                for name in a.choices}  # fmt: skip


def _checked_type(action: argparse.Action) -> Any:
    """The central check for an option declared with a plain ``int`` or ``float`` type
    (None: leave as declared). An option whose values mean something else (a seed that may
    be 0, a list, a device) declares its own type from :mod:`ropesplit.commands._types`
    where it is added; nothing here reads an option's name."""
    if action.type is int:
        return IntAtLeast(1)
    if action.type is float:
        return positive_float
    return None


def _attach_checks(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        checked = _checked_type(action)
        if checked is not None:
            action.type = checked


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full argument parser (also used by the docs' CLI reference); with ``only`` a
    subcommand's name, every other subcommand is listed by its help alone, its options
    not built: what they import (``train`` and ``analyze`` read the model registry) is
    not loaded, so ``ropesplit merge`` imports no torch (a name that is no subcommand
    builds them all, for argparse to refuse it)."""
    parser = _Parser(
        prog="ropesplit",
        description="Verify, end to end, why RoPE attention logits split into "
        "positional relevance plus semantic importance (Han & Ji, ACL 2025).",
    )
    parser.add_argument("--version", action="version", version=f"ropesplit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = _command_modules()
    for name, module in modules.items():
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        if only in modules and name != only:
            continue  # never parsed in this process
        module.add_arguments(p)
        _attach_checks(p)
        p.set_defaults(_run=module.run, _parser=p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    named = [w for w in words if not w.startswith("-")][:1]  # the subcommand, when it leads
    parser = build_parser(named[0] if named else None)
    steady_allocator()  # long runs of large tensors: no page faults per tensor (core.allocator)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad flag (one line already printed), --help or --version
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args._run(args))
    except RopesplitError as exc:
        print(f"ropesplit {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except MemoryError:
        print(
            f"ropesplit {args.command}: error: out of memory; use fewer tokens (--tokens)",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"ropesplit {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: one line (ROPESPLIT_TRACEBACK=1 shows it)
        if os.environ.get("ROPESPLIT_TRACEBACK"):
            raise
        print(f"ropesplit {args.command}: error: internal error, please report it: "
              f"{one_line(exc, 200, typed=True)}", file=sys.stderr)  # fmt: skip
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
