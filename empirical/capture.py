r"""Capture pre-RoPE queries and keys where the model applies rotary embeddings.

Every supported modeling module (``transformers.models.*.modeling_*``) calls
its own module-level ``apply_rotary_pos_emb(q, k, cos, sin)`` and then
``eager_attention_forward(module, query, key, value, mask, scaling=...)``
from the attention forward. :func:`rope_taps` swaps both names for
pass-through wrappers (restored in ``finally``) and puts a forward pre-hook
on each attention module that says which layer is running, in the manner of
TransformerLens' ``blocks.6.attn.hook_q``. So the capture records exactly
what the model rotates (after any q/k norm), the ``cos``/``sin`` it applies
(every RoPE scaling included), and the scale, soft-cap and window it uses,
without re-implementing any model.

From the captured ``cos``/``sin`` the frequencies of THEORY.md section 1 are
derived, ``cos[n, l] = a cos(p_n theta_l)``, ``sin[n, l] = a sin(p_n theta_l)``
(``a`` a constant attention factor, folded into the scale as ``s a^2``), and
the model's own attention probabilities are rebuilt from the captured tensors
(THEORY.md section 2, then soft-cap, mask, softmax) to validate the capture:
``reconstruction_max_abs_diff`` above :data:`RECONSTRUCTION_TOL` is a
:class:`~ropesplit.errors.ValidationError`.

Shapes (batch of one)::

    q       (H, N, d)     pre-RoPE queries, H query heads
    k       (Hkv, N, d)   pre-RoPE keys, Hkv KV heads; head h reads kv_map[h]
    cos/sin (N, r)        as applied; r = rotary_dim <= d
    theta   (d/2,)        float64 frequencies, 0 for the d - r non-rotating coords
    probs   (H, N, N)     the model's attention probabilities (kept on request)
"""

from __future__ import annotations

import contextlib
import inspect
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from ropesplit.empirical.models import LoadedModel, as_input_ids, as_position_ids, check_positions

from ropesplit.errors import RopesplitError, ValidationError

__all__ = [
    "RECONSTRUCTION_TOL",
    "Capture",
    "LayerCapture",
    "capture",
    "derive_theta",
    "rebuild_probs",
    "rope_taps",
]

RECONSTRUCTION_TOL = 1e-4  # max |probs - rebuilt probs| accepted on real data
_HOOK_NAME = re.compile(r"^blocks\.(\d+)\.attn\.hook_(\w+)$")


@dataclass
class LayerCapture:
    """One layer's capture; ``Capture[name, layer]`` reads these fields."""

    layer: int
    q: torch.Tensor  # (H, N, d) float32, pre-RoPE, after any q norm
    k: torch.Tensor  # (Hkv, N, d) float32, pre-RoPE, after any k norm
    cos: torch.Tensor  # (N, r) as applied
    sin: torch.Tensor  # (N, r) as applied
    theta: np.ndarray  # (d/2,) float64; 0 for non-rotating pairs
    rope_amplitude: float  # a in cos = a cos(p theta); 1 unless an attention factor
    attn_scale: float  # the module's own scale (scaling argument)
    scale: float  # s = attn_scale * a^2, the scale of W in THEORY.md section 2
    kv_map: np.ndarray  # (H,) int: KV head read by each query head
    window: int | None  # sliding window (i - j < window) or None
    softcap: float | None  # logit soft-cap (Gemma 2) or None
    layout: str  # "half" or "interleaved"
    rotary_dim: int  # r: coordinates that rotate
    rope_base: float | None  # the config's RoPE base for this layer's type
    reconstruction_max_abs_diff: float
    probs: torch.Tensor | None = None  # (H, N, N) the model's own, if kept

    @property
    def head_dim(self) -> int:
        return int(self.q.shape[-1])


