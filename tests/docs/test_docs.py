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


# a committed PNG and the one drawn here may differ by this much per channel (of 1): the
# rounding of anti-aliased edges and of the PNG's encoder where another machine drew it
# (numbers are promised to tolerances, not bits); a changed mark, label or colour differs
# by far more
PIXEL_TOL = 8 / 255


def same_picture(drawn: Path, committed: Path) -> bool:
    """Whether two PNGs show the same picture: the same bytes, or the same size with every
    channel of every pixel within :data:`PIXEL_TOL`."""
    if drawn.read_bytes() == committed.read_bytes():
        return True
    import matplotlib.image
    import numpy as np

    a, b = matplotlib.image.imread(drawn), matplotlib.image.imread(committed)
    return a.shape == b.shape and float(np.max(np.abs(a - b))) <= PIXEL_TOL


@pytest.mark.slow  # the gallery
def test_gallery_figures_are_what_their_records_draw(tmp_path):
    """Every figure in docs/figures is drawn from the recorded run kept beside it
    (``python -m ropesplit.figures.recorded docs/figures/records docs/figures``): a PNG there
    that differs from what the records draw (beyond :data:`PIXEL_TOL`: it was drawn on
    another machine), a figure without a record, or a stray PNG fails."""
    from ropesplit.figures import FIGURES, figure_files
    from ropesplit.figures.recorded import draw_recorded

    gallery = ROOT / "docs" / "figures"
    drawn = draw_recorded(gallery / "records", tmp_path)
    expected = [figure_files(spec, "double", "png") for spec in FIGURES]
    assert [path.name for path in drawn] == expected  # all twenty have a record
    assert sorted(p.name for p in gallery.glob("fig*-double.png")) == sorted(expected)
    for path in drawn:
        assert same_picture(path, gallery / path.name), path.name


def test_a_picture_differs_by_a_changed_mark_not_by_rounding(tmp_path):
    """:func:`same_picture` passes one rounding level and fails a changed pixel."""
    import matplotlib.image
    import numpy as np

    image = np.full((8, 8, 3), 0.5)
    matplotlib.image.imsave(tmp_path / "a.png", image)
    matplotlib.image.imsave(tmp_path / "b.png", image + 1 / 255)
    image[3, 3] = 0.0
    matplotlib.image.imsave(tmp_path / "c.png", image)
    assert same_picture(tmp_path / "a.png", tmp_path / "a.png")
    assert same_picture(tmp_path / "a.png", tmp_path / "b.png")
    assert not same_picture(tmp_path / "a.png", tmp_path / "c.png")


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
              "empirical": "ropesplit.empirical", "ropesplit/core": "ropesplit.core",
              "ropesplit/claims": "ropesplit.claims"}  # fmt: skip
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
    empirical (experiments included), core and claims, computed from the file tree, and no line
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


# --- the README and the install page: a newcomer's path; times only where a benchmark wrote them

README = ROOT / "README.md"
INSTALL = ROOT / "docs" / "install.md"
TIMINGS = re.compile(r"<!-- timings: begin \(written by benchmarks/bench_install\.py\) -->"
                     r".*?<!-- timings: end -->", re.S)  # fmt: skip
# a quoted duration: "527 s", "8.8 min", "13 minutes", "1.5 hours", "8m57s"
DURATION = re.compile(r"\b\d+(\.\d+)?\s?(s|secs?|seconds?|min|mins|minutes?|hours?|hrs?)\b"
                      r"|\b\d+m\d+s\b")  # fmt: skip


def quoted_times(text: str) -> list[str]:
    """Lines of ``text`` that quote a duration outside the block bench_install.py writes."""
    outside = TIMINGS.sub("", text)
    return [line.strip() for line in outside.splitlines() if DURATION.search(line)]


