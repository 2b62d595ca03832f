"""The report's pipeline, declared: stages and figures name what they need, one gather step.

Cheap stand-in stages (no model, no training) run through the real
``pipeline._run_stages``, the real plan check and the real gather step, with
figure builders that only read their declared inputs: whatever the order of
the stages, either the plan is refused before anything runs, naming what
is missing, or every figure the run's records support gets its data; a
figure's missing input is a one-line error naming the figure and the record;
the rendered report says which figure is not drawn and why.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ropesplit.core.errors import RopesplitError
from ropesplit.figures import FIGURES, figure_files
from ropesplit.report import figure_data, pipeline, sections, stages
from ropesplit.report.document import Details, Document, FigureBlock, Section, Table
from ropesplit.report.pipeline import RunContext, RunSettings, check_plan
from ropesplit.report.render import render_html, render_markdown
from ropesplit.report.sections import SectionSpec, build_document
from ropesplit.report.sections import run as run_section

ROOT = Path(__file__).resolve().parents[2]
NAMES = [spec.name for spec in FIGURES]
PNG = b"\x89PNG\r\n\x1a\n stand-in"  # what the stand-in figures stage writes


@pytest.fixture
def cheap_figures(monkeypatch):
    """Figure builders that read every declared input (and nothing else) and return it."""
    monkeypatch.setattr(figure_data.FigureSources, "capture",
                        lambda self, which: f"capture of {which}")  # fmt: skip

    def builder(spec):
        def build(view):
            return {need: view.capture("text") if need == "load" else view.record(need)
                    for need in spec.needs}  # fmt: skip
        return build

    monkeypatch.setattr(figure_data, "BUILDERS", {spec.name: builder(spec) for spec in FIGURES})


def cheap(stage, ran, *, without_record=()):
    """``stage`` with a stand-in run: records its name in ``ran`` and returns a small record
    (``load`` puts a model in memory instead); the gather step stays the real one."""
    if stage.gathers:
        return stage

    def run(ctx):
        ran.append(stage.name)
        if stage.name == "load":
            ctx.loaded, ctx.ids = SimpleNamespace(name="stand-in model"), [1, 2, 3]
            return None
        if stage.name == "figures":
            return _write_pngs(ctx)
        return None if stage.name in without_record else {"made by": stage.name}

    return dataclasses.replace(stage, run=run)


def _write_pngs(ctx) -> None:
    if ctx.figure_folder is None:
        return
    for spec in FIGURES:
        if spec.name in ctx.figure_data:
            for width in ctx.widths:
                for fmt in ctx.formats:
                    path = ctx.figure_folder / figure_files(spec, width, fmt)
                    path.write_bytes(PNG)
                    ctx.written.append(path)


def moved(stages):
    """Every order made by moving one stage to another place."""
    for i in range(len(stages)):
        for j in range(len(stages)):
            if i != j:
                order = list(stages)
                order.insert(j, order.pop(i))
                yield order


@pytest.mark.parametrize("plan", ["STAGES", "FIGURE_STAGES"])
def test_no_order_of_the_stages_drops_a_figure(plan, cheap_figures):
    """Moving any stage anywhere: refused before anything runs (one line, naming the stage
    or record), or every figure whose needs the run makes has its data."""
    stages = getattr(pipeline, plan)
    made = {stage.record for stage in stages}
    supported = {spec.name for spec in FIGURES if set(spec.needs) <= made}
    assert plan == "FIGURE_STAGES" or supported == set(NAMES)  # the report draws all
    refused = ran_through = 0
    for order in moved(stages):
        ran: list[str] = []
        ctx = RunContext(RunSettings())
        try:
            pipeline._run_stages(ctx, [cheap(stage, ran) for stage in order])
        except RopesplitError as exc:
            assert ran == [], (str(exc), ran)  # nothing ran
            assert "\n" not in str(exc) and re.search(r"'[a-z_]+'", str(exc))
            refused += 1
            continue
        ran_through += 1
        assert set(ctx.figure_data) == supported, [stage.name for stage in order]
        assert set(ctx.figure_missing) == set(NAMES) - supported
        for spec in FIGURES:  # each built from exactly its declared inputs
            if spec.name in supported:
                assert set(ctx.figure_data[spec.name]) == set(spec.needs)
    assert refused and ran_through


def test_gathering_before_the_training_is_refused_naming_figure_and_record():
    """The maintainer's case: figures 11 and 12 need train.json; gather before train (and no
    length or terms stage, which would be named first)."""
    order = [s for s in pipeline.STAGES if not s.gathers and s.name not in ("length", "terms")]
    order.insert([s.name for s in order].index("train"), stages.GATHER)
    with pytest.raises(RopesplitError) as info:
        check_plan(order)
    assert str(info.value) == ("figure 11 (emergence) needs record 'train', which stage 'train' "
                               "makes after 'gather'; gather after every compute stage")


def test_a_stage_before_what_it_needs_is_refused():
    order = [stage for stage in pipeline.STAGES if stage.name != "length"]
    order.insert([s.name for s in order].index("train"), stages.LENGTH)
    with pytest.raises(RopesplitError, match="^stage 'length' needs 'train', which stage 'train' "
                                             "makes after it; run 'train' first$"):
        check_plan(order)
    without = [stage for stage in pipeline.STAGES if stage.name != "load"]
    with pytest.raises(RopesplitError, match="^stage 'claims' needs 'load', which no stage"):
        check_plan(without)
    with pytest.raises(RopesplitError, match="^stage 'derive' makes record 'derive', which "
                       "another stage of the run makes too"):
        check_plan([stages.DERIVE, stages.DERIVE])


def test_each_stage_name_is_one_stage_and_two_subjects_make_one_record():
    """A stage's name means one stage across both plans; the length experiment on the model
    trained here (the report) and on the analysed model (``ropesplit figures``) are two
    stages that make the one ``length`` record figure 8 reads, never both in one run."""
    every = {*pipeline.STAGES, *pipeline.FIGURE_STAGES}
    assert len({s.name for s in every}) == len(every)
    assert stages.LENGTH.record == stages.LENGTH_HERE.record == "length"
    assert stages.LENGTH.name != stages.LENGTH_HERE.name
    both = [*pipeline.FIGURE_STAGES[:-2], stages.LENGTH, *pipeline.FIGURE_STAGES[-2:]]
    with pytest.raises(RopesplitError, match="makes record 'length', which another stage"):
        check_plan(both)


def test_a_figure_needing_what_no_stage_makes_is_refused():
    wrong = [dataclasses.replace(FIGURES[0], needs=("load", "trian"))]
    with pytest.raises(RopesplitError, match=r"^figure 1 \(decomposition\) needs 'trian', "
                                             "which no stage makes$"):
        check_plan(pipeline.STAGES, wrong)


def test_a_missing_declared_input_is_a_one_line_error_naming_figure_and_record():
    emergence = next(spec for spec in FIGURES if spec.name == "emergence")
    sources = figure_data.FigureSources({"analyze": {}}, RunSettings())
    with pytest.raises(RopesplitError) as info:
        figure_data.figure_data(emergence, sources)
    assert str(info.value) == "figure 11 (emergence) needs record 'train', which is missing"
    decomposition = FIGURES[0]  # needs the model in memory too
    with pytest.raises(RopesplitError, match=r"^figure 1 \(decomposition\) needs record 'load'"):
        figure_data.figure_data(decomposition, sources)


def test_a_stage_that_ran_without_its_record_stops_the_gather(cheap_figures):
    ran: list[str] = []
    stages = [cheap(stage, ran, without_record=("train",)) for stage in pipeline.STAGES]
    with pytest.raises(RopesplitError) as info:
        pipeline._run_stages(RunContext(RunSettings()), stages)
    assert str(info.value) == ("figure 11 (emergence) needs record 'train', which stage 'train' "
                               "ran without making")
    assert ran[-1] == "terms"  # stopped at gather, before the figures were drawn


def test_a_figure_cannot_read_what_it_does_not_declare():
    r_split = next(spec for spec in FIGURES if spec.name == "r_split")
    sources = figure_data.FigureSources({"analyze": {"heads": []}}, RunSettings())
    with pytest.raises(RopesplitError, match=r"^figure 2 \(r_split\) reads 'analyze' but "
                                             r"declares needs \(nothing\)"):
        figure_data.figure_data(dataclasses.replace(r_split, needs=()), sources)


def test_every_figure_has_one_builder_and_one_section():
    assert set(figure_data.BUILDERS) == set(NAMES)
    shown = [name for spec in sections.SECTIONS for name in spec.figures]
    assert sorted(shown) == sorted(NAMES)  # each figure placed in exactly one section


def test_the_report_draws_what_the_records_support_and_names_the_rest(tmp_path, monkeypatch,
                                                                      cheap_figures):
    """No train stage: figures 8, 11, 12, 15 and 22 are not drawn; the page says which and
    why, in the figure's own section, or at the end where that section is not built."""
    ran: list[str] = []
    skip = ("train", "length", "terms")
    stages = [cheap(stage, ran) for stage in pipeline.STAGES if stage.name not in skip]
    monkeypatch.setattr(pipeline, "STAGES", stages)

    def stub(inputs):
        return [Section("Stub", ["a stand-in section"], anchor="stub",
                        figures=inputs.figures_named(spec.figures))]

    spec = SectionSpec("stub", ("analyze",), stub,
                       tuple(n for n in NAMES if not n.startswith("emergence")))
    monkeypatch.setattr(sections, "SECTIONS", [spec, run_section.SECTION])
    index = pipeline.run_report(RunSettings(), tmp_path)
    html, md = index.read_text(), (tmp_path / "report.md").read_text()
    assert html.count('src="data:image/png;base64,') == len(FIGURES) - 5
    not_drawn = {8: "length", 11: "train", 12: "train", 15: "terms", 22: "train"}
    for number, need in not_drawn.items():
        name = FIGURES[number - 1].name
        line = (f"Figure {number} ({name}): {FIGURES[number - 1].title}, not drawn: needs "
                f"'{need}', which this run does not make (no {need} stage).")
        assert line in html.replace("&#x27;", "'"), line
        assert f"*{line}*" in md
    stub_part = html[html.index('<h2 id="stub">'):html.index('<h2 id="not-run">')]
    assert 'id="figure-8"' in stub_part and 'id="figure-15"' in stub_part  # in their section
    tail = html[html.index('<h2 id="not-run">'):html.index('<h2 id="run">')]
    assert 'id="figure-11"' in tail and 'id="figure-12"' in tail  # their section is not built
    assert not (tmp_path / "figures" / figure_files(FIGURES[10], "double", "png")).exists()


