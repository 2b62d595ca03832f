r"""Shuffled frequencies inside the model: the causal null of claim 4.

Claim 4 says training puts the keys' deviation in the slow pairs; if that is
what the model relies on, reassigning the frequencies over all the pairs (a
seeded permutation per layer, every layer and head:
``numerics.intervention.shuffle_frequencies``), which sends slow pairs' deviation
to fast frequencies, must hurt it more than a reassignment that keeps every
pair in its half (``band_order``: slow among slow, fast among fast). That
null hurts too (every pair's rotation changes), so a harmful edit does not
pass by hurting at all: the random-init twin, whose log ratio is about 0, is
shown beside it. Per passage, the log loss ratio
:math:`\log(\bar\ell^{\pi} / \bar\ell)`, averaged over :data:`DRAWS` permutations.
"""

from __future__ import annotations

import numpy as np

from ropesplit.empirical.experiments import edits
from ropesplit.empirical.experiments.base import Context, Experiment, Outcome, Row
from ropesplit.empirical.experiments.intervene import Edit
from ropesplit.empirical.model.loading import random_init_twin

__all__ = ["EXPERIMENT", "PREDICTION"]

DRAWS = 3  # permutations per passage
PREDICTION = (
    "If the trained model relies on its low-frequency pairs turning slowly (claim 4), "
    "shuffling the frequencies over all the pairs in every layer raises its loss more than "
    "shuffling them within the low-frequency half and within the high-frequency half (a null "
    "that hurts too): the paired "
    f"difference of log loss ratios (all minus within halves, {DRAWS} permutations each) over "
    f"{edits.PASSAGES} passages has its 95% t interval above 0; the random-init twin's log "
    "ratio is shown beside it."
)


def _ratios(data: edits.Corpus, loaded: object, seed: int, kind: str = "shuffle") -> np.ndarray:
    layers = tuple(loaded.layers)  # type: ignore[attr-defined]
    clean = data.nll(loaded, None)  # type: ignore[arg-type]
    return np.mean([edits.ratios(data.nll(loaded, Edit(kind, layers, seed=seed + d)),  # type: ignore[arg-type]
                                 clean) for d in range(DRAWS)], axis=0)  # fmt: skip


def _run(context: Context) -> list[Row]:
    data = edits.corpus(context)
    seed = context.settings.seed
    trained = _ratios(data, context.loaded, seed)
    band = _ratios(data, context.loaded, seed, "shuffle_band")
    twin = _ratios(data, random_init_twin(context.loaded, seed=seed), seed)
    return [{"run": "trained", "null": "within halves", **edits.summary(trained, "lr_shuffle"),
             **edits.summary(band, "lr_null"), **edits.summary(twin, "lr_twin"),
             **edits.paired(trained, band, "above")}]


def judge(row: Row) -> Outcome:
    return edits.judge_paired(row, f"log ratio of the shuffle, trained minus {row['null']}")


EXPERIMENT = Experiment(
    name="shuffle",
    title="Shuffled frequencies inside the model (causal null of claim 4)",
    prediction=PREDICTION,
    needs=f"{edits.PASSAGES} corpus passages; a clean pass and {DRAWS} shuffled ones per "
    "shuffle (all pairs, within halves) of the trained model, and of its random-init twin",
    run=_run,
    judge=judge,
    verdict=lambda rows: judge(rows[0]),
    forward_count=lambda settings: 3 * (1 + DRAWS),
)
