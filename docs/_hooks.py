"""MkDocs hook: fill the CLI reference from the real argument parser.

A page containing the line ``<!-- cli-reference -->`` gets, in its place, the
``--help`` text of ``ropesplit`` and of every subcommand, so the reference can
never drift from the code.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

MARKER = "<!-- cli-reference -->"
GALLERY = "<!-- figure-gallery -->"
ROOT = Path(__file__).resolve().parents[1]
API_TREE = ROOT / "build" / "apisrc"  # named in mkdocs.yml as the handler's path


def _api_tree() -> None:
    """Lay out ``build/apisrc/ropesplit`` as the installed namespace looks.

    The layers live in top-level folders mapped into ``ropesplit`` by
    ``[tool.setuptools.package-dir]``; mkdocstrings reads source folders, so it
    gets a tree of symbolic links shaped like the installed package.
    """
    pkg = API_TREE / "ropesplit"
    if pkg.exists():
        shutil.rmtree(API_TREE)
    pkg.mkdir(parents=True)
    for entry in (ROOT / "ropesplit").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for layer in ("theory", "numerics", "empirical"):
        (pkg / layer).symlink_to(ROOT / layer)


def on_startup(command, dirty):  # noqa: ARG001
    # before the config (and so mkdocstrings' search paths) is read
    _api_tree()


def _help_sections() -> str:
    from ropesplit.cli import build_parser

    parser = build_parser()
    parts = ["## `ropesplit`", "", "```text", parser.format_help().rstrip(), "```", ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        parts += [f"## `ropesplit {name}`", "", "```text", p.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def _gallery() -> str:
    """One section per figure of ``ropesplit.figures.FIGURES``: title, image, caption."""
    from ropesplit.figures import FIGURES, figure_files

    parts = []
    for spec in FIGURES:
        image = "figures/" + figure_files(spec, "double", "png")
        parts += [f"## {spec.number}. {spec.title}", "", f"![Figure {spec.number}]({image})", "",
                  spec.caption, ""]  # fmt: skip
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, _help_sections())
    if GALLERY in markdown:
        markdown = markdown.replace(GALLERY, _gallery())
    return markdown