def test_a_drawn_figure_no_section_shows_is_not_dropped():
    block = FigureBlock(5, "Synthetic sweep", "caption", PNG, name="sweep")
    doc = build_document({"run": {"model": "m"}}, [block])
    assert [s.anchor for s in doc.sections] == ["not-run", "other-figures", "run"]
    assert doc.sections[1].figures == [block]


def test_details_render_collapsed_with_their_tables():
    section = Section("S", ["shown"], anchor="s",
                      details=[Details("every row", ["hidden text"], [Table(["a"], [["1"]])])])
    html = render_html(Document("t", [section]))
    assert ('<details><summary>every row</summary><p>hidden text</p><div class="wrap">'
            '<table><thead><tr><th>a</th></tr></thead>') in html
    assert "</table></div></details>" in html
    md = render_markdown(Document("t", [section]))
    assert "<details><summary>every row</summary>\n\nhidden text\n\n| a |" in md


def test_column_titles_may_break_after_underscores():
    html = render_html(Document("t", [Section("S", tables=[Table(["lowfreq_share_k"], [["1"]])])]))
    assert "<th>lowfreq_<wbr>share_<wbr>k</th>" in html


def test_importing_the_document_imports_no_torch_and_builds_without_it():
    code = ("import sys, ropesplit.report.document\n"
            "assert 'torch' not in sys.modules and 'numpy' not in sys.modules\n"
            "import ropesplit.report\n"
            "from ropesplit.report import build_document, render_html\n"
            "html = render_html(build_document({'run': {'model': 'm', 'tokens': 3}}))\n"
            "assert 'torch' not in sys.modules, 'torch'\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)  # fmt: skip
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr[-2000:]


def test_document_imports_nothing_of_the_report():
    """No cycle: the building blocks import no section (nor anything else of the report)."""
    tree = ast.parse((ROOT / "ropesplit" / "report" / "document.py").read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.startswith("ropesplit")], imported


def test_sections_compute_nothing_of_the_empirical_layer():
    """Sections only build text from records: none imports the empirical layer or torch."""
    for path in sorted((ROOT / "ropesplit" / "report" / "sections").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                     for a in n.names]  # fmt: skip
        bad = [m for m in imported if m.startswith(("ropesplit.empirical", "torch", "numpy"))]
        assert not bad, (path.name, bad)
