r"""A model in memory, ready for capture: what the analysis needs to know about it.

:class:`LoadedModel` is what :func:`~ropesplit.empirical.model.loading.load_model` returns: the
module, its tokenizer, and the adapter's survey of its attention layers (which are
analysed: softmax attention with RoPE, docs/theory.md section 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ropesplit.empirical.adapter import AttentionLayers

__all__ = [
    "DEFAULT_LAYER_COUNT",
    "LoadedModel",
    "default_layers",
    "stated_length",
]


@dataclass
class LoadedModel:
    """A model ready for capture, with what the analysis needs to know about it.

    ``attn`` is what the adapter's survey found: the attention modules it follows and,
    layer by layer, which are analysed (softmax attention with RoPE; layer ``i`` is
    TransformerLens' ``blocks.i.attn``) and which are not, with their kind (NoPE,
    linear attention, ...); ``tokenizer`` is ``None`` for a model built from a bare
    config (pass token ids directly then).
    """

    model: Any  # transformers.PreTrainedModel in eval mode, under the kernel asked for
    tokenizer: Any  # transformers tokenizer or None
    name: str  # what the user asked for, e.g. "SmolLM2-135M-Instruct"
    random_init: bool
    seed: int
    attn: AttentionLayers  # the survey: modules followed, layers analysed and not

    @property
    def config(self) -> Any:
        """The model's (text) config."""
        return self.model.config

    def __repr__(self) -> str:
        """One line: name, layers, heads, head dim, dtype, device (not the module tree)."""
        from ropesplit.empirical.adapter.configs import largest_head_shape

        heads, kv, dim = (x or "?" for x in largest_head_shape(self.config, self.attn.modules))
        dtype = str(getattr(self.model, "dtype", "?")).removeprefix("torch.")
        return (f"LoadedModel({self.name!r}, layers={self.n_layers}, heads={heads}/{kv} KV, "
                f"head_dim={dim}, {dtype}, {self.device}"
                + (", random init" if self.random_init else "") + ")")  # fmt: skip

    @property
    def layers(self) -> list[int]:
        """The analysed layers' indices, in order (a hybrid's or NoPE stack's are sparse)."""
        return list(self.attn.analysed)

    @property
    def n_layers(self) -> int:
        """How many layers are analysed."""
        return len(self.attn.analysed)

    @property
    def max_positions(self) -> int | None:
        """The model's context (``max_position_embeddings``), if it states one."""
        from ropesplit.empirical.adapter.configs import max_positions

        return max_positions(self.config)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


DEFAULT_LAYER_COUNT = 6  # layers the distance fits use by default, evenly spaced


def default_layers(analysed: Sequence[int], count: int = DEFAULT_LAYER_COUNT) -> list[int]:
    """``count`` evenly spaced layers of the ``analysed`` ones, first to last (all when
    fewer)."""
    n = len(analysed)
    return [analysed[i] for i in sorted({int(round(x)) for x in np.linspace(0, n - 1,
                                                                          min(count, n))})]


def stated_length(loaded: LoadedModel) -> int | None:
    """The training length ``L`` the config states: ``original_max_position_embeddings``
    when RoPE is scaled, else ``max_position_embeddings``; ``None`` when it states neither.
    """
    from ropesplit.empirical.adapter.configs import original_context

    return original_context(loaded.config) or loaded.max_positions
