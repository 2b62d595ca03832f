"""The report: one run of every step on a tiny random Llama, rendered offline.

No download: the model is built from a config and stands in for the loaded
model (``stages._load`` is replaced); every other stage runs the real
functions, so the JSON records are structurally real, not typed in.
"""

from __future__ import annotations

import base64
import dataclasses
import html as html_module
import json
import re

import pytest
from conftest import (
    N_TOKENS,
    TINY_TRAIN,
    shared_checks,
    tiny_passages,
    tiny_report,
    tiny_report_settings,
)

from ropesplit.claims.registry import CLAIMS
from ropesplit.cli import main
from ropesplit.empirical import load_model
from ropesplit.figures import FIGURES, figure_files
from ropesplit.report import pipeline, render, sections
from ropesplit.report.document import Section, Table, fmt
from ropesplit.report.render import render_html, render_markdown
from ropesplit.report.sections import build_document
from ropesplit.theory import STEPS

pytestmark = pytest.mark.slow  # the tiny report, end to end (make test-fast leaves it out)

SETTINGS = tiny_report_settings()


def _extra_stage(ctx):
    """A stage added by one line: its record is written and reaches the sections."""
    return {"heads_seen": len(ctx.records["analyze"]["heads"])}


def _extra_section(inputs):
    value = inputs.records["extra"]["heads_seen"]
    return [Section("Extra: a section added by one line", [f"heads seen: {value}"],
                    anchor="extra")]  # fmt: skip


def _qwen_record(folder):
    """Another model's claims record, a tiny Qwen2 (for the models x claims table)."""
    from ropesplit.claims.records import ClaimsSettings
    from ropesplit.claims.registry import CONTROL_SEEDS
    from ropesplit.core.io import write_json
    from ropesplit.empirical.measurement.calibration import tiny_config
    from ropesplit.empirical.measurement.claims_run import run_claims

    cfg = tiny_config("qwen2")
    record = run_claims(load_model(cfg, seed=1),
                        ClaimsSettings(tokens=96, grid_tokens=(96,), passages=8, order_passages=8),
                        passage_ids=tiny_passages(),
                        controls={s: load_model(cfg, seed=50 + s) for s in CONTROL_SEEDS})
    write_json(folder / "qwen2.json", record)
    return folder / "qwen2.json"


@pytest.fixture(scope="module")
def report(tmp_path_factory, step_results):
    out = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as patch:
        tiny_report(patch)
        shared_checks(patch, step_results)  # the derive stage's checks, run once per test run
        # the extension points: one Stage line (before gather), one SectionSpec line
        at = [stage.name for stage in pipeline.STAGES].index("gather")
        patch.setattr(pipeline, "STAGES", [*pipeline.STAGES[:at], pipeline.Stage(
            "extra", "a test stage", _extra_stage, ("analyze",)), *pipeline.STAGES[at:]])
        patch.setattr(sections, "SECTIONS", [*sections.SECTIONS[:-1], sections.SectionSpec(
            "extra", ("extra",), _extra_section), sections.SECTIONS[-1]])  # fmt: skip
        index = pipeline.run_report(dataclasses.replace(SETTINGS, claims_records=(
            str(_qwen_record(tmp_path_factory.mktemp("qwen"))),)), out)
        again = tmp_path_factory.mktemp("figures")
        pipeline.run_figures(SETTINGS, again, widths=("single",), formats=("png",))  # quick rerun
    names = ("derive", "bound", "claims", "compare", "analyze", "perturb", "length", "recall",
             "encoder", "run", "extra")
    records = {name: json.loads((out / f"{name}.json").read_text()) for name in names}
    return {"out": out, "html": index.read_text(), "records": records, "again": again,
            "md": (out / "report.md").read_text()}  # fmt: skip


