r"""The one adapter between transformers and ropesplit: what a model rotates, and how it attends.

Everything ropesplit reads from inside a model's forward pass comes through
:func:`taps`, and every seam it uses is named here:

- **the attention function**, through transformers' public attention registry
  (``AttentionInterface``): one function, :data:`NAME`, is registered once (with
  transformers' eager mask under the same name in ``AttentionMaskInterface``)
  and made the model's attention for the block; it hands every call, as an
  :class:`AttentionCall` bound by position (``module, query, key, value,
  attention_mask``, then ``scaling``), to the callbacks and to the model's own
  eager attention (or to the ``attention`` function the caller installs:
  LM-Infinite, the interventions);
- **the pre-softmax logits** ``W`` (docs/theory.md section 2, after any
  soft-cap, mask added), the input of the softmax inside the model's eager
  attention, through torch's public ``TorchFunctionMode``;
- **the running layer**, through forward pre-hooks on the attention modules
  (TransformerLens' ``blocks.L.attn``);
- **the RoPE call** ``(R q, R k)`` with its pre-RoPE ``q``, ``k`` and the
  ``cos``/``sin`` tables as applied (docs/theory.md section 1). Modeling code
  calls a module-level function, and no public seam reaches it, so this is
  the one private seam: when the kernel hub has made the function an
  ``nn.Module`` (``use_kernel_forward_from_hub``, signature ``(*args,
  **kwargs)``) a forward hook reads the call; when it is a plain function it
  is wrapped for the block. Either way the call is read by position, by the
  model's calling convention (:data:`CONVENTIONS`, one entry per convention,
  in the manner of transformers' ``ROPE_INIT_FUNCTIONS``; :data:`CONVENTION_OF`
  names the families that do not use the common one).

When the adapter cannot follow a model (no RoPE call or attention call where
one is due, a call that does not match its convention, an error inside the
block), it raises :class:`AdapterError`: one line naming the model class, the
transformers version and what was not found (exit code 2 at the CLI), never
a number from a wrong capture. Everything is restored in ``finally``; nothing
here computes a statistic.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ropesplit.core.errors import RopesplitError, one_line

__all__ = [
    "CONVENTIONS",
    "CONVENTION_OF",
    "NAME",
    "AdapterError",
    "AttentionCall",
    "Block",
    "Convention",
    "RopeCall",
    "StopForward",
    "attention_modules",
    "carries_rope",
    "fast_attention",
    "heads_first",
    "record_pre_rope",
    "refusal",
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
    """One RoPE application read by position: pre-RoPE ``x``, its rotation, the tables.

    ``x`` and ``rotated`` are ``(B, heads, N, r_or_d)`` (heads first); ``cos``, ``sin``
    ``(B or 1, N, r)`` as applied, in the pair layout of the call; ``role`` is ``"q"``,
    ``"k"`` or ``None`` (a one-tensor call: its role is its place in the layer's order).
    """

    role: str | None
    x: torch.Tensor
    rotated: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor


@dataclass(frozen=True)
class Convention:
    """How one family of modeling code calls RoPE: the function's module-level name, how a
    call's positional arguments and result read (``read(args, kwargs, result)``), and, for
    one-tensor calls, the order of the query's and the key's calls within a layer."""

    function: str
    read: Callable[[Sequence[Any], Mapping[str, Any], Any], list[RopeCall]]
    order: tuple[str, ...] = ("q", "k")


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


def _tensors(what: str, *values: Any) -> None:
    if not all(isinstance(v, torch.Tensor) for v in values):
        raise AdapterError(f"a call of {what} does not match its calling convention")


def _read_qk(args: Sequence[Any], kwargs: Mapping[str, Any], result: Any) -> list[RopeCall]:
    """``f(q, k, cos, sin, ...) -> (R q, R k)``: Llama and most families."""
    if len(args) < 4 or not isinstance(result, tuple | list) or len(result) != 2:
        raise AdapterError("a RoPE call does not match the (q, k, cos, sin) convention")
    q, k, cos, sin = args[:4]
    _tensors("(q, k, cos, sin)", q, k, cos, sin, *result)
    unsq = _unsqueeze_dim(args, kwargs, 4)
    cos, sin = cos.detach(), sin.detach()
    return [RopeCall("q", heads_first(q, unsq), heads_first(result[0], unsq), cos, sin),
            RopeCall("k", heads_first(k, unsq), heads_first(result[1], unsq), cos, sin)]


def _read_one(args: Sequence[Any], kwargs: Mapping[str, Any], result: Any) -> list[RopeCall]:
    """``f(x, cos, sin, unsqueeze_dim) -> R x``, one tensor a call (Gemma 3n, Gemma 4)."""
    if len(args) < 3:
        raise AdapterError("a RoPE call does not match the (x, cos, sin) convention")
    x, cos, sin = args[:3]
    _tensors("(x, cos, sin)", x, cos, sin, result)
    unsq = _unsqueeze_dim(args, kwargs, 3)
    return [RopeCall(None, heads_first(x, unsq), heads_first(result, unsq), cos.detach(),
                     sin.detach())]  # fmt: skip


def _read_one_sin_cos(args: Sequence[Any], kwargs: Mapping[str, Any], result: Any
                      ) -> list[RopeCall]:  # fmt: skip
    """``f(x, sin, cos) -> R x`` (GPT-J): ``x (B, N, H, r)``, tables ``(B, N, r/2)`` one entry
    per pair, applied interleaved (each entry twice)."""
    if len(args) < 3:
        raise AdapterError("a RoPE call does not match the (x, sin, cos) convention")
    x, sin, cos = args[:3]
    _tensors("(x, sin, cos)", x, sin, cos, result)
    cos = torch.repeat_interleave(cos.detach(), 2, dim=-1)  # (B, N, r) as applied
    sin = torch.repeat_interleave(sin.detach(), 2, dim=-1)
    return [RopeCall(None, heads_first(x, 2), heads_first(result, 2), cos, sin)]


CONVENTIONS: dict[str, Convention] = {
    "q_k_cos_sin": Convention("apply_rotary_pos_emb", _read_qk),
    "x_cos_sin": Convention("apply_rotary_pos_emb", _read_one, order=("q", "k")),
    "x_sin_cos": Convention("apply_rotary_pos_emb", _read_one_sin_cos, order=("k", "q")),
}
# model_type -> convention, where it is not the common ``q_k_cos_sin``
CONVENTION_OF: dict[str, str] = {
    "gptj": "x_sin_cos",
    "codegen": "x_sin_cos",
    "gemma3n_text": "x_cos_sin",
    "gemma4_text": "x_cos_sin",
    "gemma4_unified_text": "x_cos_sin",
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


def carries_rope(config: Any) -> bool:
    """Whether a config states RoPE (any of transformers' RoPE fields is set)."""
    return any(getattr(config, name, None) is not None for name in _ROPE_FIELDS)


def refusal(config: Any) -> str | None:
    """Why ropesplit refuses a RoPE family before looking at its code, or None.

    Multi-head latent attention (DeepSeek-V2/V3 and its descendants: the config
    states ``qk_rope_head_dim``) turns only a decoupled sub-head of every head,
    shared by all heads on the key side, and attends with the rotated part
    last: W = q_nope . k_nope + q_pe . R k_pe, with a key of one head. The
    split of docs/theory.md lives on that sub-head alone; the capture, whose
    heads are whole RoPE heads with their rotary part first, does not model it.
    A config whose head shape varies by layer (transformers' per-layer configs)
    is refused too.
    """
    try:  # a heterogeneous config refuses a global head shape
        for name in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"):
            getattr(config, name, None)
    except Exception:
        return ("its head shape varies by layer (a per-layer config); ropesplit reads one "
                "head shape per model")  # fmt: skip
    if getattr(config, "qk_rope_head_dim", None):
        return ("multi-head latent attention: RoPE turns a decoupled sub-head "
                f"(qk_rope_head_dim={config.qk_rope_head_dim}) whose key is shared by all "
                "heads; ropesplit analyses whole RoPE heads")  # fmt: skip
    return None


def _home(module: Any) -> Any:
    """The modeling module (``transformers.models.*.modeling_*``) that defines ``module``'s
    class, where its RoPE function and eager attention live."""
    return importlib.import_module(type(module).__module__)


def attention_modules(model: Any) -> list[Any]:
    """The model's attention modules in layer order, checked to be followable.

    A module counts when its class is named ``...Attention`` and its modeling
    module defines the convention's RoPE function and an eager attention. A
    config without RoPE (GPT-2, BERT) is refused as such; a RoPE family the
    adapter cannot follow is refused in one line with the model class, the
    transformers version and what was not found (:class:`AdapterError`).
    """
    config = model.config
    model_type = getattr(config, "model_type", type(model).__name__)
    rope = carries_rope(config) or any(
        type(m).__name__.endswith("RotaryEmbedding") for m in model.modules())
    if not rope:
        raise RopesplitError(
            f"model type {model_type} has no rotary position embedding (RoPE); "
            "ropesplit needs a RoPE model (Llama, Mistral, Qwen2, Gemma, GPT-NeoX, Phi, ...)"
        )
    why = refusal(config)
    if why:
        raise AdapterError(f"ropesplit does not analyse {model_type}: {why}")
    conv = convention(model)
    candidates = [m for m in model.modules() if type(m).__name__.endswith("Attention")]
    found = [m for m in candidates
             if hasattr(_home(m), conv.function) and hasattr(_home(m), EAGER)]  # fmt: skip
    if not found:
        seen = sorted({type(m).__name__ for m in candidates}) or ["no ...Attention module"]
        raise AdapterError(
            f"cannot follow {_describe(model)}: its attention ({', '.join(seen)}) has no "
            f"module-level {conv.function} and {EAGER} to read"
        )
    for module in found:
        head_dim = getattr(module, "head_dim", getattr(module, "head_size", None))
        if head_dim is not None and head_dim % 2:
            raise RopesplitError(f"head_dim must be even, got {head_dim}")
    layer_ids = [getattr(m, "layer_idx", i) for i, m in enumerate(found)]
    if layer_ids != list(range(len(found))):
        raise RopesplitError(f"attention modules out of layer order in {model_type}: {layer_ids}")
    return found


# --------------------------------------------------------------------------- the block

# (layer, the layer's RoPE: q, k pre-RoPE and rotated, the tables)
RopeTap = Callable[[int, "RopeRecord"], None]
# (the attention call, its result (out, probs or None))
AttentionTap = Callable[["AttentionCall", tuple[torch.Tensor, Any]], None]
# (layer, pre-softmax logits (B, H, N, N) as the model's eager attention built them)
LogitsTap = Callable[[int, torch.Tensor], None]


@dataclass(frozen=True)
class RopeRecord:
    """One layer's RoPE: pre-RoPE ``q (B, H, N, .)``, ``k (B, Hkv, N, .)``, their rotations
    ``q_rot``, ``k_rot`` as the model made them, and ``cos``, ``sin`` ``(B or 1, N, r)``."""

    q: torch.Tensor
    k: torch.Tensor
    q_rot: torch.Tensor
    k_rot: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor


@dataclass
class AttentionCall:
    """One call of the model's attention function, bound by position.

    ``query`` ``(B, H, N, d)`` and ``key`` ``(B, Hkv, N, d)`` are rotated, as attended;
    ``mask`` the additive mask (or None); ``kwargs`` the rest of the call
    (``sliding_window``, ``softcap``, ``position_ids``, ...). :meth:`eager` runs the model's
    own eager attention on the call, with another mask when given.
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

    def eager(self, mask: torch.Tensor | None = None) -> Any:
        """The model's own eager attention on this call (``mask`` replaces the call's)."""
        scaling = {} if self.scaling is None else {"scaling": self.scaling}
        return self._eager(self.module, self.query, self.key, self.value,
                           self.mask if mask is None else mask, dropout=self.dropout,
                           **scaling, **self.kwargs)  # fmt: skip


@dataclass
class Block:
    """What the seams share during one block."""

    model: Any
    attn: list[Any]
    conv: Convention
    on_rope: RopeTap | None
    on_attention: AttentionTap | None
    on_logits: LogitsTap | None
    attention: Callable[[AttentionCall], Any] | None
    layer: int | None = None
    calls: dict[int, list[RopeCall]] = field(default_factory=dict)

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

    def heard(self, args: Sequence[Any], kwargs: Mapping[str, Any], result: Any) -> None:
        """One RoPE call of the running layer, read by the convention (the hook's and the
        wrapper's)."""
        self.calls.setdefault(self.running(), []).extend(self.conv.read(args, kwargs, result))

    def running(self) -> int:
        if self.layer is None:
            raise AdapterError(f"cannot follow {_describe(self.model)}: a call came from "
                               "outside its attention modules")  # fmt: skip
        return self.layer

    def rope(self, layer: int) -> RopeRecord:
        """The layer's RoPE calls as one record (q's and k's), checked complete."""
        calls = self.calls.pop(layer, [])
        roles = {c.role: c for c in calls if c.role is not None}
        unnamed = [c for c in calls if c.role is None]
        if unnamed:  # one-tensor calls: the convention's order
            if len(unnamed) != len(self.conv.order):
                raise AdapterError(
                    f"cannot follow {_describe(self.model)}: layer {layer} made "
                    f"{len(unnamed)} one-tensor RoPE call(s), expected {len(self.conv.order)} "
                    "(a query and a key of its own)"
                )
            roles.update(zip(self.conv.order, unnamed, strict=True))
        if set(roles) != {"q", "k"}:
            raise AdapterError(
                f"cannot follow {_describe(self.model)}: no {self.conv.function} call rotated "
                f"the queries and keys of layer {layer}"
            )
        q, k = roles["q"], roles["k"]
        return RopeRecord(q.x, k.x, q.rotated, k.rotated, q.cos, q.sin)


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
    layer = block.running()
    scaling = kwargs.pop("scaling", args[0] if args else None)
    dropout = float(kwargs.pop("dropout", args[1] if len(args) > 1 else 0.0))
    call = AttentionCall(layer, module, query, key, value, attention_mask,
                         None if scaling is None else float(scaling), dropout, kwargs,
                         eager)  # fmt: skip
    if block.on_rope is not None:
        block.on_rope(layer, block.rope(layer))
    if block.attention is not None:
        result = block.attention(call)
    elif block.on_logits is not None:
        report = block.on_logits
        with _SoftmaxInputs(lambda logits: report(layer, logits)):
            result = call.eager()
    else:
        result = call.eager()
    if block.on_attention is not None:
        block.on_attention(call, result)
    return result


def _register() -> None:
    """:data:`NAME` in transformers' attention and mask registries (once a process)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(NAME, _dispatch)
    AttentionMaskInterface.register(NAME, eager_mask)


def _rope_hook(block: Block) -> Callable[..., None]:
    def hook(module: Any, args: Any, kwargs: Any, result: Any) -> None:
        block.heard(args, kwargs, result)

    return hook


def _rope_wrapper(original: Callable[..., Any], block: Block) -> Callable[..., Any]:
    def apply_rotary_pos_emb(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        block.heard(args, kwargs, result)
        return result

    return apply_rotary_pos_emb


def _layer_setter(block: Block, index: int) -> Any:
    def hook(module: Any, args: Any) -> None:
        block.layer = index

    return hook


@contextlib.contextmanager
def _rope_seam(block: Block) -> Iterator[None]:
    """The RoPE function of every attention module's modeling module, read for the block:
    a forward hook where it is an ``nn.Module`` (the kernel hub's), else wrapped."""
    homes = {id(h): h for h in (_home(m) for m in block.attn)}
    handles: list[Any] = []
    saved: list[tuple[Any, Any]] = []
    try:
        for home in homes.values():
            function = getattr(home, block.conv.function)
            if isinstance(function, torch.nn.Module):
                handles.append(function.register_forward_hook(_rope_hook(block), with_kwargs=True))
            else:
                saved.append((home, function))
                setattr(home, block.conv.function, _rope_wrapper(function, block))
        yield
    finally:
        for handle in handles:
            handle.remove()
        for home, function in saved:
            setattr(home, block.conv.function, function)


def _configs(model: Any, attn: Sequence[Any]) -> list[Any]:
    """Every config the model's attention modules read (the model's own, and sub-configs)."""
    found = {id(c): c for c in [model.config, *(getattr(m, "config", None) for m in attn)]
             if c is not None}  # fmt: skip
    return list(found.values())


@contextlib.contextmanager
def _implementation(model: Any, attn: Sequence[Any], name: str) -> Iterator[None]:
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
def fast_attention(model: Any, attn: Sequence[Any]) -> Iterator[str | None]:
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
    attn: list[Any],
    *,
    on_rope: RopeTap | None = None,
    on_attention: AttentionTap | None = None,
    on_logits: LogitsTap | None = None,
    attention: Callable[[AttentionCall], Any] | None = None,
) -> Iterator[Block]:
    r"""Within the block, ``model`` reports its RoPE and attention to the given callbacks.

    ``attn`` are its attention modules in layer order (:func:`attention_modules`).
    At each attention call of layer ``L``, in this order: ``on_rope(L, record)``
    (the layer's :class:`RopeRecord`: pre-RoPE q/k, their rotation, the tables),
    then the attention runs (``attention(call)`` when given, else the model's own
    eager attention, with ``on_logits(L, logits)`` reporting its pre-softmax
    logits ``(B, H, N, N)``), then ``on_attention(call, (out, probs))``. The
    block's :meth:`Block.run` runs the forward pass, so that a failure in it is
    one :class:`AdapterError` line.
    """
    if _ACTIVE.get() is not None:
        raise RopesplitError("the adapter's blocks do not nest")
    block = Block(model, list(attn), convention(model), on_rope, on_attention, on_logits,
                   attention)  # fmt: skip
    _register()
    handles = [m.register_forward_pre_hook(_layer_setter(block, i)) for i, m in enumerate(attn)]
    token = _ACTIVE.set(block)
    try:
        with (_rope_seam(block) if on_rope is not None else contextlib.nullcontext(),
              _implementation(model, attn, NAME)):  # fmt: skip
            yield block
    finally:
        _ACTIVE.reset(token)
        for handle in handles:
            handle.remove()


def record_pre_rope(raw: dict[int, dict[str, Any]], layers: Any = None, *,
                    dtype: torch.dtype | None = None) -> RopeTap:  # fmt: skip
    """The one ``on_rope`` recorder (capture, LM-Infinite and the interventions use it):
    for each layer in ``layers`` (None: every layer) ``raw[layer]`` becomes

    - ``q`` ``(B, H, N, r_or_d)`` and ``k`` ``(B, Hkv, N, r_or_d)``: pre-RoPE, heads first,
      detached (a copy in ``dtype`` when given);
    - ``q_rot``, ``k_rot``: the model's rotation of them, as it made it;
    - ``cos``, ``sin`` ``(B, N, r)``: the tables as applied, one per sequence (a view).
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
                      "sin": rope.sin.expand(batch, -1, -1)}  # fmt: skip

    return record
