"""The documentation site: strict build, and the tutorial's code really runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: str) -> list[str]:
    """The ```python blocks of a docs page, in order."""
    return FENCE.findall((ROOT / "docs" / page).read_text(encoding="utf-8"))


@pytest.mark.slow  # the docs build
def test_docs_build_strictly(tmp_path):
    """Broken links, missing pages or unresolvable API references fail."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (tmp_path / "site" / "tutorial" / "index.html").is_file()
    # the CLI reference is filled from the live parser
    cli = (tmp_path / "site" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "ropesplit derive" in cli and "&lt;!-- cli-reference --&gt;" not in cli


def test_fence_extraction_finds_blocks():
    assert len(python_blocks("tutorial.md")) >= 5


@pytest.mark.parametrize("page", ["tutorial.md"])
def test_page_code_runs_top_to_bottom(page, capsys):
    """Every ```python block of the page runs, in order, in one namespace;
    the ``assert`` lines in the blocks are the page's claims."""
    namespace: dict = {"__name__": f"docs_{page}"}
    for i, block in enumerate(python_blocks(page)):
        try:
            exec(compile(block, f"{page}[block {i}]", "exec"), namespace)
        except Exception as exc:  # pragma: no cover - the failure message is the point
            raise AssertionError(f"{page} block {i} failed: {exc!r}\n{block}") from exc


@pytest.mark.slow  # the gallery
def test_gallery_figures_are_what_their_records_draw(tmp_path):
    """Every figure in docs/figures is drawn from the recorded run kept beside it
    (``python -m ropesplit.figures.recorded docs/figures/records docs/figures``): a PNG there
    that differs from what the records draw, a figure without a record, or a stray PNG fails."""
    from ropesplit.figures import FIGURES, figure_files
    from ropesplit.figures.recorded import draw_recorded

    gallery = ROOT / "docs" / "figures"
    drawn = draw_recorded(gallery / "records", tmp_path)
    expected = [figure_files(spec, "double", "png") for spec in FIGURES]
    assert [path.name for path in drawn] == expected  # all twenty have a record
    assert sorted(p.name for p in gallery.glob("fig*-double.png")) == sorted(expected)
    for path in drawn:
        assert path.read_bytes() == (gallery / path.name).read_bytes(), path.name


def test_the_architecture_lists_every_stage_and_figure():
    """docs/architecture.md's stage order and figure list are the registries' own."""
    from ropesplit.figures import FIGURES
    from ropesplit.report.pipeline import STAGES

    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    order = re.search(r"Order: `([^`]*)`", page)
    assert order is not None
    listed = [name.strip() for name in order.group(1).split(",")]
    assert listed == [stage.name for stage in STAGES]
    figures = re.search(r"listed in `figures.FIGURES`: `([^`]*)`", page)
    assert figures is not None
    assert " ".join(figures.group(1).split()) == ", ".join(
        f"{spec.number} {spec.name}" for spec in FIGURES)  # fmt: skip


def test_the_architecture_page_is_contracts_not_an_api_dump():
    """docs/architecture.md states contracts in under 300 lines; the API is on docs/api.md."""
    lines = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300, f"architecture.md has {len(lines)} lines; move detail to docstrings"


# the layers whose every public module the API page must name: folder -> import name
API_LAYERS = {"theory": "ropesplit.theory", "numerics": "ropesplit.numerics",
              "empirical": "ropesplit.empirical", "ropesplit/core": "ropesplit.core"}  # fmt: skip
# where the import names of the package live in the source tree (pyproject's package-dir)
PACKAGE_DIR = {"ropesplit.theory": "theory", "ropesplit.numerics": "numerics",
               "ropesplit.empirical": "empirical", "ropesplit": "ropesplit"}  # fmt: skip


def public_modules(folder: str, package: str) -> list[str]:
    """Every module and package under ``folder`` as ``package.x.y``, none whose name starts
    with ``_`` (``__init__`` is named by its package)."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        parts = path.relative_to(ROOT / folder).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(part.startswith("_") for part in parts):
            continue
        found.append(".".join((package, *parts)))
    return found


def api_entries() -> list[str]:
    """The ``::: module`` lines of docs/api.md, in order."""
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    return re.findall(r"^::: (\S+)\s*$", page, re.M)


def source_of(module: str) -> Path:
    """The file of an import name: ``ropesplit.numerics.stats`` -> ``numerics/stats.py``."""
    parts = module.split(".")
    for cut in (2, 1):
        package = ".".join(parts[:cut])
        if package in PACKAGE_DIR:
            base = ROOT / PACKAGE_DIR[package] / Path(*parts[cut:])
            return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    raise AssertionError(f"{module} is not a ropesplit module")


def test_the_api_page_names_every_public_module_of_each_layer():
    """docs/api.md has a ``::: module`` line for every public module of theory, numerics,
    empirical (experiments included) and core, computed from the file tree, and no line
    for a module that does not exist."""
    named = api_entries()
    expected = [m for folder, package in API_LAYERS.items()
                for m in public_modules(folder, package)]  # fmt: skip
    assert len(expected) > 60  # the tree was read
    missing = [m for m in expected if m not in named]
    assert not missing, f"docs/api.md lacks '::: MODULE' lines for {missing}"
    stale = [m for m in named if not source_of(m).is_file()]
    assert not stale, f"docs/api.md names modules that do not exist: {stale}"
    assert len(named) == len(set(named)), "docs/api.md names a module twice"
