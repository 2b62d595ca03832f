"""One module per ``ropesplit`` subcommand.

Each module defines::

    HELP: str                                   one-line help
    def add_arguments(parser) -> None           its flags
    def run(args) -> int                        the work; returns the exit code

Modules keep heavy imports (sympy, numpy, torch, transformers) inside ``run``
so that ``ropesplit --help`` and unrelated subcommands start fast.  The CLI
discovers the modules here; ``ORDER`` fixes how ``--help`` lists them.
"""

from __future__ import annotations

import argparse
from typing import Any

ORDER = ["derive", "bound", "analyze", "claims", "merge", "compare", "perturb", "figures", "report"]

MODEL_HELP = "Hugging Face id or local folder (default: SmolLM2-135M)"


def add_model_arguments(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    """``--model`` and ``--gguf-file``; ``many``: repeatable, one models x claims table."""
    action = "append" if many else "store"
    parser.add_argument("--model", action=action, help=MODEL_HELP + (
        "; repeat for one models x claims table" if many else ""))  # fmt: skip
    parser.add_argument("--gguf-file", action=action, help="a GGUF file inside --model's folder"
                        + (" (once per --model)" if many else ""))  # fmt: skip


def add_device_arguments(parser: argparse.ArgumentParser, *, device_map: bool = False) -> None:
    """``--device`` and ``--dtype`` (checked by ``cli.device`` and ``cli.dtype``), and
    ``--device-map`` where a command can spread a model over devices."""
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16, ...")
    if device_map:
        parser.add_argument("--device-map", help="e.g. 'auto' to spread layers over GPUs")


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
