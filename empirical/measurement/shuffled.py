r"""The frequency-order null: a trained model whose RoPE frequencies are shuffled over the pairs.

Claims 4 and 5 compare the trained model with itself under shuffled
frequencies (``empirical.measurement.passages``). :func:`shuffled_frequencies` reassigns
the frequencies for a block; the capture learns of it only through the
:class:`ShuffledFrequencies` it yields, passed as an argument, never through
the model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.adapter.weights import frequency_tables
from ropesplit.empirical.model.loaded import LoadedModel

__all__ = ["ShuffledFrequencies", "shuffled_frequencies"]


@dataclass(frozen=True)
class ShuffledFrequencies:
    """The null in force during a :func:`shuffled_frequencies` block: its seed."""

    seed: int


@contextlib.contextmanager
def shuffled_frequencies(loaded: LoadedModel, seed: int) -> Iterator[ShuffledFrequencies]:
    r"""Within the block the model's RoPE frequencies are shuffled over the pairs.

    Every RoPE frequency table, a tensor attribute named ``inv_freq`` or
    ``{layer_type}_inv_freq`` of any module (one per model; in Gemma 3 one per
    layer type, either two modules or two tables of one module, by the version
    of transformers), has its :math:`\theta_l` reassigned to the pairs in a
    seeded order, ``numpy.random.default_rng([seed, table index])``, so pair
    :math:`l` turns at :math:`\theta_{\pi(l)}` in every layer while every weight
    stays trained: the frequency-order null of claims 4 and 5 run through the
    model itself (positions still move its later layers). A table's
    ``original_inv_freq`` twin (what dynamic scalings reset to) moves with it.
    Restored on exit. Yields the null, :class:`ShuffledFrequencies`: pass it to the capture
    (``capture(..., null=...)``), which then checks theta against the config's as a set
    (each pair against the config's value of the same rank); nothing is set on the model.
    """
    tables = frequency_tables(loaded.model)  # (module, (table, its original twin))
    if not tables:
        raise RopesplitError(f"{loaded.name} has no rotary embedding module with inv_freq")
    saved: list[tuple[Any, str, Any]] = []  # (module, attribute, tensor before)
    try:
        for index, (module, names) in enumerate(tables):
            table = getattr(module, names[0])
            order = np.random.default_rng([seed, index]).permutation(table.numel())
            for attr in names:
                before = getattr(module, attr, None)
                if isinstance(before, torch.Tensor):
                    saved.append((module, attr, before))
                    setattr(module, attr, before[torch.as_tensor(order, device=before.device)])
        yield ShuffledFrequencies(seed)
    finally:
        for module, attr, before in reversed(saved):
            setattr(module, attr, before)
