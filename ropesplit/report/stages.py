"""The report's stages, one function each, and their registry (:data:`STAGES`).

Each stage is ``run(ctx: RunContext) -> dict | None``: it computes with the layer APIs and
returns its JSON record (or keeps objects in memory on the context). Adding a stage: a
function here and one ``Stage`` line in :data:`STAGES` (with its ``needs``), before
``gather``. :mod:`ropesplit.report.pipeline` checks the plan, runs them and renders.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from typing import Any

from ropesplit.core.errors import RopesplitError
from ropesplit.report.context import RunContext, RunSettings, Stage

__all__ = ["FIGURE_STAGES", "MAKERS", "STAGES", "text_header"]


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
    from ropesplit.empirical.analysis.protocol import protocol, text_ids

    n, limit = ctx.settings.tokens, ctx.loaded.max_positions
    counts = [c for c in (n // 2, n, 2 * n) if limit is None or c <= limit]  # within the context
    if ctx.loaded.tokenizer is None:  # token ids given, no text: the prefixes of those ids
        counts, ids, code_ids = [c for c in counts if c <= len(ctx.ids)], ctx.ids, None
    else:
        ids, code_ids = text_ids(ctx.loaded, ctx.text, counts, n)
    return protocol(ctx.loaded, ids, lengths=counts, baseline=n, code_ids=code_ids,
                    seed=ctx.settings.seed)  # fmt: skip


def _claims_stage(ctx: RunContext) -> dict[str, Any]:
    """Every claim's pre-registered primary test over the corpus (``ropesplit claims``)."""
    from tqdm import tqdm

    from ropesplit.claims.registry import CONTROL_SEEDS
    from ropesplit.empirical.measurement.claims_run import run_claims
    from ropesplit.empirical.model.loading import random_init_twin

    s, claims = ctx.settings, ctx.settings.claims_run
    # the load stage's control is the twin of seed s.seed: built once, shared
    controls = {seed: ctx.control if ctx.control is not None and seed == s.seed
                else random_init_twin(ctx.loaded, seed) for seed in CONTROL_SEEDS}  # fmt: skip
    with tqdm(total=claims.passages + claims.order_passages, desc="passages",
              unit="passage", file=sys.stderr, disable=None, leave=False) as bar:  # fmt: skip
        return run_claims(ctx.loaded, claims, controls=controls, passage_ids=s.claims_ids,
                          on_passage=bar.update,
                          on_stage=lambda text: bar.write(text, file=sys.stderr))  # fmt: skip


def _compare_stage(ctx: RunContext) -> dict[str, Any]:
    """The models x claims record: this run's claims beside the records ``--claims-record``
    names (``ropesplit compare``'s, every model's record under ``records``)."""
    from ropesplit.claims.records import claims_records, compare_records

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
    from ropesplit.empirical.experiments.length import checks

    record["checks"] = {name: {"outcome": v.outcome, "reason": v.reason}
                        for name, v in checks(record["length"]).items()}  # fmt: skip
    return record


def _length_stage(ctx: RunContext) -> dict[str, Any]:
    """LM-Infinite's length experiment on the model the ``train`` stage trained.

    Its subject is the last checkpoint of the first base's run (trained at ``L_train``
    tokens, ``ctx.trained``), its text the first ``8 L_train`` tokens of the held-out part
    of its corpus, so the farthest bucket lies at 4-8x the training length. The record has
    ``ropesplit perturb --experiment length --json``'s schema, plus ``checks``.
    """
    from ropesplit.empirical import tokenize
    from ropesplit.empirical.experiments import ExperimentSettings, run_experiments
    from ropesplit.empirical.training.train import split_text

    trained = ctx.trained
    loaded, cfg = trained.model(), trained.cfg
    held = split_text(cfg)[1]
    record = run_experiments(loaded, tokenize(loaded, held, 8 * cfg.seq_len), experiments=["length"],
                             settings=ExperimentSettings(seed=ctx.settings.seed))
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


def _encoder_stage(ctx: RunContext) -> dict[str, Any]:
    from ropesplit.report.training import encoder_stage  # imports torch: only when it runs

    return encoder_stage(ctx)


def _interventions_stage(ctx: RunContext) -> dict[str, Any]:
    """The interventions, edits inside the model's own forward pass, at the run's intervention
    size: ``remainder``, ``keys`` and ``shuffle`` over corpus passages of
    ``intervention_tokens`` tokens."""
    tokens = ctx.settings.intervention_tokens
    names = ["remainder", "keys", "shuffle"]
    if tokens > len(ctx.ids):
        raise RopesplitError(f"intervention_tokens {tokens} exceeds the run's {len(ctx.ids)}")
    record = _perturb(ctx.loaded, ctx.ids[:tokens], ctx.settings, names,
                      passages=ctx.settings.intervention_ids)  # fmt: skip
    record["header"]["subject"] = f"{ctx.loaded.name}: corpus passages of {tokens} tokens"
    return record


