r"""The claims run: a corpus of passages, every primary test, one ``claims.json`` record.

:func:`run_claims` reads ``passages`` passages of at least ``tokens`` tokens
from the corpus (``empirical.corpus``), measures each one on the trained
model and its random-init twin (``empirical.passages``), runs the nested
word-order perturbation on the first ``order_passages`` of them
(``empirical.experiments.order_passages``) and judges every claim of
``ropesplit.claims.CLAIMS`` from those rows (``empirical.verdicts``). The
power statement of the order test is fixed before it runs.

The record (``ropesplit claims --json``, the report's ``claims.json``)::

    {"header": {model, corpus, tokens, passages, names, token_ids_sha256,
                skipped, control_seeds, seed, power},
     "passages": [row, ...],      # one per passage: every statistic and null
     "order": [row, ...],         # one per order passage
     "pooled": {"r_split": [...]},  # each head's r_split pooled over the passages (moments)
     "claims": [claim, ...]}      # per claim: primary test, intervals, verdict, reason

``header.shards`` lists the passage ranges ``[A, B)`` the record covers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropesplit.empirical.models import LoadedModel, random_init_twin

from ropesplit.claims import CLAIMS, CONTROL_SEEDS, LEVEL, MIN_PASSAGES

__all__ = [
    "DEFAULT_ORDER_PASSAGES",
    "DEFAULT_PASSAGES",
    "merge_records",
    "passage_ranges",
    "power_statement",
    "run_claims",
]

DEFAULT_PASSAGES = 12  # passages measured for claims 2-5 (minimum MIN_PASSAGES)
DEFAULT_ORDER_PASSAGES = 8  # passages of the word-order test (claim 1)


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
    from ropesplit.errors import RopesplitError

    for name, value in (("passages", passages), ("order-passages", order_passages)):
        if value < MIN_PASSAGES:
            raise RopesplitError(f"{prefix}{name} must be at least {MIN_PASSAGES}, got {value}")
    need = max(passages, order_passages)
    lo, hi = shard or (0, need)
    if not 0 <= lo < hi <= need:
        raise RopesplitError(f"{prefix}shard must be A:B with 0 <= A < B <= {need}, got {lo}:{hi}")
    return range(lo, min(hi, passages)), range(lo, min(hi, order_passages))


def run_claims(
    loaded: LoadedModel,
    *,
    corpus: str | None = None,
    tokens: int = 512,
    passages: int = DEFAULT_PASSAGES,
    order_passages: int = DEFAULT_ORDER_PASSAGES,
    seed: int = 0,
    batch_size: int = 8,
    controls: dict[int, LoadedModel] | None = None,
    passage_ids: Any = None,
    shard: tuple[int, int] | None = None,
    on_passage: Callable[[int], Any] | None = None,
    on_stage: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """The record of the module docstring.

    ``controls`` (seed -> twin) are built when absent; ``passage_ids`` (an
    ``empirical.corpus.PassageIds``) replaces the corpus, e.g. for a model
    without a tokenizer. ``shard=(A, B)`` measures only the run's passages
    ``A..B-1`` (a SLURM array task, an ``accelerate``/``torchrun`` process):
    :func:`merge_records` of shards covering the run is the run's record.
    """
    from ropesplit.empirical.corpus import corpus_from_spec
    from ropesplit.empirical.corpus import passage_ids as passage_ids_of
    from ropesplit.empirical.experiments.order_passages import order_passage
    from ropesplit.empirical.passages import measure_passages

    from ropesplit.errors import RopesplitError

    measured, ordered = passage_ranges(passages, order_passages, shard)
    need = max(passages, order_passages)
    lo, hi = shard or (0, need)
    if passage_ids is None:
        label, texts = corpus_from_spec(corpus)
        chosen = passage_ids_of(loaded, texts, tokens, count=need, min_count=need)
    else:
        label, chosen = "given token ids", passage_ids
        if len(chosen.names) < need:
            raise RopesplitError(f"passage_ids must hold at least {need} passages, "
                                 f"got {len(chosen.names)}")  # fmt: skip
        tokens = chosen.n_tokens
    if controls is None:
        controls = {s: random_init_twin(loaded, s) for s in CONTROL_SEEDS}
    power = power_statement(order_passages)
    if on_stage is not None:
        on_stage(f"passages: {len(measured)} x {tokens} tokens, trained and control")
    rows = measure_passages(loaded, controls, chosen.ids[measured.start : measured.stop],
                            chosen.names[measured.start : measured.stop], seed=seed,
                            first=lo, on_passage=on_passage)  # fmt: skip
    if on_stage is not None:
        on_stage(f"order: {len(ordered)} passages; {power}")
    order = []
    for p in ordered:
        row = order_passage(loaded, chosen.ids[p].numpy(), seed=seed * 1000 + p,
                            batch_size=batch_size)  # fmt: skip
        ratios = row["log_ratio"]
        order.append({"passage": p, "name": chosen.names[p], "curvature": row["curvature"],
                      "log_ratio_5": ratios["0.05"], "log_ratio_10": ratios["0.1"],
                      "positive": row["positive"], "baseline_loss": row["baseline_loss"],
                      "draws": row["draws"]})  # fmt: skip
        if on_passage is not None:
            on_passage(1)
    header = {
        "model": loaded.name,
        "corpus": label,
        "tokens": tokens,
        "passages": passages,
        "order_passages": order_passages,
        "names": list(chosen.names),
        "skipped": chosen.skipped,
        "token_ids_sha256": chosen.sha256,
        "control_seeds": list(CONTROL_SEEDS),
        "seed": seed,
        "level": LEVEL,
        "power": power,
        "registry": [t.claim for t in CLAIMS],
        "shards": [[lo, hi]],
    }
    return _judged(header, rows, order)


def _judged(header: dict[str, Any], rows: list[Any], order: list[Any]) -> dict[str, Any]:
    """The record: header, rows, each head's r_split pooled over passages, the claims."""
    from ropesplit.empirical.passages import pooled_over_passages
    from ropesplit.empirical.verdicts import evaluate_all

    claims = evaluate_all({"passages": rows, "order": order})
    pooled = {"r_split": pooled_over_passages(rows)}
    return {"header": header, "passages": rows, "order": order, "pooled": pooled,
            "claims": claims}  # fmt: skip


_SAME = ("model", "corpus", "tokens", "passages", "order_passages", "names", "token_ids_sha256",
         "control_seeds", "seed", "level", "registry")  # shards of one run agree on these


def merge_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Shards of one corpus run (``shard=``) merged into the record of the passages they cover.

    The per-passage rows are independent of the shard they ran in (global
    indices, seeds and control twins), so the merge of shards covering the
    whole run is that run's record exactly; the claims and the pooled
    correlations are recomputed from the merged rows. Refuses, in one line,
    records of different runs (model, corpus, tokens, seeds, ...) and shards
    that overlap.
    """
    from ropesplit.errors import RopesplitError

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
    rows = sorted((row for r in records for row in r["passages"]), key=lambda r: r["passage"])
    order = sorted((row for r in records for row in r["order"]), key=lambda r: r["passage"])
    header = {key: value for key, value in first.items() if key != "seconds"}
    header["shards"] = [list(span) for span in spans]
    return _judged(header, rows, order)
