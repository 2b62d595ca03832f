r"""Capture pre-RoPE queries and keys where the model applies rotary embeddings.

Through :func:`ropesplit.empirical.adapter.taps` (the one adapter between
transformers and ropesplit) the capture sees every layer's RoPE call (the
pre-RoPE ``q``, ``k``, the tables and the model's own result ``(R q, R k)``),
the pre-softmax logits the eager attention hands to ``softmax`` and the
attention function's arguments and probabilities. So it records exactly what the model rotates
(after any q/k norm), the ``cos``/``sin`` it applies (every RoPE scaling
included), and the scale, soft-cap and window it uses, without
re-implementing any model.

From the captured ``cos``/``sin`` the frequencies of docs/theory.md section 1 are
derived, ``cos[n, l] = a cos(p_n theta_l)``, ``sin[n, l] = a sin(p_n theta_l)``
(``a`` a constant attention factor, folded into the scale as ``s a^2``).

Validation (what it checks: :mod:`ropesplit.empirical.model.validate`): each layer is
rebuilt from the captured tensors alone and compared with the model's own; a
failure is a :class:`~ropesplit.core.errors.ValidationError`.

Shapes (batch of one)::

    q       (H, N, d)     pre-RoPE queries, H query heads
    k       (Hkv, N, d)   pre-RoPE keys, Hkv KV heads; head h reads kv_map[h]
    cos/sin (N, r)        as applied; r = rotary_dim <= d
    theta   (d/2,)        float64 frequencies, 0 for the d - r non-rotating coords
    W       (H, N, N)     pre-softmax logits (rebuilt per head during validation)
    probs   (H, N, N)     the model's attention probabilities (kept on request)
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError, ValidationError
from ropesplit.empirical.adapter import AttentionCall, Held, StopForward, record_pre_rope, taps
from ropesplit.empirical.adapter.configs import (
    config_theta,
    layer_type_of,
    rope_base,
)
from ropesplit.empirical.model.geometry import cached_geometry, full_theta
from ropesplit.empirical.model.inputs import as_input_ids, as_position_ids, check_positions
from ropesplit.empirical.model.loaded import LoadedModel
from ropesplit.empirical.model.memory import release_growth
from ropesplit.empirical.model.passes import model_pass
from ropesplit.empirical.model.validate import (
    ModelAttention,
    RotatedAttention,
    Tolerances,
    check_reconstruction,
    mask_bias,
    max_abs,
    max_rel,
    read_mask,
    rebuild_logits,
    rebuild_probs,
    reconstruct,
    sampled_rows,
    tolerances,
    unshifted,
)
from ropesplit.numerics.applied import rotate_applied
from ropesplit.numerics.mask import Mask
from ropesplit.numerics.spec import RopeSpec, repeat_kv_map, spec_scale

if TYPE_CHECKING:  # pragma: no cover
    from ropesplit.empirical.measurement.shuffled import ShuffledFrequencies

__all__ = ["Capture", "LayerCapture", "Pairs", "RopeSeen", "capture", "capture_batch",
           "finish_layer"]

_HOOK_NAME = re.compile(r"^blocks\.(\d+)\.attn\.hook_(\w+)$")


@dataclass(frozen=True)
class Pairs:
    r"""A captured layer's first ``n`` positions as float64 features and complex RoPE pairs.

    Pair ``l`` of a head vector is :math:`\tilde x_l = x_a + i x_b` (docs/theory.md
    section 1; ``numerics.rope.to_pairs``: ``(a, b) = (l, l + r/2)`` in the ``"half"``
    layout, ``(2l, 2l+1)`` interleaved, the ``d - r`` non-rotating coordinates paired the
    same way among themselves), so that

    .. math:: W_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\,\overline{\tilde k_{jl}}\,
              e^{i\theta_l (p_i - p_j)}

    The one view every statistic, figure and training measure reads a capture through
    (:meth:`LayerCapture.pairs`).
    """

    q: np.ndarray  # (H, n, d) float64 pre-RoPE queries
    k: np.ndarray  # (Hkv, n, d) float64 pre-RoPE keys
    qc: np.ndarray  # (H, n, P) complex128 query pairs
    kc_kv: np.ndarray  # (Hkv, n, P) complex128 key pairs, one per KV head
    kv_map: np.ndarray  # (H,) the KV head each query head reads

    @property
    def kc(self) -> np.ndarray:
        """``(H, n, P)`` key pairs, the KV head each query head reads."""
        return self.kc_kv[self.kv_map]

    @property
    def n(self) -> int:
        """The positions viewed."""
        return int(self.q.shape[1])


@dataclass
class LayerCapture:
    """One layer's capture; ``Capture[name, layer]`` reads these fields and the geometry's.

    ``spec`` is the layer's geometry as the numerics take it (a
    :class:`~ropesplit.numerics.spec.RopeSpec`: theta, ``s``, layout, rotary dim, window,
    KV map), built once from what the model applies; ``theta``, ``scale``, ``kv_map``,
    ``window``, ``layout`` and ``rotary_dim`` read it.
    """

    layer: int
    q: torch.Tensor  # (H, N, d) float32, pre-RoPE, after any q norm
    k: torch.Tensor  # (Hkv, N, d) float32, pre-RoPE, after any k norm
    cos: torch.Tensor  # (N, r) as applied
    sin: torch.Tensor  # (N, r) as applied
    spec: RopeSpec  # theta (0 for non-rotating pairs), s = attn_scale a^2, layout, r, window, map
    rope_amplitude: float  # a in cos = a cos(p theta); 1 unless an attention factor
    attn_scale: float  # the module's own scale (scaling argument)
    softcap: float | None  # logit soft-cap (Gemma 2) or None
    rope_base: float | None  # the config's RoPE base for this layer's type
    reconstruction_max_abs_diff: float  # max |A - A_model| (probabilities)
    rope_max_rel_diff: float = math.nan  # max |R q - (R q)_model| / max |(R q)_model|, q and k
    logit_max_abs_diff: float = math.nan  # max |W - W_model| over the attended pairs
    logit_scale: float = math.nan  # max |W_model| over the attended pairs
    probs: torch.Tensor | None = None  # (H, N, N) the model's own, if kept
    sinks: torch.Tensor | None = None  # (H,) sink logits in the softmax's normaliser, if any
    shared_key: bool = False  # MLA: the rotating key is one head shared by every head
    # learned gains after RoPE: each head's share of the row-centred logit variance in the
    # absolute term (i + j) they add (numerics.gains); q, k then hold the relative part's
    absolute_share: np.ndarray | None = None
    # the query rows whose logits and probabilities were rebuilt and compared: all of them
    # for the first sequence of a forward pass, a seeded sample for the others
    validated_rows: int = 0
    # the pairs the attention call lets through when they are not the causal band of
    # spec.window: attention both ways, blocks, padding (docs/theory.md section 9)
    mask: Mask | None = None
    # the attention kernel the model ran ("eager", "sdpa", ...); a kernel that forms no
    # probabilities is validated by its output: max |A V - O_model| / max |V|
    attention: str = "eager"
    output_max_rel_diff: float = math.nan

    @property
    def theta(self) -> np.ndarray:
        """``(d/2,)`` float64 frequencies; 0 for non-rotating pairs."""
        return self.spec.frequencies

    @property
    def scale(self) -> float:
        """``s = attn_scale a^2``, the scale of W in docs/theory.md section 2."""
        return self.spec.scale

    @property
    def kv_map(self) -> np.ndarray:
        """``(H,)`` int: the KV head each query head reads."""
        return np.asarray(self.spec.kv_map, dtype=np.int64)

    @property
    def window(self) -> int | None:
        """The sliding window (``i - j < window``) or None."""
        return self.spec.window

    @property
    def layout(self) -> str:
        """``"half"`` or ``"interleaved"``."""
        return self.spec.layout

    @property
    def rotary_dim(self) -> int:
        """``r``: the coordinates that rotate."""
        return self.spec.rotary_dim or self.spec.head_dim

    @property
    def logit_max_rel_diff(self) -> float:
        """``logit_max_abs_diff / logit_scale``: the logit error relative to the logit scale."""
        if self.logit_scale:
            return self.logit_max_abs_diff / self.logit_scale
        # every attended logit exactly 0 (a tiny model's zero-initialised projection): rebuilt
        # exactly when the rebuild is 0 too
        return 0.0 if self.logit_max_abs_diff == 0 else math.nan

    @property
    def head_dim(self) -> int:
        return int(self.q.shape[-1])

    def pairs(self, n: int | None = None) -> Pairs:
        """The first ``n`` positions (all when None) as float64 features and complex pairs."""
        from ropesplit.numerics.rope import to_pairs

        q = self.q[:, :n].double().numpy()  # (H, n, d)
        k = self.k[:, :n].double().numpy()  # (Hkv, n, d)
        return Pairs(q, k, to_pairs(q, self.layout, self.rotary_dim),
                     to_pairs(k, self.layout, self.rotary_dim), self.kv_map)  # fmt: skip


@dataclass
class Capture:
    """All layers of one forward pass, indexed by ``(name, layer)``.

    ``cache["q", 3]`` is layer 3's pre-RoPE queries ``(H, N, d)``, one sequence's heads.
    A TransformerLens name (``"blocks.3.attn.hook_q"``) is refused with a pointer: in
    TransformerLens it means ``(batch, pos, head, d_head)``, another shape for the same
    name (:mod:`ropesplit.empirical.analysis.lens` reads such caches).
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
    def output_max_rel_diff(self) -> float:
        """Largest per-layer ``max |A V - O_model| / max |V|`` (NaN under eager attention,
        which is held to its probabilities and logits instead)."""
        return max(layer.output_max_rel_diff for layer in self.layers)

    @property
    def attention(self) -> str:
        """The attention kernel the model ran (``"eager"``, ``"sdpa"``, ...)."""
        return self.layers[0].attention if self.layers else "eager"

    @property
    def rope_max_rel_diff(self) -> float:
        """Largest per-layer relative difference of the rebuilt ``R q``/``R k``."""
        return max(layer.rope_max_rel_diff for layer in self.layers)

    def validation(self) -> dict[str, Any]:
        """The validation numbers, for JSON records: probabilities, logits and RoPE under
        eager attention, the output and RoPE under another kernel (``attention``; a number
        not measured is None, as JSON writes a NaN); and ``validated_rows``, the query rows
        of each layer whose logits were compared (every row, ``n_tokens``, for the first
        sequence of a forward pass; a seeded sample of
        :data:`~ropesplit.empirical.model.validate.VALIDATED_ROWS` for the others)."""
        numbers = {
            "validated_rows": min(layer.validated_rows for layer in self.layers),
            "reconstruction_max_abs_diff": self.reconstruction_max_abs_diff,
            "logit_max_rel_diff": self.logit_max_rel_diff,
            "logit_max_abs_diff": max(layer.logit_max_abs_diff for layer in self.layers),
            "logit_scale": max(layer.logit_scale for layer in self.layers),
            "rope_max_rel_diff": self.rope_max_rel_diff,
            "output_max_rel_diff": self.output_max_rel_diff,
            "attention": self.attention,
            **self.tolerances.as_dict(),
        }
        return {key: None if isinstance(value, float) and math.isnan(value) else value
                for key, value in numbers.items()}  # fmt: skip

    @property
    def n_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, key: tuple[str, int] | str) -> Any:
        if isinstance(key, str):
            match = _HOOK_NAME.match(key)
            hint = (f"; for layer {match.group(1)}'s {match.group(2)} ((H, N, d), not "
                    "TransformerLens' (batch, pos, head, d_head)) ask "
                    f"cache[{match.group(2)!r}, {match.group(1)}]") if match else ""  # fmt: skip
            raise KeyError(f"a capture is indexed by (name, layer), got {key!r}{hint}")
        name, layer = key
        if name not in _FIELD_NAMES:
            raise KeyError(f"unknown capture name {name!r}; one of {sorted(_FIELD_NAMES)}")
        return getattr(self.layer(layer), name)

    def layer(self, index: int) -> LayerCapture:
        """The capture of layer ``index`` (the model's own layer index: a hybrid's
        analysed layers are sparse)."""
        for one in self.layers:
            if one.layer == index:
                return one
        raise KeyError(f"layer {index} is not analysed; analysed: "
                       f"{[one.layer for one in self.layers]}")


