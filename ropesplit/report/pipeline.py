r"""The report run: every step of the toolkit on one model and one text, through the Python APIs.

The run is a list of :class:`Stage` objects, :data:`STAGES`, in order; each
prints one progress line on stderr (with tqdm bars inside the long ones) and
may return a JSON record, which :func:`run_report` writes as ``NAME.json``
(through :func:`ropesplit.core.io.write_json`) and hands to the report's sections
(:mod:`ropesplit.report.sections`). A stage declares what it ``needs`` (the
names of earlier stages: their records, or ``load``'s model in memory), and
every figure declares its own (``FigureSpec.needs``); :func:`check_plan`
refuses an order in which anything would run before what it needs, before
any stage runs. The compute stages only write records (and keep objects in
memory on the :class:`RunContext`: the model, the model trained here); the
one ``gather`` stage, after all of them, builds every figure's data from the
records it declares (:mod:`ropesplit.report.figure_data`):

1. ``derive``   the sympy checks of docs/theory.md (``ropesplit.theory.check_all``);
2. ``bound``    the numerics table on synthetic Q/K (``numerics.synthetic``, ``numerics.stats``);
3. ``load``     the model, once, and its random-init twin (the control);
4. ``claims``   every claim's pre-registered primary test (``ropesplit.claims.registry``) in every
   cell of the grid, over two corpora of passages, beside the shuffled-frequency null and
   five random-init twins (``claims.json``);
   ``compare`` the models x claims record: this run and any ``--claims-record`` given;
5. ``analyze``  docs/theory.md section 5 statistics on every head, trained and control;
6. ``protocol`` r_split per reference, kbar, token count and layers, with controls;
7. ``perturb``  every experiment of ``empirical.experiments.EXPERIMENTS`` but ``length`` and the
   interventions;
8. ``interventions`` the attention edited inside the model (``remainder``, ``keys``,
   ``shuffle``) over corpus passages of ``intervention_tokens`` tokens;
9. ``train``    a small Llama trained here at two RoPE bases, measured per checkpoint
   (:mod:`ropesplit.report.training`);
10. ``recall``   associative recall trained at the same two bases over three seeds
   (:func:`ropesplit.report.training.recall_stage`), the predictions judged over seeds;
11. ``length``   LM-Infinite's length experiment on that trained model, up to 8 L_train
   (SmolLM2's training length is beyond what 2 CPU cores can run);
12. ``terms``    which term carries length generalization, on that trained model;
13. ``gather``   every figure's data from the records it declares (and fresh captures);
14. ``figures`` every figure, PDF and PNG, one and two columns;

then ``run.json`` (model, text and token hashes, token count, seeds, stage
times, package versions) and the rendering, ``index.html`` (self-contained)
and ``report.md``, every number read from those records.

The stages live in :mod:`ropesplit.report.stages` (their bodies and the registry), the
settings and context in :mod:`ropesplit.report.context`; this module checks the plan,
runs the stages and renders. Adding a stage: a function ``run(ctx: RunContext) -> dict |
None`` and one ``Stage`` line in ``stages.STAGES`` (with its ``needs``), before
``gather``; its record reaches every section as ``inputs.records[name]`` and every figure
that names it in ``needs``.
"""

from __future__ import annotations

import contextlib
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ropesplit.core.clock import MODEL_CLOCK
from ropesplit.core.errors import RopesplitError
from ropesplit.report.context import RunContext, RunSettings, Stage
from ropesplit.report.stages import FIGURE_STAGES, MAKERS, STAGES, text_header

__all__ = [
    "FIGURE_STAGES",
    "STAGES",
    "RunContext",
    "RunSettings",
    "Stage",
    "check_plan",
    "figure_blocks",
    "run_figures",
    "run_report",
]

_VERSIONED = ("ropesplit", "numpy", "torch", "transformers", "sympy", "matplotlib", "gguf")


