r"""Capture pre-RoPE queries and keys where the model applies rotary embeddings.

Through :func:`ropesplit.empirical.taps.taps` (the one patching module) the
capture sees every layer's ``apply_rotary_pos_emb(q, k, cos, sin)`` (its
arguments and the model's own result ``(R q, R k)``), the pre-softmax logits
the eager attention hands to ``softmax`` and the attention function's
arguments and probabilities. So it records exactly what the model rotates
(after any q/k norm), the ``cos``/``sin`` it applies (every RoPE scaling
included), and the scale, soft-cap and window it uses, without
re-implementing any model.

From the captured ``cos``/``sin`` the frequencies of docs/theory.md section 1 are
derived, ``cos[n, l] = a cos(p_n theta_l)``, ``sin[n, l] = a sin(p_n theta_l)``
(``a`` a constant attention factor, folded into the scale as ``s a^2``).

Validation (what it checks, and no more): from the captured tensors alone,
the capture rebuilds, per layer, (1) the rotated queries and keys, compared
with the tensors the model's RoPE produced, relative to their largest entry
(:data:`ROPE_TOL`); (2) the pre-softmax logits ``W`` of docs/theory.md section 2
(then soft-cap), compared with the model's own on every attended pair,
relative to the largest logit (:data:`LOGIT_TOL`); (3) the probabilities
after mask and softmax, compared absolutely (:data:`RECONSTRUCTION_TOL`).
Passing says the captured ``q``, ``k``, ``cos``/``sin``, scale, soft-cap and
mask reproduce this forward pass's logits to float32 rounding; it does not
say the model's other parts, or other inputs, behave alike. A failure is a
:class:`~ropesplit.core.errors.ValidationError`.

Shapes (batch of one)::

    q       (H, N, d)     pre-RoPE queries, H query heads
    k       (Hkv, N, d)   pre-RoPE keys, Hkv KV heads; head h reads kv_map[h]
    cos/sin (N, r)        as applied; r = rotary_dim <= d
    theta   (d/2,)        float64 frequencies, 0 for the d - r non-rotating coords
    W       (H, N, N)     pre-softmax logits (rebuilt per head during validation)
    probs   (H, N, N)     the model's attention probabilities (kept on request)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import torch
from ropesplit.empirical.geometry import (
    cached_geometry,
    config_theta,
    full_theta,
    rope_base,
    with_rest,
)
from ropesplit.empirical.memory import release_growth
from ropesplit.empirical.models import LoadedModel, as_input_ids, as_position_ids, check_positions
from ropesplit.empirical.taps import record_pre_rope, taps
from ropesplit.numerics.spec import RopeSpec, repeat_kv_map

from ropesplit.core.errors import RopesplitError, ValidationError

__all__ = [
    "LOGIT_TOL",
    "RECONSTRUCTION_TOL",
    "ROPE_TOL",
    "THETA_TOL",
    "Capture",
    "LayerCapture",
    "Tolerances",
    "allowed_pairs",
    "capture",
    "capture_batch",
    "check_reconstruction",
    "max_rel",
    "rebuild_logits",
    "rebuild_probs",
    "rotate_applied",
    "tolerances",
]

RECONSTRUCTION_TOL = 1e-4  # max |probs - rebuilt probs| accepted on real data
LOGIT_TOL = 1e-5  # max |W - W_model| / max |W_model| over attended pairs (float32: ~1e-7)
ROPE_TOL = 1e-5  # max |R q - (R q)_model| / max |(R q)_model|, queries and keys
THETA_TOL = 1e-4  # max relative difference of the derived theta from the config's rope_theta
HALF_TOL_EPS = 4.0  # half precision: RoPE and logit checks within this many of the dtype's eps
HALF_PROBS_EPS = 16.0  # and the probabilities within this many (softmax amplifies the rounding)


@dataclass(frozen=True)
class Tolerances:
    """What the capture's checks accept, for one model dtype (recorded in every JSON record).

    float32 and float64 models: the constants above (float32 rounding is about
    1e-7). float16 and bfloat16 models round q, k, the cos/sin tables and the
    logits to 2^-11 and 2^-8: the RoPE and logit checks accept
    :data:`HALF_TOL_EPS` times the dtype's eps (bfloat16: 3.1e-2, float16:
    3.9e-3; SmolLM2-135M in bfloat16 at 512 tokens measured 7.1e-3 and
    6.9e-3), the probabilities :data:`HALF_PROBS_EPS` times (measured 2.5e-2:
    the softmax amplifies the logits' rounding), theta the larger of
    :data:`THETA_TOL` and one eps. The statistics never run in the
    model's dtype: captures are read in float64 (numerics), and where the
    config states the base of a default RoPE its exact frequencies replace
    the ones derived from a half-precision table.
    """

    rope: float = ROPE_TOL
    logit: float = LOGIT_TOL
    probs: float = RECONSTRUCTION_TOL
    theta: float = THETA_TOL

    @property
    def half(self) -> bool:
        """Whether these are a half-precision model's (looser than float32's)."""
        return self.theta > THETA_TOL

    def as_dict(self) -> dict[str, float]:
        """``tolerance_rope``, ``tolerance_logit``, ``tolerance_probs``, ``tolerance_theta``."""
        return {f"tolerance_{f.name}": float(getattr(self, f.name)) for f in fields(self)}


def tolerances(dtype: Any) -> Tolerances:
    """The :class:`Tolerances` of a model whose weights are ``dtype`` (a torch dtype or name).

    >>> tolerances("float32").rope, round(tolerances("bfloat16").rope, 4)
    (1e-05, 0.0312)
    """
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if dt not in (torch.float16, torch.bfloat16):
        return Tolerances()
    eps = float(torch.finfo(dt).eps)
    return Tolerances(rope=HALF_TOL_EPS * eps, logit=HALF_TOL_EPS * eps,
                      probs=HALF_PROBS_EPS * eps, theta=max(THETA_TOL, eps))  # fmt: skip
BLOCK_ELEMENTS = 2**19  # logits rebuilt at once during validation (2 MiB float32)
# set on a model whose frequencies models.shuffled_frequencies reassigned: its theta is checked
# against the config's as a set (each pair against the config's value of the same rank)
SHUFFLED_FLAG = "ropesplit_shuffled_frequencies"
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
    scale: float  # s = attn_scale * a^2, the scale of W in docs/theory.md section 2
    kv_map: np.ndarray  # (H,) int: KV head read by each query head
    window: int | None  # sliding window (i - j < window) or None
    softcap: float | None  # logit soft-cap (Gemma 2) or None
    layout: str  # "half" or "interleaved"
    rotary_dim: int  # r: coordinates that rotate
    rope_base: float | None  # the config's RoPE base for this layer's type
    reconstruction_max_abs_diff: float  # max |A - A_model| (probabilities)
    rope_max_rel_diff: float = math.nan  # max |R q - (R q)_model| / max |(R q)_model|, q and k
    logit_max_abs_diff: float = math.nan  # max |W - W_model| over the attended pairs
    logit_scale: float = math.nan  # max |W_model| over the attended pairs
    probs: torch.Tensor | None = None  # (H, N, N) the model's own, if kept

    @property
    def logit_max_rel_diff(self) -> float:
        """``logit_max_abs_diff / logit_scale``: the logit error relative to the logit scale."""
        return self.logit_max_abs_diff / self.logit_scale if self.logit_scale else math.nan

    @property
    def head_dim(self) -> int:
        return int(self.q.shape[-1])

    @property
    def spec(self) -> RopeSpec:
        """The geometry derived here: theta, ``s``, layout, rotary dim, window, KV map."""
        return RopeSpec.from_arrays(self.theta, self.scale, self.layout, self.rotary_dim,
                                    self.window, self.kv_map)  # fmt: skip


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
    tolerances: Tolerances = field(default_factory=Tolerances)  # the model dtype's

    @property
    def reconstruction_max_abs_diff(self) -> float:
        """Largest ``|probs - rebuilt|`` over all layers and heads."""
        return max(layer.reconstruction_max_abs_diff for layer in self.layers)

    @property
    def logit_max_rel_diff(self) -> float:
        """Largest per-layer ``max |W - W_model| / max |W_model|`` (attended pairs)."""
        return max(layer.logit_max_rel_diff for layer in self.layers)

    @property
    def rope_max_rel_diff(self) -> float:
        """Largest per-layer relative difference of the rebuilt ``R q``/``R k``."""
        return max(layer.rope_max_rel_diff for layer in self.layers)

    def validation(self) -> dict[str, float]:
        """The three validation numbers, for JSON records: probabilities, logits, RoPE."""
        return {
            "reconstruction_max_abs_diff": self.reconstruction_max_abs_diff,
            "logit_max_rel_diff": self.logit_max_rel_diff,
            "logit_max_abs_diff": max(layer.logit_max_abs_diff for layer in self.layers),
            "logit_scale": max(layer.logit_scale for layer in self.layers),
            "rope_max_rel_diff": self.rope_max_rel_diff,
            **self.tolerances.as_dict(),
        }

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


# --------------------------------------------------------------------------- rebuild


def rotate_applied(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   layout: str) -> torch.Tensor:  # fmt: skip
    """Apply RoPE as the model does: ``x (..., N, d)`` with ``cos``/``sin`` ``(N, r)``."""
    (_, r) = cos.shape
    rot, rest = x[..., :r], x[..., r:]
    if layout == "half":
        turned = torch.cat((-rot[..., r // 2 :], rot[..., : r // 2]), dim=-1)  # rotate_half
    else:
        turned = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).flatten(-2)  # (..., N, r)
    return torch.cat((rot * cos + turned * sin, rest), dim=-1)


def allowed_pairs(n_tokens: int, window: int | None = None, device: Any = None) -> torch.Tensor:
    """``(N, N)`` bool: ``j <= i`` (causal by index) and ``i - j < window`` when windowed."""
    i = torch.arange(n_tokens, device=device)
    allowed = i[None, :] <= i[:, None]  # (N, N)
    if window is not None:
        allowed &= (i[:, None] - i[None, :]) < window
    return allowed


def rebuild_logits(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    kv_map: np.ndarray,
    attn_scale: float,
    *,
    softcap: float | None = None,
    layout: str = "half",
    heads: slice | list[int] | None = None,
    rows: slice | None = None,
    cols: slice | None = None,
    dtype: torch.dtype = torch.float64,
    rotated: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    r"""Pre-softmax logits rebuilt from the captured tensors, in ``dtype``, every pair.

    .. math:: W_{ij} = c \tanh\big(s\, (R_i q_i)^\top (R_j k_j) / c\big)

    (docs/theory.md section 2; no ``tanh`` without a soft-cap ``c``); returns
    ``(len(heads), len(rows), len(cols))`` for the query heads, query rows
    and key columns selected (default all). The mask is not applied: see
    :func:`allowed_pairs`. ``rotated`` = ``(R q (H, N, d), R k (H, N, d))``
    already rotated (keys repeated per query head) skips the rotation.
    """
    select = slice(None) if heads is None else heads
    rows, cols = rows or slice(None), cols or slice(None)
    if rotated is None:
        cos, sin = cos.to(dtype), sin.to(dtype)
        qr = rotate_applied(q[select][:, rows].to(dtype), cos[rows], sin[rows], layout)  # (h, n, d)
        keys = k[torch.as_tensor(kv_map)[select]][:, cols].to(dtype)  # (h, c, d)
        kr = rotate_applied(keys, cos[cols], sin[cols], layout)  # (h, c, d)
    else:
        qr, kr = rotated[0][select][:, rows], rotated[1][select][:, cols]  # (h, n, d), (h, c, d)
    logits = torch.matmul(qr, kr.transpose(1, 2)).mul_(attn_scale)  # (h, n, c)
    if softcap is not None:
        logits = logits.div_(softcap).tanh_().mul_(softcap)
    return logits


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
    logits = rebuild_logits(q, k, cos, sin, kv_map, attn_scale, softcap=softcap, layout=layout,
                            heads=heads, dtype=dtype)  # fmt: skip
    allowed = allowed_pairs(q.shape[1], window, q.device)  # (N, N)
    return torch.softmax(logits.masked_fill_(~allowed, -math.inf), dim=-1)


@dataclass
class Reconstruction:
    """How far the capture's rebuild is from the model's own tensors, one layer.

    ``rope_max_rel_diff``: ``max |R q - (R q)_model| / max |(R q)_model|``
    (queries and keys); ``logit_max_abs_diff``: ``max |W - W_model|`` over
    the attended pairs, ``logit_scale``: ``max |W_model|`` there;
    ``probs_max_abs_diff``: ``max |A - A_model|``.
    """

    rope_max_rel_diff: float
    logit_max_abs_diff: float
    logit_scale: float
    probs_max_abs_diff: float

    @property
    def logit_max_rel_diff(self) -> float:
        return self.logit_max_abs_diff / max(self.logit_scale, _TINY)


_TINY = 1e-30


def _max_abs(x: torch.Tensor) -> float:
    """``max |x|`` without a temporary (``max(amax, -amin)``; 0 for an empty tensor)."""
    if not x.numel():
        return 0.0
    low, high = torch.aminmax(x)  # one pass
    return max(float(high), -float(low))


def max_rel(rebuilt: torch.Tensor, model: torch.Tensor) -> float:
    """``max |rebuilt - model| / max |model|`` (0 when both vanish)."""
    return _max_abs(rebuilt - model) / max(_max_abs(model), _TINY) if model.numel() else 0.0


def _reconstruct(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    kv_map: np.ndarray,
    attn_scale: float,
    *,
    window: int | None,
    softcap: float | None,
    layout: str,
    model_logits: torch.Tensor | None,
    probs: torch.Tensor,
    rotated: tuple[torch.Tensor, torch.Tensor],
) -> tuple[float, float, float]:
    """``(logit_max_abs_diff, logit_scale, probs_max_abs_diff)`` over all heads.

    Logits are rebuilt in float32 (the model's precision), in blocks of query
    rows ``[r0, r1)`` against the keys they may attend (``[r0 - w + 1, r1)``,
    the causal part only), about :data:`BLOCK_ELEMENTS` elements each (of
    2^17 to 2^21, 2^19 validated 16 x 512 tokens of the default model
    fastest: 0.90 times 2^17's time, in fewer and larger operations). On the
    attended pairs they are compared with the model's
    pre-softmax logits ``model_logits`` ``(H, N, N)`` (when tapped); their
    softmax is compared with ``probs``, and each row of ``probs`` must put
    all its mass inside its block (a model attending beyond the mask fails).
    ``rotated`` = ``(R q (H, N, d), R k (Hkv, N, d))``.
    """
    (n_heads, n_tokens) = q.shape[:2]
    qr, kr = rotated[0], rotated[1][torch.as_tensor(kv_map)]  # (H, N, d) each, float32
    allowed = allowed_pairs(n_tokens, window, q.device)  # (N, N)
    step = max(1, BLOCK_ELEMENTS // (n_heads * n_tokens))
    logit_diff = logit_scale = prob_diff = 0.0
    for r0 in range(0, n_tokens, step):
        r1 = min(r0 + step, n_tokens)
        c0 = 0 if window is None else max(0, r0 - window + 1)
        rows, cols = slice(r0, r1), slice(c0, r1)
        logits = rebuild_logits(q, k, cos, sin, kv_map, attn_scale, softcap=softcap,
                                layout=layout, rows=rows, cols=cols, dtype=torch.float32,
                                rotated=(qr, kr))  # fmt: skip  # (H, n, c)
        attended = allowed[rows, cols]  # (n, c)
        keep = attended.to(logits.dtype)  # (n, c): 1 attended, 0 masked
        if model_logits is not None:  # its masked entries may be -inf: where, not a product
            model = torch.where(attended, model_logits[:, rows, cols], 0.0)  # (H, n, c)
            logit_scale = max(logit_scale, _max_abs(model))
            logits.mul_(keep)  # the attended pairs only (rebuilt logits are finite)
            logit_diff = max(logit_diff, _max_abs(model.sub_(logits)))
            del model
        model_probs = probs[:, rows, cols].float()  # (H, n, c)
        outside = _max_abs(1.0 - model_probs.sum(-1))  # mass beyond the block
        masked = torch.zeros_like(keep).masked_fill_(~attended, -math.inf)  # (n, c)
        rebuilt = torch.softmax(logits.add_(masked), dim=-1)  # (H, n, c)
        prob_diff = max(prob_diff, outside, _max_abs(rebuilt.sub_(model_probs)))
    return logit_diff, logit_scale, prob_diff


# --------------------------------------------------------------------------- taps


@dataclass
class _CaptureState:
    """What the capture's taps share during one forward pass of ``B`` sequences."""

    loaded: LoadedModel
    positions: np.ndarray  # (B, N)
    keep_probs: bool
    tol: Tolerances = field(default_factory=Tolerances)
    on_layer: Callable[[list[LayerCapture]], None] | None = None  # streaming: a layer, each seq
    check: bool = True  # streamed layers: validate each as it finishes
    stop_after: int | None = None  # the forward pass ends after this layer's attention
    raw: dict[int, dict[str, Any]] = field(default_factory=dict)
    done: dict[int, list[LayerCapture]] = field(default_factory=dict)
    tables: dict[tuple[int, int], tuple[str, np.ndarray, float]] = field(
        default_factory=dict
    )  # (cos data_ptr, sin data_ptr) -> layout, theta, amplitude: one derivation per table
    resident: int | None = None  # streamed: bytes resident after the first layer


class _LastAttention(Exception):
    """Raised after the last layer's attention is captured: the rest of the forward pass
    (that layer's output projection and MLP, the final norm) is not needed."""


def _on_logits(state: _CaptureState) -> Any:
    def record(layer: int, logits: torch.Tensor) -> None:
        if layer in state.raw:
            state.raw[layer]["logits"] = logits  # (B, H, N, N), mask added

    return record


def _on_attention(state: _CaptureState) -> Any:
    def finish(layer: int, arguments: Mapping[str, Any], result: Any) -> None:
        if layer not in state.raw:
            return
        done = [_finish_layer(state, layer, arguments, result[1], b)
                for b in range(state.positions.shape[0])]  # fmt: skip
        if state.on_layer is not None:  # streamed: checked, handed on, only the numbers kept
            if state.check:
                for one in done:
                    check_reconstruction(Capture([one], torch.zeros(0), torch.zeros(0),
                                                 tolerances=state.tol))  # fmt: skip
            state.on_layer(done)
            done = [_released(one) for one in done]
        state.done[layer] = done
        del state.raw[layer]
        if state.stop_after == layer:  # nothing after the last attention is needed
            raise _LastAttention
        if state.on_layer is not None:  # streamed: the process stays at one layer's size
            state.resident = release_growth(state.resident)

    return finish


def _released(layer: LayerCapture) -> LayerCapture:
    """``layer`` without its tensors (a streamed capture keeps only the numbers)."""
    empty = torch.zeros(0)
    return replace(layer, q=empty, k=empty, cos=empty, sin=empty, probs=None)




def _finish_layer(
    state: _CaptureState, layer: int, arguments: Mapping[str, Any], weights: Any, b: int
) -> LayerCapture:
    """Assemble, check and validate sequence ``b`` of one layer from what the taps saw."""
    raw, module = state.raw[layer], arguments["module"]
    extra = arguments.get("kwargs", {})
    query, key = arguments["query"].detach()[b], arguments["key"].detach()[b]  # (H|Hkv, N, d)
    (d,) = query.shape[-1:]
    q, k = raw["q"][b], raw["k"][b]
    q, k = with_rest(q, query), with_rest(k, key)  # (H, N, d), (Hkv, N, d)
    if d % 2:
        raise RopesplitError(f"head_dim must be even, got {d}")
    if not (math.isfinite(_max_abs(q)) and math.isfinite(_max_abs(k))):  # NaN propagates
        raise RopesplitError(
            f"non-finite activations (NaN or inf) in the queries/keys of layer {layer}"
        )
    (n_heads, _, _), (n_kv, _, _) = q.shape, k.shape
    kv_map = repeat_kv_map(n_heads, n_kv)  # repeat_kv's grouping
    cos, sin = raw["cos"][b], raw["sin"][b]  # (N, r)
    (r,) = cos.shape[-1:]
    if r % 2 or r > d:
        raise RopesplitError(f"rotary_dim must be even and at most head_dim {d}, got {r}")
    layout, theta_r, amplitude = cached_geometry(state.tables, cos, sin, state.positions[b],
                                                 f"cos/sin of layer {layer}")  # fmt: skip
    layer_type = getattr(module, "layer_type", None)
    if layer_type is None and getattr(state.loaded.config, "layer_types", None):
        layer_type = state.loaded.config.layer_types[layer]
    base, rope_type = rope_base(state.loaded.config, layer_type)
    seq_len = int(state.positions.max()) + 1  # what a dynamic RoPE recomputes its table for
    expected = config_theta(state.loaded.config, layer_type, r, seq_len)  # (r/2,) or None
    if expected is not None:
        if getattr(state.loaded.model, SHUFFLED_FLAG, False):  # models.shuffled_frequencies
            expected = np.sort(expected)[np.argsort(np.argsort(theta_r))]
        err = float(np.max(np.abs(theta_r / expected - 1.0)))
        if err > state.tol.theta:
            raise ValidationError(
                f"theta of layer {layer} does not match rope_theta {base:g} ({rope_type}; "
                f"relative error {err:.1e}, tolerance {state.tol.theta:.1e})"
            )
        if state.tol.half:  # a half-precision table: the config's exact frequencies
            theta_r = expected
    theta = full_theta(theta_r, d)  # (d/2,)
    attn_scale = arguments.get("scaling")
    if attn_scale is None:
        attn_scale = getattr(module, "scaling", None) or d**-0.5
    window = extra.get("sliding_window", getattr(module, "sliding_window", None))
    window = int(window) if window else None
    softcap = arguments.get("softcap", extra.get("softcap"))
    softcap = float(softcap) if softcap else None
    probs = weights.detach()[b]  # (H, N, N)
    qr = rotate_applied(q, cos, sin, layout)  # (H, N, d)
    kr = rotate_applied(k, cos, sin, layout)  # (Hkv, N, d)
    # against R q, R k as the model attends with them (its RoPE's output)
    rope_diff = max(max_rel(qr, query.float()), max_rel(kr, key.float()))
    logit_diff, logit_scale, prob_diff = _reconstruct(
        q, k, cos, sin, kv_map, float(attn_scale), window=window, softcap=softcap, layout=layout,
        model_logits=raw["logits"][b] if "logits" in raw else None, probs=probs, rotated=(qr, kr),
    )  # fmt: skip
    return LayerCapture(
        layer=layer, q=q, k=k, cos=cos, sin=sin, theta=theta, rope_amplitude=amplitude,
        attn_scale=float(attn_scale), scale=float(attn_scale) * amplitude**2, kv_map=kv_map,
        window=window, softcap=softcap, layout=layout, rotary_dim=int(r), rope_base=base,
        reconstruction_max_abs_diff=prob_diff, rope_max_rel_diff=rope_diff,
        logit_max_abs_diff=logit_diff if "logits" in raw else math.nan,
        logit_scale=logit_scale if "logits" in raw else math.nan,
        probs=probs.float().clone() if state.keep_probs else None,
    )  # fmt: skip


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
    causal by index. Each layer is rebuilt from the capture and compared with
    the model's own tensors: the rotated queries/keys (relative to their
    largest entry), the pre-softmax logits on the attended pairs (relative to
    the largest logit) and the probabilities (absolute). With ``validate``, a
    difference above :data:`ROPE_TOL`, :data:`LOGIT_TOL` or
    :data:`RECONSTRUCTION_TOL` raises ``ValidationError``.
    ``keep_probs=False`` drops the ``(H, N, N)`` probabilities after that check
    (they dominate memory at large N); ``keep_logits`` keeps the model's
    output logits ``(N, vocab)`` (without it the pass stops after the last
    layer's attention: nothing later is needed). :func:`capture_batch` runs many sequences.
    """
    ids = as_input_ids(loaded, input_ids)  # (1, N)
    (result,) = _run(loaded, ids, position_ids, keep_probs=keep_probs, keep_logits=keep_logits)
    if validate:
        check_reconstruction(result)
    return result


def capture_batch(
    loaded: LoadedModel,
    input_ids: Any,
    position_ids: Any = None,
    *,
    on_layer: Callable[[list[LayerCapture]], None],
    validate: bool = True,
    keep_probs: bool = False,
) -> list[Capture]:
    r"""One forward pass of ``B`` sequences ``input_ids (B, N)``, streamed layer by layer.

    As each layer finishes, each sequence's :class:`LayerCapture` is rebuilt
    and validated as in :func:`capture` (``validate``: a miss raises at once)
    and the layer's captures, one per sequence, go to ``on_layer(captures)``; then their tensors are
    released, so memory holds one layer's captures at a time (and the model's
    own activations). Returns one :class:`Capture` per sequence holding the
    validation numbers only (``q``, ``k``, tables and probabilities
    released). ``position_ids`` is ``(N,)`` for every sequence or ``(B, N)``;
    ``keep_probs`` hands each layer's probabilities to ``on_layer`` too.
    """
    ids = as_input_ids(loaded, input_ids, batch=True)  # (B, N)
    return _run(loaded, ids, position_ids, keep_probs=keep_probs, keep_logits=False,
                on_layer=on_layer, validate=validate)  # fmt: skip


def _run(
    loaded: LoadedModel,
    ids: torch.Tensor,
    position_ids: Any,
    *,
    keep_probs: bool,
    keep_logits: bool,
    on_layer: Callable[[list[LayerCapture]], None] | None = None,
    validate: bool = False,
) -> list[Capture]:
    """The forward pass through the taps: one :class:`Capture` per sequence of ``ids (B, N)``."""
    pos = as_position_ids(ids, position_ids)  # (B, N)
    check_positions(loaded, pos)
    if loaded.model.config._attn_implementation != "eager":
        raise RopesplitError("capture needs attn_implementation='eager'; load with load_model")
    tol = tolerances(loaded.model.dtype)
    state = _CaptureState(loaded, pos.cpu().numpy(), keep_probs, tol, on_layer, validate,
                          stop_after=None if keep_logits else loaded.n_layers - 1)  # fmt: skip
    out = None
    on_rope = record_pre_rope(state.raw, dtype=torch.float32)  # (B, H, N, .) float32 copies
    with taps(loaded, on_rope=on_rope, on_attention=_on_attention(state),
              on_logits=_on_logits(state)), torch.no_grad():  # fmt: skip
        # an explicit all-ones mask keeps the mask causal by index: without it,
        # transformers reads non-+1 steps in position_ids as packed sequences;
        # without kept logits the base model runs (no (B, N, vocab) output head) and stops
        # after the last attention (_LastAttention)
        model = loaded.model if keep_logits else loaded.model.base_model
        try:
            out = model(input_ids=ids, position_ids=pos, attention_mask=torch.ones_like(ids),
                        use_cache=False)  # fmt: skip
        except _LastAttention:
            pass
    missing = [i for i in range(loaded.n_layers) if i not in state.done]
    if missing:
        raise RopesplitError(f"no rotary embedding was applied in layers {missing}")
    return [Capture(layers=[state.done[i][b] for i in range(loaded.n_layers)],
                    input_ids=ids[b].cpu(), positions=pos[b].cpu(),
                    logits=out.logits[b].float() if keep_logits and out is not None else None,
                    tolerances=tol)
            for b in range(ids.shape[0])]  # fmt: skip


def check_reconstruction(cache: Capture) -> None:
    """Raise ``ValidationError`` when any rebuild misses its tolerance (one line, all numbers)."""
    tol = cache.tolerances
    checks = (
        ("reconstruction_max_abs_diff", cache.reconstruction_max_abs_diff, tol.probs),
        ("logit_max_rel_diff", cache.logit_max_rel_diff, tol.logit),
        ("rope_max_rel_diff", cache.rope_max_rel_diff, tol.rope),
    )
    if all(value <= tol for _, value, tol in checks):
        return
    raise ValidationError(
        ", ".join(f"{name} {value:.2e} {'exceeds' if not value <= tol else 'within'} {tol:g}"
                  for name, value, tol in checks)
        + ": the capture does not reproduce the model's attention"
    )  # fmt: skip
