r"""Taps: the one place ropesplit patches a model, for capture and for interventions.

Every supported modeling module (``transformers.models.*.modeling_*``) calls
its own module-level ``apply_rotary_pos_emb(q, k, cos, sin)`` and then an
attention function, ``eager_attention_forward(module, query, key, value,
mask, scaling=...)`` or the one ``config._attn_implementation`` names in
transformers' ``AttentionInterface``. Inside a :func:`taps` block:

- ``apply_rotary_pos_emb`` is a pass-through wrapper that hands the running
  layer, the bound arguments (``q, k, cos, sin, unsqueeze_dim``) and the
  model's own result ``(R q, R k)`` to ``on_rope`` (docs/theory.md section 1: the
  rotation ``R(p_n theta)`` exactly as the model applies it);
- ``eager_attention_forward`` is a pass-through wrapper that hands its bound
  arguments and its result ``(out, probs)`` to ``on_attention``; with
  ``on_logits`` it also reads the model's own pre-softmax logits (docs/theory.md
  section 2, ``W`` after any soft-cap, mask added), the tensor the model's
  code hands to ``torch.nn.functional.softmax``;
- ``attention=(name, function)`` registers ``function`` in
  ``AttentionInterface`` (and transformers' eager mask under the same name in
  ``AttentionMaskInterface``) and makes it the model's attention for the
  block; ``on_attention`` sees its calls too;
- forward pre-hooks on the attention modules set :attr:`TapState.layer`, the
  index of the running layer (TransformerLens' ``blocks.L.attn``).

Everything is restored, removed or unregistered in ``finally``. Nothing here
computes a statistic: the callers (``capture``, ``lminfinite``) do.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from ropesplit.empirical.models import LoadedModel

from ropesplit.core.errors import RopesplitError

__all__ = ["TAPPED", "AttentionTap", "LogitsTap", "RopeTap", "TapState", "heads_first",
           "record_pre_rope", "taps"]

TAPPED = ("apply_rotary_pos_emb", "eager_attention_forward")  # modeling-module names wrapped

# (layer, bound arguments of apply_rotary_pos_emb, the model's (R q, R k))
RopeTap = Callable[[int, Mapping[str, Any], tuple[torch.Tensor, torch.Tensor]], None]
# (layer, bound arguments of the attention function, its (out, probs))
AttentionTap = Callable[[int, Mapping[str, Any], tuple[torch.Tensor, Any]], None]
# (layer, pre-softmax logits (B, H, N, N) as the model's eager attention built them)
LogitsTap = Callable[[int, torch.Tensor], None]


@dataclass
class TapState:
    """What the wrappers share during a block; ``layer`` is the running attention module."""

    loaded: LoadedModel
    layer: int | None = None  # index into loaded.attn of the attention module now running

    def running(self) -> int:
        """The running layer; a tap fired outside an attention module is a bug."""
        if self.layer is None:
            raise RopesplitError("a tap fired outside the model's attention modules")
        return self.layer


def _bind(signature: inspect.Signature, args: Any, kwargs: Any) -> dict[str, Any]:
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _rope_wrapper(original: Any, state: TapState, on_rope: RopeTap) -> Any:
    signature = inspect.signature(original)

    def apply_rotary_pos_emb(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        on_rope(state.running(), _bind(signature, args, kwargs), result)
        return result

    return apply_rotary_pos_emb


@contextlib.contextmanager
def _softmax_tap(state: TapState, on_logits: LogitsTap) -> Iterator[None]:
    """While the eager attention runs, ``torch.nn.functional.softmax`` reports its input."""
    original = torch.nn.functional.softmax

    def softmax(logits: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        on_logits(state.running(), logits.detach())
        return original(logits, *args, **kwargs)

    torch.nn.functional.softmax = softmax  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.nn.functional.softmax = original


def _attention_wrapper(
    original: Any, state: TapState, on_attention: AttentionTap | None, on_logits: LogitsTap | None
) -> Any:
    signature = inspect.signature(original)

    def eager_attention_forward(*args: Any, **kwargs: Any) -> Any:
        with _softmax_tap(state, on_logits) if on_logits else contextlib.nullcontext():
            result = original(*args, **kwargs)
        if on_attention is not None:
            on_attention(state.running(), _bind(signature, args, kwargs), result)
        return result

    return eager_attention_forward


def _layer_setter(state: TapState, index: int) -> Any:
    def hook(module: Any, args: Any) -> None:
        state.layer = index

    return hook


@contextlib.contextmanager
def _registered(loaded: LoadedModel, name: str, function: Any) -> Iterator[None]:
    """``function`` as the model's attention under ``name``; unregistered in ``finally``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    maps = (AttentionInterface._global_mapping, AttentionMaskInterface._global_mapping)
    if any(name in m for m in maps):
        raise RopesplitError(f"attention {name!r} is already registered (taps do not nest)")
    previous = loaded.model.config._attn_implementation
    try:
        AttentionInterface.register(name, function)
        AttentionMaskInterface.register(name, eager_mask)
        loaded.model.config._attn_implementation = name
        yield
    finally:
        loaded.model.config._attn_implementation = previous
        for mapping in maps:
            mapping.pop(name, None)