def test_every_step_writes_its_json_and_every_figure_both_widths_and_formats(report):
    out = report["out"]
    assert {p.name for p in out.iterdir()} >= {"derive.json", "bound.json", "analyze.json",
                                               "claims.json",
                                               "perturb.json", "run.json", "extra.json",
                                               "index.html", "report.md"}  # fmt: skip
    written = sorted(p.name for p in (out / "figures").iterdir() if p.is_file())
    expected = sorted(figure_files(spec, w, f) for spec in FIGURES
                      for w in ("single", "double") for f in ("pdf", "png"))  # fmt: skip
    assert written == expected and len(written) == len(FIGURES) * 4


def test_the_report_keeps_the_records_its_figures_redraw_from(report, tmp_path):
    """Every figure's data is kept in figures/records/, and the gallery command
    redraws each two-column PNG from it byte for byte."""
    from ropesplit.figures.recorded import draw_recorded

    folder = report["out"] / "figures"
    assert sorted(p.stem for p in (folder / "records").glob("*.json")) == sorted(
        spec.name for spec in FIGURES)  # fmt: skip
    for path in draw_recorded(folder / "records", tmp_path):
        assert path.read_bytes() == (folder / path.name).read_bytes(), path.name


def test_html_embeds_every_figure_and_references_nothing_outside(report):
    html = report["html"]
    assert len(re.findall(r'src="([^"]*)"', html)) == len(FIGURES)
    sources = dict(re.findall(r'<figure id="figure-(\d+)"><img alt="[^"]*" src="([^"]*)"', html))
    assert sorted(map(int, sources)) == [spec.number for spec in FIGURES]
    for spec in FIGURES:
        src = sources[str(spec.number)]
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.removeprefix("data:image/png;base64,"))
        assert png == (report["out"] / "figures" / figure_files(spec, "double", "png")).read_bytes()
        assert f"Figure {spec.number}. {spec.title}." in html
    assert not re.search(r"https?://", html)
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "<style>" in html  # the CSS is inline


def cell(value) -> str:
    """How a formatted number appears in the HTML: a right-aligned numeric cell."""
    return f'<td class="num">{fmt(value)}</td>'


def test_html_holds_every_table_with_numbers_from_the_json(report):
    html, records = report["html"], report["records"]
    titles = ["Theory:", "Numerics:", "Empirical:", "Training:", "Run"]
    titles += [f"Experiment: {e['title']}" for e in records["perturb"]["experiments"].values()]
    for title in titles:
        assert re.search(f"<h2[^>]*>{re.escape(title)}", html), title
    for step in STEPS:
        assert f"<td>{step.id}</td>" in html
    analysis = records["analyze"]
    n_layers = 1 + max(h["layer"] for h in analysis["heads"])
    assert html.count("<tr><td") >= len(STEPS) + n_layers + 1
    assert cell(analysis["summary"]["r_split"]) in html
    assert cell(analysis["control"]["summary"]["r_split"]) in html
    for row in records["perturb"]["order"]:
        assert cell(row["ratio"]) in html
    for case in records["bound"]["cases"]:
        assert cell(case["r_split"]) in html
    assert f"heads seen: {len(analysis['heads'])}" in html  # the added stage and section


