r"""The paper's four experiments on one model and one text, each beside THEORY.md's prediction.

1. ``distance`` (:mod:`.experiments_distance`): the same query/key pairs at
   dummy distances; the key component stays put, the distance component moves.
2. ``order`` (:mod:`.experiments_order`): word-order perturbation of the
   context; the continuation loss barely moves up to about 5%, more past 10%.
3. ``position`` (:mod:`.experiments_position`): only the position ids move;
   the loss beside the bound ``s sum_l |q~_l||k~_l| 2|sin(theta_l t/2)|`` split
   into its ``f`` part, ``g`` part (exactly 0) and ``E`` part.
4. ``length`` (:mod:`.experiments_length`): distances beyond the training
   length, with and without LM-Infinite's cap ``Delta -> min(Delta, L)``.

:func:`run_experiments` captures the text once (validated against the
model's own attention) for the three experiments that read activations and
returns the JSON record: a ``header`` and one list of rows per experiment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from ropesplit.empirical.capture import capture
from ropesplit.empirical.experiments_distance import (
    DISTANCES,
    check_layers,
    default_layers,
    distance_experiment,
)
from ropesplit.empirical.experiments_forward import context_length, model_context
from ropesplit.empirical.experiments_length import length_experiment, spacing
from ropesplit.empirical.experiments_order import ORDER_RATES, order_experiment
from ropesplit.empirical.experiments_position import SHIFTS, position_experiment
from ropesplit.empirical.models import LoadedModel, as_input_ids
from ropesplit.empirical.perturb import ORDER_SCHEMES, POSITION_SCHEMES

from ropesplit.errors import RopesplitError

__all__ = [
    "EXPERIMENTS",
    "PREDICTIONS",
    "distance_experiment",
    "forward_count",
    "length_experiment",
    "order_experiment",
    "position_experiment",
    "run_experiments",
]

EXPERIMENTS = ("distance", "order", "position", "length")

# what THEORY.md section 4 (and the paper) predict, printed beside each measurement
PREDICTIONS = {
    "distance": "key_corr ~ 1 at every D; the key component moves far less than the distance "
    "component (key_shift << distance_shift)",
    "order": "ratio ~ 1 up to about 5% of the context's tokens; clearly > 1 past 10% (paper)",
    "position": "g moves by exactly 0; |dW| <= bound_W <= bound_f + bound_E for a key moved by t "
    "(tightness <= 1); the loss ratio grows with t as the bound does",
    "length": "g identical in every setting (position-free); f leaves its trained range when "
    "spaced (f_outside > 0) and stays in it with the cap (f_outside = 0)",
}


def forward_count(experiments: Sequence[str], seeds: int) -> int:
    """Forward-pass rows the experiments run at most (a progress bar's total)."""
    per = {
        "distance": 0,
        "order": 1 + len(ORDER_SCHEMES) * sum(r > 0 for r in ORDER_RATES) * seeds,
        "position": 1 + len(POSITION_SCHEMES) * sum(t > 0 for t in SHIFTS) * seeds,
        "length": 3,
    }
    return sum(per[name] for name in experiments)


def _header(
    loaded: LoadedModel, ids: torch.Tensor, seed: int, seeds: int, layers: list[int]
) -> dict[str, Any]:
    token_ids = [int(t) for t in ids]
    digest = hashlib.sha256(np.asarray(token_ids, dtype=np.int64).tobytes()).hexdigest()
    return {
        "model": loaded.name + (" (random init)" if loaded.random_init else ""),
        "tokens": len(token_ids),
        "context_tokens": context_length(len(token_ids)),
        "token_ids_sha256": digest,
        "token_ids": token_ids,
        "seed": seed,
        "seeds": seeds,
        "layers": layers,
        "training_length": model_context(loaded),
    }


def run_experiments(
    loaded: LoadedModel,
    input_ids: Any,
    *,
    experiments: Sequence[str] = EXPERIMENTS,
    seeds: int = 3,
    seed: int = 0,
    layers: Sequence[int] | None = None,
    batch_size: int = 8,
    on_forward: Callable[[int], Any] | None = None,
    on_stage: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    r"""Run the chosen experiments; the record ``{"header", name: rows, ...}``.

    ``layers`` (default: six evenly spaced) are the layers the distance and
    length analyses fit (every head of each); the position bound covers all
    layers. ``on_forward(k)`` follows the forward passes, ``on_stage(name)``
    announces each experiment.
    """
    unknown = [name for name in experiments if name not in EXPERIMENTS]
    if unknown or not experiments:
        raise RopesplitError(
            f"experiments must be among {', '.join(EXPERIMENTS)}, got {list(experiments)}"
        )
    if seeds < 1:
        raise RopesplitError(f"seeds must be at least 1, got {seeds}")
    ids = as_input_ids(loaded, input_ids)[0]  # (N,)
    (n_tokens,) = ids.shape
    context_length(n_tokens)  # enough tokens for a context and a continuation
    layers = check_layers(
        default_layers(loaded.n_layers) if layers is None else list(layers), loaded.n_layers
    )
    if "length" in experiments:
        if model_context(loaded) is None:
            raise RopesplitError(f"{loaded.name} states no training length for --experiment length")
        spacing(n_tokens, int(model_context(loaded) or 0))  # fails early on too many tokens
    record: dict[str, Any] = {"header": _header(loaded, ids, seed, seeds, layers)}
    cache = None
    if {"distance", "position", "length"} & set(experiments):
        if on_stage is not None:
            on_stage("capture")
        cache = capture(loaded, ids, keep_probs=False)
        record["header"]["reconstruction_max_abs_diff"] = cache.reconstruction_max_abs_diff
    for name in EXPERIMENTS:
        if name not in experiments:
            continue
        if on_stage is not None:
            on_stage(name)
        if name == "distance":
            assert cache is not None
            record[name] = distance_experiment(cache, layers=layers, distances=DISTANCES)
        elif name == "order":
            record[name] = order_experiment(
                loaded, ids, seeds=seeds, seed=seed, batch_size=batch_size, on_forward=on_forward
            )
        elif name == "position":
            assert cache is not None
            record[name] = position_experiment(
                loaded, ids, cache, seeds=seeds, seed=seed, batch_size=batch_size,
                on_forward=on_forward,
            )  # fmt: skip
        else:
            assert cache is not None
            record[name] = length_experiment(
                loaded, ids, cache, layers=layers, batch_size=batch_size, on_forward=on_forward
            )
    return record
