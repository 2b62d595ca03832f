r"""The registry of experiments and the one entry point that runs them: :func:`run_experiments`.

``EXPERIMENTS`` maps each name to its :class:`~.base.Experiment`, in the
order they run. Adding an experiment is one module defining an
``EXPERIMENT`` plus one line here.

The record :func:`run_experiments` returns (and ``ropesplit perturb --json``
writes)::

    {"header": {...},                         # model, tokens, seeds, layers, ...
     "experiments": {name: {"title", "prediction", "needs",
                            "verdict", "reason",  # the experiment's verdict
                            "own_capture"}},      # labels of the captures it read
     name: [row, ...]}                            # each row with "verdict", "reason"
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.experiments import (
    distance,
    keys,
    length,
    order,
    position,
    remainder,
    shuffle,
    terms,
)
from ropesplit.empirical.experiments.base import Context, Experiment, ExperimentSettings
from ropesplit.empirical.experiments.continuation import context_tokens
from ropesplit.empirical.model.inputs import as_input_ids
from ropesplit.empirical.model.loaded import LoadedModel, stated_length

__all__ = ["EXPERIMENTS", "INTERVENTIONS", "PREDICTIONS", "forward_count", "run_experiments"]


EXPERIMENTS: dict[str, Experiment] = {
    "distance": distance.EXPERIMENT,
    "order": order.EXPERIMENT,
    "position": position.EXPERIMENT,
    "length": length.EXPERIMENT,
    "remainder": remainder.EXPERIMENT,  # edits inside the forward pass: intervene
    "keys": keys.EXPERIMENT,
    "terms": terms.EXPERIMENT,
    "shuffle": shuffle.EXPERIMENT,
}

# the experiments that edit the model's attention: they measure a corpus, not the text
INTERVENTIONS = ("remainder", "keys", "terms", "shuffle")

# the prediction of each experiment, in words (the report and the CLI print them)
PREDICTIONS = {name: e.prediction for name, e in EXPERIMENTS.items()}


def _chosen(experiments: Sequence[str]) -> list[Experiment]:
    unknown = [name for name in experiments if name not in EXPERIMENTS]
    if unknown or not experiments:
        raise RopesplitError(
            f"experiments must be among {', '.join(EXPERIMENTS)}, got {list(experiments)}"
        )
    return [e for name, e in EXPERIMENTS.items() if name in experiments]


def forward_count(experiments: Sequence[str], settings: ExperimentSettings | None = None) -> int:
    """Forward passes the experiments run at most (a progress bar's total)."""
    return sum(e.forward_count(settings or ExperimentSettings()) for e in _chosen(experiments))


def _header(context: Context) -> dict[str, Any]:
    token_ids = [int(t) for t in context.ids]
    digest = hashlib.sha256(np.asarray(token_ids, dtype=np.int64).tobytes()).hexdigest()
    loaded = context.loaded
    return {
        "model": loaded.name + (" (random init)" if loaded.random_init else ""),
        "tokens": len(token_ids),
        "context_tokens": context_tokens(len(token_ids)),
        "token_ids_sha256": digest,
        "token_ids": token_ids,
        "seed": context.settings.seed,
        "draws": context.settings.draws,
        "layers": context.layers,
        "training_length": stated_length(loaded),
    }


def run_experiments(
    loaded: LoadedModel,
    input_ids: Any,
    *,
    experiments: Sequence[str] = tuple(EXPERIMENTS),
    settings: ExperimentSettings | None = None,
    on_forward: Callable[[int], Any] | None = None,
    on_stage: Callable[[str], Any] | None = None,
    passages: Any = None,
    on_plan: Callable[[dict[str, int]], Any] | None = None,
) -> dict[str, Any]:
    r"""Run the chosen experiments of :data:`EXPERIMENTS`; the record of the module docstring.

    ``settings`` (:class:`~.base.ExperimentSettings`: draws, seed, layers, batch size) default to
    its defaults.
    ``on_forward(k)`` follows the forward passes, ``on_stage(name)``
    announces each experiment. Every row gets ``verdict`` and ``reason``
    from its experiment's ``judge``. ``passages`` ``(P, N)`` token ids are the
    interventions' corpus (default: the default corpus at the text's length).
    ``on_plan(counts)`` hears each experiment's forward passes at most, once the inputs
    are checked and before the first pass.
    """
    chosen = _chosen(experiments)
    settings = settings or ExperimentSettings()
    ids = as_input_ids(loaded, input_ids)[0].cpu()  # (N,)
    context = Context(loaded, ids, settings, on_forward, passages=passages)
    context_tokens(context.n_tokens)  # enough tokens for a context and a continuation
    for experiment in chosen:
        experiment.check(context)
    context.layers  # noqa: B018 - the layers checked before any forward pass
    if on_plan is not None:
        on_plan({e.name: e.forward_count(settings) for e in chosen})
    record: dict[str, Any] = {"header": _header(context), "experiments": {}}
    for experiment in chosen:
        if on_stage is not None:
            on_stage(experiment.name)
        before = len(context.captured)
        rows = experiment.run(context)
        for row in rows:
            verdict = experiment.judge(row)
            row["verdict"], row["reason"] = verdict.outcome, verdict.reason
        overall = experiment.verdict(rows)
        record[experiment.name] = rows
        record["experiments"][experiment.name] = {
            "title": experiment.title,
            "prediction": experiment.prediction,
            "needs": experiment.needs,
            "verdict": overall.outcome,
            "reason": overall.reason,
            "own_capture": list(dict.fromkeys(context.captured[before:])),
        }
    if context._text is not None:
        record["header"]["reconstruction_max_abs_diff"] = context._text.reconstruction_max_abs_diff
    return record
