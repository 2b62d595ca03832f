r"""The claims run: corpora of passages, every primary test in every cell, one ``claims.json``.

:func:`run_claims` reads ``passages`` passages from each corpus of the
``corpus`` axis (the run's corpus and a second one; ``empirical.model.corpus``),
each at the longest length of the ``tokens`` axis, measures each one on the
trained model, its shuffled-frequency null and its random-init twin
(``empirical.measurement.passages``; every length from the same captures), runs the
nested word-order perturbation on the first ``order_passages`` of them
(``empirical.measurement.order_passages``; every length from one forward pass
each) and judges every claim of ``ropesplit.claims.registry.CLAIMS`` in the headline
cell and in every cell of the grid (``ropesplit.claims.verdicts``). The power
statement of the order test is fixed before it runs.

A model whose attention looks both ways (an encoder, docs/theory.md section 9) is measured
the same way, with two changes the header's ``attends`` records: each length is its own
capture (its q and k read the later tokens), and claim 1 scores the masked-token loss (it
predicts no next token).

The record's layout, its merge and its judging live in ``ropesplit.claims.records``
(no model needed); this module only measures the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ropesplit.claims.records import (
    DEFAULT_GRID_TOKENS,
    ClaimsSettings,
    Header,
    grid_tokens,
    judge_record,
    power_statement,
)
from ropesplit.claims.registry import (
    CLAIMS,
    CONTROL_SEEDS,
    LEVEL,
)
from ropesplit.empirical.model.loaded import LoadedModel
from ropesplit.empirical.model.loading import random_init_twin

__all__ = ["run_claims"]


def run_claims(
    loaded: LoadedModel,
    settings: ClaimsSettings | None = None,
    *,
    controls: dict[int, LoadedModel] | None = None,
    passage_ids: Any = None,
    on_passage: Callable[[int], Any] | None = None,
    on_stage: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """The record of ``ropesplit.claims.records``, for ``settings`` (:class:`ClaimsSettings`;
    its defaults when None).

    ``controls`` (seed -> twin) are built when absent; ``passage_ids`` (an
    ``empirical.model.corpus.PassageIds``, or a mapping corpus label -> one) replaces the
    corpora, e.g. for a model without a tokenizer (then the axis holds the lengths up to
    theirs). ``on_stage(text)`` hears the plan (``measurement.plan``: the forward passes by
    kind, the minutes from a timed warm-up) before the first forward pass, then each stage;
    ``on_passage(1)`` follows the passages.
    """
    from ropesplit.empirical.measurement.passages import measure_passages

    s = settings or ClaimsSettings()
    say = on_stage or (lambda text: None)
    measured, ordered = s.ranges()
    if ordered and loaded.attn.both_ways():  # an encoder's claim 1 needs its <mask>: ask first
        from ropesplit.empirical.model.inputs import mask_id

        mask_id(loaded)
    corpora, lengths, tokens = _corpora(loaded, s, passage_ids)
    if on_stage is not None:  # the plan, before the first forward pass
        say(_plan(loaded, lengths, len(corpora), (measured, ordered), s))
    if controls is None:
        controls = {seed: random_init_twin(loaded, seed) for seed in CONTROL_SEEDS}
    power = power_statement(s.order_passages)
    rows: list[dict[str, Any]] = []
    order: list[dict[str, Any]] = []
    for label, chosen in corpora.items():
        say(f"{label}: {len(measured)} passages x {lengths} tokens: trained, "
            "shuffled frequencies, random-init twin")  # fmt: skip
        rows += measure_passages(loaded, controls, (label, chosen), measured,
                                 lengths=lengths, seed=s.seed, run=s.passages,
                                 on_passage=on_passage)  # fmt: skip
        say(f"{label}: word order, {len(ordered)} passages; {power}")
        order += _word_order(loaded, (label, chosen), ordered, lengths, s, on_passage)
    header = _header(loaded, s, (corpora, lengths, tokens), power)
    return judge_record(header, rows, order)


def _corpora(loaded: LoadedModel, s: ClaimsSettings, passage_ids: Any
             ) -> tuple[dict[str, Any], list[int], int]:  # fmt: skip
    """``(corpora, lengths, tokens)``: each corpus label's ``PassageIds`` (given, or read at
    the longest length), the ``tokens`` axis measured and the headline length."""
    from ropesplit.core.errors import RopesplitError
    from ropesplit.empirical.model.corpus import DEFAULT_CORPUS

    need = max(s.passages, s.order_passages)
    if passage_ids is None:
        lengths = grid_tokens(s.tokens, s.grid_tokens, limit=loaded.max_positions)
        corpora = dict(_corpus_ids(loaded, spec, lengths[-1], need)
                       for spec in s.corpora(DEFAULT_CORPUS))  # fmt: skip
        return corpora, lengths, s.tokens
    given = passage_ids if isinstance(passage_ids, Mapping) else {
        s.corpus or "given token ids": passage_ids}
    for label, chosen in given.items():
        if len(chosen.names) < need:
            raise RopesplitError(f"passage_ids must hold at least {need} passages, got "
                                 f"{len(chosen.names)} ({label})")  # fmt: skip
    length = min(c.n_tokens for c in given.values())
    tokens = min(s.tokens, length)
    return dict(given), grid_tokens(tokens, s.grid_tokens, limit=length), tokens


def _corpus_ids(loaded: LoadedModel, spec: str, n_tokens: int, need: int) -> tuple[str, Any]:
    from ropesplit.empirical.model.corpus import corpus_from_spec, passage_ids

    label, texts = corpus_from_spec(spec)
    return label, passage_ids(loaded, texts, n_tokens, count=need, min_count=need)


def _plan(loaded: LoadedModel, lengths: list[int], corpora: int, spans: tuple[range, range],
          s: ClaimsSettings) -> str:  # fmt: skip
    """The plan ``measurement.plan`` prints: forward passes by kind, minutes from a warm-up of
    what the passages measure (the split alone)."""
    from dataclasses import replace

    from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE
    from ropesplit.empirical.measurement.plan import claims_plan, warmup

    plan = claims_plan(lengths, corpora, *spans, s.batch_size, run=s.passages,
                       both_ways=loaded.attn.both_ways())  # fmt: skip
    split = replace(DEFAULT_MEASURE, split_only=True)
    return replace(plan, cost=warmup(loaded, measure=split)).text()


def _word_order(loaded: LoadedModel, corpus: tuple[str, Any], ordered: range,
                lengths: list[int], s: ClaimsSettings,
                on_passage: Callable[[int], Any] | None) -> list[dict[str, Any]]:  # fmt: skip
    """The word-order rows of one corpus' ``ordered`` passages (claim 1)."""
    from ropesplit.empirical.measurement.order_passages import order_passage

    label, chosen = corpus
    rows = []
    for p in ordered:
        got = order_passage(loaded, chosen.ids[p, : lengths[-1]].numpy(), lengths=lengths,
                            seed=s.seed * 1000 + p, batch_size=s.batch_size)  # fmt: skip
        rows.append({"corpus": label, "passage": p, "name": chosen.names[p], **got})
        if on_passage is not None:
            on_passage(1)
    return rows