@dataclass
class _Progress:
    """One line per stage on stderr, with its duration; durations kept for ``run.json``, and
    of each the seconds of model compute in it (:data:`ropesplit.core.clock.MODEL_CLOCK`)."""

    total: int
    seconds: dict[str, float] = field(default_factory=dict)
    model_seconds: dict[str, float] = field(default_factory=dict)
    stream: Any = None

    @contextlib.contextmanager
    def stage(self, name: str, what: str) -> Iterator[None]:
        out = self.stream or sys.stderr
        index = len(self.seconds) + 1
        print(f"[{index}/{self.total}] {name}: {what} ...", file=out, flush=True)
        start, model = time.perf_counter(), MODEL_CLOCK.seconds
        yield
        self.seconds[name] = round(time.perf_counter() - start, 1)
        self.model_seconds[name] = round(MODEL_CLOCK.seconds - model, 1)
        print(f"[{index}/{self.total}] {name}: done in {self.seconds[name]:.1f} s", file=out,
              flush=True)  # fmt: skip


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def check_plan(stages: Sequence[Stage], figures: Sequence[Any] | None = None) -> None:
    """Refuse, before anything runs, an order of ``stages`` that would run a stage before
    what it needs, or gather a figure's data before a stage it needs (one-line error).

    ``figures`` (default ``ropesplit.figures.FIGURES``): every need must name a stage of
    :data:`STAGES` or :data:`FIGURE_STAGES` (or of this run); one that this run has no
    stage for leaves its figure out, said in the report and on stderr.
    """
    position: dict[str, int] = {}
    for index, stage in enumerate(stages):
        if stage.record in position:
            raise RopesplitError(f"stage {stage.name!r} makes record {stage.record!r}, which "
                                 "another stage of the run makes too")  # fmt: skip
        position[stage.record] = index
    for index, stage in enumerate(stages):
        for need in stage.needs:
            if need not in position:
                raise RopesplitError(f"stage {stage.name!r} needs {need!r}, which no stage of "
                                     "this run makes")  # fmt: skip
            if position[need] > index:
                raise RopesplitError(f"stage {stage.name!r} needs {need!r}, which stage "
                                     f"{need!r} makes after it; run {need!r} first")  # fmt: skip
    gathers = [stage for stage in stages if stage.gathers]
    if len(gathers) > 1:
        raise RopesplitError(f"one gather stage per run, got {len(gathers)}")
    if not gathers:
        return
    if figures is None:
        from ropesplit.figures import FIGURES

        figures = FIGURES
    known = MAKERS | set(position)
    at = position[gathers[0].record]
    for spec in figures:
        for need in spec.needs:
            if need not in known:
                raise RopesplitError(f"figure {spec.number} ({spec.name}) needs {need!r}, "
                                     "which no stage makes")  # fmt: skip
            if position.get(need, -1) > at:
                raise RopesplitError(f"figure {spec.number} ({spec.name}) needs record "
                                     f"{need!r}, which stage {need!r} makes after "
                                     f"{gathers[0].name!r}; gather after every compute stage")


def _run_stages(ctx: RunContext, stages: Sequence[Stage]) -> _Progress:
    """Check the order, then run ``stages``; a returned record is kept (and written when
    there is a folder)."""
    from ropesplit.core.io import write_json

    check_plan(stages)
    ctx.planned = tuple(stage.record for stage in stages)
    progress = _Progress(total=len(stages) + (ctx.folder is not None))
    for stage in stages:
        with progress.stage(stage.name, stage.what):
            record = stage.run(ctx)
            if record is not None:
                ctx.records[stage.record] = record
                if ctx.folder is not None:
                    write_json(ctx.folder / f"{stage.record}.json", record)
    return progress


