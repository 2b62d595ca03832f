r"""The calls seam between transformers and ropesplit: what a model rotates, and how it attends.

Everything ropesplit reads from inside a model's forward pass comes through
:func:`taps`, and every seam it uses is named here:

- **the attention function**, through transformers' public attention registry
  (``AttentionInterface``): one function, :data:`NAME`, is registered once per kernel
  (``ropesplit-sdpa`` stands for SDPA, with that kernel's mask function under the same
  name in ``AttentionMaskInterface``) and made the model's attention for the block; it
  hands every call, as an :class:`AttentionCall` bound by position (``module, query,
  key, value, attention_mask``, then ``scaling``), to the callbacks and to the kernel the
  model runs (or to the ``attention`` function the caller installs: LM-Infinite, the
  interventions);
- **the pre-softmax logits** ``W`` (docs/theory.md section 2, after any
  soft-cap, mask added), the input of the softmax inside the model's eager
  attention, through torch's public ``TorchFunctionMode``;
- **the running layer**, through forward pre-hooks on the attention modules
  (TransformerLens' ``blocks.L.attn``);
- **the RoPE calls** ``(R q, R k)`` with their pre-RoPE ``q``, ``k``. Modeling code
  calls module-level functions, and no public seam reaches them, so this is
  the one private seam: where the kernel hub has made a function an
  ``nn.Module`` a forward hook reads the call; a plain function is wrapped for the
  block. Each call is read by position, by the model's calling convention
  (:data:`CONVENTIONS`, in the manner of transformers' ``ROPE_INIT_FUNCTIONS``;
  :data:`CONVENTION_OF` names the families that do not use the common one), and
  every RoPE function of the modeling module is read; the call kept is the one
  whose output the attention call attends with. What the function applies is the
  table it was handed where that table, as a half-split rotation, reproduces the
  call's output (Llama and most families: no probe); else it is read off the
  function itself: probed with unit vectors at every token, once per table and
  distinct set of positions, on the model's device
  (:func:`ropesplit.numerics.applied.read_rotation`), so re-interleaved tables,
  complex ``freqs_cis``, negated sines and DeepSeek-V3's interleave-to-half are
  one rotation in a standard layout (:class:`RopeRecord`).

Which layers are analysed, :func:`survey` decides once per model from a short
forward pass: a layer whose attention makes a RoPE call and a softmax attention
call (the rest: NoPE, linear attention, ... recorded with their kind). When the
adapter cannot follow a model (no RoPE call where one is due, a call that does
not match, an error inside the block) it raises :class:`AdapterError`: one line
naming the model class, the transformers version and what was not found (exit
code 2 at the CLI), never a number from a wrong capture. Everything is restored
in ``finally``; nothing here computes a statistic.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from ropesplit.core.errors import RopesplitError, one_line
from ropesplit.numerics.applied import STRUCTURE_TOKENS, rotate_applied

__all__ = [
    "CONVENTIONS",
    "CONVENTION_OF",
    "NAME",
    "AdapterError",
    "AttentionCall",
    "Block",
    "Convention",
    "Held",
    "RopeCall",
    "StopForward",
    "AttentionLayers",
    "carries_rope",
    "fast_attention",
    "heads_first",
    "kernel_names",
    "record_pre_rope",
    "survey",
    "taps",
]

NAME = "ropesplit"  # the attention registered in transformers' AttentionInterface
EAGER = "eager_attention_forward"  # the modeling module's own eager attention


class AdapterError(RopesplitError):
    """The adapter cannot follow this model: one line, exit code 2."""


class StopForward(Exception):  # noqa: N818 - control flow, not an error
    """Raised by a callback to end the forward pass early (the capture stops after the last
    attention it needs); :func:`taps` lets it through untouched."""


# --------------------------------------------------------------------------- conventions


@dataclass(frozen=True)
class RopeCall:
    """One RoPE application read by position: pre-RoPE ``x``, its rotation, and the function.

    ``x`` and ``rotated`` are ``(B, heads, N, dx)`` (heads first); ``apply(E, rows)`` runs
    the model's own RoPE function, with the call's tables (their sequences ``rows`` only,
    when given), on a heads-first ``E (len(rows) or B, m, N, dx)`` (the probe of
    :mod:`ropesplit.numerics.applied`), and ``table`` names those tables (one probe per
    table); ``role`` is ``"q"``, ``"k"`` or ``None`` (a one-tensor call: which it is, the
    attention call tells). ``passed``: the ``(cos, sin)`` the call was handed, where the
    convention has them (the probe is skipped where they reproduce the call's output).
    """

    role: str | None
    x: torch.Tensor
    rotated: torch.Tensor
    apply: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor] = field(repr=False)
    table: tuple[Any, ...] = ()
    passed: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)


Reader = Callable[[Callable[..., Any], Sequence[Any], Mapping[str, Any], Any], list[RopeCall]]


@dataclass(frozen=True)
class Convention:
    """How one family of modeling code calls RoPE: the module-level names of its RoPE
    functions (each one present is read; DeepSeek-V3 has two) and how a call's positional
    arguments and result read (``read(function, args, kwargs, result)``). A call that
    does not match is not RoPE's (an indexer's one-tensor call, say) and reads as none."""

    functions: tuple[str, ...]
    read: Reader


def _unsqueeze_dim(args: Sequence[Any], kwargs: Mapping[str, Any], first: int) -> int:
    """``unsqueeze_dim`` of a call: the keyword, else the last int among the positional
    arguments from ``first`` on, else 1 (heads first)."""
    if "unsqueeze_dim" in kwargs:
        return int(kwargs["unsqueeze_dim"])
    ints = [a for a in args[first:] if isinstance(a, int) and not isinstance(a, bool)]
    return int(ints[-1]) if ints else 1


def heads_first(x: torch.Tensor, unsqueeze_dim: int) -> torch.Tensor:
    """``(B, H, N, .)`` (``(B, N, H, .)`` when ``unsqueeze_dim == 2``, the layout in which a
    model broadcasts cos/sin over dim 2) -> ``(B, H, N, .)``, detached."""
    x = x.detach()
    return x.transpose(1, 2) if unsqueeze_dim == 2 else x


def _table(function: Callable[..., Any], values: Sequence[Any]) -> tuple[Any, ...]:
    """What names a call's tables: the function and its tensors, by identity. A bound
    method (a hub kernel's ``forward``) is a new object at each access, so its function and
    owner name it; the tensors themselves are held, so that no table freed in the pass can
    lend its address to another while the probe read off it is kept."""
    owner, plain = getattr(function, "__self__", None), getattr(function, "__func__", function)
    return (id(owner), id(plain), *(Held(v) for v in values if isinstance(v, torch.Tensor)))


class Held:
    """A tensor in a cache key: equal to the same storage and view, and kept alive while the
    key is, so that no tensor freed meanwhile lends its address to another (the adapter's
    probes, the capture's reads of a mask)."""

    __slots__ = ("tensor", "key")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.key = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Held) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


def _all_tensors(*values: Any) -> bool:
    return all(isinstance(v, torch.Tensor) for v in values)


def _read_qk(function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
             result: Any) -> list[RopeCall]:  # fmt: skip
    """``f(q, k, cos, sin, ...) -> (R q, R k)``: Llama and most families."""
    if len(args) < 4 or not isinstance(result, tuple | list) or len(result) != 2:
        return []
    q, k, cos, sin = args[:4]
    if not _all_tensors(q, k, cos, sin, *result):
        return []
    return _pair(function, args, kwargs, result, _unsqueeze_dim(args, kwargs, 4), (cos, sin))


def _pair(function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
          result: Any, unsq: int, passed: tuple[torch.Tensor, torch.Tensor] | None = None
          ) -> list[RopeCall]:  # fmt: skip
    """The query's and the key's calls of ``f(q, k, *tables) -> (R q, R k)``, heads at dim
    1 (``unsq`` 1) or tokens first (``unsq`` 2)."""
    q, k, rest = args[0], args[1], args[2:]
    batch, tokens = q.shape[0], q.shape[2 if unsq == 1 else 1]

    def apply(e: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        e = heads_first(e, unsq)  # the call's own layout (a transpose is its own inverse)
        tables = _sequences(rest, rows, batch, tokens)
        return heads_first(function(e, e, *tables, **kwargs)[0], unsq)

    table = _table(function, rest)
    return [RopeCall("q", heads_first(q, unsq), heads_first(result[0], unsq), apply, table,
                     passed),
            RopeCall("k", heads_first(k, unsq), heads_first(result[1], unsq), apply, table,
                     passed)]  # fmt: skip


def _sequences(values: Sequence[Any], rows: torch.Tensor | None, batch: int, tokens: int
               ) -> list[Any]:  # fmt: skip
    """A call's table arguments for the sequences ``rows`` only: each tensor laid out
    ``(B, N, ...)`` sliced on its batch; the rest (a table shared by the batch) as it is."""
    if rows is None or batch == 1:
        return list(values)
    return [v.index_select(0, rows) if isinstance(v, torch.Tensor) and v.ndim >= 2
            and v.shape[0] == batch and v.shape[1] == tokens else v for v in values]


def _read_one(function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
              result: Any) -> list[RopeCall]:  # fmt: skip
    """``f(x, cos, sin, unsqueeze_dim) -> R x``, one tensor a call (Gemma 3n, Gemma 4)."""
    if len(args) < 3 or not _all_tensors(*args[:3], result):
        return []
    x, rest, unsq = args[0], args[1:], _unsqueeze_dim(args, kwargs, 3)
    batch, tokens = x.shape[0], x.shape[2 if unsq == 1 else 1]

    def apply(e: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        tables = _sequences(rest, rows, batch, tokens)
        return heads_first(function(heads_first(e, unsq), *tables, **kwargs), unsq)

    return [RopeCall(None, heads_first(x, unsq), heads_first(result, unsq), apply,
                     _table(function, rest))]  # fmt: skip


def _read_one_sin_cos(function: Callable[..., Any], args: Sequence[Any],
                      kwargs: Mapping[str, Any], result: Any) -> list[RopeCall]:  # fmt: skip
    """``f(x, sin, cos) -> R x`` (GPT-J): ``x (B, N, H, r)``, tables ``(B, N, r/2)``."""
    if len(args) < 3 or not _all_tensors(*args[:3], result):
        return []
    x, rest = args[0], args[1:]
    batch, tokens = x.shape[0], x.shape[1]

    def apply(e: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        tables = _sequences(rest, rows, batch, tokens)
        return heads_first(function(heads_first(e, 2), *tables, **kwargs), 2)

    return [RopeCall(None, heads_first(x, 2), heads_first(result, 2), apply,
                     _table(function, rest))]  # fmt: skip


def _freqs_reader(unsq: int) -> Reader:
    """``f(xq, xk, freqs_cis) -> (R xq, R xk)`` with a complex table: heads first
    (DeepSeek-V2, ``unsq`` 1) or tokens first (Llama 4, ``unsq`` 2)."""

    def read(function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
             result: Any) -> list[RopeCall]:  # fmt: skip
        if len(args) < 3 or not isinstance(result, tuple | list) or len(result) != 2:
            return []
        if not _all_tensors(*args[:3], *result):
            return []
        return _pair(function, args, kwargs, result, unsq)

    return read


_COS_SIN = ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave")
CONVENTIONS: dict[str, Convention] = {
    "q_k_cos_sin": Convention(_COS_SIN, _read_qk),
    "x_cos_sin": Convention(("apply_rotary_pos_emb",), _read_one),
    "x_sin_cos": Convention(("apply_rotary_pos_emb",), _read_one_sin_cos),
    "q_k_freqs_cis": Convention(("apply_rotary_emb",), _freqs_reader(1)),
    "q_k_freqs_cis_tokens_first": Convention(("apply_rotary_emb",), _freqs_reader(2)),
}
# model_type -> convention, where it is not the common ``q_k_cos_sin``
CONVENTION_OF: dict[str, str] = {
    "gptj": "x_sin_cos",
    "codegen": "x_sin_cos",
    "gemma3n_text": "x_cos_sin",
    "gemma4_text": "x_cos_sin",
    "gemma4_unified_text": "x_cos_sin",
    "gemma4_assistant": "x_cos_sin",
    "deepseek_v2": "q_k_freqs_cis",
    "llama4_text": "q_k_freqs_cis_tokens_first",
}


def _version() -> str:
    import transformers

    return str(transformers.__version__)


def _describe(model: Any) -> str:
    return f"{type(model).__name__} (transformers {_version()})"


def convention(model: Any) -> Convention:
    """The calling convention of ``model``'s RoPE function."""
    model_type = str(getattr(model.config, "model_type", ""))
    return CONVENTIONS[CONVENTION_OF.get(model_type, "q_k_cos_sin")]


# --------------------------------------------------------------------------- which models


_ROPE_FIELDS = ("rope_parameters", "rope_theta", "rope_scaling", "rotary_dim", "rotary_pct",
                "partial_rotary_factor", "rotary_emb_base")  # fmt: skip
SURVEY_TOKENS = 16  # the survey's forward pass: which layers rotate and attend


def carries_rope(config: Any) -> bool:
    """Whether a config states RoPE (any of transformers' RoPE fields is set)."""
    return any(getattr(config, name, None) is not None for name in _ROPE_FIELDS)


def _home(module: Any) -> Any:
    """The modeling module (``transformers.models.*.modeling_*``) that defines ``module``'s
    class, where its RoPE function and eager attention live."""
    return importlib.import_module(type(module).__module__)


@dataclass(frozen=True)
class AttentionLayers:
    """The attention a model runs, layer by layer, as the survey found it.

    ``modules`` are the attention modules the adapter follows (every one gets the
    running-layer hook) and ``index`` their layer indices; ``analysed`` the layers whose
    attention makes a RoPE call and a softmax attention call, in order;
    ``not_analysed`` every other layer of the model with its kind (``"NoPE"``: softmax
    attention without RoPE; else the config's layer type, e.g. ``"linear_attention"``).
    """

    modules: list[Any]
    index: list[int]
    analysed: list[int]
    not_analysed: dict[int, str]

    def both_ways(self) -> bool:
        """Whether an analysed layer's attention looks both ways (its module's ``is_causal``
        False: an encoder's, docs/theory.md section 9)."""
        return any(getattr(self.modules[self.index.index(layer)], "is_causal", True) is False
                   for layer in self.analysed)  # fmt: skip

    def describe(self) -> str:
        """``"3 of 4 layers analysed; not: 3 NoPE"``: what the record and the CLI print."""
        total = len(self.analysed) + len(self.not_analysed)
        kinds: dict[str, list[int]] = {}
        for layer, kind in sorted(self.not_analysed.items()):
            kinds.setdefault(kind, []).append(layer)
        rest = "; ".join(f"{kind} at layer{'s' if len(ls) > 1 else ''} "
                         f"{', '.join(map(str, ls))}" for kind, ls in kinds.items())  # fmt: skip
        return f"{len(self.analysed)} of {total} layers analysed" + (f" (not: {rest})"
                                                                      if rest else "")


def _layer_kinds(config: Any) -> tuple[int, list[str] | None]:
    """The model's layer count and, where its config states them, the layers' types."""
    types = getattr(config, "layer_types", None)
    types = [str(t) for t in types] if isinstance(types, list | tuple) else None
    count = getattr(config, "num_hidden_layers", None)
    return (int(count) if isinstance(count, int) else len(types or [])), types


def _candidates(model: Any, conv: Convention) -> list[Any]:
    """Modules named ``...Attention`` (or ``...MLA``) whose modeling module defines one of
    the convention's RoPE functions and an eager attention, the innermost where one holds
    another."""
    named = [m for m in model.modules() if type(m).__name__.endswith(("Attention", "MLA"))]
    found = [m for m in named if hasattr(_home(m), EAGER)
             and any(hasattr(_home(m), f) for f in conv.functions)]  # fmt: skip
    inner = {id(m) for m in found}  # a wrapper holding another (ESM's EsmAttention) is no layer
    return [m for m in found if not any(id(c) in inner for c in m.modules() if c is not m)]


def survey(model: Any) -> AttentionLayers:
    """Which layers of ``model`` are softmax attention with RoPE, from one short forward.

    A config without RoPE (GPT-2, BERT) is refused as such. The candidate modules
    (:func:`_candidates`) run :data:`SURVEY_TOKENS` tokens through the block: a module
    whose attention call follows a RoPE call of its own is analysed, one whose attention
    call has none is NoPE, one never called is not attention of this forward (a vision
    tower, say). A model with no layer left is refused in one line saying what its
    layers are; a RoPE family the adapter cannot follow likewise (:class:`AdapterError`).
    """
    config = model.config
    model_type = getattr(config, "model_type", type(model).__name__)
    rope = carries_rope(config) or any(  # a rotary module, or RoPE as an attention's method
        type(m).__name__.endswith("RotaryEmbedding") or any("rotary" in name for name in
                                                             vars(type(m)))
        for m in model.modules())  # fmt: skip
    if not rope:
        raise RopesplitError(
            f"model type {model_type} has no rotary position embedding (RoPE); "
            "ropesplit needs a RoPE model (Llama, Mistral, Qwen2, Gemma, GPT-NeoX, Phi, ...)"
        )
    conv = convention(model)
    found = _candidates(model, conv)
    n_layers, types = _layer_kinds(config)
    if not found:
        kinds = sorted(set(types or [])) or ["no ...Attention module with a module-level RoPE "
                                             f"function ({', '.join(conv.functions)}) and "
                                             f"{EAGER}"]  # fmt: skip
        raise AdapterError(f"cannot follow {_describe(model)}: none of its layers is softmax "
                           f"attention with RoPE ({', '.join(kinds)})")  # fmt: skip
    positions = AttentionLayers(found, list(range(len(found))), [], {})
    seen: dict[int, bool] = {}
    vocab = int(getattr(config, "vocab_size", None) or SURVEY_TOKENS)
    ids = (torch.arange(SURVEY_TOKENS) % vocab)[None].to(_device(model))
    with taps(model, positions, survey=seen) as block, torch.no_grad():
        block.run(model, input_ids=ids, use_cache=False)
    own = [getattr(m, "layer_idx", None) for m in found]
    unique = all(isinstance(i, int) for i in own) and len(set(own)) == len(own)
    index = [int(i) if unique else pos for pos, i in enumerate(own)]  # type: ignore[arg-type]
    analysed = [index[pos] for pos in range(len(found)) if seen.get(pos)]
    nope = {index[pos] for pos in range(len(found)) if seen.get(pos) is False}
    total = max([n_layers, *(index[pos] + 1 for pos in seen)])
    not_analysed = {i: ("NoPE" if i in nope else (types[i] if types and i < len(types)
                                                  else "no softmax attention call"))
                    for i in range(total) if i not in analysed}  # fmt: skip
    if not analysed:
        what = sorted(set(not_analysed.values()))
        if what == ["NoPE"] and not carries_rope(config):  # a rotary module no call reads
            import transformers

            raise AdapterError(
                f"ropesplit does not analyse {model_type}: it has a rotary module, yet none of its "
                f"{total} attention layers calls a RoPE function the capture follows "
                f"({' or '.join(f'{name}(q, k, ...)' for name in conv.functions)} in its "
                "modeling file); "
                f"transformers {transformers.__version__}'s {model_type} rotates q and k "
                "another way")  # fmt: skip
        raise AdapterError(f"ropesplit does not analyse {model_type}: none of its "
                           f"{total} layers is softmax attention with RoPE "
                           f"({', '.join(what)})")  # fmt: skip
    for module in (found[index.index(i)] for i in analysed):
        head_dim = getattr(module, "head_dim", getattr(module, "head_size", None))
        if isinstance(head_dim, int) and head_dim % 2:
            raise RopesplitError(f"head_dim must be even, got {head_dim}")
    return AttentionLayers(found, index, analysed, not_analysed)


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


# --------------------------------------------------------------------------- the block

# (layer, the layer's RoPE: q, k pre-RoPE and rotated, the tables)
RopeTap = Callable[[int, "RopeRecord"], None]
# (the attention call, its result (out, probs or None))
AttentionTap = Callable[["AttentionCall", tuple[torch.Tensor, Any]], None]
# (layer, pre-softmax logits (B, H, N, N) as the model's eager attention built them)
LogitsTap = Callable[[int, torch.Tensor], None]


@dataclass(frozen=True)
class RopeRecord:
    """One layer's RoPE as attended, in the standard layout of :mod:`ropesplit.numerics.applied`.

    ``q (B, H, N, d)`` and ``k (B, Hkv, N, d)`` are the pre-RoPE query and key, whole
    heads with the rotating pairs first (the attended coordinates that no RoPE call
    turned follow them, as attended: MLA's ``nope`` part, Phi's pass-through); ``q_rot``,
    ``k_rot`` the model's attended query and key in the same order, ``rotate(q) ==
    q_rot``; ``cos``, ``sin`` ``(B, N, r)`` the table the RoPE function applied (read
    off it). ``shared_key``: the rotating part of the key came from one head shared by
    all (multi-head latent attention's ``k_pe``). ``q_gain``, ``k_gain`` ``(d,)``: learned
    per-channel gains after RoPE (Hunyuan's norms: ``q_rot = q_gain * rotate(q)``), else
    None.
    """

    q: torch.Tensor
    k: torch.Tensor
    q_rot: torch.Tensor
    k_rot: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    shared_key: bool = False
    q_gain: torch.Tensor | None = None
    k_gain: torch.Tensor | None = None


@dataclass
class AttentionCall:
    """One call of the model's attention function, bound by position.

    ``query`` ``(B, H, N, d)`` and ``key`` ``(B, Hkv, N, d)`` are rotated, as attended;
    ``mask`` the mask the kernel's mask function built (additive under eager, boolean or
    None under SDPA); ``kwargs`` the rest of the call (``sliding_window``, ``softcap``,
    ``position_ids``, ...). :meth:`run` runs it through the kernel the model runs
    (``kernel``: ``"eager"``, ``"sdpa"``, ...); :meth:`eager` through the model's own eager
    attention, with another mask when given.
    """

    layer: int
    module: Any
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: torch.Tensor | None
    scaling: float | None
    dropout: float
    kwargs: dict[str, Any]
    _eager: Callable[..., Any] = field(repr=False)
    kernel: str = "eager"
    _kernel: Callable[..., Any] | None = field(default=None, repr=False)

    @property
    def scale(self) -> float:
        """The logit scale the attention applies: the call's ``scaling``, else the module's,
        else ``d^{-1/2}``."""
        if self.scaling is not None:
            return self.scaling
        return float(getattr(self.module, "scaling", None) or self.query.shape[-1] ** -0.5)

    @property
    def softcap(self) -> float | None:
        value = self.kwargs.get("softcap")
        return float(value) if value else None

    @property
    def window(self) -> int | None:
        value = self.kwargs.get("sliding_window", getattr(self.module, "sliding_window", None))
        return int(value) if value else None

    @property
    def causal(self) -> bool:
        """Whether the attention module attends to earlier keys only (its ``is_causal``, the
        decoders' default): an encoder's looks both ways (docs/theory.md section 9)."""
        return bool(self.kwargs.get("is_causal", getattr(self.module, "is_causal", True)))

    @property
    def sinks(self) -> torch.Tensor | None:
        """``(H,)`` the per-head sink logit the softmax's normaliser adds (gpt-oss, MiMo), or
        None."""
        value = getattr(self.module, "sinks", None)
        return value.detach() if isinstance(value, torch.Tensor) else None

    def eager(self, mask: torch.Tensor | None = None) -> Any:
        """The model's own eager attention on this call (``mask`` replaces the call's)."""
        return self._through(self._eager, self.mask if mask is None else mask)

    def run(self) -> Any:
        """The call through the kernel the model runs: ``(out (B, N, H, dv), probs)``, probs
        None where the kernel forms none (SDPA, flash attention)."""
        return self._through(self._kernel or self._eager, self.mask)

    def _through(self, kernel: Callable[..., Any], mask: torch.Tensor | None) -> Any:
        scaling = {} if self.scaling is None else {"scaling": self.scaling}
        return kernel(self.module, self.query, self.key, self.value, mask,
                      dropout=self.dropout, **scaling, **self.kwargs)  # fmt: skip


@dataclass
class _Probe:
    """One table's rotation as :func:`~ropesplit.numerics.applied.read_rotation` read it."""

    in_order: torch.Tensor
    out_order: torch.Tensor
    identity: bool
    cos: torch.Tensor  # (B, N, r)
    sin: torch.Tensor


# (offset, per-vector scale or None, the rotated head of each attended head, per-channel gain
# or None)
Located = tuple[int, "torch.Tensor | None", torch.Tensor, "torch.Tensor | None"]


def _locate(rotated: torch.Tensor, attended: torch.Tensor) -> Located | None:
    """Where a RoPE call's output ``(B, h, N, dx)`` sits in an attended ``(B, H, N, d)``:
    ``(offset, scale, heads_of)`` with ``attended[..., offset:offset + dx] == scale *
    rotated[:, heads_of]`` (:func:`_tilings`: the attended head ``i`` holds rotated head
    ``heads_of[i]``); ``scale (B, H, N, 1)`` is None where it is 1, else one number per
    vector (a weightless norm after RoPE, Llama 4); ``gain (dx,)`` None, else one number
    per coordinate besides (a norm with learned weights after RoPE, Hunyuan: ``attended =
    gain * scale * rotated``). None where it is not there."""
    (b, h, n, dx), (b2, heads, n2, d) = rotated.shape, attended.shape
    if (b, n) != (b2, n2) or dx > d or heads % h:
        return None
    if (rotated.shape == attended.shape and rotated.stride() == attended.stride()
            and rotated.data_ptr() == attended.data_ptr()):  # the very tensor: Llama's case
        return 0, None, torch.arange(heads, device=rotated.device), None
    eps = max(float(torch.finfo(attended.dtype).eps), float(torch.finfo(rotated.dtype).eps))
    for offset in dict.fromkeys((0, d - dx)):
        for heads_of in _tilings(h, heads, rotated.device):
            found = _at(rotated.float()[:, heads_of], attended, offset, dx, eps)
            if found is not None:
                return offset, found[1], heads_of, found[2]
    return None


def _tilings(h: int, heads: int, device: Any) -> list[torch.Tensor]:
    """The ways ``h`` rotated heads are laid over ``heads`` attended ones: each head's own
    (``h == heads``), one broadcast to all, ``repeat_kv``'s blocks and ``repeat``'s cycles
    (JetMoE tiles its keys so): the attended head ``i`` reads rotated head ``[i]``."""
    i = torch.arange(heads, device=device)
    return list({tuple(t.tolist()): t for t in (i // (heads // h), i % h)}.values())


def _at(rot: torch.Tensor, attended: torch.Tensor, offset: int, dx: int, eps: float
        ) -> tuple[int, torch.Tensor | None, torch.Tensor | None] | None:  # fmt: skip
    """``(offset, scale, gain)`` where ``attended[..., offset:offset + dx]`` is ``gain *
    scale * rot`` to the dtypes' rounding (``scale``, ``gain`` None: 1), else None."""
    part = attended[..., offset:offset + dx].float()
    size = float(torch.nan_to_num(part).abs().max()) if part.numel() else 0.0
    tol = 8 * eps * max(size, 1e-30)
    if bool(torch.isclose(part, rot, rtol=0.0, atol=tol, equal_nan=True).all()):
        return offset, None, None  # (NaN where the model has NaN: the capture says so)
    norm = (rot * rot).sum(-1, keepdim=True)
    scale = torch.where(norm > 0, (part * rot).sum(-1, keepdim=True) / norm, 1.0)
    if bool(torch.isclose(part, scale * rot, rtol=0.0, atol=tol).all()):
        return offset, scale, None
    scale, gain = _rank_one(part, rot)
    if bool(torch.isclose(part, gain * scale * rot, rtol=0.0, atol=tol).all()):
        return offset, scale, gain
    return None


def _rank_one(part: torch.Tensor, rot: torch.Tensor, sweeps: int = 4
              ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(scale (B, H, N, 1), gain (dx,))`` fitting ``part = gain * scale * rot`` by
    alternating least squares from the RMS norm's scale (exact data converges at once)."""
    scale = torch.rsqrt((rot * rot).mean(-1, keepdim=True).clamp_min(1e-30))
    gain = torch.ones(rot.shape[-1], dtype=rot.dtype, device=rot.device)
    for _ in range(sweeps):
        base = rot * scale
        gain = (part * base).sum((0, 1, 2)) / (base * base).sum((0, 1, 2)).clamp_min(1e-30)
        gained = rot * gain
        norm = (gained * gained).sum(-1, keepdim=True)
        scale = torch.where(norm > 0, (part * gained).sum(-1, keepdim=True) / norm, scale)
    return scale, gain


@dataclass
class Block:
    """What the seams share during one block."""

    model: Any
    attn: AttentionLayers
    conv: Convention
    on_rope: RopeTap | None
    on_attention: AttentionTap | None
    on_logits: LogitsTap | None
    attention: Callable[[AttentionCall], Any] | None
    positions: Any = None  # (B, N) the positions applied, for the turn's direction
    kernel: str = "eager"  # the attention implementation the model runs (its config's)
    # its function in transformers' registry, looked up once (None: each module's own eager)
    kernel_function: Callable[..., Any] | None = None
    survey: dict[int, bool] | None = None  # survey mode: layer -> made a RoPE call
    layer: int | None = None
    depth: int = 0  # inside a RoPE function (or its probe): nested calls are not read
    calls: dict[int, list[RopeCall]] = field(default_factory=dict)
    probes: dict[tuple[Any, ...], _Probe] = field(default_factory=dict)
    # the running layer's record, by its attended tensors: a second attention call on the same
    # query and key (DiffLlama's two softmaxes) reads the same RoPE (layers stream: one kept)
    last: tuple[int, tuple[int, int], RopeRecord] | None = None

    def run(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` (the model's forward pass) inside the block: an
        error is one :class:`AdapterError` line naming the model (a :class:`RopesplitError`
        or :class:`StopForward` passes as it is)."""
        try:
            return function(*args, **kwargs)
        except (RopesplitError, StopForward):
            raise
        except Exception as exc:  # the model's code or a seam that moved: one line, no number
            raise AdapterError(f"cannot follow {_describe(self.model)}: "
                               f"{one_line(exc, typed=True)}") from None  # fmt: skip

    def heard(self, function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
              result: Any) -> None:  # fmt: skip
        """One RoPE call of the running layer, read by the convention (the hook's and the
        wrapper's)."""
        if self.depth == 0:
            self.calls.setdefault(self.running(), []).extend(
                self.conv.read(function, args, kwargs, result))

    def running(self) -> int:
        if self.layer is None:
            raise AdapterError(f"cannot follow {_describe(self.model)}: a call came from "
                               "outside its attention modules")  # fmt: skip
        return self.layer

    def _fail(self, what: str) -> AdapterError:
        return AdapterError(f"cannot follow {_describe(self.model)}: {what}")

    def _attended(self, calls: list[RopeCall], roles: tuple[str | None, ...],
                  attended: torch.Tensor, what: str, layer: int
                  ) -> tuple[RopeCall, Located]:  # fmt: skip
        for one in calls:
            if one.role in roles:
                where = _locate(one.rotated, attended)
                if where is not None:
                    return one, where
        raise self._fail(f"no {'/'.join(self.conv.functions)} call made the {what} that "
                         f"layer {layer} attends with")  # fmt: skip

    def _probe(self, one: RopeCall) -> _Probe:
        """The rotation behind ``one``'s tables, read once per table: the table the call was
        handed where it reproduces the call's output (:func:`_as_passed`), else from the
        function's response to unit vectors at every token of each distinct set of
        positions (each sequence where the block was not told them), on the model's
        device."""
        if one.table in self.probes:
            return self.probes[one.table]
        from ropesplit.numerics.applied import read_rotation

        b, _, n, dx = one.x.shape
        positions = np.broadcast_to(np.arange(n) if self.positions is None
                                    else np.asarray(self.positions), (b, n))  # fmt: skip
        probe = _as_passed(one, positions)
        if probe is None:
            # one probe per distinct row of positions: a batch of one text's passages is one
            distinct, first, inverse = positions, np.arange(b), np.arange(b)  # each its own
            if self.positions is not None:  # (a block not told them probes each sequence)
                distinct, first, inverse = np.unique(positions, axis=0, return_index=True,
                                                     return_inverse=True)  # fmt: skip
                if len(first) == b:  # every sequence its own positions: in the batch's order
                    distinct, first, inverse = positions, np.arange(b), np.arange(b)
            rows = torch.as_tensor(first, device=one.x.device)
            eye = torch.eye(dx, dtype=one.x.dtype, device=one.x.device)
            self.depth += 1
            try:
                with torch.no_grad():
                    response = one.apply(eye[None, :, None, :].expand(len(first), dx, n, dx)
                                         .contiguous(), None if len(first) == b else rows)
            finally:
                self.depth -= 1
            m = response.detach().permute(0, 2, 3, 1)  # (distinct, N, out, in), on the device
            rotation = read_rotation(m, distinct)  # pairs from one sequence, tables from each
            device, dtype = one.rotated.device, one.rotated.dtype
            at = torch.as_tensor(inverse.reshape(-1), device=device)
            probe = _Probe(torch.as_tensor(rotation.in_order, device=device),
                           torch.as_tensor(rotation.out_order, device=device), rotation.identity,
                           torch.as_tensor(rotation.cos, device=device).to(dtype)[at],
                           torch.as_tensor(rotation.sin, device=device).to(dtype)[at])
        self.probes[one.table] = probe
        return probe

    def _standard(self, one: RopeCall, where: Located, attended: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, _Probe, torch.Tensor | None]:  # fmt: skip
        """Pre-RoPE whole heads and the attended ones, rotating pairs first, and the
        per-channel gain after RoPE in the same order (RopeRecord)."""
        probe, (offset, scale, heads_of, gain) = self._probe(one), where
        (_, heads, _, d), dx = attended.shape, one.x.shape[-1]
        if probe.identity and offset == 0 and dx == d and scale is None and one.x.shape[1] == heads:
            return one.x, attended, probe, None
        x = one.x.index_select(-1, probe.in_order)[:, heads_of]
        if scale is not None:
            x = x * scale.to(x.dtype)
        inside = attended[..., offset:offset + dx].index_select(-1, probe.out_order)
        rest = torch.cat((attended[..., :offset], attended[..., offset + dx:]), dim=-1)
        if gain is not None:  # in the standard order, 1 on the coordinates no RoPE call made
            gain = torch.cat((gain.index_select(-1, probe.out_order),
                              torch.ones(d - dx, dtype=gain.dtype, device=gain.device)))
        return (torch.cat((x, rest.to(x.dtype)), dim=-1), torch.cat((inside, rest), dim=-1),
                probe, gain)  # fmt: skip

    def rope(self, layer: int, call: AttentionCall) -> RopeRecord:
        """The layer's RoPE as attended: the calls whose outputs ``call`` attends with,
        read through the function's own rotation (:class:`RopeRecord`)."""
        calls = self.calls.pop(layer, [])
        attended = (call.query.data_ptr(), call.key.data_ptr())
        if not calls and self.last is not None and self.last[:2] == (layer, attended):
            return self.last[2]
        if not calls:
            raise self._fail(f"no {'/'.join(self.conv.functions)} call rotated the queries "
                             f"and keys of layer {layer}")  # fmt: skip
        q_call, q_at = self._attended(calls, ("q", None), call.query, "queries", layer)
        rest = [c for c in calls if c is not q_call]
        k_call, k_at = self._attended(rest, ("k", None), call.key, "keys", layer)
        q, q_rot, probe, q_gain = self._standard(q_call, q_at, call.query)
        k, k_rot, _, k_gain = self._standard(k_call, k_at, call.key)
        shared = k_call.x.shape[1] == 1 < call.key.shape[1]
        record = RopeRecord(q, k, q_rot, k_rot, probe.cos, probe.sin, shared, q_gain, k_gain)
        self.last = (layer, attended, record)
        return record


_ACTIVE: ContextVar[Block | None] = ContextVar("ropesplit_adapter_block", default=None)


class _SoftmaxInputs(TorchFunctionMode):
    """Reports the input of every softmax run inside the block (the eager attention's one)."""

    FUNCS = (torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax)

    def __init__(self, report: Callable[[torch.Tensor], None]) -> None:
        super().__init__()
        self.report = report

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:  # fmt: skip
        if func in self.FUNCS and args and isinstance(args[0], torch.Tensor):
            self.report(args[0].detach())
        return func(*args, **(kwargs or {}))


def _dispatch(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
              *args: Any, **kwargs: Any) -> Any:  # fmt: skip
    """The registered attention: binds the call by position, reports it, runs it."""
    block = _ACTIVE.get()
    eager = getattr(_home(module), EAGER)
    if block is None:  # registered for good, used only inside a block: plain eager outside
        return eager(module, query, key, value, attention_mask, *args, **kwargs)
    kernel = block.kernel_function or eager
    layer = block.running()
    if block.survey is not None:  # which layers rotate: the survey
        block.survey[layer] = block.survey.get(layer, False) or bool(block.calls.pop(layer, None))
        return kernel(module, query, key, value, attention_mask, *args, **kwargs)
    if layer not in block.attn.analysed:  # NoPE, say: attends as it would, nothing read
        block.calls.pop(layer, None)
        return kernel(module, query, key, value, attention_mask, *args, **kwargs)
    scaling = kwargs.pop("scaling", args[0] if args else None)
    dropout = float(kwargs.pop("dropout", args[1] if len(args) > 1 else 0.0))
    call = AttentionCall(layer, module, query, key, value, attention_mask,
                         None if scaling is None else float(scaling), dropout, kwargs,
                         eager, block.kernel, kernel)  # fmt: skip
    if block.on_rope is not None:
        block.on_rope(layer, block.rope(layer, call))
    else:
        block.calls.pop(layer, None)
    if block.attention is not None:
        result = block.attention(call)
    elif block.on_logits is not None and block.kernel == "eager":
        report = block.on_logits
        with _SoftmaxInputs(lambda logits: report(layer, logits)):
            result = call.run()
    else:
        result = call.run()
    if block.on_attention is not None:
        block.on_attention(call, result)
    return result


def kernel_names() -> tuple[str, ...]:
    """The attention kernels a model can be run under: ``eager`` and every name in
    transformers' attention registry (``sdpa``, ``flash_attention_2``, ``flex_attention``,
    ...), the adapter's own and the paged ones left out."""
    from transformers import AttentionInterface

    names = [n for n in AttentionInterface._global_mapping
             if not n.startswith(NAME) and "|" not in n]  # fmt: skip
    return ("eager", *sorted(names))


def _kernel(name: str) -> Callable[..., Any]:
    """The attention function transformers' registry holds for ``name`` (``"sdpa"``, ...)."""
    from transformers import AttentionInterface

    try:
        return AttentionInterface()[name]  # type: ignore[no-any-return]
    except KeyError:
        raise RopesplitError(f"no attention kernel {name!r} in transformers' registry") from None


def _register(kernel: str = "eager") -> str:
    """The name under which :func:`_dispatch` runs a model whose kernel is ``kernel``:
    :data:`NAME` for eager, ``"ropesplit-sdpa"`` and so on for another, each registered
    once in transformers' attention registry and, in its mask registry, with the mask
    function of the kernel it stands for (so the kernel gets the mask it builds as it runs:
    SDPA's boolean one, or none where it attends causally by itself)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    name = NAME if kernel == "eager" else f"{NAME}-{kernel}"
    masks = AttentionMaskInterface()
    AttentionInterface.register(name, _dispatch)
    AttentionMaskInterface.register(name, masks[kernel] if kernel in masks else eager_mask)
    return name


def _rope_hook(block: Block, function: Any) -> Callable[..., None]:
    def hook(module: Any, args: Any, kwargs: Any, result: Any) -> None:
        block.heard(function.forward, args, kwargs, result)

    return hook


def _rope_wrapper(original: Callable[..., Any], block: Block) -> Callable[..., Any]:
    def apply_rotary_pos_emb(*args: Any, **kwargs: Any) -> Any:
        block.depth += 1  # a RoPE function calling another (gpt-oss) is read once
        try:
            result = original(*args, **kwargs)
        finally:
            block.depth -= 1
        block.heard(original, args, kwargs, result)
        return result

    return apply_rotary_pos_emb


def _layer_setter(block: Block, index: int) -> Any:
    def hook(module: Any, args: Any) -> None:
        block.layer = index

    return hook


def _as_passed(one: RopeCall, positions: np.ndarray) -> _Probe | None:
    r"""The table a call was handed as the probe would read it, without the probe: where
    ``(cos, sin)`` ``(B|1, N, dx)`` are one half-split rotation (``cos[:P] == cos[P:]``,
    likewise ``sin``; every pair turning, forward) and reproduce the call's output to the
    dtype's rounding, ``rotated = x cos + rotate_half(x) sin`` (Llama's, and most
    families'). None elsewhere: the probe reads it. The capture's validation still holds
    the rotation to the model's."""
    if one.passed is None or one.x.is_complex():
        return None
    b, _, n, dx = one.x.shape
    half = dx // 2
    try:
        cos, sin = (t.reshape(-1, n, dx).expand(b, n, dx) for t in one.passed)
    except RuntimeError:  # another shape: not this table
        return None
    if cos.dtype != one.x.dtype or sin.dtype != one.x.dtype or dx % 2:
        return None
    if not (torch.equal(cos[..., :half], cos[..., half:])
            and torch.equal(sin[..., :half], sin[..., half:])):  # fmt: skip
        return None
    rotated = rotate_applied(one.x, cos[:, None], sin[:, None], "half")  # (B, h, N, dx)
    eps = float(torch.finfo(one.rotated.dtype).eps)
    size = float(one.rotated.abs().max()) if one.rotated.numel() else 0.0
    diff = float((rotated - one.rotated).abs().max())
    if not (size > 0 and diff <= 8 * eps * size):  # a miss, NaN, or x all 0: the probe
        return None
    # each pair turns, and forward (read_rotation reads a pair that does not as another)
    rows = min(n, STRUCTURE_TOKENS)
    phase = torch.atan2(sin[0, :rows, :half].double(), cos[0, :rows, :half].double())
    step = torch.as_tensor(np.diff(positions[0, :rows]), dtype=torch.float64,
                           device=cos.device)  # fmt: skip
    turn = torch.remainder(phase.diff(dim=0) + math.pi, 2 * math.pi) - math.pi  # (rows-1, P)
    unit = step.abs() == 1
    if not bool(unit.any()) or bool((sin[0, :rows, :half] == 0).all(0).any()):
        return None
    if bool((torch.median(turn[unit] * step[unit, None], dim=0).values <= 0).any()):
        return None
    order = torch.arange(dx, device=cos.device)
    return _Probe(order, order, True, cos, sin)


@contextlib.contextmanager
def _rope_seam(block: Block) -> Iterator[None]:
    """Each RoPE function of every attention module's modeling module, read for the block:
    a forward hook where it is an ``nn.Module`` (the kernel hub's), else wrapped."""
    homes = {id(h): h for h in (_home(m) for m in block.attn.modules)}
    handles: list[Any] = []
    saved: list[tuple[Any, str, Any]] = []
    try:
        for home in homes.values():
            for name in block.conv.functions:
                function = getattr(home, name, None)
                if function is None:
                    continue
                if isinstance(function, torch.nn.Module):
                    handles.append(function.register_forward_hook(_rope_hook(block, function),
                                                                  with_kwargs=True))  # fmt: skip
                else:
                    saved.append((home, name, function))
                    setattr(home, name, _rope_wrapper(function, block))
        yield
    finally:
        for handle in handles:
            handle.remove()
        for home, name, function in saved:
            setattr(home, name, function)


def _configs(model: Any, attn: AttentionLayers) -> list[Any]:
    """Every config the model's attention modules read (the model's own, and sub-configs)."""
    found = {id(c): c for c in [model.config, *(getattr(m, "config", None) for m in attn.modules)]
             if c is not None}  # fmt: skip
    return list(found.values())


@contextlib.contextmanager
def _implementation(model: Any, attn: AttentionLayers, name: str) -> Iterator[None]:
    """``name`` as the attention of every config the model's attention modules read."""
    saved = [(c, c._attn_implementation) for c in _configs(model, attn)]
    try:
        for config, _ in saved:
            config._attn_implementation = name
        yield
    finally:
        for config, previous in saved:
            config._attn_implementation = previous


def fast_implementation(model: Any) -> str:
    """The fastest attention that computes the model's own probabilities: ``"sdpa"`` where
    the model supports it and caps no logits (SDPA has no soft-cap), else ``"eager"``."""
    softcap = getattr(model.config, "attn_logit_softcapping", None)
    return "sdpa" if getattr(model, "_supports_sdpa", False) and not softcap else "eager"


@contextlib.contextmanager
def fast_attention(model: Any, attn: AttentionLayers) -> Iterator[str | None]:
    """Within the block a forward pass that captures nothing attends through
    :func:`fast_implementation` (torch's ``scaled_dot_product_attention``: no ``(B, H, N,
    N)`` probabilities in memory); inside a :func:`taps` block, or where SDPA does not
    apply, the attention is left as it is. Yields the implementation used."""
    name, now = fast_implementation(model), getattr(model.config, "_attn_implementation", None)
    if _ACTIVE.get() is not None or now is None or name == now:  # None: not transformers'
        yield now
        return
    with _implementation(model, attn, name):
        yield name


@contextlib.contextmanager
def taps(
    model: Any,
    attn: AttentionLayers,
    *,
    on_rope: RopeTap | None = None,
    on_attention: AttentionTap | None = None,
    on_logits: LogitsTap | None = None,
    attention: Callable[[AttentionCall], Any] | None = None,
    positions: Any = None,
    survey: dict[int, bool] | None = None,
) -> Iterator[Block]:
    r"""Within the block, ``model`` reports its RoPE and attention to the given callbacks.

    ``attn`` is what :func:`survey` found: the hooks go on every followed module, the
    callbacks hear the analysed layers only (another layer attends as it would). At each
    attention call of an analysed layer ``L``, in this order: ``on_rope(L, record)``
    (the layer's :class:`RopeRecord`: pre-RoPE q/k, the attended q/k, the table as
    applied), then the attention runs (``attention(call)`` when given, under the eager
    mask; else the kernel the model's config selects, :meth:`AttentionCall.run`, with
    ``on_logits(L, logits)`` reporting the pre-softmax logits ``(B, H, N, N)`` where that
    is eager attention), then ``on_attention(call, (out, probs))`` (probs None where the
    kernel forms none). ``positions (B, N)``
    are the positions applied (default ``0..N-1``; read for each pair's direction of
    turn); ``survey`` puts the block in the survey's mode (:func:`survey`). The block's
    :meth:`Block.run` runs the forward pass, so that a failure in it is one
    :class:`AdapterError` line.
    """
    if _ACTIVE.get() is not None:
        raise RopesplitError("the adapter's blocks do not nest")
    # the capture runs the model's own kernel; an attention the caller installs reads the
    # eager mask (LM-Infinite and the interventions add to it)
    kernel = getattr(model.config, "_attn_implementation", None) or "eager"
    kernel = "eager" if attention is not None or kernel.startswith(NAME) else kernel
    block = Block(model, attn, convention(model), on_rope, on_attention, on_logits, attention,
                  positions, kernel, None if kernel == "eager" else _kernel(kernel),
                  survey)  # fmt: skip
    name = _register(kernel)
    handles = [m.register_forward_pre_hook(_layer_setter(block, i))
               for i, m in zip(attn.index, attn.modules, strict=True)]  # fmt: skip
    token = _ACTIVE.set(block)
    reading = on_rope is not None or survey is not None
    try:
        with (_rope_seam(block) if reading else contextlib.nullcontext(),
              _implementation(model, attn, name)):  # fmt: skip
            yield block
    finally:
        _ACTIVE.reset(token)
        for handle in handles:
            handle.remove()


def record_pre_rope(raw: dict[int, dict[str, Any]], layers: Any = None, *,
                    dtype: torch.dtype | None = None) -> RopeTap:  # fmt: skip
    """The one ``on_rope`` recorder (capture, LM-Infinite and the interventions use it):
    for each layer in ``layers`` (None: every analysed layer) ``raw[layer]`` becomes

    - ``q`` ``(B, H, N, d)`` and ``k`` ``(B, Hkv, N, d)``: pre-RoPE whole heads, rotating
      pairs first (:class:`RopeRecord`), detached (a copy in ``dtype`` when given);
    - ``q_rot``, ``k_rot``: the attended query and key in the same order;
    - ``cos``, ``sin`` ``(B, N, r)``: the table as applied, one per sequence (a view);
    - ``shared_key``: the rotating key is one head shared by all (MLA);
    - ``q_gain``, ``k_gain``: per-channel gains after RoPE, or None.
    """

    def record(layer: int, rope: RopeRecord) -> None:
        if layers is not None and layer not in layers:
            return
        q, k = rope.q, rope.k
        if dtype is not None:
            q, k = q.to(dtype, copy=True), k.to(dtype, copy=True)
        batch = q.shape[0]
        raw[layer] = {"q": q, "k": k, "q_rot": rope.q_rot, "k_rot": rope.k_rot,
                      "cos": rope.cos.expand(batch, -1, -1),
                      "sin": rope.sin.expand(batch, -1, -1), "shared_key": rope.shared_key,
                      "q_gain": rope.q_gain, "k_gain": rope.k_gain}

    return record