@dataclass
class Capture:
    """All layers of one forward pass, indexed by ``(name, layer)``.

    ``cache["q", 3]`` is layer 3's pre-RoPE queries ``(H, N, d)``; the
    TransformerLens-style name ``cache["blocks.3.attn.hook_q"]`` is the same.
    """

    layers: list[LayerCapture]
    input_ids: torch.Tensor  # (N,)
    positions: torch.Tensor  # (N,) the position ids applied
    logits: torch.Tensor | None = field(default=None, repr=False)  # (N, vocab) if kept

    @property
    def reconstruction_max_abs_diff(self) -> float:
        """Largest ``|probs - rebuilt|`` over all layers and heads."""
        return max(layer.reconstruction_max_abs_diff for layer in self.layers)

    @property
    def n_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, key: tuple[str, int] | str) -> Any:
        if isinstance(key, str):
            match = _HOOK_NAME.match(key)
            if match is None:
                raise KeyError(f"expected 'blocks.L.attn.hook_NAME' or (name, layer), got {key!r}")
            key = (match.group(2), int(match.group(1)))
        name, layer = key
        if name not in _FIELD_NAMES:
            raise KeyError(f"unknown capture name {name!r}; one of {sorted(_FIELD_NAMES)}")
        return getattr(self.layers[layer], name)


_FIELD_NAMES = {f.name for f in fields(LayerCapture)} - {"layer"}


# --------------------------------------------------------------------------- theta


def _wrap(angle: np.ndarray) -> np.ndarray:
    """Angles reduced to ``(-pi, pi]``."""
    return np.pi - np.mod(np.pi - angle, 2 * np.pi)


def derive_theta(
    cos: np.ndarray, sin: np.ndarray, positions: np.ndarray, *, layout: str = "half"
) -> tuple[np.ndarray, float, float]:
    r"""Frequencies and amplitude behind an applied ``cos``/``sin`` table.

    .. math:: \cos_{n,l} = a \cos(p_n \theta_l), \quad \sin_{n,l} = a \sin(p_n \theta_l)

    ``cos``/``sin`` are ``(N, r)`` in the given pair layout; returns
    ``(theta (r/2,), a, fit_max_abs_diff)``. The phase step between two
    consecutive positions seeds ``theta`` (so ``theta_l < pi``, true of every
    RoPE); least squares over positions up to twice as far, repeatedly,
    refines it without ambiguity modulo ``2 pi``.
    """
    c, s = _pair_columns(cos, layout), _pair_columns(sin, layout)  # (N, r/2) each
    p = positions.astype(np.float64)  # (N,)
    amplitude = float(np.median(np.hypot(c, s)))
    phase = np.arctan2(s, c)  # (N, r/2), p_n theta_l mod 2 pi
    order = np.argsort(p, kind="stable")
    steps = np.flatnonzero(np.diff(p[order]) == 1)
    if steps.size == 0:
        raise RopesplitError(
            "cannot derive RoPE frequencies: no two tokens at consecutive positions"
        )
    a, b = order[steps[0]], order[steps[0] + 1]
    theta = _wrap(phase[b] - phase[a])  # (r/2,)
    reach = 2.0 * max(abs(p[a]), abs(p[b]), 1.0)
    while True:
        near = np.abs(p) <= reach
        resid = _wrap(phase[near] - p[near, None] * theta)  # (n_near, r/2)
        theta = theta + (p[near] @ resid) / max(float(p[near] @ p[near]), 1.0)
        if near.all():
            break
        reach *= 2.0
    fit = np.maximum(
        np.abs(amplitude * np.cos(p[:, None] * theta) - c),
        np.abs(amplitude * np.sin(p[:, None] * theta) - s),
    )
    return theta, amplitude, float(fit.max())


