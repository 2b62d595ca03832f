r"""What a model's config states, read in one place and turned into ropesplit's own objects.

Every read of a transformers config field (or of a TransformerLens
``HookedTransformerConfig``) outside the calls seam is one of these functions,
so only this module breaks when transformers renames a field:

- **RoPE**: :func:`rope_parameters` (``rope_parameters``, or the older
  ``rope_scaling``, per layer type where they differ, ``rope_theta`` filled in),
  :func:`scaling` (those parameters as the ``scaling`` of
  :func:`ropesplit.numerics.rope.frequencies`, whose table
  :data:`~ropesplit.numerics.rope.SCALINGS` computes each ``rope_type`` as
  transformers' ``ROPE_INIT_FUNCTIONS`` does), :func:`rope_base`,
  :func:`config_theta` and :func:`rope_spec`, the layer's
  :class:`~ropesplit.numerics.spec.RopeSpec` built with its own config-free
  constructors (``numerics`` reads only the spec);
- **layers and heads**: :func:`layer_type_of`, :func:`n_layers`, :func:`head_shape`,
  :func:`widths`, :func:`stated_head_dim`;
- **lengths and tokens**: :func:`max_positions`, :func:`original_context`,
  :func:`trained_length`, :func:`vocab_size`, :func:`bos_token_id`;
- **the model's own record**: :func:`model_type`, :func:`name_or_path`,
  :func:`lens_name`, :func:`lens_dtype`, :func:`attn_implementation`, :func:`set_attention`,
  :func:`set_name_or_path` and :func:`save_config`.

Nothing here imports transformers: a config is any object with the fields read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.rope import SCALINGS, attention_factor, frequencies
from ropesplit.numerics.spec import RopeSpec, repeat_kv_map, spec_scale

__all__ = [
    "attn_implementation",
    "bos_token_id",
    "config_theta",
    "max_positions",
    "head_shape",
    "is_lens_config",
    "layer_type_of",
    "lens_dtype",
    "lens_name",
    "model_type",
    "n_layers",
    "name_or_path",
    "original_context",
    "rope_base",
    "rope_parameters",
    "rope_spec",
    "save_config",
    "scaling",
    "set_attention",
    "set_name_or_path",
    "stated_head_dim",
    "trained_length",
    "vocab_size",
    "widths",
]


# --------------------------------------------------------------------------------------- RoPE


def rope_parameters(config: Any, layer_type: str | None = None) -> dict[str, Any]:
    """A Hugging Face config's RoPE parameters, read in one place: ``rope_parameters``
    (or the older ``rope_scaling``), the entry of ``layer_type`` where they are per layer
    type (Gemma 3: ``full_attention``, ``sliding_attention``), ``rope_theta`` filled in from
    the config where the dict lacks it, ``rope_type`` "default" where it names none.

    >>> from types import SimpleNamespace
    >>> rope_parameters(SimpleNamespace(rope_theta=500.0))
    {'rope_theta': 500.0, 'rope_type': 'default'}
    """
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    params = params if isinstance(params, Mapping) else {}
    if layer_type is not None and isinstance(params.get(layer_type), Mapping):
        params = params[layer_type]
    out = dict(params)
    if out.get("rope_theta") is None and getattr(config, "rope_theta", None) is not None:
        out["rope_theta"] = config.rope_theta
    out.setdefault("rope_type", out.get("type", "default"))
    return out


def scaling(params: Mapping[str, Any], max_position_embeddings: int | None = None,
            seq_len: int | None = None) -> dict[str, Any] | None:  # fmt: skip
    """The ``scaling`` of :func:`~ropesplit.numerics.rope.frequencies` for a Hugging Face
    ``rope_parameters`` (or ``rope_scaling``) dict: None for the default RoPE, else the dict
    with its kind under ``"type"``, the config's ``max_position_embeddings`` and the
    ``seq_len`` the frequencies are for (dynamic and longrope change with it; None: at the
    model's initialisation).

    >>> scaling({"rope_type": "default", "rope_theta": 1e4}) is None
    True
    """
    kind = str(params.get("rope_type", params.get("type", "default")))
    if kind == "default":
        return None
    out = {**params, "type": kind}
    if max_position_embeddings is not None:
        out.setdefault("max_position_embeddings", int(max_position_embeddings))
    if seq_len is not None:
        out["seq_len"] = int(seq_len)
    return out


def rope_base(config: Any, layer_type: str | None) -> tuple[float | None, str]:
    """(base, rope_type) of ``layer_type``'s RoPE (:func:`rope_parameters`)."""
    params = rope_parameters(config, layer_type)
    base = params.get("rope_theta")
    return (float(base) if base is not None else None), str(params["rope_type"])


def config_theta(config: Any, layer_type: str | None, r: int, seq_len: int) -> np.ndarray | None:
    """The frequencies ``(r/2,)`` the config states for positions below ``seq_len``
    (``numerics.rope.frequencies``: every rope_type of transformers' table but
    ``proportional``; None for a config without a base or of another type)."""
    base, rope_type = rope_base(config, layer_type)
    if base is None or rope_type not in ("default", *SCALINGS):
        return None
    limit = getattr(config, "max_position_embeddings", None)
    return frequencies(r, base, scaling=scaling(rope_parameters(config, layer_type), limit,
                                                seq_len))  # fmt: skip


def is_lens_config(config: Any) -> bool:
    """Whether ``config`` is a TransformerLens ``HookedTransformerConfig`` (it states
    ``rotary_base`` and ``d_head``) rather than a Hugging Face config."""
    return hasattr(config, "rotary_base") and hasattr(config, "d_head")


def rope_spec(config: Any, layer_type: str | None = None) -> RopeSpec:
    """The :class:`~ropesplit.numerics.spec.RopeSpec` a Hugging Face config states (its
    ``layer_type``'s RoPE where they differ by layer type, as in Gemma 3) or a TransformerLens
    ``HookedTransformerConfig`` (``d_head``, ``rotary_base``, ``rotary_dim``,
    ``rotary_adjacent_pairs``, ``n_heads``, ``n_key_value_heads``, ``attn_scale``, Llama-3
    scaling), built with ``RopeSpec.from_base``.

    >>> from types import SimpleNamespace
    >>> rope_spec(SimpleNamespace(rope_theta=100.0, num_attention_heads=1, hidden_size=4)).theta
    (1.0, 0.1)
    """
    if is_lens_config(config):
        return _lens_spec(config)
    params = rope_parameters(config, layer_type)
    base = params.get("rope_theta")
    types = [k for k, v in params.items() if isinstance(v, dict)]
    if base is None and types:
        raise RopesplitError(f"{type(config).__name__} has a RoPE per layer type "
                             f"({', '.join(types)}): give layer_type")  # fmt: skip
    if base is None:
        raise RopesplitError(f"{type(config).__name__} states no rope_theta: not a RoPE model")
    n_heads, n_kv, d = head_shape(config)
    partial = params.get("partial_rotary_factor",
                         getattr(config, "partial_rotary_factor", None))  # fmt: skip
    rotary = int(d * partial) if partial and partial < 1 else None
    scaled = scaling(params, getattr(config, "max_position_embeddings", None))
    window = getattr(config, "sliding_window", None)
    # a scaled RoPE's tables carry its attention factor a: W scales by a^2 (section 2)
    return RopeSpec.from_base(d, float(base), rotary_dim=rotary, scaling=scaled,
                              scale=spec_scale(d**-0.5, attention_factor(scaled)),
                              window=int(window) if window else None,
                              kv_map=repeat_kv_map(n_heads, n_kv))  # fmt: skip


def _lens_spec(config: Any) -> RopeSpec:
    """:func:`rope_spec` of a TransformerLens config."""
    if getattr(config, "positional_embedding_type", "rotary") != "rotary":
        raise RopesplitError("the TransformerLens config has no rotary embedding "
                             f"({config.positional_embedding_type})")  # fmt: skip
    d = int(config.d_head)
    layout = "interleaved" if getattr(config, "rotary_adjacent_pairs", False) else "half"
    rotary = getattr(config, "rotary_dim", None)
    n_heads = int(config.n_heads)
    n_kv = int(getattr(config, "n_key_value_heads", None) or n_heads)
    scaled = None
    if getattr(config, "use_NTK_by_parts_rope", False):  # Llama-3's scaled RoPE
        scaled = {"type": "llama3", "factor": config.NTK_by_parts_factor,
                  "low_freq_factor": config.NTK_by_parts_low_freq_factor,
                  "high_freq_factor": config.NTK_by_parts_high_freq_factor,
                  "original_max_position_embeddings": config.NTK_original_ctx_len}
    attn_scale = float(getattr(config, "attn_scale", -1.0))
    scale = d**-0.5 if attn_scale <= 0 else 1.0 / attn_scale  # TL divides by attn_scale
    if not getattr(config, "use_attn_scale", True):
        scale = 1.0
    return RopeSpec.from_base(d, float(config.rotary_base), layout=layout, scale=scale,
                              rotary_dim=int(rotary) if rotary else None, scaling=scaled,
                              kv_map=repeat_kv_map(n_heads, n_kv))  # fmt: skip


# ---------------------------------------------------------------------------- layers and heads


def layer_type_of(config: Any, layer: int, module: Any = None) -> str | None:
    """Layer ``layer``'s type (Gemma 3: ``"sliding_attention"`` or ``"full_attention"``):
    the attention ``module``'s own ``layer_type`` where it states one, else the config's
    ``layer_types[layer]``; None where neither states one."""
    found = getattr(module, "layer_type", None) if module is not None else None
    if found is None and getattr(config, "layer_types", None):
        found = config.layer_types[layer]
    return found


def n_layers(config: Any) -> int:
    """The number of layers: TransformerLens' ``n_layers``, Hugging Face's
    ``num_hidden_layers``."""
    return int(config.n_layers if is_lens_config(config) else config.num_hidden_layers)


def head_shape(config: Any) -> tuple[int, int, int]:
    """``(H, H_kv, d)``: query heads, KV heads (``H`` without grouped-query attention) and
    the head dimension (``head_dim``, else ``hidden_size / H``) of a Hugging Face config."""
    n_heads = int(config.num_attention_heads)
    n_kv = int(getattr(config, "num_key_value_heads", None) or n_heads)
    d = int(getattr(config, "head_dim", None) or config.hidden_size // n_heads)
    return n_heads, n_kv, d


def largest_head_shape(config: Any, modules: Any) -> tuple[int, int, int]:
    """``(H, H_kv, d)`` of the widest analysed layer: :func:`head_shape` where the config
    states one shape, raised to the attention ``modules``' own ``head_dim`` (Gemma 4's
    global layers are wider than its sliding ones; its config refuses one ``head_dim``)."""
    try:
        n_heads, n_kv, d = head_shape(config)
    except Exception:  # a per-layer config: the modules say
        n_heads = n_kv = d = 0
    for module in modules:
        heads = getattr(module, "num_heads", None) or getattr(
            getattr(module, "config", None), "num_attention_heads", None)
        n_heads = max(n_heads, int(heads or 0))
        d = max(d, int(getattr(module, "head_dim", None) or 0))
        groups = getattr(module, "num_key_value_groups", None)
        if groups:
            n_kv = max(n_kv, n_heads // int(groups))
    return n_heads, max(n_kv, 1), d


def widths(config: Any, fallback: int = 0) -> tuple[int, int]:
    """``(hidden_size, intermediate_size)``, the MLP's width ``4 hidden_size`` where the
    config states none; ``fallback`` where it states no ``hidden_size`` (a model of several
    stacks, BLT: their largest attention width), and the largest of a per-layer list
    (Gemma 3n's MLP widths)."""
    width = int(getattr(config, "hidden_size", None) or fallback)
    ffn = getattr(config, "intermediate_size", None)
    ffn = max(ffn) if isinstance(ffn, list | tuple) else ffn
    return width, int(ffn or 4 * width)


def stated_head_dim(config: Any) -> Any:
    """The ``head_dim`` the config states (None when it states none, or when reading it
    raises, as a per-layer config's does: the calls seam refuses that with its reason)."""
    try:
        return getattr(config, "head_dim", None)
    except Exception:  # a per-layer config
        return None


# ------------------------------------------------------------------------- lengths and tokens


def max_positions(config: Any) -> int | None:
    """The model's context (``max_position_embeddings``), if it states one."""
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if value else None


def original_context(config: Any) -> int | None:
    """``original_max_position_embeddings`` of a scaled RoPE (its parameters, else the
    config), the length the model was trained at; None when it states none."""
    original = rope_parameters(config).get("original_max_position_embeddings")
    original = original or getattr(config, "original_max_position_embeddings", None)
    return int(original) if original else None


def trained_length(config: Any) -> int | None:
    """``ropesplit_train_length``, the training length ``ropesplit train`` saves in the
    config of a model it trained; None for any other model."""
    trained = getattr(config, "ropesplit_train_length", None)
    return int(trained) if trained else None


def vocab_size(config: Any) -> int:
    """The vocabulary's size: token ids lie in ``[0, vocab_size)``."""
    return int(config.vocab_size)


def bos_token_id(config: Any) -> int | None:
    """The beginning-of-sequence token's id, None when the config states none."""
    bos = getattr(config, "bos_token_id", None)
    return None if bos is None else int(bos)


# -------------------------------------------------------------------- the model's own record


def mask_token_id(config: Any) -> int | None:
    """The ``<mask>`` token's id (a masked-LM's), None when the config states none."""
    mask = getattr(config, "mask_token_id", None)
    return None if mask is None else int(mask)


def model_type(config: Any) -> str:
    """The config's ``model_type`` (``"llama"``, ``"qwen2"``, ...)."""
    return str(config.model_type)


def name_or_path(config: Any) -> str:
    """Where the model was loaded from (``_name_or_path``), ``""`` when unknown."""
    return str(getattr(config, "_name_or_path", "") or "")


def set_name_or_path(config: Any, source: str) -> None:
    """Record ``source`` as where the model was loaded from (a copy read in its place)."""
    config._name_or_path = str(source)


def save_config(config: Any, folder: Any) -> None:
    """Write the config into ``folder`` (its ``config.json``), as ``from_pretrained`` reads it."""
    config.save_pretrained(folder)


def lens_name(config: Any) -> str:
    """A TransformerLens model's name (``model_name``), ``"HookedTransformer"`` when unset."""
    return str(getattr(config, "model_name", "HookedTransformer"))


def lens_dtype(config: Any) -> str:
    """A TransformerLens model's dtype (``dtype``) without its ``torch.`` prefix, ``"float32"``
    when unset."""
    return str(getattr(config, "dtype", "float32")).removeprefix("torch.")


def attn_implementation(config: Any) -> str | None:
    """The attention implementation the config selects (``"eager"``, ``"sdpa"``, ...)."""
    return getattr(config, "_attn_implementation", None)


def set_attention(config: Any, name: str) -> None:
    """Select the attention kernel ``name`` in ``config`` (in place; ``"model"``: leave the
    config's own). Eager attention is the one whose logits and probabilities the capture
    compares; another kernel is held to its output."""
    if name != "model":
        config._attn_implementation = name