def _terms_stage(ctx: RunContext) -> dict[str, Any]:
    """The ``terms`` intervention on the model the ``train`` stage trained: corpus passages
    of ``4 L_train`` tokens, beyond its training length."""
    from ropesplit.empirical.experiments import ExperimentSettings, run_experiments
    from ropesplit.empirical.model.text import tokenize
    from ropesplit.empirical.training.train import split_text

    trained = ctx.trained
    loaded, cfg = trained.model(), trained.cfg
    held = split_text(cfg)[1]  # the header's text; the passages come from the corpus
    record = run_experiments(loaded, tokenize(loaded, held, 4 * cfg.seq_len), experiments=["terms"],
                             settings=ExperimentSettings(seed=ctx.settings.seed))
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
              "seed": settings.seed, "draws": settings.experiments_run.draws,
              "text": settings.text}  # fmt: skip
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
ENCODER = Stage("encoder", "masked-LM encoders trained here on text and proteins, both ways",
                _encoder_stage)  # fmt: skip
LENGTH = Stage("length", "LM-Infinite's four settings on the model trained here, up to 8 L_train",
               _length_stage, ("train",))  # fmt: skip
TERMS = Stage("terms", "f capped against g + E capped, beyond L, on the model trained here",
              _terms_stage, ("train",))  # fmt: skip
GATHER = Stage("gather", "every figure's data from the records it declares", _gather_stage,
               gathers=True)  # fmt: skip
FIGURES = Stage("figures", "every figure, PDF and PNG, 3.3 in and 6.9 in", _figures_stage,
                ("gather",))  # fmt: skip
LENGTH_HERE = Stage("length_here", "LM-Infinite's four settings on the analysed model and text",
                    _length_here_stage, MODEL, makes="length")  # fmt: skip

# ``ropesplit figures`` runs these; ``ropesplit report`` runs STAGES, then renders
FIGURE_STAGES: list[Stage] = [LOAD, ANALYZE, PERTURB, LENGTH_HERE, GATHER, FIGURES]
STAGES: list[Stage] = [DERIVE, BOUND, LOAD, CLAIMS, COMPARE, ANALYZE, PROTOCOL, PERTURB,
                       INTERVENE, TRAIN, RECALL, ENCODER, LENGTH, TERMS, GATHER,
                       FIGURES]  # fmt: skip
# every name a stage of ropesplit makes: what a figure's needs may name
MAKERS = frozenset(stage.record for stage in (*STAGES, *FIGURE_STAGES))


def _load(settings: RunSettings) -> tuple[Any, Any | None, Any, str]:
    """The model, its random-init twin (or None), the token ids ``(N,)`` and the text
    (``empirical.analysis.analyze.load_subject``, as ``ropesplit analyze`` reads them)."""
    from ropesplit.empirical.analysis.analyze import load_subject
    from ropesplit.empirical.model.loading import Placement, random_init_twin

    loaded, ids, text = load_subject(settings.model, settings.gguf_file, text=settings.text,
                                     tokens=settings.tokens, seed=settings.seed,
                                     tokenizer=settings.tokenizer,
                                     placement=Placement(settings.device, settings.dtype,
                                                         attention=settings.attention))
    control = random_init_twin(loaded, settings.seed) if settings.control else None
    return loaded, control, ids, text


def _analyze(loaded: Any, control: Any | None, ids: Any, seed: int) -> dict[str, Any]:
    """The ``ropesplit analyze --json`` record: trained heads, summary, and the control
    (``empirical.analysis.analyze.analyze_pair``)."""
    from dataclasses import replace

    from tqdm import tqdm

    from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE, analyze_pair

    with tqdm(total=loaded.n_layers * (1 + (control is not None)), desc="layers",
              unit="layer", file=sys.stderr, disable=None, leave=False) as bar:  # fmt: skip
        return analyze_pair(loaded, control, ids, replace(DEFAULT_MEASURE, seed=seed),
                            on_layer=bar.update)[0]  # fmt: skip


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
    chosen = settings.experiments_run
    with tqdm(total=forward_count(names, chosen), desc="forward passes",
              unit="input", file=sys.stderr, disable=None, leave=False) as bar:  # fmt: skip
        return run_experiments(loaded, ids, experiments=names, settings=chosen,
                               on_forward=bar.update, passages=passages)  # fmt: skip


def text_header(settings: RunSettings, loaded: Any, ids: Any, text: str) -> dict[str, Any]:
    """The ``run.json`` header: the model, the text and digests of it and of its token ids,
    the tokens, the seed and the perturbation draws."""
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
        "perturbation_draws": settings.experiments_run.draws,
    }