def _pair_columns(table: np.ndarray, layout: str) -> np.ndarray:
    """``(N, r)`` cos/sin table -> ``(N, r/2)``, one column per pair."""
    (_, r) = table.shape
    return table[:, : r // 2] if layout == "half" else table[:, 0::2]


def _detect_layout(cos: np.ndarray, sin: np.ndarray) -> str:
    """``"half"`` when pair ``l`` repeats at column ``l + r/2``, ``"interleaved"`` at ``2l+1``."""
    (_, r) = cos.shape
    if np.array_equal(cos[:, : r // 2], cos[:, r // 2 :]) and np.array_equal(
        sin[:, : r // 2], sin[:, r // 2 :]
    ):
        return "half"
    if np.array_equal(cos[:, 0::2], cos[:, 1::2]) and np.array_equal(sin[:, 0::2], sin[:, 1::2]):
        return "interleaved"
    raise RopesplitError("cos/sin table is neither half-split nor interleaved RoPE")


def _rope_base(config: Any, layer_type: str | None) -> tuple[float | None, str]:
    """(base, rope_type) from ``config.rope_parameters`` (per layer type for Gemma 3)."""
    params = getattr(config, "rope_parameters", None) or {}
    if layer_type is not None and isinstance(params.get(layer_type), dict):
        params = params[layer_type]
    base = params.get("rope_theta", getattr(config, "rope_theta", None))
    return (float(base) if base is not None else None), str(params.get("rope_type", "default"))


# --------------------------------------------------------------------------- rebuild


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Apply RoPE as the model does: ``x (..., N, d)`` with ``cos``/``sin`` ``(N, r)``."""
    (_, r) = cos.shape
    rot, rest = x[..., :r], x[..., r:]
    if layout == "half":
        turned = torch.cat((-rot[..., r // 2 :], rot[..., : r // 2]), dim=-1)  # rotate_half
    else:
        turned = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).flatten(-2)  # (..., N, r)
    return torch.cat((rot * cos + turned * sin, rest), dim=-1)


def rebuild_probs(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    kv_map: np.ndarray,
    attn_scale: float,
    *,
    window: int | None = None,
    softcap: float | None = None,
    layout: str = "half",
    heads: slice | list[int] | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    r"""Attention probabilities rebuilt from the captured tensors, in ``dtype``.

    .. math:: A_{ij} = \mathrm{softmax}_j\big(c \tanh(s\, (R_i q_i)^\top (R_j k_j) / c)\big),
              \quad j \le i,\ i - j < w

    (no ``tanh`` without a soft-cap ``c``); returns ``(len(heads), N, N)``
    for the query heads selected (default all).
    """
    select = slice(None) if heads is None else heads
    (n_tokens,) = q.shape[1:2]
    cos, sin = cos.to(dtype), sin.to(dtype)
    qr = _rotate(q[select].to(dtype), cos, sin, layout)  # (h, N, d)
    kr = _rotate(k[torch.as_tensor(kv_map)[select]].to(dtype), cos, sin, layout)  # (h, N, d)
    logits = attn_scale * (qr @ kr.transpose(1, 2))  # (h, N, N)
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    i = torch.arange(n_tokens, device=q.device)
    allowed = i[None, :] <= i[:, None]  # (N, N), causal by index
    if window is not None:
        allowed &= (i[:, None] - i[None, :]) < window
    return torch.softmax(logits.masked_fill(~allowed, -math.inf), dim=-1)


def _reconstruction_diff(
    q: torch.Tensor, probs: torch.Tensor, rebuild: Any, *, budget: int = 2**26
) -> float:
    """``max |probs - rebuild(heads)|`` over all heads, a few heads at a time.

    ``rebuild(slice)`` returns those heads' probabilities ``(h, N, N)``;
    ``budget`` bounds the elements built at once (float32: 256 MiB).
    """
    (n_heads, n_tokens) = q.shape[:2]
    step = max(1, budget // n_tokens**2)
    diff = 0.0
    for start in range(0, n_heads, step):
        heads = slice(start, min(start + step, n_heads))
        diff = max(diff, float((rebuild(heads) - probs[heads].float()).abs().max()))
    return diff


# --------------------------------------------------------------------------- taps


@dataclass
class _TapState:
    """What the wrappers share during one forward pass."""

    loaded: LoadedModel
    positions: np.ndarray  # (N,)
    keep_probs: bool
    layer: int | None = None
    raw: dict[int, dict[str, Any]] = field(default_factory=dict)
    done: dict[int, LayerCapture] = field(default_factory=dict)


def _heads_first(x: torch.Tensor, unsqueeze_dim: int) -> torch.Tensor:
    """``(1, H, N, .)`` (or ``(1, N, H, .)`` when ``unsqueeze_dim == 2``) -> ``(H, N, .)``."""
    x = x.detach()[0]
    return x.transpose(0, 1) if unsqueeze_dim == 2 else x


def _rope_wrapper(original: Any, state: _TapState) -> Any:
    signature = inspect.signature(original)

    def apply_rotary_pos_emb(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        unsq = int(bound.arguments.get("unsqueeze_dim", 1))
        q, k, cos, sin = (bound.arguments[n] for n in ("q", "k", "cos", "sin"))
        if state.layer is not None:
            state.raw[state.layer] = {
                "q": _heads_first(q, unsq).float().clone(),  # (H, N, r_or_d)
                "k": _heads_first(k, unsq).float().clone(),  # (Hkv, N, r_or_d)
                "cos": cos.detach()[0].clone(),  # (N, r)
                "sin": sin.detach()[0].clone(),  # (N, r)
            }
        return original(*args, **kwargs)

    return apply_rotary_pos_emb


def _eager_wrapper(original: Any, state: _TapState) -> Any:
    signature = inspect.signature(original)

    def eager_attention_forward(*args: Any, **kwargs: Any) -> Any:
        out, weights = original(*args, **kwargs)
        if state.layer is not None and state.layer in state.raw:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            state.done[state.layer] = _finish_layer(state, bound.arguments, weights)
            del state.raw[state.layer]
        return out, weights

    return eager_attention_forward


def _finish_layer(state: _TapState, arguments: dict[str, Any], weights: Any) -> LayerCapture:
    """Assemble, check and validate one layer from what the two wrappers saw."""
    layer = state.layer
    assert layer is not None
    raw, module = state.raw[layer], arguments["module"]
    extra = arguments.get("kwargs", {})
    query, key = arguments["query"].detach()[0], arguments["key"].detach()[0]  # (H|Hkv, N, d)
    (d,) = query.shape[-1:]
    q, k = raw["q"], raw["k"]
    if q.shape[-1] < d:  # only the rotary slice went through RoPE (Phi): the rest as attended
        q = torch.cat((q, query[..., q.shape[-1] :].float()), dim=-1)  # (H, N, d)
        k = torch.cat((k, key[..., k.shape[-1] :].float()), dim=-1)  # (Hkv, N, d)
    if d % 2:
        raise RopesplitError(f"head_dim must be even, got {d}")
    if not (torch.isfinite(q).all() and torch.isfinite(k).all()):
        raise RopesplitError(
            f"non-finite activations (NaN or inf) in the queries/keys of layer {layer}"
        )
    (n_heads, _, _), (n_kv, _, _) = q.shape, k.shape
    if n_heads % n_kv:
        raise RopesplitError(f"{n_heads} query heads do not divide into {n_kv} KV heads")
    kv_map = np.arange(n_heads) // (n_heads // n_kv)  # repeat_kv's grouping
    cos, sin = raw["cos"], raw["sin"]  # (N, r)
    (r,) = cos.shape[-1:]
    if r % 2 or r > d:
        raise RopesplitError(f"rotary_dim must be even and at most head_dim {d}, got {r}")
    cos_np, sin_np = cos.double().cpu().numpy(), sin.double().cpu().numpy()
    layout = _detect_layout(cos_np, sin_np)
    theta_r, amplitude, fit = derive_theta(cos_np, sin_np, state.positions, layout=layout)
    eps = float(torch.finfo(cos.dtype).eps)
    if abs(amplitude - 1.0) <= 4 * eps:  # no attention factor: 1 up to the table's rounding
        amplitude = 1.0
    max_angle = float(np.abs(state.positions).max() * theta_r.max())
    if fit > amplitude * eps * (8.0 + 2.0 * max_angle):
        raise ValidationError(
            f"cos/sin of layer {layer} fit no single frequency per pair ({fit:.2e})"
        )
    layer_type = getattr(module, "layer_type", None)
    if layer_type is None and getattr(state.loaded.config, "layer_types", None):
        layer_type = state.loaded.config.layer_types[layer]
    base, rope_type = _rope_base(state.loaded.config, layer_type)
    if base is not None and rope_type == "default":
        expected = base ** (-np.arange(r // 2) * 2.0 / r)  # (r/2,)
        err = float(np.max(np.abs(theta_r / expected - 1.0)))
        if err > 1e-4:
            raise ValidationError(
                f"theta of layer {layer} does not match rope_theta {base:g} "
                f"(relative error {err:.1e})"
            )
    theta = np.concatenate([theta_r, np.zeros((d - r) // 2)])  # (d/2,)
    attn_scale = arguments.get("scaling")
    if attn_scale is None:
        attn_scale = getattr(module, "scaling", None) or d**-0.5
    window = extra.get("sliding_window", getattr(module, "sliding_window", None))
    softcap = arguments.get("softcap", extra.get("softcap"))
    probs = weights.detach()[0]  # (H, N, N)
    diff = _reconstruction_diff(
        q,
        probs,
        lambda heads: rebuild_probs(
            q, k, cos, sin, kv_map, float(attn_scale), window=window, softcap=softcap,
            layout=layout, heads=heads, dtype=torch.float32,
        ),
    )  # fmt: skip
    return LayerCapture(
        layer=layer, q=q, k=k, cos=cos, sin=sin, theta=theta, rope_amplitude=amplitude,
        attn_scale=float(attn_scale), scale=float(attn_scale) * amplitude**2, kv_map=kv_map,
        window=int(window) if window else None, softcap=float(softcap) if softcap else None,
        layout=layout, rotary_dim=int(r), rope_base=base, reconstruction_max_abs_diff=diff,
        probs=probs.float().clone() if state.keep_probs else None,
    )  # fmt: skip


_TAPPED = ("apply_rotary_pos_emb", "eager_attention_forward")  # modeling-module names swapped
_WRAPPERS = (_rope_wrapper, _eager_wrapper)


@contextlib.contextmanager
def rope_taps(
    loaded: LoadedModel, positions: np.ndarray, *, keep_probs: bool = True
) -> Iterator[_TapState]:
    """Swap ``apply_rotary_pos_emb``/``eager_attention_forward`` for taps, for one block.

    Pre-hooks on the attention modules set the running layer; the originals
    and the hooks are restored/removed in ``finally``.
    """
    state = _TapState(loaded, positions, keep_probs)
    homes: dict[str, Any] = {
        type(m).__module__: sys.modules[type(m).__module__] for m in loaded.attn
    }
    saved = {name: [getattr(home, tap) for tap in _TAPPED] for name, home in homes.items()}
    handles = []
    try:
        for name, home in homes.items():
            for tap, original, wrap in zip(_TAPPED, saved[name], _WRAPPERS, strict=True):
                setattr(home, tap, wrap(original, state))
        for index, module in enumerate(loaded.attn):
            handles.append(module.register_forward_pre_hook(_layer_setter(state, index)))
        yield state
    finally:
        for handle in handles:
            handle.remove()
        for name, home in homes.items():
            for tap, original in zip(_TAPPED, saved[name], strict=True):
                setattr(home, tap, original)


def _layer_setter(state: _TapState, index: int) -> Any:
    def hook(module: Any, args: Any) -> None:
        state.layer = index

    return hook


def capture(
    loaded: LoadedModel,
    input_ids: Any,
    position_ids: Any = None,
    *,
    keep_probs: bool = True,
    keep_logits: bool = False,
    validate: bool = True,
) -> Capture:
    r"""Run the model once and capture every layer's pre-RoPE q/k and RoPE tables.

    ``input_ids`` is ``(N,)`` or ``(1, N)``; ``position_ids`` (default
    ``0..N-1``) sets the RoPE angle ``p_n theta_l`` of token ``n``; the mask is
    causal by index. Each layer's attention probabilities are rebuilt from the
    capture and compared with the model's own; with ``validate`` a largest
    difference above :data:`RECONSTRUCTION_TOL` raises ``ValidationError``.
    ``keep_probs=False`` drops the ``(H, N, N)`` probabilities after that check
    (they dominate memory at large N).
    """
    ids = as_input_ids(loaded, input_ids)  # (1, N)
    pos = as_position_ids(ids, position_ids)  # (1, N)
    check_positions(loaded, pos)
    if loaded.model.config._attn_implementation != "eager":
        raise RopesplitError("capture needs attn_implementation='eager'; load with load_model")
    positions = pos[0].cpu().numpy()
    with rope_taps(loaded, positions, keep_probs=keep_probs) as state, torch.no_grad():
        # an explicit all-ones mask keeps the mask causal by index: without it,
        # transformers reads non-+1 steps in position_ids as packed sequences
        out = loaded.model(
            input_ids=ids, position_ids=pos, attention_mask=torch.ones_like(ids), use_cache=False
        )
    missing = [i for i in range(loaded.n_layers) if i not in state.done]
    if missing:
        raise RopesplitError(f"no rotary embedding was applied in layers {missing}")
    result = Capture(
        layers=[state.done[i] for i in range(loaded.n_layers)],
        input_ids=ids[0].cpu(),
        positions=pos[0].cpu(),
        logits=out.logits[0].float() if keep_logits else None,
    )
    if validate and not result.reconstruction_max_abs_diff <= RECONSTRUCTION_TOL:
        raise ValidationError(
            f"reconstruction_max_abs_diff {result.reconstruction_max_abs_diff:.2e} exceeds "
            f"{RECONSTRUCTION_TOL:g}: the capture does not reproduce the model's attention"
        )
    return result