@contextlib.contextmanager
def taps(
    loaded: LoadedModel,
    *,
    on_rope: RopeTap | None = None,
    on_attention: AttentionTap | None = None,
    on_logits: LogitsTap | None = None,
    attention: tuple[str, Callable[..., Any]] | None = None,
) -> Iterator[TapState]:
    r"""Within the block, the model reports its RoPE and attention to the given callbacks.

    ``on_rope(layer, arguments, (q_rot, k_rot))`` runs after each
    ``apply_rotary_pos_emb`` (``arguments``: the bound ``q, k, cos, sin,
    unsqueeze_dim``, pre-RoPE); ``on_attention(layer, arguments, (out,
    probs))`` after each call of the attention function (the eager one or
    ``attention``'s); ``on_logits(layer, logits)`` inside the eager attention
    with the pre-softmax logits ``(B, H, N, N)``. ``attention=(name,
    function)`` swaps the model's attention implementation for ``function``
    (same signature as ``eager_attention_forward``) for the block. The
    wrapped names, hooks, registration and attention implementation are
    restored in ``finally``.
    """
    state = TapState(loaded)
    homes = {type(m).__module__: sys.modules[type(m).__module__] for m in loaded.attn}
    saved = {name: {tap: getattr(home, tap) for tap in TAPPED} for name, home in homes.items()}
    handles = []
    with contextlib.ExitStack() as stack:
        try:
            if attention is not None:
                name, function = attention
                stack.enter_context(
                    _registered(loaded, name, _attention_wrapper(function, state, on_attention,
                                                                 None))
                )  # fmt: skip
            for name, home in homes.items():
                wrappers = {}
                if on_rope is not None:
                    wrappers["apply_rotary_pos_emb"] = _rope_wrapper(
                        saved[name]["apply_rotary_pos_emb"], state, on_rope
                    )
                if on_attention is not None or on_logits is not None:
                    wrappers["eager_attention_forward"] = _attention_wrapper(
                        saved[name]["eager_attention_forward"], state, on_attention, on_logits
                    )
                for tap, wrapper in wrappers.items():
                    setattr(home, tap, wrapper)
            for index, module in enumerate(loaded.attn):
                handles.append(module.register_forward_pre_hook(_layer_setter(state, index)))
            yield state
        finally:
            for handle in handles:
                handle.remove()
            for name, home in homes.items():
                for tap, original in saved[name].items():
                    setattr(home, tap, original)


def heads_first(x: torch.Tensor, unsqueeze_dim: int) -> torch.Tensor:
    """``(B, H, N, .)`` (``(B, N, H, .)`` when ``unsqueeze_dim == 2``, the layout in which a
    model broadcasts cos/sin over dim 2) -> ``(B, H, N, .)``, detached."""
    x = x.detach()
    return x.transpose(1, 2) if unsqueeze_dim == 2 else x


def record_pre_rope(raw: dict[int, dict[str, Any]], layers: Any = None, *,
                    dtype: torch.dtype | None = None) -> RopeTap:  # fmt: skip
    """The one ``on_rope`` recorder (capture, LM-Infinite and the interventions use it):
    for each layer in ``layers`` (None: every layer) ``raw[layer]`` becomes

    - ``q`` ``(B, H, N, r_or_d)`` and ``k`` ``(B, Hkv, N, r_or_d)``: pre-RoPE, heads first,
      detached (a copy in ``dtype`` when given);
    - ``cos``, ``sin`` ``(B, N, r)``: the tables as applied, one per sequence (a view).
    """

    def record(layer: int, arguments: Mapping[str, Any], rotated: Any) -> None:
        if layers is not None and layer not in layers:
            return
        unsq = int(arguments.get("unsqueeze_dim", 1))
        q, k = heads_first(arguments["q"], unsq), heads_first(arguments["k"], unsq)
        if dtype is not None:
            q, k = q.to(dtype, copy=True), k.to(dtype, copy=True)
        batch = q.shape[0]
        entry = {"q": q, "k": k,
                 "cos": arguments["cos"].detach().expand(batch, -1, -1),
                 "sin": arguments["sin"].detach().expand(batch, -1, -1)}  # fmt: skip
        raw[layer] = entry

    return record
