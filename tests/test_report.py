"""The report (issue 6): one run of every step on a tiny random Llama, rendered offline.

No download: the model is built from a config and stands in for the loaded
model (``pipeline._load`` is replaced); every other stage runs the real
functions, so the JSON records are structurally real, not typed in.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
import torch
import transformers as T
from ropesplit.empirical import load_model
from ropesplit.empirical.models import random_init_twin
from ropesplit.theory import STEPS

from ropesplit.cli import main
from ropesplit.figures import FIGURES, figure_files
from ropesplit.report import pipeline
from ropesplit.report.document import build_document, fmt
from ropesplit.report.render import render_html, render_markdown

N_TOKENS = 48
SETTINGS = pipeline.RunSettings(tokens=N_TOKENS, seeds=1, figure_tokens=24, bound_tokens=64)


def _tiny_load(settings):
    config = T.LlamaConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=3,
        intermediate_size=64, vocab_size=128, max_position_embeddings=64,
    )  # fmt: skip
    loaded = load_model(config, seed=1)  # the "trained" stand-in
    ids = torch.randint(0, 128, (settings.tokens,), generator=torch.Generator().manual_seed(0))
    return loaded, random_init_twin(loaded, settings.seed), ids, "tiny text"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "_load", _tiny_load)
        index = pipeline.run_report(SETTINGS, out)
        again = tmp_path_factory.mktemp("figures")
        pipeline.run_figures(SETTINGS, again, widths=("single",), formats=("png",))  # quick rerun
    records = {name: json.loads((out / f"{name}.json").read_text())
               for name in ("derive", "bound", "analyze", "perturb")}  # fmt: skip
    return {"out": out, "html": index.read_text(), "records": records, "again": again,
            "md": (out / "report.md").read_text()}  # fmt: skip


def test_every_step_writes_its_json_and_every_figure_both_widths_and_formats(report):
    out = report["out"]
    assert {p.name for p in out.iterdir()} >= {"derive.json", "bound.json", "analyze.json",
                                               "perturb.json", "index.html", "report.md"}
    written = sorted(p.name for p in (out / "figures").iterdir())
    expected = sorted(figure_files(spec, w, f) for spec in FIGURES
                      for w in ("single", "double") for f in ("pdf", "png"))  # fmt: skip
    assert written == expected and len(written) == 8 * 4


def test_html_embeds_all_eight_figures_and_references_nothing_outside(report):
    html = report["html"]
    sources = re.findall(r'src="([^"]*)"', html)
    assert len(sources) == 8
    for spec, src in zip(FIGURES, sources, strict=True):
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.removeprefix("data:image/png;base64,"))
        assert png == (report["out"] / "figures" / figure_files(spec, "double", "png")).read_bytes()
        assert f"Figure {spec.number}. {spec.title}." in html
    assert not re.search(r"https?://", html)
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "<style>" in html  # the CSS is inline


def test_html_holds_every_table_with_numbers_from_the_json(report):
    html, records = report["html"], report["records"]
    for title in ("Theory:", "Numerics:", "Empirical:", "Experiment: Controlled distance",
                  "Experiment: Word-order perturbation", "Experiment: Position-id perturbation",
                  "Experiment: Length extrapolation", "Figures"):  # fmt: skip
        assert f"<h2>{title}" in html
    for step in STEPS:
        assert f"<td>{step.id}</td>" in html
    analysis = records["analyze"]
    n_layers = 1 + max(h["layer"] for h in analysis["heads"])
    assert html.count("<tr><td>") >= len(STEPS) + n_layers + 1
    assert f"<td>{fmt(analysis['summary']['r_split'])}</td>" in html
    assert f"<td>{fmt(analysis['control']['summary']['r_split'])}</td>" in html
    assert "<td>0.959</td>" in html  # the paper's, beside this model's
    for row in records["perturb"]["order"]:
        assert f"<td>{fmt(row['ratio'])}</td>" in html
    for case in records["bound"]["cases"]:
        assert f"<td>{fmt(case['r_split'])}</td>" in html


def test_header_records_versions_model_hashes_tokens_seed_and_time(report):
    html = report["html"]
    perturb_header = report["records"]["perturb"]["header"]
    for key, value in (("tokens", str(N_TOKENS)), ("seed", "0"),
                       ("token_ids_sha256", perturb_header["token_ids_sha256"]),
                       ("model", "llama (config)")):  # fmt: skip
        assert f"<td>{key}</td><td>{value}</td>" in html
    for name in ("ropesplit", "torch", "transformers", "numpy", "sympy", "matplotlib"):
        assert f"<td>version of {name}</td>" in html
    assert re.search(r"<td>run_seconds</td><td>\d+\.\d+</td>", html)


def test_markdown_links_the_written_pngs(report):
    links = re.findall(r"!\[Figure \d: [^\]]*\]\(([^)]*)\)", report["md"])
    assert len(links) == 8
    assert all((report["out"] / link).is_file() for link in links)
    assert "| layer | r_split | r_split (control) | r_split (paper) |" in report["md"]


def test_figures_rerun_gives_byte_identical_files(report):
    """A second run from scratch (analysis, experiments, captures) draws the same bytes."""
    again = sorted(report["again"].iterdir())
    assert len(again) == 8
    for path in again:
        assert path.read_bytes() == (report["out"] / "figures" / path.name).read_bytes(), path.name


def test_renderer_shows_failed_steps_and_steps_not_run(report):
    records = dict(report["records"])
    derive = json.loads(json.dumps(records["derive"]))
    derive["steps"][0]["checked"] = False
    derive["all_checked"] = False
    doc = build_document({"model": "m"}, {"derive": derive, "analyze": records["analyze"]})
    html, md = render_html(doc), render_markdown(doc)
    assert "<td>FAILED</td>" in html and "NOT all checked" in html
    assert "<h2>Steps not run</h2>\n<p>bound, perturb</p>" in html
    assert "## Steps not run\n\nbound, perturb" in md


def test_renderer_escapes_text_in_html(report):
    doc = build_document({"model": "<b>x</b> & y"}, {"analyze": report["records"]["analyze"]})
    assert "<td>&lt;b&gt;x&lt;/b&gt; &amp; y</td>" in render_html(doc)


@pytest.mark.parametrize("command", ["figures", "report"])
def test_missing_output_folder_is_a_one_line_error(command, capsys):
    assert main([command, "--out", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"ropesplit {command}: error: cannot write ")
    assert "folder /nonexistent does not exist" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--head", "3x"], "head must be LAYER.HEAD (e.g. 3.1), got '3x'"),
        (["--tokens", "8"], "--tokens must be at least 16, got 8"),
        (["--figure-tokens", "600"], "--figure-tokens must lie in [2, --tokens = 512], got 600"),
        (["--seeds", "0"], "--seeds must be at least 1, got 0"),
    ],
)
def test_bad_flags_fail_before_anything_is_created(flags, message, tmp_path, capsys):
    out = tmp_path / "new"
    assert main(["figures", *flags, "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"ropesplit figures: error: {message}\n"
    assert not out.exists()
