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
4. ``claims``   every claim's pre-registered primary test (``ropesplit.core.claims``) in every
   cell of the grid, over two corpora of passages, beside the shuffled-frequency null and
   five random-init twins (``claims.json``);
   ``compare`` the models x claims record: this run and any ``--claims-record`` given;
5. ``analyze``  docs/theory.md section 5 statistics on every head, trained and control;
6. ``protocol`` r_split per reference, kbar, token count and layers, with controls;
7. ``perturb``  every experiment of ``empirical.experiments.EXPERIMENTS`` but ``length`` and the
   interventions;
8. ``interventions`` the attention edited inside the model (``remainder``, ``keys``,
   ``shuffle``; issue 20) over corpus passages of ``intervention_tokens`` tokens;
9. ``train``    a small Llama trained here at two RoPE bases, measured per checkpoint
   (:mod:`ropesplit.report.training`);
10. ``recall``   associative recall trained at the same two bases over three seeds (issue 21;
   :func:`ropesplit.report.training.recall_stage`), the predictions judged over seeds;
11. ``length``   LM-Infinite's length experiment on that trained model, up to 8 L_train
   (SmolLM2's training length is beyond what 2 CPU cores can run);
12. ``terms``    which term carries length generalization, on that trained model;
13. ``gather``   every figure's data from the records it declares (and fresh captures);
14. ``figures`` every figure, PDF and PNG, one and two columns;

then ``run.json`` (model, text and token hashes, token count, seeds, stage
times, package versions) and the rendering, ``index.html`` (self-contained)
and ``report.md``, every number read from those records.

Adding a stage: a function ``run(ctx: RunContext) -> dict | None`` and one
``Stage`` line in :data:`STAGES` (with its ``needs``), before ``gather``; its
record reaches every section as ``inputs.records[name]`` and every figure that
names it in ``needs``.
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ropesplit.core.errors import RopesplitError

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
class RunSettings:
    """What one run reads and how much it computes (defaults sized for 2 CPU cores)."""

    # Hugging Face id or folder; None: the embedded SmolLM2-135M; or a causal LM
    # object in memory (transformers PreTrainedModel) with its ``tokenizer``
    model: Any = None
    tokenizer: Any = None  # only with a model object
    gguf_file: str | None = None  # a GGUF file inside ``model``'s folder
    text: str | None = None  # a UTF-8 file; None: Python's language reference
    tokens: int = 512  # tokens analysed and perturbed
    seed: int = 0  # control weights, pair sampling, perturbations
    seeds: int = 2  # perturbation seeds per (scheme, rate)
    head: tuple[int, int] | None = None  # figure 1's (layer, head); None: median r_split
    figure_tokens: int = 96  # tokens of figure 1's heatmaps and figure 4's heads
    control: bool = True  # also analyse the random-init twin
    bound_tokens: int = 512  # tokens of the synthetic heads in the numerics table
    corpus: str | None = None  # the claims' passages: None, Python's language reference
    second_corpus: str | None = ""  # the grid's other corpus ("": prose, or pydoc; None: none)
    # the grid's passage lengths: the registry's 256 and 512 (its 1024 is left to ropesplit
    # claims: on 2 CPU cores it alone would double the report's time); tokens is added
    grid_tokens: tuple[int, ...] | None = (256, 512)
    passages: int = 12  # passages of claims 2-5 per corpus (the unit of replication; >= 8)
    order_passages: int = 8  # passages of the word-order test per corpus, claim 1 (>= 8)
    claims_records: tuple[str, ...] = ()  # other models' claims.json: the models x claims table
    intervention_tokens: int = 128  # tokens per passage of the interventions (issue 20)
    device: str | None = None  # torch device of a model read from disk (None: cpu)
    dtype: str | None = None  # its dtype (None: float32); the statistics are float64 anyway


@dataclass
class RunContext:
    """What the stages share: settings, output folder, records so far, the model and its data."""

    settings: RunSettings
    folder: Path | None = None  # the report's folder (None: figures only)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage name -> JSON
    loaded: Any = None  # LoadedModel
    control: Any = None  # its random-init twin, or None
    ids: Any = None  # (N,) token ids
    text: str = ""
    trained: Any = None  # the train stage's TrainedSubject (report.training), in memory
    planned: tuple[str, ...] = ()  # the names of this run's stages, in order
    # written by the gather stage only: each figure's keyword arguments, and why any is not
    figure_data: dict[str, dict[str, Any]] = field(default_factory=dict)
    figure_missing: dict[str, str] = field(default_factory=dict)
    figure_folder: Path | None = None
    widths: Sequence[str] = ("single", "double")
    formats: Sequence[str] = ("pdf", "png")
    written: list[Path] = field(default_factory=list)  # figure files


@dataclass(frozen=True)
class Stage:
    """A step of the run: ``run(ctx)`` returns its JSON record (written as NAME.json) or None.

    ``needs``: the stages that must have run before it (their records, or for ``load`` the
    model in memory). ``gathers``: the gather step, which must run after every stage any
    figure needs (``FigureSpec.needs``) that this run has.
    """

    name: str
    what: str  # the progress line
    run: Callable[[RunContext], dict[str, Any] | None]
    needs: tuple[str, ...] = ()
    gathers: bool = False


@dataclass
class _Progress:
    """One line per stage on stderr, with its duration; durations kept for ``run.json``."""

    total: int
    seconds: dict[str, float] = field(default_factory=dict)
    stream: Any = None

    @contextlib.contextmanager
    def stage(self, name: str, what: str) -> Iterator[None]:
        out = self.stream or sys.stderr
        index = len(self.seconds) + 1
        print(f"[{index}/{self.total}] {name}: {what} ...", file=out, flush=True)
        start = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - start, 1)
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