def test_the_report_opens_with_the_claims_and_ends_with_the_run(report):
    """One line per claim, its primary test's numbers and verdict from claims.json,
    linking to the claim's detail; run metadata last."""
    html, records = report["html"], report["records"]
    headings = re.findall(r'<h2 id="([^"]*)">', html)
    assert headings[0] == "claims" and headings[-1] == "run"
    assert headings[1:6] == [f"claim-{n}" for n in range(1, 6)]
    claims = html[html.index('<h2 id="claims">'):html.index('<h2 id="claim-1">')]
    rows = re.findall(r"<tr><td[^>]*><a href=\"#([^\"]+)\">(\d)\. ", claims)
    assert [int(n) for _, n in rows] == [c.claim for c in CLAIMS] == [1, 2, 3, 4, 5]
    for target, _ in rows:
        assert f'id="{target}"' in html  # every link lands on a section
    for claim in records["claims"]["claims"]:
        row = re.search(rf"{claim['claim']}\. .*?</tr>", claims).group(0)
        css = render.VERDICT_CLASS[claim["verdict"]]
        assert f'<td class="{css}">{claim["verdict"]}</td>' in row
        assert f"n = {claim['n']} passages" in row
        first = claim["conditions"][0]["interval"]
        assert fmt(first["mean"]) in row and fmt(first["low"]) in row
    row2 = re.search(r"2\. Attention logits split.*?</tr>", claims).group(0)
    assert html_module.escape("toolkit's") in row2 and html_module.escape("paper's") in row2
    grids = {g["claim"]: g for g in records["claims"]["grid"]}
    for claim in records["claims"]["claims"]:  # over the grid: one line, the rest folded
        row = re.search(rf"{claim['claim']}\. .*?</tr>", claims).group(0)
        assert_one_line_over_the_grid(row, claim["robust_statement"], grids[claim["claim"]])
    assert "weaker than the paper:" in claims  # the verdict words are defined on the page
    # the length experiment is routed by what each check is about: loss under 1, f/g under 5
    one = html[html.index('<h2 id="claim-1">'):html.index('<h2 id="claim-2">')]
    five = html[html.index('<h2 id="claim-5">'):html.index('<h2 id="theory">')]
    assert "vanilla rises" in one and "LM-Infinite near" in one and "g in range" not in one
    assert "g in range" in five and "f goes with the rise" in five and "vanilla rises" not in five


def assert_one_line_over_the_grid(row: str, statement: str, grid: dict) -> None:
    """The row's last cell: a robust statement as it is; a fragile one as one line, its most
    common verdict's count of the grid's cells, the whole statement folded under it."""
    last = row.rsplit("<td", 1)[1]
    if statement.startswith("robust: "):
        assert f">{html_module.escape(statement)}</td>" in last and "<details>" not in last
        return
    shown = re.fullmatch(
        r"[^>]*><details><summary>fragile: ([a-z ]+) in (\d+) of (\d+) "
        r"cells</summary><ul>(.*)</ul></details></td></tr>",
        last,
    )
    assert shown is not None, last
    verdicts = [c["verdict"] for c in grid["cells"]]
    assert int(shown.group(3)) == len(verdicts) == grid["n_cells"]
    assert (
        int(shown.group(2)) == verdicts.count(shown.group(1)) == max(map(verdicts.count, verdicts))
    )
    folded = re.findall(r"<li>(.*?)</li>", shown.group(4))
    assert "; ".join(folded) == html_module.escape(statement.removeprefix("fragile: "))


def test_prose_is_left_aligned_numbers_right_and_wide_tables_scroll(report):
    html = report["html"]
    assert ".wrap { overflow-x: auto;" in html
    assert html.count('<div class="wrap"><table>') == html.count("<table>")
    method = html_module.escape(report["records"]["derive"]["steps"][0]["method"])
    assert re.search(f'<td( class="prose")?>{re.escape(method)}</td>', html)  # left (default)
    assert "td.num { text-align: right;" in html and "text-align: left;" in html


def test_header_records_versions_model_hashes_tokens_seed_and_time(report):
    html = report["html"]
    run = html[html.index('<h2 id="run">'):]
    perturb_header = report["records"]["perturb"]["header"]
    for key, value in (("tokens", str(N_TOKENS)), ("seed", "0"),
                       ("token_ids_sha256", perturb_header["token_ids_sha256"]),
                       ("model", "llama (config)")):  # fmt: skip
        assert re.search(f"<td>{key}</td><td[^>]*>{re.escape(value)}</td>", run), key
    for name in ("ropesplit", "torch", "transformers", "numpy", "sympy", "matplotlib"):
        assert f"<td>version of {name}</td>" in run
    assert re.search(r"<td>run_seconds</td><td[^>]*>\d+\.\d+</td>", run)
    assert report["records"]["run"]["tokens"] == N_TOKENS  # and it is in run.json


