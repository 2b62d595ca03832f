r"""Shuffled frequencies inside the model: the causal null of claim 4.

Claim 4 says training puts the keys' deviation in the slow pairs; if the
model relies on which pair turns at which frequency, reassigning the
frequencies over the pairs (a seeded permutation per layer, every layer and
head: ``numerics.intervention.shuffle_frequencies``) must hurt it, and hurt
it more than the random-init twin, whose pairs carry nothing learned. Per
passage, the log loss ratio :math:`\log(\bar\ell^{\pi} / \bar\ell)`, averaged
over :data:`DRAWS` permutations.
"""

from __future__ import annotations

import numpy as np
from ropesplit.empirical.experiments import edits
from ropesplit.empirical.experiments.base import Context, Experiment, Row, Verdict
from ropesplit.empirical.intervene import Edit
from ropesplit.empirical.models import random_init_twin

__all__ = ["EXPERIMENT", "PREDICTION"]

DRAWS = 3  # permutations per passage
PREDICTION = (
    "If the trained model relies on which pair turns at which frequency (claim 4), shuffling "
    "the frequencies over the pairs in every layer raises its loss, by more than the same "
    f"shuffle raises the random-init twin's: the paired difference of log loss ratios (trained "
    f"minus twin, {DRAWS} permutations each) over {edits.PASSAGES} passages has its 95% t "
    "interval above 0."
)


def _ratios(data: edits.Corpus, loaded: object, seed: int) -> np.ndarray:
    layers = tuple(range(loaded.n_layers))  # type: ignore[attr-defined]
    clean = data.nll(loaded, None)  # type: ignore[arg-type]
    return np.mean([edits.ratios(data.nll(loaded, Edit("shuffle", layers, seed=seed + d)),  # type: ignore[arg-type]
                                 clean) for d in range(DRAWS)], axis=0)  # fmt: skip


def _run(context: Context) -> list[Row]:
    data = edits.corpus(context)
    seed = context.settings.seed
    trained = _ratios(data, context.loaded, seed)
    twin = _ratios(data, random_init_twin(context.loaded, seed=seed), seed)
    return [{"run": "trained", "null": "random-init twin", **edits.summary(trained, "lr_shuffle"),
             **edits.summary(twin, "lr_null"), **edits.paired(trained, twin, "above")}]


def judge(row: Row) -> Verdict:
    return edits.judge_paired(row, f"log ratio of the shuffle, trained minus {row['null']}")


EXPERIMENT = Experiment(
    name="shuffle",
    title="Shuffled frequencies inside the model (causal null of claim 4)",
    prediction=PREDICTION,
    needs=f"{edits.PASSAGES} corpus passages; per model (trained, random-init twin) a clean "
    f"pass and {DRAWS} shuffled ones",
    run=_run,
    judge=judge,
    verdict=lambda rows: judge(rows[0]),
    forward_count=lambda settings: 2 * (1 + DRAWS),
)
