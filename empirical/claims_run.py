r"""The claims run: corpora of passages, every primary test in every cell, one ``claims.json``.

:func:`run_claims` reads ``passages`` passages from each corpus of the
``corpus`` axis (the run's corpus and a second one; ``empirical.corpus``),
each at the longest length of the ``tokens`` axis, measures each one on the
trained model, its shuffled-frequency null and its random-init twin
(``empirical.passages``; every length from the same captures), runs the
nested word-order perturbation on the first ``order_passages`` of them
(``empirical.experiments.order_passages``; every length from one forward pass
each) and judges every claim of ``ropesplit.core.claims.CLAIMS`` in the headline
cell and in every cell of the grid (``empirical.verdicts``). The power
statement of the order test is fixed before it runs.

The record (``ropesplit claims --json``, the report's ``claims.json``)::

    {"header": {model, layers, corpus, corpora, tokens, grid, passages, order_passages,
                names, token_ids_sha256, skipped, control_seeds, seed, level, power,
                registry, shards},
     "passages": [row, ...],      # one per corpus passage: every cell's statistics and nulls
     "order": [row, ...],         # one per order passage: every length's damages
     "pooled": {"r_split": [...]},  # each head's r_split pooled over the headline passages
     "claims": [claim, ...],      # per claim, in the headline cell: primary test, verdict
     "grid": [claim, ...]}        # per claim: every cell's verdict and estimate, robustness

``header.grid`` lists the axis values measured (``tokens``, ``corpus``; the
other axes need no new capture and take every value of ``ropesplit.core.claims.GRID``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ropesplit.core.claims import (
    CLAIMS,
    CONTROL_SEEDS,
    GRID,
    LEVEL,
    MIN_PASSAGES,
    PAIRED,
    resolve_second_corpus,
)
from ropesplit.empirical.models import LoadedModel, random_init_twin

__all__ = [
    "ClaimsSettings",
    "DEFAULT_GRID_TOKENS",
    "DEFAULT_ORDER_PASSAGES",
    "DEFAULT_PASSAGES",
    "claims_records",
    "grid_tokens",
    "judge_record",
    "compare_records",
    "merge_records",
    "passage_ranges",
    "power_statement",
    "run_claims",
]

DEFAULT_PASSAGES = 12  # passages measured for claims 2-5 (minimum MIN_PASSAGES)
DEFAULT_ORDER_PASSAGES = 8  # passages of the word-order test (claim 1)
# the tokens axis when none is given (``ropesplit claims`` and the report alike): the
# registry's 256 and 512, never past the run's own tokens; its 1024 only when asked
# (``--grid-tokens``): on 2 CPU cores that length alone doubles the run
DEFAULT_GRID_TOKENS = (256, 512)


def power_statement(n: int) -> str:
    """What ``n`` passages can detect, stated before the run (two-sided t test, 80% power)."""
    from ropesplit.numerics.intervals import min_detectable_effect

    effect = min_detectable_effect(n, level=LEVEL, power=0.8)
    return (f"with {n} passages a {LEVEL:.0%} t interval excludes the threshold with 80% power "
            f"when the true mean lies at least {effect:.2f} passage-SDs from it")  # fmt: skip


def passage_ranges(
    passages: int, order_passages: int, shard: tuple[int, int] | None = None, *, prefix: str = ""
) -> tuple[range, range]:
    """The passages of claims 2-5 and of the word-order test that ``shard`` (default: the
    whole run) measures, the counts and the shard checked first (one-line errors naming the
    options as ``prefix + name``: ``"--"`` for the command line)."""
    from ropesplit.core.errors import RopesplitError

    for name, value in (("passages", passages), ("order-passages", order_passages)):
        if value < MIN_PASSAGES:
            raise RopesplitError(f"{prefix}{name} must be at least {MIN_PASSAGES}, got {value}")
    need = max(passages, order_passages)
    lo, hi = shard or (0, need)
    if not 0 <= lo < hi <= need:
        raise RopesplitError(f"{prefix}shard must be A:B with 0 <= A < B <= {need}, got {lo}:{hi}")
    return range(lo, min(hi, passages)), range(lo, min(hi, order_passages))


def grid_tokens(tokens: int, values: Sequence[int] | None = None, *, limit: int | None = None,
                prefix: str = "") -> list[int]:  # fmt: skip
    """The ``tokens`` axis a run measures: ``values`` as given, or by default
    :data:`DEFAULT_GRID_TOKENS` up to the headline ``tokens`` (the axis never goes past what
    was asked for unless ``values`` say so); the headline ``tokens`` added, each checked,
    those beyond ``limit`` (the passages' or the model's length) left out."""
    from ropesplit.core.errors import RopesplitError

    base = values if values is not None else [t for t in DEFAULT_GRID_TOKENS if t <= tokens]
    chosen = sorted({int(t) for t in base} | {int(tokens)})
    bad = [t for t in chosen if t < 16]
    if bad:
        raise RopesplitError(f"{prefix}tokens must be at least 16, got {bad[0]}")
    if limit is not None:
        if tokens > limit:
            raise RopesplitError(f"{prefix}tokens {tokens} exceeds the {limit} available")
        chosen = [t for t in chosen if t <= limit]
    return chosen


def _corpus_ids(loaded: LoadedModel, spec: str, n_tokens: int, need: int) -> tuple[str, Any]:
    from ropesplit.empirical.corpus import corpus_from_spec, passage_ids

    label, texts = corpus_from_spec(spec)
    return label, passage_ids(loaded, texts, n_tokens, count=need, min_count=need)


@dataclass(frozen=True)
class ClaimsSettings:
    """What one claims run measures (``ropesplit claims``' options and the report's), checked
    when built: ``tokens`` is the headline cell's length; ``grid`` the ``tokens`` axis
    (default :data:`DEFAULT_GRID_TOKENS` up to ``tokens``; ``tokens`` added,
    :func:`grid_tokens`); ``corpus`` the run's corpus (None: ``empirical.corpus``' default);
    ``second_corpus`` the corpus axis' other value (``core.claims.PAIRED``: the one
    ``core.claims.SECOND_CORPUS`` pairs with the run's corpus; None: the run's corpus
    only); ``passages`` and ``order_passages`` the counts of claims 2-5 and of the word
    order; ``seed`` every draw's; ``batch_size`` the word order's rows per forward pass;
    ``shard=(A, B)`` measures only the run's passages ``A..B-1`` of each corpus (a SLURM
    array task, an ``accelerate``/``torchrun`` process): :func:`merge_records` of shards
    covering the run is the run's record."""

    corpus: str | None = None
    second_corpus: str | None = PAIRED
    tokens: int = 512
    grid: tuple[int, ...] | None = None
    passages: int = DEFAULT_PASSAGES
    order_passages: int = DEFAULT_ORDER_PASSAGES
    seed: int = 0
    batch_size: int = 8
    shard: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        from ropesplit.core.errors import RopesplitError

        passage_ranges(self.passages, self.order_passages, self.shard)
        grid_tokens(self.tokens, self.grid)
        if self.batch_size < 1:
            raise RopesplitError(f"batch_size must be at least 1, got {self.batch_size}")