def test_each_stage_records_its_model_compute_beside_its_total(report):
    """run.json: per stage the seconds inside the model's passes and training steps
    (core.clock), never above the stage's own; model-free stages read 0; the sum beside
    the run's total, so the report shows its own overhead."""
    record = report["records"]["run"]

    def parse(line):
        return {k: float(v) for k, v in (part.rsplit(" ", 1) for part in line.split(", "))}

    total, model = parse(record["stage_seconds"]), parse(record["stage_model_seconds"])
    assert list(model) == list(total)
    assert all(model[k] <= total[k] + 0.1 for k in total)
    assert model["derive"] == model["bound"] == 0.0  # sympy and synthetic numerics only
    assert model["analyze"] > 0.0 and model["train"] > 0.0
    assert record["model_seconds"] == pytest.approx(sum(model.values()), abs=0.2)
    assert record["model_seconds"] <= record["run_seconds"]


def test_markdown_links_the_written_pngs(report):
    links = re.findall(r"!\[Figure \d+: [^\]]*\]\(([^)]*)\)", report["md"])
    assert len(links) == len(FIGURES)
    assert all((report["out"] / link).is_file() for link in links)
    assert "| layer | r_split | r_split (control) | r_split_rowcentred |" in report["md"]
    assert "[1. Position generalization" in report["md"]  # claims link to their sections


# drawn by the report from the model it trains (train and length stages) or from its
# interventions stage, not by `figures`
INTERVENTIONS = ("remainder", "keys", "terms", "shuffle")
TRAINED = ("emergence", "emergence_pairs", "recall_emergence", "recall_pairs",
           "bothways")  # report only (the train, recall and encoder stages)
CLAIMS_RUN = ("tolerance", "forest", "cells")  # the claims and compare stages' (report only)
REPORT_ONLY = (*TRAINED, "length", *INTERVENTIONS, *CLAIMS_RUN)


def test_figures_rerun_gives_byte_identical_files(report):
    """A second run from scratch (analysis, experiments, captures) draws the same bytes."""
    again = sorted(p for p in report["again"].iterdir() if p.is_file())
    assert len(again) == len([s for s in FIGURES
                              if s.name not in (*TRAINED, *INTERVENTIONS, *CLAIMS_RUN)])
    again = [p for p in again if not any(f"-{name}-" in p.name for name in REPORT_ONLY)]
    assert len(again) == len([s for s in FIGURES if s.name not in REPORT_ONLY])
    for path in again:
        assert path.read_bytes() == (report["out"] / "figures" / path.name).read_bytes(), path.name
    for path in sorted((report["again"] / "records").iterdir()):  # and the data they drew from
        if path.stem in REPORT_ONLY:
            continue
        assert path.read_bytes() == (report["out"] / "figures" / "records" / path.name
                                     ).read_bytes(), path.name  # fmt: skip


def test_length_runs_on_the_model_the_report_trains(report):
    """The report's length experiment reaches 8 L_train on the model it trained."""
    perturb, length = report["records"]["perturb"], report["records"]["length"]
    assert "length" not in perturb["experiments"]  # not on the analysed model's short text
    assert "trained here" in length["header"]["subject"]
    seq_len = TINY_TRAIN.seq_len
    assert length["header"]["tokens"] == 8 * seq_len
    assert {r["bucket"] for r in length["length"]} == {"1x", "2x", "4x", "8x"}
    assert "Subject: " in report["html"] and 'id="experiment-length"' in report["html"]


def test_renderer_shows_failed_steps_and_steps_not_run(report):
    records = dict(report["records"])
    derive = json.loads(json.dumps(records["derive"]))
    derive["steps"][0]["checked"] = False
    derive["all_checked"] = False
    doc = build_document({"derive": derive, "analyze": records["analyze"]})
    html, md = render_html(doc), render_markdown(doc)
    assert "<td>FAILED</td>" in html and "NOT all checked" in html
    not_run = "claims, compare, bound, protocol, perturb, train, recall, encoder, run"
    assert f'<h2 id="not-run">Steps not run</h2>\n<p>{not_run}</p>' in html
    assert f"## Steps not run\n\n{not_run}" in md


def test_renderer_escapes_text_in_html(report):
    records = {"run": {"model": "<b>x</b> & y"}, "analyze": report["records"]["analyze"]}
    doc = build_document(records)
    assert "<td>&lt;b&gt;x&lt;/b&gt; &amp; y</td>" in render_html(doc)


