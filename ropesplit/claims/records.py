r"""The claims records: a run's settings and grid, its record judged from its rows, shards
merged, models compared; no model and no torch (``ropesplit merge`` and ``compare`` read
only JSON). Importing it loads no numpy either (the settings are plain data): the
verdicts load it where they judge.

The record (``ropesplit claims --json``, the report's ``claims.json``)::

    {"header": {model, layers, corpus, corpora, tokens, grid, passages, order_passages,
                names, token_ids_sha256, skipped, control_seeds, seed, level, power,
                registry, shards},
     "passages": [row, ...],      # one per corpus passage: every cell's statistics and nulls
     "order": [row, ...],         # one per order passage: every length's damages
     "claims": [claim, ...],      # per claim, in the headline cell: primary test, verdict
     "grid": [claim, ...]}        # per claim: every cell's verdict and estimate, robustness

``header.grid`` lists the axis values measured (``tokens``, ``corpus``; the
other axes need no new capture and take every value of :data:`.registry.GRID`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ropesplit.claims.registry import (
    CLAIMS,
    COMPARISON_FIELDS,
    GRID,
    LEVEL,
    MIN_PASSAGES,
    PAIRED,
    resolve_second_corpus,
)
from ropesplit.core.errors import RopesplitError, SettingError
from ropesplit.core.io import read_json

__all__ = [
    "ClaimsSettings",
    "Header",
    "DEFAULT_GRID_TOKENS",
    "DEFAULT_ORDER_PASSAGES",
    "DEFAULT_PASSAGES",
    "MIN_TOKENS",
    "check_tokens",
    "claims_records",
    "compare_records",
    "grid_tokens",
    "judge_record",
    "merge_records",
    "missing_passages",
    "passage_ranges",
    "power_statement",
]

DEFAULT_PASSAGES = 12  # passages measured for claims 2-5 (minimum MIN_PASSAGES)
DEFAULT_ORDER_PASSAGES = 8  # passages of the word-order test (claim 1)
# the tokens axis when none is given (``ropesplit claims`` and the report alike): the
# registry's 256 and 512, never past the run's own tokens; its 1024 only when asked
# (``--grid-tokens``): on 2 CPU cores that length alone doubles the run
DEFAULT_GRID_TOKENS = (256, 512)
# the fewest tokens any run reads (``--tokens`` of every command, each ``--grid-tokens``):
# below it r_3axis is 1 by construction (nearly as many parameters as pairs)
MIN_TOKENS = 16


def check_tokens(value: int, field: str = "tokens") -> None:
    """The one check of a length in tokens: at least :data:`MIN_TOKENS`, else a
    :class:`~ropesplit.core.errors.SettingError` naming ``field`` (the setting, and option,
    that gave it)."""
    if value < MIN_TOKENS:
        raise SettingError(field, f"must be at least {MIN_TOKENS}, got {value}")


def power_statement(n: int) -> str:
    """What ``n`` passages can detect, stated before the run (two-sided t test, 80% power)."""
    from ropesplit.numerics.intervals import min_detectable_effect

    effect = min_detectable_effect(n, level=LEVEL, power=0.8)
    return (f"with {n} passages a {LEVEL:.0%} t interval excludes the threshold with 80% power "
            f"when the true mean lies at least {effect:.2f} passage-SDs from it")  # fmt: skip


def passage_ranges(
    passages: int, order_passages: int, shard: tuple[int, int] | None = None
) -> tuple[range, range]:
    """The passages of claims 2-5 and of the word-order test that ``shard`` (default: the
    whole run) measures, the counts and the shard checked first (one-line errors naming
    :class:`ClaimsSettings`' fields, :class:`~ropesplit.core.errors.SettingError`)."""
    for name, value in (("passages", passages), ("order_passages", order_passages)):
        if value < MIN_PASSAGES:
            raise SettingError(name, f"must be at least {MIN_PASSAGES}, got {value}")
    need = max(passages, order_passages)
    lo, hi = shard or (0, need)
    if not 0 <= lo < hi <= need:
        raise SettingError("shard", f"must be A:B with 0 <= A < B <= {need}, got {lo}:{hi}")
    return range(lo, min(hi, passages)), range(lo, min(hi, order_passages))


def grid_tokens(tokens: int, values: Sequence[int] | None = None, *,
                limit: int | None = None) -> list[int]:  # fmt: skip
    """The ``tokens`` axis a run measures: ``values`` as given, or by default
    :data:`DEFAULT_GRID_TOKENS` up to the headline ``tokens`` (the axis never goes past what
    was asked for unless ``values`` say so); the headline ``tokens`` added, each checked
    (:func:`check_tokens`: ``tokens``, then ``values`` as ``grid_tokens``), those beyond
    ``limit`` (the passages' or the model's length) left out."""
    check_tokens(tokens)
    if values:
        check_tokens(min(values), "grid_tokens")
    base = values if values is not None else [t for t in DEFAULT_GRID_TOKENS if t <= tokens]
    chosen = sorted({int(t) for t in base} | {int(tokens)})
    if limit is not None:
        if tokens > limit:
            raise RopesplitError(f"tokens {tokens} exceeds the {limit} available")
        chosen = [t for t in chosen if t <= limit]
    return chosen


@dataclass(frozen=True)
class ClaimsSettings:
    """What one claims run measures (``ropesplit claims``' options and the report's), checked
    when built: ``tokens`` is the headline cell's length; ``grid_tokens`` the ``tokens`` axis
    (default :data:`DEFAULT_GRID_TOKENS` up to ``tokens``; ``tokens`` added,
    :func:`grid_tokens`); ``corpus`` the run's corpus (None: ``empirical.model.corpus``' default);
    ``second_corpus`` the corpus axis' other value (``claims.registry.PAIRED``: the one
    ``claims.registry.SECOND_CORPUS`` pairs with the run's corpus; None: the run's corpus
    only); ``passages`` and ``order_passages`` the counts of claims 2-5 and of the word
    order; ``seed`` every draw's; ``batch_size`` the word order's rows per forward pass;
    ``shard=(A, B)`` measures only the run's passages ``A..B-1`` of each corpus (a SLURM
    array task, an ``accelerate``/``torchrun`` process): :func:`merge_records` of shards
    covering the run is the run's record. Each field is the option of ``ropesplit claims``
    of its name (``grid_tokens``: ``--grid-tokens``) and holds its default; a failed check
    is a :class:`~ropesplit.core.errors.SettingError` naming the field."""

    corpus: str | None = None
    second_corpus: str | None = PAIRED
    tokens: int = 512
    grid_tokens: tuple[int, ...] | None = None
    passages: int = DEFAULT_PASSAGES
    order_passages: int = DEFAULT_ORDER_PASSAGES
    seed: int = 0
    batch_size: int = 8
    shard: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        self.ranges()
        grid_tokens(self.tokens, self.grid_tokens)
        if self.batch_size < 1:
            raise SettingError("batch_size", f"must be at least 1, got {self.batch_size}")

    def ranges(self) -> tuple[range, range]:
        """The passages of claims 2-5 and of the word order this run measures
        (:func:`passage_ranges`)."""
        return passage_ranges(self.passages, self.order_passages, self.shard)

    def corpora(self, default: str) -> list[str]:
        """The corpus axis this run measures: the run's corpus (``default`` when ``corpus`` is
        None) and the one ``second_corpus`` resolves to, if any
        (:func:`~ropesplit.claims.registry.resolve_second_corpus`)."""
        first = self.corpus or default
        second = resolve_second_corpus(first, self.second_corpus)
        return [first] + ([second] if second else [])


@dataclass(frozen=True)
class Header:
    """The run a claims record is of, as its ``header`` holds it (:meth:`as_dict`, in this
    order): what was measured, on what, how, and which of the run's passages (``shards``;
    ``partial`` says what a merge on purpose leaves out, ``seconds`` what the CLI timed)."""

    model: str
    layers: dict[str, Any]  # analysed: the layers pooled over; not_analysed: the rest, why
    corpus: str  # the headline cell's corpus
    corpora: list[str]  # the corpus axis measured
    tokens: int  # the headline cell's length
    grid: dict[str, list[Any]]  # the axis values measured: tokens, corpus
    grid_tokens: dict[str, Any]  # the tokens axis: as given (None) and the default
    passages: int  # of claims 2-5, per corpus
    order_passages: int  # of the word order (claim 1), per corpus
    names: dict[str, list[str]]  # corpus -> passage names
    skipped: dict[str, int]  # corpus -> passages too short to use
    token_ids_sha256: dict[str, str]  # corpus -> hash of the passages' token ids
    control_seeds: list[int]  # the random-init twins
    twins_drawn_on: str | None  # the device whose generator drew them (None: not recorded)
    seed: int
    level: float  # of every interval
    power: str  # what the word-order test can detect, fixed before the run
    registry: list[int]  # the claims judged
    shards: list[list[int]]  # the passage spans measured, [[A, B], ...]
    partial: str | None = None  # "passages 4:6 of 8 missing": a merge that leaves some out
    seconds: float | None = None  # the run's wall time, where the CLI measured it
    # "both ways": an encoder's run (claim 1 scores the masked-token loss, each length its
    # own capture; docs/theory.md section 9); None: a causal model's
    attends: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record's ``header``: every field, ``partial``, ``seconds`` and ``attends`` only
        when set."""
        out = asdict(self)
        for key in ("partial", "seconds", "attends"):
            if out[key] is None:
                del out[key]
        return out

    @classmethod
    def from_dict(cls, header: Mapping[str, Any]) -> Header:
        """A record's ``header`` read back (one-line error for a field it lacks or one this
        toolkit does not write)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(header) - known)
        if unknown:
            raise RopesplitError(f"a claims header has no field {unknown[0]!r}")
        optional = {"partial", "seconds", "twins_drawn_on", "attends"}
        missing = sorted(known - optional - set(header))
        if missing:
            raise RopesplitError(f"the claims header lacks {missing[0]!r}")
        return cls(**{"twins_drawn_on": None, **header})

    def values(self) -> dict[str, list[Any]]:
        """Every axis' values of the run: the measured ``tokens`` and ``corpus``, the
        registry's others (they need no new capture)."""
        return {a.name: list(self.grid.get(a.name, a.values)) for a in GRID}