def _derive(ctx: RunContext) -> dict[str, Any]:
    """Every docs/theory.md step checked, ``ropesplit derive --check --json``'s record
    (``theory.derive_record``)."""
    from ropesplit.theory import check_all, derive_record

    return derive_record(check_all())


def _bound(ctx: RunContext) -> dict[str, Any]:
    """Each synthetic pattern's statistics and bound violations, ``ropesplit bound --json``'s
    record at d = 64, base 10000 (``numerics.synthetic.bound_record``)."""
    from ropesplit.numerics.synthetic import bound_record

    return bound_record(tokens=ctx.settings.bound_tokens, seed=ctx.settings.seed)


def _load_stage(ctx: RunContext) -> None:
    ctx.loaded, ctx.control, ctx.ids, ctx.text = _load(ctx.settings)


def _analyze_stage(ctx: RunContext) -> dict[str, Any]:
    return _analyze(ctx.loaded, ctx.control, ctx.ids, ctx.settings.seed)


def _protocol_stage(ctx: RunContext) -> dict[str, Any]:
    """The protocol table at N/2, N, 2N tokens and its controls at N (``analyze --protocol``)."""
    from ropesplit.empirical.protocol import protocol, text_ids

    n, limit = ctx.settings.tokens, ctx.loaded.max_positions
    counts = [c for c in (n // 2, n, 2 * n) if limit is None or c <= limit]  # within the context
    if ctx.loaded.tokenizer is None:  # token ids given, no text: the prefixes of those ids
        counts, ids, code_ids = [c for c in counts if c <= len(ctx.ids)], ctx.ids, None
    else:
        ids, code_ids = text_ids(ctx.loaded, ctx.text, counts, n)
    return protocol(ctx.loaded, ids, tokens=counts, baseline=n, code_ids=code_ids,
                    seed=ctx.settings.seed)  # fmt: skip


def _claims_ids(ctx: RunContext) -> Any:
    """The claims' passages: None reads ``settings.corpus`` (``empirical.corpus``)."""
    return None


def _intervention_ids(ctx: RunContext) -> Any:
    """The interventions' passages: None reads the default corpus (``empirical.corpus``)."""
    return None


def _claims_stage(ctx: RunContext) -> dict[str, Any]:
    """Every claim's pre-registered primary test over the corpus (``ropesplit claims``)."""
    from tqdm import tqdm

    from ropesplit.empirical.claims_run import run_claims

    s = ctx.settings
    with tqdm(total=s.passages + s.order_passages, desc="passages", unit="passage",
              file=sys.stderr, disable=None, leave=False) as bar:  # fmt: skip
        return run_claims(ctx.loaded, corpus=s.corpus, second_corpus=s.second_corpus,
                          tokens=s.tokens, grid=s.grid_tokens, passages=s.passages,
                          order_passages=s.order_passages, seed=s.seed,
                          passage_ids=_claims_ids(ctx), on_passage=bar.update)  # fmt: skip


def _compare_stage(ctx: RunContext) -> dict[str, Any]:
    """The models x claims record: this run's claims beside the records ``--claims-record``
    names (``ropesplit compare``'s, every model's record under ``records``)."""
    from ropesplit.empirical.claims_run import claims_records, compare_records

    records = [ctx.records["claims"], *claims_records(list(ctx.settings.claims_records))]
    return compare_records(records) | {"records": records[1:]}


def _perturb_stage(ctx: RunContext) -> dict[str, Any]:
    """Every experiment but ``length`` (its own stage) and the interventions (theirs)."""
    from ropesplit.empirical.experiments import EXPERIMENTS, INTERVENTIONS

    names = [name for name in EXPERIMENTS if name != "length" and name not in INTERVENTIONS]
    return _perturb(ctx.loaded, ctx.ids, ctx.settings, names)


def _with_checks(record: dict[str, Any]) -> dict[str, Any]:
    """The length record with each of its four checks judged (``checks``: name -> outcome,
    reason), so the claims' sections read them from the record."""
    from ropesplit.empirical.experiments.length import claims

    record["checks"] = {name: {"outcome": v.outcome, "reason": v.reason}
                        for name, v in claims(record["length"]).items()}  # fmt: skip
    return record


def _length_stage(ctx: RunContext) -> dict[str, Any]:
    """LM-Infinite's length experiment on the model the ``train`` stage trained (issue 12).

    Its subject is the last checkpoint of the first base's run (trained at ``L_train``
    tokens, ``ctx.trained``), its text the first ``8 L_train`` tokens of the held-out part
    of its corpus, so the farthest bucket lies at 4-8x the training length. The record has
    ``ropesplit perturb --experiment length --json``'s schema, plus ``checks``.
    """
    from ropesplit.empirical import tokenize
    from ropesplit.empirical.experiments import run_experiments
    from ropesplit.empirical.train import split_text

    trained = ctx.trained
    loaded, cfg = trained.model(), trained.cfg
    held = split_text(cfg)[1]
    record = run_experiments(loaded, tokenize(loaded, held, 8 * cfg.seq_len),
                             experiments=["length"], seed=ctx.settings.seed)  # fmt: skip
    record["header"]["subject"] = f"{trained.subject}; held-out text"
    return _with_checks(record)


def _length_here_stage(ctx: RunContext) -> dict[str, Any]:
    """``ropesplit figures``: the length experiment on the analysed model and its text."""
    return _with_checks(_perturb(ctx.loaded, ctx.ids, ctx.settings, ["length"]))


def _recall_stage(ctx: RunContext) -> dict[str, Any]:
    from ropesplit.report.training import recall_stage  # imports torch: only when it runs

    return recall_stage(ctx)


def _train_stage(ctx: RunContext) -> dict[str, Any]:
    from ropesplit.report.training import train_stage  # imports torch: only when it runs

    return train_stage(ctx)


def _interventions_stage(ctx: RunContext) -> dict[str, Any]:
    """The interventions that run on the model itself (issue 20), at the run's intervention
    size: ``remainder``, ``keys`` and ``shuffle`` over corpus passages of
    ``intervention_tokens`` tokens."""
    tokens = ctx.settings.intervention_tokens
    names = ["remainder", "keys", "shuffle"]
    if tokens > len(ctx.ids):
        raise RopesplitError(f"intervention_tokens {tokens} exceeds the run's {len(ctx.ids)}")
    record = _perturb(ctx.loaded, ctx.ids[:tokens], ctx.settings, names,
                      passages=_intervention_ids(ctx))  # fmt: skip
    record["header"]["subject"] = f"{ctx.loaded.name}: corpus passages of {tokens} tokens"
    return record


def _terms_stage(ctx: RunContext) -> dict[str, Any]:
    """The ``terms`` intervention on the model the ``train`` stage trained: corpus passages
    of ``4 L_train`` tokens, beyond its training length."""
    from ropesplit.empirical.experiments import run_experiments
    from ropesplit.empirical.text import tokenize
    from ropesplit.empirical.train import split_text

    trained = ctx.trained
    loaded, cfg = trained.model(), trained.cfg
    held = split_text(cfg)[1]  # the header's text; the passages come from the corpus
    record = run_experiments(loaded, tokenize(loaded, held, 4 * cfg.seq_len),
                             experiments=["terms"], seed=ctx.settings.seed)  # fmt: skip
    record["header"]["subject"] = trained.subject
    return record


def _gather_stage(ctx: RunContext) -> None:
    """Every figure's data from the records (and model) it declares; why any is missing."""
    from ropesplit.figures import FIGURES as FIGURE_SPECS
    from ropesplit.report.figure_data import FigureSources, gather_figures

    sources = FigureSources(ctx.records, ctx.settings, ctx.loaded, ctx.control, ctx.ids)
    ctx.figure_data, ctx.figure_missing = gather_figures(FIGURE_SPECS, sources, ctx.planned)


def _figures_stage(ctx: RunContext) -> None:
    """Every gathered figure drawn, and its data kept as a record in ``records/`` beside
    them: ``python -m ropesplit.figures.recorded FOLDER/records OUT`` redraws them (the
    gallery in docs/figures is drawn that way)."""
    from ropesplit.figures import write_figures
    from ropesplit.figures.recorded import write_records

    assert ctx.figure_folder is not None
    ctx.written = write_figures(ctx.figure_data, ctx.figure_folder, widths=ctx.widths,
                                formats=ctx.formats)  # fmt: skip
    settings = ctx.settings
    source = {"model": getattr(ctx.loaded, "name", None), "tokens": settings.tokens,
              "seed": settings.seed, "seeds": settings.seeds, "text": settings.text}  # fmt: skip
    write_records(ctx.figure_data, ctx.figure_folder / "records", source=source)


MODEL = ("load",)  # the model in memory
DERIVE = Stage("derive", "sympy checks of every step", _derive)
BOUND = Stage("bound", "numerics on synthetic queries and keys", _bound)
LOAD = Stage("load", "model and random-init control", _load_stage)
ANALYZE = Stage("analyze", "every head, trained and control", _analyze_stage, MODEL)
PROTOCOL = Stage("protocol", "r_split per reference, kbar, tokens, layers; controls",
                 _protocol_stage, MODEL)  # fmt: skip
PERTURB = Stage("perturb", "every experiment of the registry but length and interventions",
                _perturb_stage, MODEL)  # fmt: skip
CLAIMS = Stage("claims", "each claim's primary test over a corpus, trained and controls",
               _claims_stage, MODEL)  # fmt: skip
COMPARE = Stage("compare", "models x claims: this run beside the claims records given",
                _compare_stage, ("claims",))  # fmt: skip
INTERVENE = Stage("interventions", "attention edited inside the model: remainder, keys, shuffle",
                  _interventions_stage, MODEL)  # fmt: skip
TRAIN = Stage("train", "a small Llama trained at two RoPE bases, per checkpoint", _train_stage)
RECALL = Stage("recall", "associative recall trained at two RoPE bases over three seeds",
               _recall_stage)  # fmt: skip
LENGTH = Stage("length", "LM-Infinite's four settings on the model trained here, up to 8 L_train",
               _length_stage, ("train",))  # fmt: skip
TERMS = Stage("terms", "f capped against g + E capped, beyond L, on the model trained here",
              _terms_stage, ("train",))  # fmt: skip
GATHER = Stage("gather", "every figure's data from the records it declares", _gather_stage,
               gathers=True)  # fmt: skip
FIGURES = Stage("figures", "every figure, PDF and PNG, 3.3 in and 6.9 in", _figures_stage,
                ("gather",))  # fmt: skip
LENGTH_HERE = Stage("length", "LM-Infinite's four settings on the analysed model and text",
                    _length_here_stage, MODEL)  # fmt: skip

# ``ropesplit figures`` runs these; ``ropesplit report`` runs STAGES, then renders
FIGURE_STAGES: list[Stage] = [LOAD, ANALYZE, PERTURB, LENGTH_HERE, GATHER, FIGURES]
STAGES: list[Stage] = [DERIVE, BOUND, LOAD, CLAIMS, COMPARE, ANALYZE, PROTOCOL, PERTURB,
                       INTERVENE, TRAIN, RECALL, LENGTH, TERMS, GATHER, FIGURES]  # fmt: skip
# every name a stage of ropesplit makes: what a figure's needs may name
_MAKERS = frozenset(stage.name for stage in (*STAGES, *FIGURE_STAGES))


def check_plan(stages: Sequence[Stage], figures: Sequence[Any] | None = None) -> None:
    """Refuse, before anything runs, an order of ``stages`` that would run a stage before
    what it needs, or gather a figure's data before a stage it needs (one-line error).

    ``figures`` (default ``ropesplit.figures.FIGURES``): every need must name a stage of
    :data:`STAGES` or :data:`FIGURE_STAGES` (or of this run); one that this run has no
    stage for leaves its figure out, said in the report and on stderr.
    """
    position: dict[str, int] = {}
    for index, stage in enumerate(stages):
        if stage.name in position:
            raise RopesplitError(f"stage {stage.name!r} appears twice in the run")
        position[stage.name] = index
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
    known = _MAKERS | set(position)
    at = position[gathers[0].name]
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
    ctx.planned = tuple(stage.name for stage in stages)
    progress = _Progress(total=len(stages) + (ctx.folder is not None))
    for stage in stages:
        with progress.stage(stage.name, stage.what):
            record = stage.run(ctx)
            if record is not None:
                ctx.records[stage.name] = record
                if ctx.folder is not None:
                    write_json(ctx.folder / f"{stage.name}.json", record)
    return progress


def _load(settings: RunSettings) -> tuple[Any, Any | None, Any, str]:
    """The model, its random-init twin (or None), the token ids ``(N,)`` and the text
    (``empirical.analyze.load_subject``, as ``ropesplit analyze`` reads them)."""
    from ropesplit.empirical.analyze import load_subject
    from ropesplit.empirical.models import random_init_twin

    loaded, ids, text = load_subject(settings.model, settings.gguf_file, text=settings.text,
                                     tokens=settings.tokens, seed=settings.seed,
                                     tokenizer=settings.tokenizer, device=settings.device,
                                     dtype=settings.dtype)  # fmt: skip
    control = random_init_twin(loaded, settings.seed) if settings.control else None
    return loaded, control, ids, text


def _analyze(loaded: Any, control: Any | None, ids: Any, seed: int) -> dict[str, Any]:
    """The ``ropesplit analyze --json`` record: trained heads, summary, and the control
    (``empirical.analyze.analyze_pair``)."""
    from tqdm import tqdm

    from ropesplit.empirical.analyze import analyze_pair

    with tqdm(total=loaded.n_layers * (1 + (control is not None)), desc="layers",
              unit="layer", file=sys.stderr, disable=None, leave=False) as bar:  # fmt: skip
        return analyze_pair(loaded, control, ids, seed=seed, on_layer=bar.update)[0]


def _perturb(
    loaded: Any, ids: Any, settings: RunSettings, names: Sequence[str] | None = None,
    passages: Any = None,
) -> dict[str, Any]:
    """The record of the paper's experiments (every one but the interventions, which the
    ``interventions`` stage runs at its own size), or of the experiments ``names``."""
    from tqdm import tqdm

    from ropesplit.empirical.experiments import (
        EXPERIMENTS,
        INTERVENTIONS,
        forward_count,
        run_experiments,
    )

    if names is None:
        names = [name for name in EXPERIMENTS if name not in INTERVENTIONS]
    with tqdm(total=forward_count(names, settings.seeds), desc="forward passes",
              unit="input", file=sys.stderr, disable=None, leave=False) as bar:  # fmt: skip
        return run_experiments(loaded, ids, experiments=names, seeds=settings.seeds,
                               seed=settings.seed, on_forward=bar.update,
                               passages=passages)  # fmt: skip


def _text_header(settings: RunSettings, loaded: Any, ids: Any, text: str) -> dict[str, Any]:
    import numpy as np

    token_ids = [int(t) for t in ids]
    return {
        "model": loaded.name,
        "text": settings.text or "Python language reference (pydoc_data.topics)",
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "token_ids_sha256": hashlib.sha256(
            np.asarray(token_ids, dtype=np.int64).tobytes()
        ).hexdigest(),  # the same digest as the perturb header's
        "tokens": len(token_ids),
        "seed": settings.seed,
        "perturbation_seeds": settings.seeds,
    }


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
        run = _text_header(settings, ctx.loaded, ctx.ids, ctx.text)
        run["stage_seconds"] = ", ".join(f"{k} {v:.1f}" for k, v in progress.seconds.items())
        run["run_seconds"] = round(time.perf_counter() - start, 1)
        run["versions"] = _versions()
        run["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        run["commit"] = _commit()
        if "claims" in ctx.records:  # the claims' corpus and size, for the run line
            head = ctx.records["claims"].get("header", {})
            run["corpus"] = f"{head.get('corpus', settings.corpus or 'pydoc')}, " \
                f"{head.get('passages', settings.passages)} passages of {settings.tokens} tokens"
        ctx.records["run"] = run
        write_json(folder / "run.json", run)
        doc = build_document(ctx.records, blocks)
        write_text(folder / "index.html", render_html(doc))
        links = {b.number: next(f for f in b.files if f.endswith("-double.png"))
                 for b in blocks if not b.missing}  # the PNG embedded in index.html
        write_text(folder / "report.md", render_markdown(doc, links))
    return folder / "index.html"
