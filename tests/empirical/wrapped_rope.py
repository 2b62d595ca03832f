"""A tiny Llama attention whose RoPE function is whatever a test makes it.

Its modeling module is this file: the adapter reads the attention's RoPE
function and eager attention here, as it reads a transformers modeling
module's. ``apply_rotary_pos_emb`` is a plain function by default; a test sets
it to :class:`HubRope`, the shape the kernel hub gives a function
(``use_kernel_forward_from_hub``: an ``nn.Module`` called as ``(*args,
**kwargs)``), or leaves RoPE out (:class:`NoRopeAttention`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.llama import modeling_llama as llama

eager_attention_forward = llama.eager_attention_forward


def plain_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Llama's rotation, ``x cos + rotate_half(x) sin``, as a plain function."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + llama.rotate_half(q) * sin, k * cos + llama.rotate_half(k) * sin


class HubRope(torch.nn.Module):
    """``plain_rope`` as the kernel hub wraps a function: a module of ``(*args, **kwargs)``."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return plain_rope(*args, **kwargs)


apply_rotary_pos_emb: Any = plain_rope


class WrappedAttention(torch.nn.Module):
    """Llama's attention, calling this module's ``apply_rotary_pos_emb`` and the attention
    function transformers' registry names (this module's eager one for ``"eager"``)."""

    rotate = True

    def __init__(self, original: Any) -> None:
        super().__init__()
        self.config, self.layer_idx = original.config, original.layer_idx
        self.head_dim, self.scaling = original.head_dim, original.scaling
        self.num_key_value_groups = original.num_key_value_groups
        self.q_proj, self.k_proj = original.q_proj, original.k_proj
        self.v_proj, self.o_proj = original.v_proj, original.o_proj

    def forward(self, hidden_states: torch.Tensor, position_embeddings: Any = None,
                attention_mask: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        if self.rotate:
            cos, sin = position_embeddings
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
        name = self.config._attn_implementation
        function = eager_attention_forward if name == "eager" else ALL_ATTENTION_FUNCTIONS[name]
        kwargs.pop("past_key_values", None), kwargs.pop("cache", None)
        out, weights = function(self, q, k, v, attention_mask, dropout=0.0,
                                scaling=self.scaling, **kwargs)  # fmt: skip
        return self.o_proj(out.reshape(*hidden_states.shape[:-1], -1).contiguous()), weights


class NoRopeAttention(WrappedAttention):
    """The same attention with RoPE left out: a model the adapter cannot follow."""

    rotate = False


def wrap(model: Any, cls: type = WrappedAttention) -> Any:
    """``model`` (a ``LlamaForCausalLM``) with every attention module replaced by ``cls``
    around the same weights; in place, returned."""
    for layer in model.model.layers:
        layer.self_attn = cls(layer.self_attn)
    return model