def bench_install():
    """benchmarks/bench_install.py as a module (benchmarks/ is not a package)."""
    import importlib.util

    name = "ropesplit_bench_install"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, ROOT / "benchmarks" / "bench_install.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclass looks its module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_the_readme_is_short_and_opens_with_the_commands_and_the_verdicts():
    """At most 60 lines; the first 30 hold both commands, the figure and a table row for each
    of the five claims (``| 1 ...`` to ``| 5 ...``) with a verdict word."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 60, f"README.md has {len(lines)} lines; move detail to docs/"
    head = "\n".join(lines[:30])
    for needed in ("make report", "make test", "](docs/figures/fig1-decomposition-double.png)"):
        assert needed in head, f"README.md's first 30 lines lack {needed!r}"
    verdicts = ("agrees", "weaker than the paper", "disagrees", "inconclusive")
    for claim in range(1, 6):
        rows = [line for line in lines[:30] if re.match(rf"\|\s*{claim}\b", line)]
        assert rows, f"README.md's first 30 lines have no table row for claim {claim}"
        assert any(word in rows[0] for word in verdicts), rows[0]
        assert re.search(r"\[\d", rows[0]), f"claim {claim}'s row gives no interval"


def test_the_newcomers_path_links_readme_tutorial_analyse():
    """README -> docs/tutorial.md (in its first 30 lines) -> docs/analyse-your-model.md
    (a closing 'Next' link), and every relative link of the README names a file."""
    readme = README.read_text(encoding="utf-8")
    assert "](docs/tutorial.md)" in "\n".join(readme.splitlines()[:30])
    tail = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8").strip().splitlines()[-3:]
    assert any("Next" in line for line in tail), "docs/tutorial.md does not end with 'Next'"
    assert "](analyse-your-model.md)" in "\n".join(tail)
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links {target}, which does not exist"


@pytest.mark.parametrize("path", [README, INSTALL], ids=lambda p: p.name)
def test_times_are_quoted_only_where_a_benchmark_wrote_them(path):
    """A time in README.md or docs/install.md goes stale unless something measured it:
    only the block benchmarks/bench_install.py writes may quote one."""
    found = quoted_times(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name} quotes times outside the timings block:\n" + "\n".join(found)


def test_the_timings_block_names_a_date_and_a_machine_and_is_the_scripts():
    """docs/install.md holds one block, as bench_install.py renders it: each row a what,
    seconds, an ISO date and a machine (``N CPU cores, ...``)."""
    bench = bench_install()
    before, block, after = bench.split_page(INSTALL.read_text(encoding="utf-8"))
    assert len(TIMINGS.findall(INSTALL.read_text(encoding="utf-8"))) == 1
    rows = bench.parse_block(block)
    assert rows, "docs/install.md's timings block has no row"
    for row in rows:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row.date), row
        assert re.match(r"\d+ CPU cores?\b", row.machine), row
        assert row.seconds > 0, row
    assert bench.render_block(rows) == block  # written by the script, not edited by hand


def test_the_time_check_sees_a_planted_time():
    planted = "It took 8.8 min.\nCI: 527 s\n8m57s locally\n"
    assert len(quoted_times(planted)) == 3
    fine = ("r = 0.959 on 5 seeds, 2 CPU cores, 512 tokens, SmolLM2-135M, 8x, 2026-12-05\n"
            "<!-- timings: begin (written by benchmarks/bench_install.py) -->\n| x | 527 s |\n"
            "<!-- timings: end -->\n")  # fmt: skip
    assert quoted_times(fine) == []


def test_bench_install_rewrites_its_block(tmp_path):
    """--record rows replace the row with the same what and keep the others; bad input
    exits 2; no arguments prints the block and writes nothing."""
    bench = bench_install()
    page = tmp_path / "install.md"
    page.write_text(f"# t\n\n{bench.BEGIN}\n{bench.END}\n\ntail\n", encoding="utf-8")
    args = ["--page", str(page), "--date", "2026-12-05", "--machine", "2 CPU cores, X"]
    assert bench.main([*args, "--record", "make test=527", "--record", "make report=796.7"]) == 0
    assert bench.main([*args, "--record", "make test=530"]) == 0
    text = page.read_text(encoding="utf-8")
    rows = bench.parse_block(bench.split_page(text)[1])
    assert [(r.what, r.seconds) for r in rows] == [("make test", 530.0), ("make report", 796.7)]
    assert text.startswith("# t\n\n") and text.endswith("\n\ntail\n")
    assert bench.main([*args, "--record", "no seconds"]) == 2
    assert bench.main(["--page", str(page), "--date", "5 Dec", "--record", "x=1"]) == 2
    assert bench.main(["--page", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == text
    assert re.match(r"\d+ CPU cores?, \S", bench.machine())
