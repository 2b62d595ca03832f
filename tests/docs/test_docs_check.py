"""The docs site renders its maths offline: every built page in headless Chromium.

Chromium runs with no network (``tools/offline_check.py``); each page must show
no raw TeX once MathJax has run, request nothing off the machine, and fit a
window 800 and 1400 px wide (nothing sticking out to the right outside a box
of its own that scrolls). Planted faults show the check can fail: a raw
formula outside the maths markup, the old CDN script, a site whose local
MathJax is missing, and tiny pages with a table or a word too wide for the
window. The report's first screen, at 1400 x 1000 px, must show its figure
and all five verdicts without scrolling (saved as a PNG: into
``$DOCS_CHECK_SCREENSHOTS`` when set, as ``make docs-check`` sets it); planted
faults show that check can fail too. Skipped where Chromium is not installed
(``make docs-check`` installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import offline_check  # noqa: E402

pytestmark = [pytest.mark.skipif(
    offline_check.find_chromium() is None, reason="Chromium not installed (make docs-check)"
), pytest.mark.slow]
CDN = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # strictness is test_docs' business; here only the rendered pages matter
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--no-strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return out


def planted(site: Path, tmp_path: Path, page: str, before: str, insert: str) -> Path:
    """A copy of the site with ``insert`` written into ``page`` just before ``before``."""
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    path = copy / page
    html = path.read_text(encoding="utf-8")
    assert before in html
    path.write_text(html.replace(before, insert + before, 1), encoding="utf-8")
    return copy


def test_every_page_renders_its_maths_offline(site):
    checked = offline_check.check_pages([site])
    results = {Path(r.page).relative_to(site).as_posix(): r for r in checked}
    assert {"index.html", "tutorial/index.html", "derivation/index.html",
            "notebooks/rope-to-split/index.html"} <= set(results)  # fmt: skip
    for page, result in results.items():
        assert result.ok, (page, result)
    assert results["tutorial/index.html"].typeset >= 20
    assert results["notebooks/rope-to-split/index.html"].typeset >= 20
    notebook = (site / "notebooks" / "rope-to-split" / "index.html").read_text(encoding="utf-8")
    assert notebook.count('src="data:image/png;base64,') >= 5  # its figures, from a build-time run
    assert results["derivation/index.html"].typeset >= 20
    assert not list(site.rglob("*.html")) or not any(
        CDN in p.read_text(encoding="utf-8") for p in site.rglob("*.html")
    )


def test_planted_raw_formula_fails(site, tmp_path):
    copy = planted(site, tmp_path, "tutorial/index.html", "</article>",
                   r"<p>planted \(\theta_l = b^{-2l/d}\) and $$W = f + g$$</p>")  # fmt: skip
    (result,) = offline_check.check_pages([copy / "tutorial" / "index.html"])
    assert not result.ok
    assert len(result.raw_tex) == 3  # \(, and $$ twice: each delimiter left in sight
    assert r"\(\theta_l" in result.raw_tex[0] and "$$W = f + g$$" in result.raw_tex[1]
    assert offline_check.main([str(copy / "tutorial" / "index.html")]) == 1


def test_cdn_script_counts_as_leaving_the_machine(site, tmp_path):
    copy = planted(site, tmp_path, "index.html", "</head>", f'<script src="{CDN}"></script>')
    (result,) = offline_check.check_pages([copy / "index.html"])
    assert result.external == [CDN] and not result.ok


def test_site_without_its_mathjax_shows_raw_formulas(site, tmp_path):
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    (copy / "javascripts" / "mathjax" / "tex-svg.js").unlink()
    (result,) = offline_check.check_pages([copy / "derivation" / "index.html"])
    assert result.typeset == 0 and len(result.raw_tex) >= 20 and not result.external


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """report/index.html when there is one; else, under ``make docs-check``
    (DOCS_CHECK_TINY_REPORT=1), a tiny report built the way test_report builds it."""
    report = ROOT / "report" / "index.html"
    if report.is_file():
        return report
    if os.environ.get("DOCS_CHECK_TINY_REPORT") != "1":
        pytest.skip("no report/index.html (make report; make docs-check builds a tiny one)")
    from conftest import tiny_report, tiny_report_settings

    from ropesplit.report import pipeline

    with pytest.MonkeyPatch.context() as patch:
        tiny_report(patch)
        return pipeline.run_report(tiny_report_settings(), tmp_path_factory.mktemp("report"))


def test_report_renders_offline(report):
    """It must fit both widths too: its tables scroll in their own boxes."""
    (result,) = offline_check.check_pages([report])
    assert result.ok, result
    assert result.widths == list(offline_check.WIDTHS)


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height in pixels, from its header."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_report_first_screen_shows_the_figure_and_all_five_verdicts(report, tmp_path):
    """At 1400 x 1000 px, unscrolled: the lead's figure (drawn) and each of the five verdict
    rows end above the window's bottom edge (getBoundingClientRect); the window is saved
    as a PNG."""
    from ropesplit.claims.registry import CLAIMS

    shots = Path(os.environ.get("DOCS_CHECK_SCREENSHOTS") or tmp_path)
    (result,) = offline_check.check_pages([report], widths=(), first_screen=(1400, 1000),
                                          screenshots=shots)  # fmt: skip
    screen = result.screen
    print(offline_check.screen_line(screen))  # the measured bottoms, under pytest -s / -rA
    assert screen, "the report has no first screen (section.lead)"
    assert result.below == [] and result.ok, result.below
    figure, rows = screen["figure"], screen["rows"]
    assert figure["name"] == "figure#figure-21" and figure["drawn"]
    assert [row["text"][:2] for row in rows] == [f"{c.claim}." for c in CLAIMS]  # all five
    assert all(part["bottom"] <= 1000 for part in [figure, *rows]), screen
    assert png_size(Path(screen["screenshot"])) == (1400, 1000)


PNG_PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4"
             "nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==")  # fmt: skip


def lead_page(tmp_path: Path, name: str, figure_px: int, *, beside: bool = True) -> Path:
    """A page whose lead is a ``figure_px`` px tall figure with a table of five verdict rows
    beside it (``beside=False``: under it)."""
    body = "".join(f"<tr><td>{k + 1}. claim</td><td>agrees</td></tr>" for k in range(5))
    flex = ' style="display: flex"' if beside else ""
    return tiny_page(
        tmp_path,
        name,
        f'<section class="lead"{flex}><figure id="figure-21">'
        f'<img src="{PNG_PIXEL}" style="width: 600px; height: {figure_px}px">'
        "</figure><div><table><tbody>" + body + "</tbody></table></div></section>",
    )


def test_a_first_screen_that_fits_passes_and_is_saved(tmp_path):
    page = lead_page(tmp_path, "fits", 700)
    (result,) = offline_check.check_pages([page], widths=(), screenshots=tmp_path / "shots")
    assert result.ok and result.below == [], result
    assert result.screen["figure"]["drawn"] and len(result.screen["rows"]) == 5
    assert result.screen["figure"]["bottom"] <= 1000
    assert png_size(tmp_path / "shots" / f"{tmp_path.name}-fits-1400x1000.png") == (1400, 1000)


def test_a_figure_taller_than_the_first_screen_fails_naming_it(tmp_path, capsys):
    page = lead_page(tmp_path, "tall", 1200)
    (result,) = offline_check.check_pages([page], widths=())
    assert not result.ok
    (line,) = result.below
    assert line.startswith("at 1400x1000 px: figure#figure-21 ends at ")
    assert line.endswith("px, below the 1000 px window")
    assert offline_check.main(["--widths", "", str(page)]) == 1
    assert "not on the first screen at 1400x1000 px: figure#figure-21" in capsys.readouterr().out
    assert offline_check.main(["--widths", "", "--first-screen", "", str(page)]) == 0


def test_verdict_rows_below_the_first_screen_fail_naming_them(tmp_path):
    """Rows under a figure that fits are named, one line each."""
    page = lead_page(tmp_path, "stacked", 950, beside=False)
    (result,) = offline_check.check_pages([page], widths=(), first_screen=(1000, 1000))
    assert len(result.below) == 5 and not result.ok
    assert result.screen["figure"]["bottom"] <= 1000
    assert result.below[0].startswith("at 1000x1000 px: verdict row '1. claim' ends at ")
    assert all(line.startswith("at 1000x1000 px: verdict row '") for line in result.below)


def test_a_lead_without_a_drawn_figure_or_verdicts_fails(tmp_path):
    page = tiny_page(tmp_path, "empty", '<section class="lead"><p class="missing">Figure 21 '
                     "(grid): not drawn.</p></section>")  # fmt: skip
    (result,) = offline_check.check_pages([page], widths=())
    assert result.below == ["at 1400x1000 px: the first screen has no drawn figure",
                            "at 1400x1000 px: the first screen has no verdict table"]  # fmt: skip


def test_a_page_without_a_lead_has_no_first_screen_check(tmp_path):
    page = tiny_page(tmp_path, "plain", "<p>text</p>")
    (result,) = offline_check.check_pages([page], widths=())
    assert result.ok and result.screen == {} and result.below == []


WIDE_CELL = '<td style="white-space: nowrap">' + "wide " * 300 + "</td>"


def tiny_page(tmp_path: Path, name: str, body: str) -> Path:
    """A page of its own (the viewport meta tag as in every built page) holding ``body``."""
    path = tmp_path / f"{name}.html"
    path.write_text('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                    '<meta name="viewport" content="width=device-width, initial-scale=1">'
                    f"<title>{name}</title></head><body>{body}</body></html>",
                    encoding="utf-8")  # fmt: skip
    return path


@pytest.mark.parametrize("width", offline_check.WIDTHS)
def test_a_table_wider_than_the_window_fails_naming_it(tmp_path, width):
    page = tiny_page(tmp_path, "wide", '<p>text</p><table id="data" class="results">'
                     f"<tr>{WIDE_CELL}</tr></table>")  # fmt: skip
    (result,) = offline_check.check_pages([page], widths=(width,))
    assert not result.ok and result.wide_at == [width]
    (line,) = result.overflow  # the table, not each of its cells
    assert line.startswith(f"at {width} px: table#data.results 'wide wide ")
    assert line.endswith(f"right of the {width} px viewport")


@pytest.mark.parametrize("width", offline_check.WIDTHS)
def test_the_same_table_in_a_scrolling_box_of_its_own_passes(tmp_path, width):
    page = tiny_page(tmp_path, "scrolls", '<p>text</p><div style="overflow-x: auto">'
                     f'<table id="data"><tr>{WIDE_CELL}</tr></table></div>')  # fmt: skip
    (result,) = offline_check.check_pages([page], widths=(width,))
    assert result.ok and result.overflow == [] and result.widths == [width], result


@pytest.mark.parametrize("width", offline_check.WIDTHS)
def test_a_word_too_long_for_the_window_fails(tmp_path, width):
    """Not only tables: a paragraph holding one unbreakable 300-letter word (a hash, a
    path) widens the page; the paragraph is named."""
    page = tiny_page(tmp_path, "word", f'<p id="hash">{"f" * 300}</p>')
    (result,) = offline_check.check_pages([page], widths=(width,))
    assert result.wide_at == [width] and result.overflow[0].startswith(f"at {width} px: p#hash")


def test_a_page_too_wide_only_for_the_narrow_window_fails_there(tmp_path, capsys):
    """A 1000 px block fits 1400 px, not 800; so does a scrolling box that is itself too
    wide. The command line names the width and the element and exits 1."""
    page = tiny_page(tmp_path, "block", '<div id="block" style="width: 1000px">x</div>'
                     '<div id="box" style="overflow-x: auto; width: 1100px">y</div>')
    (result,) = offline_check.check_pages([page])
    assert result.widths == [800, 1400] and result.wide_at == [800]
    assert [line.split(" '")[0] for line in result.overflow] == ["at 800 px: div#block",
                                                                 "at 800 px: div#box"]
    assert offline_check.main([str(page)]) == 1
    out = capsys.readouterr().out
    assert "too wide at 800 px" in out and "too wide at 800 px: div#block 'x' ends at" in out
    assert offline_check.main(["--widths", "1400", str(page)]) == 0


def test_planted_wide_block_in_the_site_fails(site, tmp_path):
    copy = planted(site, tmp_path, "tutorial/index.html", "</article>",
                   '<div id="planted" style="min-width: 1500px">a planted block</div>')
    (result,) = offline_check.check_pages([copy / "tutorial" / "index.html"])
    assert result.wide_at == [800, 1400] and not result.raw_tex and not result.external
    assert all("div#planted 'a planted block'" in line for line in result.overflow)


def test_bad_input_exits_2(tmp_path, capsys):
    assert offline_check.main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert offline_check.main([str(tmp_path)]) == 2  # a folder with no page
