"""The docs site renders its maths offline (issue 13): every built page in headless Chromium.

Chromium runs with no network (``tools/offline_check.py``); each page must show
no raw TeX once MathJax has run and request nothing off the machine. Planted
faults show the check can fail: a raw formula outside the maths markup, the
old CDN script, and a site whose local MathJax is missing. Skipped where
Chromium is not installed (``make docs-check`` installs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import offline_check  # noqa: E402

pytestmark = pytest.mark.skipif(
    offline_check.find_chromium() is None, reason="Chromium not installed (make docs-check)"
)
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


def test_report_renders_offline(tmp_path, monkeypatch):
    """report/index.html when there is one; else, under ``make docs-check``
    (DOCS_CHECK_TINY_REPORT=1), a tiny report built the way test_report builds it."""
    report = ROOT / "report" / "index.html"
    if not report.is_file():
        if os.environ.get("DOCS_CHECK_TINY_REPORT") != "1":
            pytest.skip("no report/index.html (make report; make docs-check builds a tiny one)")
        from test_report import SETTINGS, _tiny_load

        from ropesplit.report import pipeline

        monkeypatch.setattr(pipeline, "_load", _tiny_load)
        report = pipeline.run_report(SETTINGS, tmp_path)
    (result,) = offline_check.check_pages([report])
    assert result.ok, result


def test_bad_input_exits_2(tmp_path, capsys):
    assert offline_check.main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert offline_check.main([str(tmp_path)]) == 2  # a folder with no page