_FIELD_NAMES = ({f.name for f in fields(LayerCapture)} - {"layer"}
                | {"theta", "scale", "kv_map", "window", "layout", "rotary_dim",
                   "logit_max_rel_diff", "head_dim"})  # fmt: skip


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
    # one read per mask and sequence (and window), keyed by the mask held (adapter.Held)
    masks: dict[tuple[Held | None, int, bool, int | None], Mask] = field(default_factory=dict)
    biases: dict[tuple[Held | None, int, int | None], torch.Tensor | None] = field(
        default_factory=dict
    )
    resident: int | None = None  # streamed: bytes resident after the first layer
    shuffled: bool = False  # under the frequency-order null: theta checked as a set


class _LastAttention(StopForward):
    """Raised after the last layer's attention is captured: the rest of the forward pass
    (that layer's output projection and MLP, the final norm) is not needed."""


def _on_logits(state: _CaptureState) -> Any:
    def record(layer: int, logits: torch.Tensor) -> None:
        if layer in state.raw:
            state.raw[layer]["logits"] = logits  # (B, H, N, N), mask added

    return record


def _on_attention(state: _CaptureState) -> Any:
    def finish(call: AttentionCall, result: Any) -> None:
        layer = call.layer
        if layer not in state.raw:
            return
        done = [_finish_layer(state, call, result, b)
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


@dataclass(frozen=True)
class RopeSeen:
    """One sequence of one layer's RoPE as the adapter saw it, with the geometry read off its
    table (docs/theory.md section 1: ``cos[n, l] = a cos(p_n theta_l)``, ``sin`` alike)."""

    q: torch.Tensor  # (H, N, d) pre-RoPE, rotating pairs first
    k: torch.Tensor  # (Hkv, N, d)
    query: torch.Tensor  # (H, N, d) R q as the model attends with it
    key: torch.Tensor  # (Hkv, N, d) R k
    cos: torch.Tensor  # (N, r) as applied
    sin: torch.Tensor  # (N, r)
    layout: str  # "half" or "interleaved"
    theta: np.ndarray  # (r/2,) the rotating pairs' frequencies
    amplitude: float  # a; 1 unless an attention factor

    @functools.cached_property
    def rotated(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(R q (H, N, d), R k (Hkv, N, d))``: ``q``, ``k`` turned by the applied table."""
        return (rotate_applied(self.q.float(), self.cos, self.sin, self.layout),
                rotate_applied(self.k.float(), self.cos, self.sin, self.layout))  # fmt: skip

    def spec(self, attn_scale: float, window: int | None = None) -> RopeSpec:
        """The layer's geometry as the numerics take it: theta (0 for the ``d - r``
        non-rotating pairs), ``s = attn_scale a^2``, layout, ``r``, window, KV map."""
        (n_heads, _, d), (n_kv, _, _), (r,) = self.q.shape, self.k.shape, self.cos.shape[-1:]
        s = spec_scale(attn_scale, self.amplitude)
        return RopeSpec.from_arrays(full_theta(self.theta, d), s, self.layout, int(r), window,
                                    repeat_kv_map(n_heads, n_kv))  # fmt: skip

    def rope_diff(self, gains: _Gains | None = None) -> float:
        """``max |R q - (R q)_model| / max |(R q)_model|``, queries and keys: the rotated
        features (times the gains a norm after RoPE applies) against what the model attends with."""
        qr, kr = self.rotated
        if gains is None:
            return max(max_rel(qr, self.query.float()), max_rel(kr, self.key.float()))
        return max(max_rel(qr * gains.q_gain, self.query.float()),
                   max_rel(kr * gains.k_gain, self.key.float()))  # fmt: skip


def finish_layer(layer: int, seen: RopeSeen, spec: RopeSpec, attn_scale: float,
                 gains: _Gains | None = None) -> LayerCapture:  # fmt: skip
    """The capture's record of one layer of one sequence from what the adapter saw, its RoPE
    checked (:meth:`RopeSeen.rope_diff`; the caller holds it to its tolerance). Under
    ``gains`` ``q``, ``k`` are the relative part's features (the split is of ``W^rel``).
    The softmax is not rebuilt here (``reconstruction_max_abs_diff`` NaN): the capture
    rebuilds and compares it (:func:`capture`), LM-Infinite's attention is no plain softmax."""
    q, k = (seen.q, seen.k) if gains is None else (gains.q, gains.k)
    return LayerCapture(
        layer=layer, q=q, k=k, cos=seen.cos, sin=seen.sin, spec=spec,
        rope_amplitude=seen.amplitude, attn_scale=attn_scale, softcap=None, rope_base=None,
        reconstruction_max_abs_diff=math.nan, rope_max_rel_diff=seen.rope_diff(gains),
    )  # fmt: skip


def _finish_layer(state: _CaptureState, call: AttentionCall, result: Any, b: int
                  ) -> LayerCapture:  # fmt: skip
    """Assemble, check and validate sequence ``b`` of one layer from what the adapter saw
    and what the kernel returned, ``result = (out, probs or None)``."""
    raw = state.raw[call.layer]
    seen, base = _seen(state, call, b)
    pairs = _mask(state, call, b)
    spec = seen.spec(call.scale, pairs.window if pairs.is_causal_band else None)
    gains = _gains(raw, seen.q, seen.k, spec, state.positions[b])  # learned gains after RoPE
    one = finish_layer(call.layer, seen, spec, float(call.scale), gains)
    features = seen if gains is None else replace(seen, q=one.q, k=one.k)  # W^rel's
    qr, kr = features.rotated  # (H, N, d), (Hkv, N, d)
    attention = RotatedAttention(qr, kr[torch.as_tensor(one.kv_map)], one.attn_scale,
                                 call.softcap, spec.window,
                                 None if pairs.is_causal_band else pairs)  # fmt: skip
    model = _model_attention(state, call, result, b, gains, attention)
    blocks = None if b == 0 else sampled_rows(seen.q.shape[1], (call.layer, b))
    logit_diff, logit_scale, prob_diff, output_diff = reconstruct(attention, model, blocks)
    tapped = "logits" in raw
    probs = None
    if state.keep_probs:  # a kernel that forms none: the rebuilt ones its output matched
        probs = (rebuild_probs(attention, model) if model.probs is None else model.probs).float()
    return replace(
        one, softcap=call.softcap, rope_base=base, reconstruction_max_abs_diff=prob_diff,
        logit_max_abs_diff=logit_diff if tapped else math.nan,
        logit_scale=logit_scale if tapped else math.nan,
        attention=call.kernel, output_max_rel_diff=output_diff,
        probs=None if probs is None else probs.clone(),
        sinks=None if model.sinks is None else model.sinks.float().cpu(),
        shared_key=bool(raw["shared_key"]), mask=attention.mask,
        absolute_share=None if gains is None else gains.share,
        validated_rows=seen.q.shape[1] if blocks is None else sum(r1 - r0 for r0, r1 in blocks),
    )  # fmt: skip


def _seen(state: _CaptureState, call: AttentionCall, b: int) -> tuple[RopeSeen, float | None]:
    """Sequence ``b`` of the layer's RoPE call, checked (even ``d`` and ``r <= d``, finite
    activations, the table's theta against the config's), and the config's RoPE base."""
    layer, raw = call.layer, state.raw[call.layer]
    # the attended query and key, and their pre-RoPE wholes, rotating pairs first (adapter)
    query, key = raw["q_rot"][b].detach(), raw["k_rot"][b].detach()  # (H|Hkv, N, d)
    (d,) = query.shape[-1:]
    q, k = raw["q"][b], raw["k"][b]  # (H, N, d), (Hkv, N, d)
    if d % 2:
        raise RopesplitError(f"head_dim must be even, got {d}")
    if not (math.isfinite(max_abs(q)) and math.isfinite(max_abs(k))):  # NaN propagates
        raise RopesplitError(
            f"non-finite activations (NaN or inf) in the queries/keys of layer {layer}"
        )
    cos, sin = raw["cos"][b], raw["sin"][b]  # (N, r)
    (r,) = cos.shape[-1:]
    if r % 2 or r > d:
        raise RopesplitError(f"rotary_dim must be even and at most head_dim {d}, got {r}")
    layout, theta_r, amplitude = cached_geometry(state.tables, cos, sin, state.positions[b],
                                                 f"cos/sin of layer {layer}")  # fmt: skip
    theta_r, base = _config_theta(state, call, theta_r)
    return RopeSeen(q, k, query, key, cos, sin, layout, theta_r, amplitude), base


def _config_theta(state: _CaptureState, call: AttentionCall, theta_r: np.ndarray
                  ) -> tuple[np.ndarray, float | None]:  # fmt: skip
    """The table's frequencies ``theta_r (r/2,)`` checked against those the config states
    (where it states them; under the frequency-order null as a set), replaced by them for a
    half-precision table; and the config's RoPE base for the layer's type."""
    config, layer = state.loaded.config, call.layer
    layer_type = layer_type_of(config, layer, call.module)
    base, rope_type = rope_base(config, layer_type)
    seq_len = int(state.positions.max()) + 1  # what a dynamic RoPE recomputes its table for
    r = 2 * theta_r.size  # the rotary dim: r/2 rotating pairs
    expected = config_theta(config, layer_type, r, seq_len)  # (r/2,) or None
    if expected is None:
        return theta_r, base
    if state.shuffled:  # shuffled.shuffled_frequencies: the config's values, rank-matched
        expected = np.sort(expected)[np.argsort(np.argsort(theta_r))]
    err = float(np.max(np.abs(theta_r / expected - 1.0)))
    if err > state.tol.theta:
        raise ValidationError(
            f"theta of layer {layer} does not match rope_theta {base:g} ({rope_type}; "
            f"relative error {err:.1e}, tolerance {state.tol.theta:.1e})"
        )
    # a half-precision table: the config's exact frequencies
    return (expected if state.tol.half else theta_r), base


def _mask(state: _CaptureState, call: AttentionCall, b: int) -> Mask:
    """The pairs the layer's call lets through for sequence ``b`` (:func:`read_mask`): a
    decoder's causal band, with the call's window or one kept only in the mask
    (Phi-3.5-MoE); an encoder's band, blocks and padding. Read once per mask."""
    key = (None if call.mask is None else Held(call.mask), b, call.causal, call.window)
    if key not in state.masks:
        state.masks[key] = read_mask(call.mask, b, call.causal, call.window)
    return state.masks[key]


def _model_attention(
    state: _CaptureState, call: AttentionCall, result: Any, b: int,
    gains: _Gains | None, rebuilt: RotatedAttention,
) -> ModelAttention:  # fmt: skip
    """What the model's attention produced for sequence ``b``, as the rebuild compares it:
    ``probs (H, N, N)``; its pre-softmax logits when tapped, less the mask's bias and the
    gains' absolute term and :func:`unshifted`; sinks in the normaliser; the bias. A kernel
    that forms no probabilities: its output ``(H, N, dv)`` and the values each head read."""
    raw, window = state.raw[call.layer], rebuilt.window
    weights = result[1]
    probs = None if weights is None else weights.detach()[b]
    model_logits = raw["logits"][b] if "logits" in raw else None
    # a sink in the softmax's normaliser shows as its column in the softmax input (gpt-oss);
    # a sink applied to the output (Granite-SWA) leaves the probabilities a plain softmax
    sinks = call.sinks
    if model_logits is None or model_logits.shape[-1] != model_logits.shape[-2] + 1:
        sinks = None
    key_of_mask = (None if call.mask is None else Held(call.mask), b, window)
    if key_of_mask not in state.biases:  # one read per mask and sequence (layers share it)
        state.biases[key_of_mask] = mask_bias(call.mask, b, window, rebuilt.mask)
    bias = state.biases[key_of_mask]  # Doge's per-key bias, else None
    if gains is not None:  # the gains' absolute term, beside the relative logit
        bias = gains.absolute if bias is None else bias + gains.absolute
    if model_logits is not None and bias is not None:
        model_logits = model_logits - bias
    if model_logits is not None and rebuilt.mask is None:  # a decoder's shifted rows
        model_logits = unshifted(model_logits, sinks, window, lambda: rebuild_logits(rebuilt))
    if probs is not None:
        return ModelAttention(probs, model_logits, sinks, bias)
    output = result[0].detach()[b].transpose(0, 1)  # (N, H, dv) -> (H, N, dv)
    value = call.value.detach()[b][torch.as_tensor(repeat_kv_map(output.shape[0],
                                                                 call.value.shape[1]))]
    return ModelAttention(None, model_logits, sinks, bias, output, value)


@dataclass(frozen=True)
class _Gains:
    """A layer's learned gains after RoPE, split (:mod:`ropesplit.numerics.gains`)."""

    q_gain: torch.Tensor  # (d,)
    k_gain: torch.Tensor  # (d,)
    q: torch.Tensor  # (H, N, d) the relative part's features
    k: torch.Tensor  # (Hkv, N, d)
    absolute: torch.Tensor  # (H, N, N) W^abs, float32
    share: np.ndarray  # (H,) its share of the row-centred logit variance


def _gains(raw: dict[str, Any], q: torch.Tensor, k: torch.Tensor, spec: RopeSpec,
           positions: np.ndarray) -> _Gains | None:  # fmt: skip
    """The gains a norm after RoPE applies, split into a relative logit's features and an
    absolute term (None where RoPE's output is attended as it is, or only rescaled)."""
    if raw.get("q_gain") is None and raw.get("k_gain") is None:
        return None
    from ropesplit.numerics.gains import (
        absolute_logits,
        absolute_share,
        gain_parts,
        relative_features,
    )

    d = q.shape[-1]
    ones = torch.ones(d, device=q.device)
    q_gain = ones if raw["q_gain"] is None else raw["q_gain"].float()
    k_gain = ones if raw["k_gain"] is None else raw["k_gain"].float()
    gain = (q_gain * k_gain).double().cpu().numpy()
    m, n = gain_parts(gain, spec)
    qn, kn = q.double().cpu().numpy(), k.double().cpu().numpy()
    q_rel, k_rel = relative_features(qn, kn, m)
    absolute = absolute_logits(qn, kn, spec, n, positions=positions)
    share = absolute_share(qn, kn, spec, gain, positions=positions)
    return _Gains(q_gain, k_gain, torch.as_tensor(q_rel, dtype=q.dtype, device=q.device),
                  torch.as_tensor(k_rel, dtype=k.dtype, device=k.device),
                  torch.as_tensor(absolute, dtype=torch.float32, device=q.device), share)


def capture(
    loaded: LoadedModel,
    input_ids: Any,
    position_ids: Any = None,
    *,
    keep_probs: bool = True,
    keep_logits: bool = False,
    validate: bool = True,
    null: ShuffledFrequencies | None = None,
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
    layer's attention: nothing later is needed). ``null``: the frequency-order null in
    force (``shuffled.shuffled_frequencies``), whose theta is checked against the config's
    as a set. :func:`capture_batch` runs many sequences.
    """
    ids = as_input_ids(loaded, input_ids)  # (1, N)
    (result,) = _run(loaded, ids, position_ids, keep_probs=keep_probs, keep_logits=keep_logits,
                     null=null)  # fmt: skip
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
    null: ShuffledFrequencies | None = None,
) -> list[Capture]:
    r"""One forward pass of ``B`` sequences ``input_ids (B, N)``, streamed layer by layer.

    As each layer finishes, each sequence's :class:`LayerCapture` is rebuilt
    and validated as in :func:`capture` (``validate``: a miss raises at once)
    and the layer's captures, one per sequence, go to ``on_layer(captures)``; then their tensors are
    released, so memory holds one layer's captures at a time (and the model's
    own activations). Returns one :class:`Capture` per sequence holding the
    validation numbers only (``q``, ``k``, tables and probabilities
    released). ``position_ids`` is ``(N,)`` for every sequence or ``(B, N)``;
    ``keep_probs`` hands each layer's probabilities to ``on_layer`` too; ``null`` as in
    :func:`capture`.
    """
    ids = as_input_ids(loaded, input_ids, batch=True)  # (B, N)
    return _run(loaded, ids, position_ids, keep_probs=keep_probs, keep_logits=False,
                on_layer=on_layer, validate=validate, null=null)  # fmt: skip


def _run(
    loaded: LoadedModel,
    ids: torch.Tensor,
    position_ids: Any,
    *,
    keep_probs: bool,
    keep_logits: bool,
    on_layer: Callable[[list[LayerCapture]], None] | None = None,
    validate: bool = False,
    null: ShuffledFrequencies | None = None,
) -> list[Capture]:
    """The forward pass through the taps: one :class:`Capture` per sequence of ``ids (B, N)``."""
    pos = as_position_ids(ids, position_ids)  # (B, N)
    check_positions(loaded, pos)
    tol = tolerances(loaded.model.dtype)
    state = _CaptureState(loaded, pos.cpu().numpy(), keep_probs, tol, on_layer, validate,
                          stop_after=None if keep_logits else loaded.layers[-1],
                          shuffled=null is not None)  # fmt: skip
    out = None
    on_rope = record_pre_rope(state.raw, dtype=torch.float32)  # (B, H, N, .) float32 copies
    with taps(loaded.model, loaded.attn, on_rope=on_rope, on_attention=_on_attention(state),
              on_logits=_on_logits(state), positions=state.positions) as block, \
            torch.no_grad():  # fmt: skip
        # without kept logits the base model runs (no (B, N, vocab) output head) and stops
        # after the last attention (_LastAttention)
        model = loaded.model if keep_logits else loaded.model.base_model
        try:
            out = block.run(model_pass, model, ids, pos)
        except _LastAttention:
            pass
    missing = [i for i in loaded.layers if i not in state.done]
    if missing:
        raise RopesplitError(f"no rotary embedding was applied in layers {missing}")
    return [Capture(layers=[state.done[i][b] for i in loaded.layers],
                    input_ids=ids[b].cpu(), positions=pos[b].cpu(),
                    logits=out.logits[b].float() if keep_logits and out is not None else None,
                    tolerances=tol)
            for b in range(ids.shape[0])]  # fmt: skip