def run_claims(
    loaded: LoadedModel,
    settings: ClaimsSettings | None = None,
    *,
    controls: dict[int, LoadedModel] | None = None,
    passage_ids: Any = None,
    on_passage: Callable[[int], Any] | None = None,
    on_stage: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """The record of the module docstring, for ``settings`` (:class:`ClaimsSettings`; its
    defaults when None).

    ``controls`` (seed -> twin) are built when absent; ``passage_ids`` (an
    ``empirical.corpus.PassageIds``, or a mapping corpus label -> one) replaces the
    corpora, e.g. for a model without a tokenizer (then the axis holds the lengths up to
    theirs). ``on_stage(text)`` hears the plan (``empirical.plan``: the forward passes by
    kind, the minutes from a timed warm-up) before the first forward pass, then each stage;
    ``on_passage(1)`` follows the passages.
    """
    from ropesplit.core.errors import RopesplitError
    from ropesplit.empirical.corpus import DEFAULT_CORPUS
    from ropesplit.empirical.experiments.order_passages import order_passage
    from ropesplit.empirical.passages import measure_passages

    s = settings or ClaimsSettings()
    corpus, second_corpus, tokens, grid = s.corpus, s.second_corpus, s.tokens, s.grid
    passages, order_passages, seed, shard = s.passages, s.order_passages, s.seed, s.shard
    measured, ordered = passage_ranges(passages, order_passages, shard)
    need = max(passages, order_passages)
    lo, hi = shard or (0, need)
    if passage_ids is not None:
        given = passage_ids if isinstance(passage_ids, Mapping) else {
            corpus or "given token ids": passage_ids}
        for label, chosen in given.items():
            if len(chosen.names) < need:
                raise RopesplitError(f"passage_ids must hold at least {need} passages, got "
                                     f"{len(chosen.names)} ({label})")  # fmt: skip
        length = min(c.n_tokens for c in given.values())
        lengths = grid_tokens(min(tokens, length), grid, limit=length)
        tokens = min(tokens, length)
        corpora = {label: chosen for label, chosen in given.items()}
    else:
        lengths = grid_tokens(tokens, grid, limit=loaded.max_positions)
        first = corpus or DEFAULT_CORPUS
        second = resolve_second_corpus(first, second_corpus)
        specs = [first] + ([second] if second else [])
        corpora = dict(_corpus_ids(loaded, spec, lengths[-1], need) for spec in specs)
    if on_stage is not None:  # the plan, before the first forward pass
        from dataclasses import replace

        from ropesplit.empirical.analyze import DEFAULT_MEASURE
        from ropesplit.empirical.plan import claims_plan, warmup

        plan = claims_plan(lengths, len(corpora), measured, ordered, s.batch_size)
        split = replace(DEFAULT_MEASURE, split_only=True)  # what the passages measure
        on_stage(replace(plan, cost=warmup(loaded, measure=split)).text())
    if controls is None:
        controls = {s: random_init_twin(loaded, s) for s in CONTROL_SEEDS}
    power = power_statement(order_passages)
    rows: list[dict[str, Any]] = []
    order: list[dict[str, Any]] = []
    for label, chosen in corpora.items():
        if on_stage is not None:
            on_stage(f"{label}: {len(measured)} passages x {lengths} tokens: trained, "
                     "shuffled frequencies, random-init twin")  # fmt: skip
        rows += measure_passages(loaded, controls, chosen.ids[measured.start : measured.stop],
                                 chosen.names[measured.start : measured.stop], lengths=lengths,
                                 seed=seed, first=lo, corpus=label,
                                 on_passage=on_passage)  # fmt: skip
        if on_stage is not None:
            on_stage(f"{label}: word order, {len(ordered)} passages; {power}")
        for p in ordered:
            got = order_passage(loaded, chosen.ids[p, : lengths[-1]].numpy(), lengths=lengths,
                                seed=seed * 1000 + p, batch_size=s.batch_size)  # fmt: skip
            order.append({"corpus": label, "passage": p, "name": chosen.names[p], **got})
            if on_passage is not None:
                on_passage(1)
    labels = list(corpora)
    header = {
        "model": loaded.name,
        # the layers every statistic pools over (a hybrid's RoPE softmax layers), and the rest
        "layers": {"analysed": loaded.layers,
                   "not_analysed": [{"layer": i, "kind": k}
                                    for i, k in sorted(loaded.attn.not_analysed.items())]},
        "corpus": labels[0],
        "corpora": labels,
        "tokens": int(tokens),
        "grid": {"tokens": lengths, "corpus": labels},
        "grid_tokens": {"given": None if grid is None else [int(t) for t in grid],
                        "default": list(DEFAULT_GRID_TOKENS)},
        "passages": passages,
        "order_passages": order_passages,
        "names": {label: list(c.names) for label, c in corpora.items()},
        "skipped": {label: c.skipped for label, c in corpora.items()},
        "token_ids_sha256": {label: c.sha256 for label, c in corpora.items()},
        "control_seeds": list(CONTROL_SEEDS),
        # each twin is drawn by the generator of the device the model is on: twins drawn on
        # a CPU and on a GPU are different draws from the same distribution
        "twins_drawn_on": loaded.device.type,
        "seed": seed,
        "level": LEVEL,
        "power": power,
        "registry": [t.claim for t in CLAIMS],
        "shards": [[lo, hi]],
    }
    return judge_record(header, rows, order)


def _values(header: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Every axis' values of a run: the measured ``tokens`` and ``corpus``, the registry's
    others (they need no new capture)."""
    return {a.name: list(header["grid"].get(a.name, a.values)) for a in GRID}


def judge_record(header: dict[str, Any], rows: list[Any], order: list[Any],
                 *, rule: Any = None) -> dict[str, Any]:  # fmt: skip
    """The record: header, rows, each head's pooled r_split, the headline claims, the grid
    (``rule``: the decision rule, ``verdicts.graded_verdict`` by default)."""
    from ropesplit.empirical.passages import pooled_over_passages
    from ropesplit.empirical.verdicts import (
        default_cell,
        evaluate_all,
        evaluate_grid,
        graded_verdict,
    )

    rule = rule or graded_verdict
    sources = {"passages": rows, "order": order}
    cell = default_cell(header["tokens"], header["corpus"])
    claims = evaluate_all(sources, cell, rule=rule)
    values = _values(header)
    grid = [evaluate_grid(test, sources[test.source], values, rule=rule) for test in CLAIMS]
    for claim, cells in zip(claims, grid, strict=True):
        claim["robustness"], claim["robust_statement"] = cells["robustness"], cells["statement"]
    headline = [r for r in rows if r.get("corpus") == header["corpus"]]
    pooled = {"r_split": pooled_over_passages(headline, header["tokens"])}
    return {"header": header, "passages": rows, "order": order, "pooled": pooled,
            "claims": claims, "grid": grid}  # fmt: skip


_SAME = ("model", "corpus", "corpora", "tokens", "grid", "passages", "order_passages", "names",
         "token_ids_sha256", "control_seeds", "seed", "level", "registry")  # shards agree


def merge_records(records: list[dict[str, Any]], *, partial: bool = False) -> dict[str, Any]:
    """Shards of one corpus run (``shard=``) merged into the record of the passages they cover.

    The per-passage rows are independent of the shard they ran in (global
    indices, seeds and control twins), so the merge of shards covering the
    whole run is that run's record exactly; the claims, the grid and the pooled
    correlations are recomputed from the merged rows. Refuses, in one line,
    records of different runs (model, corpus, tokens, seeds, ...), shards
    that overlap, and shards that leave some of the run's passages out (a
    failed array job), naming the missing ranges; with ``partial`` those are
    merged on purpose and ``header.partial`` says what is missing
    (``"passages 4:6 of 8 missing"``).
    """
    from ropesplit.core.errors import RopesplitError

    if len(records) < 2:
        raise RopesplitError(f"merge needs at least 2 records, got {len(records)}")
    first = records[0]["header"]
    for k, record in enumerate(records[1:], start=2):
        head = record["header"]
        differ = [key for key in _SAME if head.get(key) != first.get(key)]
        if differ:
            raise RopesplitError(f"record {k} is not a shard of the same run as record 1: "
                                 f"{', '.join(differ)} differ")  # fmt: skip
    spans = sorted(tuple(span) for r in records for span in r["header"]["shards"])
    for (a0, a1), (b0, b1) in zip(spans, spans[1:], strict=False):
        if b0 < a1:
            raise RopesplitError(f"shards {a0}:{a1} and {b0}:{b1} overlap: each passage once")
    missing = missing_passages(spans, max(first["passages"], first["order_passages"]))
    if missing and not partial:
        raise RopesplitError(f"the shards leave {missing}: merge them all, or pass --partial "
                             "to judge the claims on the passages there are")  # fmt: skip
    labels = first["corpora"]

    def place(row: Mapping[str, Any]) -> tuple[int, int]:
        return labels.index(row["corpus"]), int(row["passage"])

    rows = sorted((row for r in records for row in r["passages"]), key=place)
    order = sorted((row for r in records for row in r["order"]), key=place)
    header = {key: value for key, value in first.items() if key not in ("seconds", "partial")}
    header["shards"] = [list(span) for span in spans]
    if missing:
        header["partial"] = missing
    return judge_record(header, rows, order)


def missing_passages(spans: Sequence[Sequence[int]], need: int) -> str | None:
    """What the sorted, disjoint shard ``spans`` leave out of a run's ``need`` passages, in
    words (``"passages 4:6 of 8 missing"``), or None when they cover it.

    >>> missing_passages([[0, 4], [6, 8]], 8)
    'passages 4:6 of 8 missing'
    >>> missing_passages([[2, 8]], 8), missing_passages([[0, 8]], 8)
    ('passages 0:2 of 8 missing', None)
    """
    gaps, at = [], 0
    for lo, hi in spans:
        if lo > at:
            gaps.append(f"{at}:{lo}")
        at = max(at, hi)
    if at < need:
        gaps.append(f"{at}:{need}")
    return f"passages {', '.join(gaps)} of {need} missing" if gaps else None


def compare_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One models x claims record from claims records (``ropesplit claims --model A --model
    B``, ``ropesplit compare``): per model and claim the headline verdict, its robustness
    over the grid, ``conditions``: every primary condition's estimate (its interval), its
    threshold, direction and origin, the paper's own number where it gives one, and the
    first null's interval. Models of the same name are numbered apart."""
    from ropesplit.core.errors import RopesplitError

    if not records:
        raise RopesplitError("compare needs at least 1 claims record, got 0")
    paper = {test.claim: test.paper_value for test in CLAIMS}
    names = [str(r["header"]["model"]) for r in records]
    shown = [n if names.count(n) == 1 else f"{n} [{k + 1}]" for k, n in enumerate(names)]
    rows = []
    for name, record in zip(shown, records, strict=True):
        head = record["header"]
        for claim in record["claims"]:
            null = claim["nulls"][0] if claim["nulls"] else None
            conditions = [{"measure": c["measure"], "compare": c.get("compare", "level"),
                           "null": c.get("null"), "estimate": c["interval"],
                           "threshold": c["threshold"], "direction": c["direction"],
                           "origin": c["origin"], "n": c["n"], "unit": c.get("unit")}
                          for c in claim["conditions"]]  # fmt: skip
            rows.append({
                "model": name, "claim": claim["claim"], "statement": claim["statement"],
                "verdict": claim["verdict"], "robustness": claim.get("robustness"),
                "robust_statement": claim.get("robust_statement"), "cell": claim["cell"],
                "conditions": conditions, "paper": paper.get(claim["claim"]),
                "null": None if null is None else {"measure": null["measure"],
                                                   "interval": null["interval"]},
                "corpus": head["corpus"], "tokens": head["tokens"],
            })  # fmt: skip
    return {"models": shown, "rows": rows, "claims": [t.claim for t in CLAIMS]}


def claims_records(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The claims records in the files ``paths`` (``ropesplit claims --json``), a compare
    record's unpacked into its models' (one-line error for any other file)."""
    from ropesplit.core.errors import RopesplitError
    from ropesplit.core.io import read_json

    records: list[dict[str, Any]] = []
    for name in paths:
        record = read_json(name, "record")
        if isinstance(record, dict) and isinstance(record.get("records"), list):
            records += record["records"]
        elif isinstance(record, dict) and "claims" in record and "header" in record:
            records.append(record)
        else:
            raise RopesplitError(f"record {name} is not a 'ropesplit claims' record")
    return records
