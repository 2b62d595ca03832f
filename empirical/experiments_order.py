r"""Experiment 2: word-order perturbation of the context, loss on the untouched continuation.

The paper's first claim (position generalization): shuffling up to about 5%
of the tokens barely moves the loss, more than about 10% hurts. THEORY.md
section 4 explains it: a small perturbation moves only the positional term
``f`` and the remainder ``E`` of each logit, never the semantic ``g``.

The first 75% of the tokens (the context) are perturbed by a scheme of
:mod:`ropesplit.empirical.perturb` at each rate; the loss is the model's mean
next-token loss on the last 25% (the continuation), whose tokens and
positions never change:

.. math:: \mathrm{ratio}(r) = \frac{1}{S}\sum_{s=1}^{S}
          \frac{L(\pi_{r,s}(x_{<c}),\, x_{\ge c})}{L(x)}

Rate 0 perturbs nothing: the same input as the baseline, so ratio 1 exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from ropesplit.empirical.experiments_forward import (
    context_length,
    continuation_losses,
    seed_groups,
)
from ropesplit.empirical.models import LoadedModel, as_input_ids
from ropesplit.empirical.perturb import ORDER_SCHEMES, order_permutation

from ropesplit.errors import RopesplitError

__all__ = ["ORDER_RATES", "order_experiment", "order_inputs"]

ORDER_RATES = (0.0, 0.01, 0.02, 0.05, 0.10, 0.20)  # shares of the context's tokens


def _check(seeds: int, rates: Sequence[float], schemes: Sequence[str]) -> None:
    if seeds < 1:
        raise RopesplitError(f"seeds must be at least 1, got {seeds}")
    if not rates:
        raise RopesplitError("rates must name at least one rate, got none")
    unknown = [s for s in schemes if s not in ORDER_SCHEMES]
    if unknown or not schemes:
        raise RopesplitError(
            f"order schemes must be among {', '.join(ORDER_SCHEMES)}, got {list(schemes)}"
        )


def order_inputs(
    input_ids: Any,
    *,
    schemes: Sequence[str] = tuple(ORDER_SCHEMES),
    rates: Sequence[float] = ORDER_RATES,
    seeds: int = 3,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], np.ndarray]:
    r"""Every perturbed input: (one label per row, token ids ``(B, N)``).

    Row ``(scheme, rate, s)`` reads ``ids[perm] ++ ids[c:]`` with ``perm`` drawn
    from ``numpy.random.default_rng([seed, scheme, rate, s])`` (indices), so
    each row is the same whatever else is asked for. Labels carry ``moved``,
    the share of context positions that read another position's token.
    """
    _check(seeds, rates, schemes)
    ids = np.asarray(torch.as_tensor(input_ids).reshape(-1), dtype=np.int64)  # (N,)
    (n_tokens,) = ids.shape
    context = context_length(n_tokens)
    labels: list[dict[str, Any]] = []
    rows: list[np.ndarray] = []
    for a, scheme in enumerate(schemes):
        for b, rate in enumerate(rates):
            for s in range(seeds):
                rng = np.random.default_rng([seed, a, b, s])
                perm = order_permutation(scheme, context, float(rate), rng)  # (c,)
                rows.append(np.concatenate([ids[:context][perm], ids[context:]]))  # (N,)
                moved = float(np.mean(perm != np.arange(context)))
                labels.append({"scheme": scheme, "rate": float(rate), "seed": s, "moved": moved})
    return labels, np.stack(rows)  # (B, N)


def order_experiment(
    loaded: LoadedModel,
    input_ids: Any,
    *,
    schemes: Sequence[str] = tuple(ORDER_SCHEMES),
    rates: Sequence[float] = ORDER_RATES,
    seeds: int = 3,
    seed: int = 0,
    batch_size: int = 8,
    on_forward: Callable[[int], Any] | None = None,
) -> list[dict[str, Any]]:
    r"""One row per (scheme, rate): ``{"scheme", "rate", "loss", "ratio", "spread", "moved"}``.

    .. math:: \mathrm{ratio} = \mathrm{mean}_s\, L_s / L_0,\quad
              \mathrm{spread} = \mathrm{std}_s\, L_s / L_0\ (\text{sample})

    ``loss`` is the mean continuation loss (nats) over seeds, ``moved`` the
    mean share of context positions whose token changed place. The baseline
    ``L_0`` is the unperturbed input; real forward passes, ``batch_size``
    inputs at a time.
    """
    ids = as_input_ids(loaded, input_ids)[0].cpu().numpy()  # (N,)
    labels, batch = order_inputs(ids, schemes=schemes, rates=rates, seeds=seeds, seed=seed)
    (_, n_tokens) = batch.shape
    context = context_length(n_tokens)
    positions = np.broadcast_to(np.arange(n_tokens), (len(batch) + 1, n_tokens))  # (B + 1, N)
    inputs = np.concatenate([ids[None], batch])  # (B + 1, N): the baseline first
    losses = continuation_losses(
        loaded, inputs, positions, context, batch_size=batch_size, on_forward=on_forward
    )  # (B + 1,)
    return seed_groups(labels, losses[1:], float(losses[0]), ("scheme", "rate"))
