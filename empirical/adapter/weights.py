"""Where a transformers model keeps the weights and buffers ropesplit edits, named in one place.

- :func:`key_projections`: every attention module's key projection (``k_proj``), the
  linear map whose rows the planted calibration models zero
  (:func:`ropesplit.empirical.measurement.calibration.plant_lowfreq_keys`);
- :func:`frequency_tables`: every RoPE frequency table (``inv_freq``, or
  ``{layer_type}_inv_freq``, with its ``original_inv_freq`` twin), the buffers the
  frequency-order null shuffles
  (:func:`ropesplit.empirical.measurement.shuffled.shuffled_frequencies`).

Only the names are transformers'; what is done with the tensors is the caller's.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["frequency_tables", "key_projections"]


def key_projections(model: Any) -> list[Any]:
    """The key projection (``k_proj``, a ``torch.nn.Linear``) of every module that has one,
    in module order."""
    return [proj for module in model.modules()
            if (proj := getattr(module, "k_proj", None)) is not None]  # fmt: skip


def frequency_tables(model: Any) -> list[tuple[Any, tuple[str, ...]]]:
    """Every RoPE frequency table of ``model`` as ``(module, attributes)``: a tensor attribute
    (buffer, or plain attribute) named ``inv_freq`` or ``{layer_type}_inv_freq`` of any
    module (one per model; in Gemma 3 one per layer type, either two modules or two tables
    of one module, by the version of transformers), buffers first, then attributes; its
    attributes are the table's name, then that of its ``original_inv_freq`` twin (what
    dynamic scalings reset to, present or not)."""
    return [(m, (name, name.removesuffix("inv_freq") + "original_inv_freq"))
            for _, m in model.named_modules()
            for name in dict.fromkeys([*m._buffers, *vars(m)])  # buffers, then attributes
            if name.endswith("inv_freq") and not name.endswith("original_inv_freq")
            and isinstance(getattr(m, name, None), torch.Tensor)]  # fmt: skip
