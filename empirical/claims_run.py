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
     "claims": [claim, ...]}      # per claim: primary test, intervals, verdict, reason
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropesplit.empirical.models import LoadedModel, random_init_twin

from ropesplit.claims import CLAIMS, CONTROL_SEEDS, LEVEL, MIN_PASSAGES

__all__ = ["DEFAULT_ORDER_PASSAGES", "DEFAULT_PASSAGES", "power_statement", "run_claims"]

DEFAULT_PASSAGES = 12  # passages measured for claims 2-5 (minimum MIN_PASSAGES)
DEFAULT_ORDER_PASSAGES = 8  # passages of the word-order test (claim 1)


def power_statement(n: int) -> str:
    """What ``n`` passages can detect, stated before the run (two-sided t test, 80% power)."""
    from ropesplit.numerics.intervals import min_detectable_effect

    effect = min_detectable_effect(n, level=LEVEL, power=0.8)
    return (f"with {n} passages a {LEVEL:.0%} t interval excludes the threshold with 80% power "
            f"when the true mean lies at least {effect:.2f} passage-SDs from it")  # fmt: skip


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
    on_passage: Callable[[int], Any] | None = None,
    on_stage: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """The record of the module docstring.

    ``controls`` (seed -> twin) are built when absent; ``passage_ids`` (an
    ``empirical.corpus.PassageIds``) replaces the corpus, e.g. for a model
    without a tokenizer.
    """
    from ropesplit.empirical.corpus import corpus_from_spec
    from ropesplit.empirical.corpus import passage_ids as passage_ids_of
    from ropesplit.empirical.experiments.order_passages import order_passage
    from ropesplit.empirical.passages import measure_passages
    from ropesplit.empirical.verdicts import evaluate_all

    from ropesplit.errors import RopesplitError

    for flag, value in (("passages", passages), ("order passages", order_passages)):
        if value < MIN_PASSAGES:
            raise RopesplitError(f"{flag} must be at least {MIN_PASSAGES}, got {value}")
    need = max(passages, order_passages)
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
        on_stage(f"passages: {passages} x {tokens} tokens, trained and control")
    rows = measure_passages(loaded, controls, chosen.ids[:passages], chosen.names[:passages],
                            seed=seed, on_passage=on_passage)  # fmt: skip
    if on_stage is not None:
        on_stage(f"order: {order_passages} passages; {power}")
    order = []
    for p in range(order_passages):
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
    }
    claims = evaluate_all({"passages": rows, "order": order})
    return {"header": header, "passages": rows, "order": order, "claims": claims}
