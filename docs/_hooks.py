"""MkDocs hooks: generated pages, offline maths and the teaching notebook.

- A page containing the line ``<!-- cli-reference -->`` gets, in its place, the
  ``--help`` text of ``ropesplit`` and of every subcommand, so the reference can
  never drift from the code; ``<!-- figure-gallery -->`` gets every figure.
- MathJax comes from the ``django-static-mathjax`` package (MathJax 3.2.2, the
  JavaScript only: no Django needed) and is copied into the built site under
  ``javascripts/mathjax/``: the maths renders with no network access (SVG
  output, so no web fonts are fetched either).
- ``docs/notebooks/*.ipynb`` become pages (markdown cells as written, code
  cells as fenced Python), so their maths goes through the same renderer.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path

MARKER = "<!-- cli-reference -->"
GALLERY = "<!-- figure-gallery -->"
ROOT = Path(__file__).resolve().parents[1]
API_TREE = ROOT / "build" / "apisrc"  # named in mkdocs.yml as the handler's path
MATHJAX_URI = "javascripts/mathjax"  # where the site serves MathJax (named in mkdocs.yml)
# tex-svg.js holds TeX input, SVG output and its fonts; the folders hold what it
# loads on demand (TeX extensions via autoload, the menu and its a11y parts)
MATHJAX_PARTS = ("tex-svg.js", "input/tex/extensions", "ui", "a11y")


def mathjax_root() -> Path:
    """The ``es5`` folder of the installed MathJax (package ``django-static-mathjax``)."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("MathJax not installed: pip install django-static-mathjax")
    root = Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax" / "es5"
    if not (root / "tex-svg.js").is_file():
        raise RuntimeError(f"MathJax's tex-svg.js missing from {root}")
    return root


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


def on_files(files, config):
    """Add the local MathJax to the site, and each notebook as a page."""
    from mkdocs.structure.files import File

    root = mathjax_root()
    for part in MATHJAX_PARTS:
        paths = [root / part] if (root / part).is_file() else sorted((root / part).rglob("*.js"))
        for path in paths:
            uri = f"{MATHJAX_URI}/{path.relative_to(root).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    for notebook in sorted(Path(config["docs_dir"]).glob("notebooks/*.ipynb")):
        uri = notebook.relative_to(config["docs_dir"]).with_suffix(".md").as_posix()
        files.append(File.generated(config, uri, content=notebook_markdown(notebook)))
    return files


def notebook_markdown(path: Path) -> str:
    """A notebook as a Markdown page: markdown cells as written, code cells fenced.

    Outputs are not shown (the committed notebook has none; the tests run it);
    a note at the top says how to run it.
    """
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    parts = []
    for i, cell in enumerate(cells):
        text = "".join(cell["source"]).rstrip()
        if cell["cell_type"] == "markdown":
            parts.append(text)
            if i == 0:
                parts.append(f'!!! note "Run it"\n    This page is the notebook '
                             f"`docs/notebooks/{path.name}` without its outputs. Run it with "
                             f"`.venv/bin/jupyter execute docs/notebooks/{path.name}` or open "
                             "it in Jupyter to see the figures inline.")  # fmt: skip
        elif cell["cell_type"] == "code":
            parts.append(f"```python\n{text}\n```")
    return "\n\n".join(parts) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, _help_sections())
    if GALLERY in markdown:
        markdown = markdown.replace(GALLERY, _gallery())
    return markdown