def _commit() -> str:
    """The git commit of the checkout this package runs from, or ``"unknown"``."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def run_figures(
    settings: RunSettings,
    out: str | Path,
    *,
    widths: Sequence[str] = ("single", "double"),
    formats: Sequence[str] = ("pdf", "png"),
) -> list[Path]:
    """``ropesplit figures``: :data:`FIGURE_STAGES` (load, analyse, run, draw) into ``out``.

    The figures this run has no records for (the trained model's, the interventions') are
    named on stderr with what they need."""
    ctx = RunContext(settings, figure_folder=Path(out), widths=widths, formats=formats)
    _run_stages(ctx, FIGURE_STAGES)
    for block in figure_blocks(ctx):
        if block.missing:
            print(f"figure {block.number} ({block.name}) {block.missing}", file=sys.stderr)
    return ctx.written


def figure_blocks(ctx: RunContext) -> list[Any]:
    """One :class:`~ropesplit.report.document.FigureBlock` per figure of the registry, in
    order: the PNG the figures stage wrote (two-column), or, where it drew none, why not."""
    from ropesplit.figures import FIGURES as FIGURE_SPECS
    from ropesplit.figures import figure_files
    from ropesplit.report.document import FigureBlock

    folder = ctx.figure_folder or Path(".")
    written = {Path(p).resolve() for p in ctx.written}
    blocks = []
    for spec in FIGURE_SPECS:
        png = folder / figure_files(spec, "double", "png")
        files = [f"figures/{figure_files(spec, w, f)}" for w in ctx.widths for f in ctx.formats]
        if spec.name in ctx.figure_missing:
            missing = f"not drawn: {ctx.figure_missing[spec.name]}"
        elif spec.name not in ctx.figure_data:
            missing = "not drawn: no gather stage ran"
        elif png.resolve() not in written:
            missing = f"not drawn: the figures stage wrote no {png.name}"
        else:
            missing = ""
        blocks.append(FigureBlock(spec.number, spec.title, spec.caption,
                                  b"" if missing else png.read_bytes(), [] if missing else files,
                                  name=spec.name, missing=missing))  # fmt: skip
    return blocks


def run_report(settings: RunSettings, out: str | Path) -> Path:
    """``ropesplit report``: every stage of :data:`STAGES`, its JSON, the figures, HTML, Markdown.

    Writes into ``out`` (which must exist): ``NAME.json`` for every stage
    with a record, ``run.json``, ``figures/`` (PDF and PNG of every figure at
    both widths), ``index.html`` and ``report.md``. Returns the path of
    ``index.html``. A figure whose records this run did not make is not drawn;
    the report says so where the figure would stand, naming what it needs.
    """
    from ropesplit.core.io import write_json, write_text
    from ropesplit.report.render import render_html, render_markdown
    from ropesplit.report.sections import build_document

    folder = Path(out)
    if not folder.is_dir():
        raise RopesplitError(f"cannot write the report to {folder}: folder does not exist")
    check_plan(STAGES)  # before the figures folder is made
    start = time.perf_counter()
    ctx = RunContext(settings, folder=folder, figure_folder=folder / "figures")
    ctx.figure_folder.mkdir(exist_ok=True)  # type: ignore[union-attr]
    progress = _run_stages(ctx, STAGES)
    with progress.stage("render", "run.json, index.html and report.md"):
        blocks = figure_blocks(ctx)
        run = text_header(settings, ctx.loaded, ctx.ids, ctx.text)
        run["stage_seconds"] = ", ".join(f"{k} {v:.1f}" for k, v in progress.seconds.items())
        run["stage_model_seconds"] = ", ".join(f"{k} {v:.1f}" for k, v in
                                               progress.model_seconds.items())  # fmt: skip
        run["run_seconds"] = round(time.perf_counter() - start, 1)
        run["model_seconds"] = round(sum(progress.model_seconds.values()), 1)
        run["versions"] = _versions()
        run["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        run["commit"] = _commit()
        if "claims" in ctx.records:  # the claims' corpus and size, for the run line
            head = ctx.records["claims"].get("header", {})
            run["corpus"] = f"{head.get('corpus', settings.claims.corpus or 'pydoc')}, " \
                f"{head.get('passages', settings.claims.passages)} passages of " \
                f"{settings.tokens} tokens"
        ctx.records["run"] = run
        write_json(folder / "run.json", run)
        doc = build_document(ctx.records, blocks)
        write_text(folder / "index.html", render_html(doc))
        links = {b.number: next(f for f in b.files if f.endswith("-double.png"))
                 for b in blocks if not b.missing}  # the PNG embedded in index.html
        write_text(folder / "report.md", render_markdown(doc, links))
    return folder / "index.html"
