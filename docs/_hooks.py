"""MkDocs hooks: generated pages, offline maths and the teaching notebook.

- A page containing the line ``<!-- cli-reference -->`` gets, in its place, the
  ``--help`` text of ``ropesplit`` and of every subcommand, so the reference can
  never drift from the code; ``<!-- figure-gallery -->`` gets every figure.
- MathJax comes from the ``django-static-mathjax`` package (MathJax 3.2.2, the
  JavaScript only: no Django needed) and is copied into the built site under
  ``javascripts/mathjax/``: the maths renders with no network access (SVG
  output, so no web fonts are fetched either).
- ``docs/notebooks/*.ipynb`` become pages (markdown cells as written, code
  cells as fenced Python, their outputs and figures from one run of the fast
  path at build time, cached in ``build/notebooks/``), so their maths goes
  through the same renderer.
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


NOTEBOOK_CACHE = ROOT / "build" / "notebooks"  # executed copies, keyed by content hash
SOURCES = ("theory", "numerics", "empirical", "ropesplit")  # what a notebook's outputs depend on


def _source_hash(path: Path) -> str:
    """Hash of the notebook and of every module it can import: a changed one reruns it."""
    import hashlib

    digest = hashlib.sha256(path.read_bytes())
    for folder in SOURCES:
        for module in sorted((ROOT / folder).rglob("*.py")):
            digest.update(module.relative_to(ROOT).as_posix().encode() + module.read_bytes())
    return digest.hexdigest()[:16]


def executed_cells(path: Path) -> tuple[list[dict], bool]:
    """The notebook's cells with outputs: run once in a kernel (fast path), then cached.

    Falls back to the cells without outputs (``False``) where nbclient or
    ipykernel is not installed; a cell that fails fails the build.
    """
    import os

    cache = NOTEBOOK_CACHE / f"{path.stem}-{_source_hash(path)}.ipynb"
    if cache.is_file():
        return json.loads(cache.read_text(encoding="utf-8"))["cells"], True
    try:
        import nbclient
        import nbformat
        from jupyter_client.kernelspec import NoSuchKernel
    except ImportError:
        return json.loads(path.read_text(encoding="utf-8"))["cells"], False
    nb = nbformat.read(path, as_version=4)
    saved = os.environ.pop("ROPESPLIT_NOTEBOOK_MODEL", None)  # the site shows the fast path
    try:
        where = {"metadata": {"path": str(path.parent)}}
        nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", resources=where).execute()
    except NoSuchKernel:
        return json.loads(path.read_text(encoding="utf-8"))["cells"], False
    finally:
        if saved is not None:
            os.environ["ROPESPLIT_NOTEBOOK_MODEL"] = saved
    cache.parent.mkdir(parents=True, exist_ok=True)
    for old in cache.parent.glob(f"{path.stem}-*.ipynb"):
        old.unlink()
    nbformat.write(nb, cache)
    return json.loads(cache.read_text(encoding="utf-8"))["cells"], True


def _outputs(cell: dict) -> list[str]:
    """A code cell's outputs as Markdown: text fenced, figures as embedded PNG."""
    parts = []
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if out.get("output_type") == "stream" and out.get("name") == "stdout":
            parts.append("```text\n" + "".join(out["text"]).rstrip() + "\n```")
        elif "image/png" in data:
            png = "".join(data["image/png"]).replace("\n", "")
            parts.append(f"![figure](data:image/png;base64,{png})")
        elif "text/plain" in data:
            parts.append("```text\n" + "".join(data["text/plain"]).rstrip() + "\n```")
    return parts


def notebook_markdown(path: Path) -> str:
    """A notebook as a Markdown page: markdown cells as written, code cells fenced,
    then their outputs (figures inline) from a run of the fast path at build time."""
    cells, ran = executed_cells(path)
    how = (f"`.venv/bin/jupyter execute docs/notebooks/{path.name}`, or open it in Jupyter")
    note = (f"This page is the notebook `docs/notebooks/{path.name}`, "
            + ("run at build time on its fast path (tiny inputs)" if ran else "without outputs")
            + f". Run it yourself with {how}; `ROPESPLIT_NOTEBOOK_MODEL=1` uses the "
            "embedded SmolLM2-135M.")  # fmt: skip
    parts = []
    for i, cell in enumerate(cells):
        text = "".join(cell["source"]).rstrip()
        if cell["cell_type"] == "markdown":
            parts.append(text)
            if i == 0:
                parts.append(f'!!! note "Run it"\n    {note}')
        elif cell["cell_type"] == "code":
            parts.append(f"```python\n{text}\n```")
            parts += _outputs(cell)
    return "\n\n".join(parts) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, _help_sections())
    if GALLERY in markdown:
        markdown = markdown.replace(GALLERY, _gallery())
    return markdown