def test_a_table_cell_is_numeric_only_when_every_cell_is_a_number():
    from ropesplit.report.render import _column_kinds

    table = Table(["a", "b", "c"], [["1.5", "x", "n/a"], ["-2e-05", "3", "n/a"]])
    assert _column_kinds(table) == ["num", "", ""]


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
        (["--draws", "0"], "argument --draws: must be at least 1, got 0"),
    ],
)
def test_bad_flags_fail_before_anything_is_created(flags, message, tmp_path, capsys):
    out = tmp_path / "new"
    assert main(["figures", *flags, "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"ropesplit figures: error: {message}\n"
    assert not out.exists()


def test_the_report_opens_with_its_run_line_and_a_table_of_contents(report):
    """Model, corpus and tokens, date and commit first; then the first screen (figure 21 and
    the five verdicts); then links to every section, below the first screen in the page
    (a sticky column beside it on a wide window)."""
    html, run = report["html"], report["records"]["run"]
    assert {"date", "commit", "corpus"} <= set(run)
    top = html.split("<h1>", 1)[1].split("</nav>", 1)[0]
    assert '<p class="run">' in top and run["model"] in top and f"commit {run['commit']}" in top
    assert f"{run['tokens']} tokens" in top and "8 passages of 48 tokens" in top
    anchors = re.findall(r'<h2 id="([^"]+)"', html)
    links = re.findall(r'<li><a href="#([^"]+)">', top)
    assert links == anchors and "claims" in " ".join(links)
    assert (html.index('<p class="run">') < html.index('<section class="lead" id="glance"')
            < html.index('<nav class="toc">') < html.index("<h2 id="))  # fmt: skip
    assert "nav.toc { grid-area: toc; position: sticky;" in html
    assert report["md"].splitlines()[2].startswith(f"*{run['model']}")


def test_the_first_screen_is_figure_21_beside_the_five_verdicts(report):
    """The lead: the forest of every claim in every cell (figure 21, drawn from claims.json),
    and a compact table, one row per claim: its verdict and over the grid one line."""
    html, record = report["html"], report["records"]["claims"]
    lead = html[html.index('<section class="lead"') : html.index('<nav class="toc">')]
    assert lead.index('<figure id="figure-21"><img') < lead.index('<div class="verdicts">')
    assert lead.count("<figure") == 1 and "<h2" not in lead
    rows = re.findall(r"<tr>.*?</tr>", lead.split("<tbody>", 1)[1])
    grids = {g["claim"]: g for g in record["grid"]}
    assert len(rows) == len(record["claims"]) == 5
    for row, claim in zip(rows, record["claims"], strict=True):
        n = claim["claim"]
        assert row.startswith(f'<tr><td class="prose"><a href="#claim-{n}">{n}. ')
        css = render.VERDICT_CLASS[claim["verdict"]]
        assert f'<td class="{css}">{claim["verdict"]}</td>' in row
        assert_one_line_over_the_grid(row, claim["robust_statement"], grids[n])
    md = report["md"]  # the Markdown opens the same way: the table and the figure, then contents
    assert md.index("| claim | verdict | over the grid |") < md.index("![Figure 21: ") < md.index(
        "1. [The paper's claims")  # fmt: skip


# the section each figure stands in (by anchor): with what it shows, not in a gallery at the end
PLACE = {"decomposition": "empirical", "r_split": "empirical", "pair_energy": "empirical",
         "bound": "numerics", "sweep": "numerics", "reference": "protocol",
         "reference_pairs": "protocol", "perturbation": "experiment-order",
         "distance": "experiment-distance", "length": "experiment-length",
         "emergence": "training", "emergence_pairs": "training",
         "recall_emergence": "recall", "recall_pairs": "recall",
         "tolerance": "claim-1", "forest": "models", "cells": "glance", "bothways": "both-ways",
         **{name: f"experiment-{name}" for name in INTERVENTIONS}}  # fmt: skip


def test_each_figure_stands_in_its_own_section(report):
    """Under its section's heading, or inside the first screen (a lead section has none)."""
    html = report["html"]
    heads = [(m.start(), m.group(1)) for m in re.finditer(r'<h2 id="([^"]+)"', html)]
    leads = [(m.start(), html.index("</section>", m.start()), m.group(1))
             for m in re.finditer(r'<section class="lead" id="([^"]+)"', html)]  # fmt: skip
    assert set(PLACE) == {spec.name for spec in FIGURES}
    for spec in FIGURES:
        at = html.index(f'<figure id="figure-{spec.number}">')
        inside = [anchor for start, end, anchor in leads if start < at < end]
        placed = inside or [anchor for pos, anchor in heads if pos < at]
        assert placed[-1] == PLACE[spec.name], spec.name
    assert 'class="missing"' not in html  # the tiny report draws every figure


def test_each_claim_is_two_lines_with_every_test_collapsed(report):
    """The claim's section: prediction and verdict, then its tests in a <details> block; the
    length experiment's checks as the length stage judged them (length.json)."""
    html, records = report["html"], report["records"]
    checks = records["length"]["checks"]
    assert set(checks) == {"vanilla rises", "LM-Infinite near", "f goes with the rise",
                           "g in range"}  # fmt: skip
    for claim in records["claims"]["claims"]:
        n = claim["claim"]
        part = html[html.index(f'<h2 id="claim-{n}">') + 1:]
        part = part[:part.index("<h2")]
        shown = re.sub(r"<details>.*?</details>", "", part, flags=re.S)  # what is not collapsed
        assert shown.count("<p>") == 2 and "<p>Prediction: " in shown and "<p>Verdict: " in shown
        assert "Over the grid: " in shown
        assert f"<details><summary>every test of claim {n} (" in part
        assert f"<details><summary>the paper&#x27;s words for claim {n}" in part
        assert f"<details><summary>claim {n} in every cell of the grid" in part
        tests_at = part.index(f"<details><summary>every test of claim {n} (")
        assert tests_at < part.index("<table>", tests_at) < part.index("</details>", tests_at)
        if n == 1:
            assert html_module.escape(checks["vanilla rises"]["reason"]) in part


def test_the_recall_section_states_its_predictions_and_verdicts(report):
    """The report trains associative recall at two bases over three seeds and says
    what came out: the prediction before training, accuracy by distance, each verdict."""
    record = report["records"]["recall"]
    assert record["config"]["task"] == "recall"
    assert {r["rope_base"] for r in record["runs"]} == {10000.0, 100.0}
    assert sorted({r["seed"] for r in record["runs"]}) == [0, 1, 2]
    assert set(record["verdict"]) == {"weighted_slow_share_rises", "r_split_rises",
                                      "accuracy_falls_with_distance"}  # fmt: skip
    html = report["html"]
    section = html.split('<h2 id="recall"', 1)[1].split("<h2 ", 1)[0]
    assert "Prediction, computed before training" in section and "Finding: " in section
    for v in record["verdict"].values():
        assert v["verdict"] in section


def test_the_both_ways_section_trains_encoders_measured_on_every_pair(report):
    """The report trains the masked-LM encoder on its text and on the bundled proteins, and
    its section shows the split beside the three-term fit, on every pair both ways, with
    which claims carry over; figure 22 draws the causal run beside the encoders."""
    record = report["records"]["encoder"]
    assert set(record) == {"text", "proteins"}
    for corpus, run in record.items():
        assert run["config"]["task"] == "mlm"
        seq_len = run["config"]["seq_len"]
        last = run["runs"][0]["checkpoints"][-1]
        assert {h["n_pairs"] for h in last["heads"]} == {seq_len**2}, corpus
        final = run["final_analysis"]
        assert final["masks"] == ["both ways"]
        assert 0.0 < final["summary_three_term"]["three_term_r_probs"] <= 1.0
    assert record["proteins"]["config"]["text"].endswith("swissprot.fasta")
    html = report["html"]
    section = html.split('<h2 id="both-ways"', 1)[1].split("<h2 ", 1)[0]
    assert "three-term r" in section and "carry over" in section and "masked-token loss" in section