def _header(loaded: LoadedModel, s: ClaimsSettings,
            measured: tuple[dict[str, Any], list[int], int], power: str) -> Header:  # fmt: skip
    """The record's header: the model, what was ``measured`` (the corpora, the lengths, the
    headline length) and how."""
    corpora, lengths, tokens = measured
    labels = list(corpora)
    lo, hi = s.shard or (0, max(s.passages, s.order_passages))
    return Header(
        model=loaded.name,
        # the layers every statistic pools over (a hybrid's RoPE softmax layers), and the rest
        layers={"analysed": loaded.layers,
                "not_analysed": [{"layer": i, "kind": k}
                                 for i, k in sorted(loaded.attn.not_analysed.items())]},
        corpus=labels[0], corpora=labels, tokens=int(tokens),
        grid={"tokens": lengths, "corpus": labels},
        grid_tokens={"given": None if s.grid_tokens is None else [int(t) for t in s.grid_tokens],
                     "default": list(DEFAULT_GRID_TOKENS)},
        passages=s.passages, order_passages=s.order_passages,
        names={label: list(c.names) for label, c in corpora.items()},
        skipped={label: c.skipped for label, c in corpora.items()},
        token_ids_sha256={label: c.sha256 for label, c in corpora.items()},
        control_seeds=list(CONTROL_SEEDS),
        # each twin is drawn by the generator of the device the model is on: twins drawn on
        # a CPU and on a GPU are different draws from the same distribution
        twins_drawn_on=loaded.device.type,
        seed=s.seed, level=LEVEL, power=power,
        registry=[t.claim for t in CLAIMS], shards=[[lo, hi]],
        attends="both ways" if loaded.attn.both_ways() else None,
    )  # fmt: skip
