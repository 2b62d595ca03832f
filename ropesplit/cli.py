"""The ``ropesplit`` command: one subcommand per capability.

Every subcommand that produces numbers accepts ``--json PATH``.  User errors
(:class:`ropesplit.errors.RopesplitError`) become one line on stderr and a
non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

from ropesplit import __version__
from ropesplit import commands as _commands
from ropesplit.errors import RopesplitError


def _command_modules() -> dict[str, ModuleType]:
    """Import every subcommand module, in ``commands.ORDER`` then by name."""
    names = [m.name for m in pkgutil.iter_modules(_commands.__path__) if not m.name.startswith("_")]
    order = {n: i for i, n in enumerate(_commands.ORDER)}
    names.sort(key=lambda n: (order.get(n, len(order)), n))
    return {n: importlib.import_module(f"ropesplit.commands.{n}") for n in names}


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used by the docs' CLI reference)."""
    parser = argparse.ArgumentParser(
        prog="ropesplit",
        description="Verify, end to end, why RoPE attention logits split into "
        "positional relevance plus semantic importance (Han & Ji, ACL 2025).",
    )
    parser.add_argument("--version", action="version", version=f"ropesplit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _command_modules().items():
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _parser=p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