def judge_record(header: Header, rows: list[Any], order: list[Any],
                 *, rule: Any = None) -> dict[str, Any]:  # fmt: skip
    """The record: header, rows, the headline claims, the grid (``rule``: the decision rule,
    ``verdicts.graded_verdict`` by default)."""
    from ropesplit.claims.verdicts import default_cell, evaluate_all, evaluate_grid, graded_verdict

    rule = rule or graded_verdict
    sources = {"passages": rows, "order": order}
    cell = default_cell(header.tokens, header.corpus)
    claims = evaluate_all(sources, cell, rule=rule)
    values = header.values()
    grid = [evaluate_grid(test, sources[test.source], values, rule=rule) for test in CLAIMS]
    for claim, cells in zip(claims, grid, strict=True):
        claim["robustness"], claim["robust_statement"] = cells["robustness"], cells["statement"]
        claim["robust_line"] = cells["line"]
    return {"header": header.as_dict(), "passages": rows, "order": order, "claims": claims,
            "grid": grid}  # fmt: skip


_SAME = ("model", "corpus", "corpora", "tokens", "grid", "passages", "order_passages", "names",
         "token_ids_sha256", "control_seeds", "seed", "level", "registry")  # shards agree


def merge_records(records: list[dict[str, Any]], *, partial: bool = False) -> dict[str, Any]:
    """Shards of one corpus run (``shard=``) merged into the record of the passages they cover.

    The per-passage rows are independent of the shard they ran in (global
    indices, seeds and control twins), so the merge of shards covering the
    whole run is that run's record exactly; the claims and the grid are recomputed
    from the merged rows. Refuses, in one line,
    records of different runs (model, corpus, tokens, seeds, ...), shards
    that overlap, and shards that leave some of the run's passages out (a
    failed array job), naming the missing ranges; with ``partial`` those are
    merged on purpose and ``header.partial`` says what is missing
    (``"passages 4:6 of 8 missing"``).
    """
    if len(records) < 2:
        raise RopesplitError(f"merge needs at least 2 records, got {len(records)}")
    heads = [Header.from_dict(record["header"]) for record in records]
    first = heads[0]
    for k, head in enumerate(heads[1:], start=2):
        differ = [key for key in _SAME if getattr(head, key) != getattr(first, key)]
        if differ:
            raise RopesplitError(f"record {k} is not a shard of the same run as record 1: "
                                 f"{', '.join(differ)} differ")  # fmt: skip
    spans = sorted(tuple(span) for head in heads for span in head.shards)
    for (a0, a1), (b0, b1) in zip(spans, spans[1:], strict=False):
        if b0 < a1:
            raise RopesplitError(f"shards {a0}:{a1} and {b0}:{b1} overlap: each passage once")
    missing = missing_passages(spans, max(first.passages, first.order_passages))
    if missing and not partial:
        raise RopesplitError(f"the shards leave {missing}: merge them all, or pass --partial "
                             "to judge the claims on the passages there are")  # fmt: skip
    labels = first.corpora

    def place(row: Mapping[str, Any]) -> tuple[int, int]:
        return labels.index(row["corpus"]), int(row["passage"])

    rows = sorted((row for r in records for row in r["passages"]), key=place)
    order = sorted((row for r in records for row in r["order"]), key=place)
    header = replace(first, shards=[list(span) for span in spans], partial=missing, seconds=None)
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
            conditions = [{**{name: c.get(name) for name in COMPARISON_FIELDS},
                           "compare": c.get("compare", "level"), "estimate": c["interval"],
                           "origin": c["origin"], "n": c["n"]}
                          for c in claim["conditions"]]  # fmt: skip
            rows.append({
                "model": name, "claim": claim["claim"], "statement": claim["statement"],
                "verdict": claim["verdict"], "robustness": claim.get("robustness"),
                "robust_statement": claim.get("robust_statement"),
                "robust_line": claim.get("robust_line"), "cell": claim["cell"],
                "conditions": conditions, "paper": paper.get(claim["claim"]),
                "null": None if null is None else {"measure": null["measure"],
                                                   "interval": null["interval"]},
                "corpus": head["corpus"], "tokens": head["tokens"],
            })  # fmt: skip
    return {"models": shown, "rows": rows, "claims": [t.claim for t in CLAIMS]}


def claims_records(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The claims records in the files ``paths`` (``ropesplit claims --json``), a compare
    record's unpacked into its models' (one-line error for any other file)."""
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


