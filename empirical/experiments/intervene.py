r"""Edit the split inside the forward pass: attention from ``W + Delta W`` on chosen heads.

The interventions that test the split causally (the changes :math:`\Delta W` are the formulas
of :mod:`ropesplit.numerics.intervention`; nothing is computed here but the
arrays they take). Through the one patching module
(:func:`ropesplit.empirical.adapter.taps`, as LM-Infinite):

- ``on_rope`` keeps each layer's pre-RoPE ``q``/``k`` and ``cos``/``sin``
  table (the frequencies, layout and RoPE amplitude come from the table:
  ``capture.table_geometry``);
- the attention function of the block hands every layer to the model's own
  ``eager_attention_forward``; on an edited layer it adds :math:`\Delta W`
  ``(B, H, N, N)`` (0 on the heads left alone) to the additive attention
  mask, so the eager code computes :math:`\mathrm{softmax}(W + M + \Delta W)`
  with the model's own arithmetic, bit for bit the same where
  :math:`\Delta W = 0`.

An :class:`Edit` names the edit (:data:`EDITS`), the layers and heads, the
reference key :math:`\bar k` per layer (estimated on other passages by
:func:`calibrate_kbars`: a passage's own mean key would let each query see
later tokens), the reference of ``g`` (``"zero"``, the paper's split, or
``"mean"``, the mean rotation), the training length of the cap edits and the
seed of the noise and of the shuffled frequencies.

Supported: what LM-Infinite supports (an ``apply_rotary_pos_emb`` and an
attention function; no logit soft-capping).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.adapter import AttentionCall, record_pre_rope, taps
from ropesplit.empirical.model.capture import LayerCapture, capture_batch
from ropesplit.empirical.model.geometry import cached_geometry, full_theta, with_rest
from ropesplit.empirical.model.inputs import as_input_ids, as_position_ids, check_positions
from ropesplit.empirical.model.loaded import LoadedModel
from ropesplit.empirical.model.passes import model_pass, token_nll
from ropesplit.numerics import intervention as iv
from ropesplit.numerics.reference import resolve_reference
from ropesplit.numerics.spec import repeat_kv_map, spec_scale

__all__ = ["EDITS", "Edit", "calibrate_kbars", "install", "intervened_nll"]

EDITS = {
    "remainder": "attention from f + g (E dropped)",
    "semantic": "attention from f + E (g dropped)",
    "noise": "a Gaussian term with E's row norms dropped (the null of edit 1)",
    "structured": "the remainder under shuffled frequencies, rows at E's norms, dropped (the "
    "structured null of edit 1)",
    "fast_keys": "keys' deviation in the fast pairs replaced by kbar",
    "slow_keys": "the same deviation energy removed from the slow pairs (control)",
    "cap_f": "f capped at the training length L (W + f(q, L) - f(q, Delta), Delta > L)",
    "cap_rest": "g + E capped at L (W + (W - f)(L) - (W - f)(Delta), Delta > L)",
    "cap_all": "every term capped at L (W(L), LM-Infinite's distance cap without its mask)",
    "shuffle": "the frequencies shuffled over the pairs (seeded per layer)",
    "shuffle_band": "the frequencies shuffled within the low-frequency half and within the "
    "high-frequency half (the null of shuffle that hurts too)",
}
_NEEDS_KBAR = {"remainder", "semantic", "noise", "structured", "fast_keys", "slow_keys",
               "cap_f", "cap_rest", "cap_all"}  # fmt: skip


@dataclass(frozen=True)
class Edit:
    """One intervention: ``kind`` (:data:`EDITS`) on ``layers`` (all heads unless ``heads``)."""

    kind: str
    layers: tuple[int, ...] = ()
    heads: tuple[int, ...] | None = None  # query heads of each edited layer (None: all)
    # layer -> its kbar (Hkv, d)
    kbars: Mapping[int, np.ndarray] | None = field(default=None, repr=False)
    reference: str = "zero"  # m of g: "zero" (the paper's split) or "mean"
    length: int | None = None  # the cap edits' training length L
    seed: int = 0  # the noise draw and the shuffled order
    strength: float = 1.0  # fast_keys / slow_keys: the share of the removal's weights applied

    def __post_init__(self) -> None:
        if self.kind not in EDITS:
            raise RopesplitError(f"edit must be one of {', '.join(EDITS)}, got {self.kind!r}")
        if self.reference not in ("zero", "mean"):
            raise RopesplitError(f"reference must be zero or mean, got {self.reference!r}")
        if self.kind in _NEEDS_KBAR and self.layers:
            missing = [x for x in self.layers if self.kbars is None or x not in self.kbars]
            if missing:
                raise RopesplitError(f"edit {self.kind} needs kbar for layers {missing}")
        if self.kind.startswith("cap") and (self.length is None or self.length < 1):
            raise RopesplitError(f"edit {self.kind} needs the training length (>= 1)")
        if not 0.0 <= self.strength <= 1.0:
            raise RopesplitError(f"strength must lie in [0, 1], got {self.strength}")


def calibrate_kbars(loaded: LoadedModel, input_ids: Any) -> dict[int, np.ndarray]:
    r"""Each layer's reference key :math:`\bar k` ``(Hkv, d)``: the mean pre-RoPE key over
    every token of the calibration sequences ``input_ids (B, N)`` (one streamed capture)."""
    means: dict[int, np.ndarray] = {}

    def add(layers: list[LayerCapture]) -> None:
        keys = torch.cat([one.k.double() for one in layers], dim=1)  # (Hkv, B N, d)
        means[layers[0].layer] = keys.mean(dim=1).numpy()

    capture_batch(loaded, input_ids, on_layer=add)
    return means


@dataclass
class _State:
    edit: Edit
    positions: np.ndarray  # (B, N)
    run: Any = None  # the adapter block's run: the forward pass, its errors in one line
    raw: dict[int, dict[str, Any]] = field(default_factory=dict)
    tables: dict[tuple[int, int], tuple[str, np.ndarray, float]] = field(default_factory=dict)


def _delta(state: _State, layer: int, query: torch.Tensor, key: torch.Tensor,
           scaling: float) -> torch.Tensor:  # fmt: skip
    """:math:`\\Delta W` ``(B, H, N, N)`` of ``state.edit`` on ``layer``, in float32."""
    edit, raw = state.edit, state.raw.pop(layer)
    batch, n_heads, n, d = query.shape
    n_kv = key.shape[1]
    kv = torch.as_tensor(repeat_kv_map(n_heads, n_kv))
    heads = list(range(n_heads)) if edit.heads is None else list(edit.heads)
    out = torch.zeros(batch, n_heads, n, n, dtype=torch.float32, device=query.device)
    for b in range(batch):
        row = min(b, raw["cos"].shape[0] - 1)  # one table for every sequence, or one each
        cos, sin = raw["cos"][row], raw["sin"][row]
        layout, theta_r, amplitude = cached_geometry(state.tables, cos, sin, state.positions[b])
        r = cos.shape[-1]
        theta = full_theta(theta_r, d)  # (d/2,)
        q, k = with_rest(raw["q"][b], query[b]), with_rest(raw["k"][b], key[b])
        qc = iv.pairs(q[heads].float(), layout, r)  # (h, N, P)
        kc = iv.pairs(k[kv[heads]].float(), layout, r)  # (h, N, P) the KV head each reads
        pos = state.positions[b].astype(np.float64)
        s = spec_scale(scaling, amplitude)
        kb = None
        if edit.kbars is not None and layer in edit.kbars:
            kb = iv.pairs(torch.as_tensor(edit.kbars[layer])[kv[heads]].float(), layout, r)
        m = None if edit.reference == "zero" else resolve_reference("mean", theta, n=n).m
        seed = [edit.seed, layer, b]
        if edit.kind == "remainder":
            change = iv.drop_remainder(qc, kc, kb, theta, pos, s, m)
        elif edit.kind == "semantic":
            change = iv.drop_semantic(qc, kc, kb, s, m)
        elif edit.kind == "noise":
            change = iv.same_norm_noise(-iv.drop_remainder(qc, kc, kb, theta, pos, s, m), seed)
        elif edit.kind == "structured":
            order = np.random.default_rng([edit.seed, layer]).permutation(theta.size)
            change = iv.structured_remainder(qc, kc, kb, theta, pos, s, order, m)
        elif edit.kind in ("fast_keys", "slow_keys"):
            fast = iv.fast_pairs(theta, n)
            weights = (torch.as_tensor(fast, dtype=torch.float32) if edit.kind == "fast_keys"
                       else iv.matched_slow_weights(kc, kb, fast))  # fmt: skip
            change = iv.drop_pair_deviation(qc, kc, kb, theta, pos, s, edit.strength * weights)
        elif edit.kind.startswith("cap"):
            length = float(edit.length or 0)
            change = torch.zeros(len(heads), n, n, dtype=qc.real.dtype)
            if edit.kind in ("cap_f", "cap_all"):
                change = change + iv.cap_positional(qc, kc, kb, theta, pos, s, length)
            if edit.kind in ("cap_rest", "cap_all"):
                change = change + iv.cap_rest(qc, kc, kb, theta, pos, s, length)
        else:  # shuffle, shuffle_band
            rng = np.random.default_rng([edit.seed, layer])
            order = (rng.permutation(theta.size) if edit.kind == "shuffle"
                     else iv.band_order(theta, rng))  # fmt: skip
            change = iv.shuffle_frequencies(qc, kc, theta, pos, s, order)
        out[b, heads] = change.to(torch.float32)
    return out


def _attention(state: _State) -> Any:
    def attention(call: AttentionCall) -> Any:
        layer, query, key = call.layer, call.query, call.key
        if layer not in state.edit.layers or state.edit.heads == ():
            state.raw.pop(layer, None)
            return call.eager()
        if call.softcap:
            raise RopesplitError(f"edits need attention without logit soft-capping (layer {layer})")
        delta = _delta(state, layer, query, key, call.scale).to(query.dtype)  # (B, H, N, N)
        n = key.shape[-2]
        mask = call.mask
        if mask is None:
            causal = torch.ones(n, n, dtype=torch.bool, device=query.device).tril()
            mask = torch.zeros_like(delta[:1, :1]).masked_fill_(~causal, -torch.inf)
        return call.eager(mask[:, :, :, :n] + delta)  # the eager code adds the mask to W

    return attention


@contextlib.contextmanager
def install(loaded: LoadedModel, edit: Edit, positions: np.ndarray) -> Iterator[_State]:
    """Within the block the model attends with ``W + Delta W`` on ``edit``'s heads.

    ``positions`` ``(B, N)``: the position ids of the forward pass to come.
    """
    bad = [x for x in edit.layers if x not in loaded.layers]
    if bad:
        raise RopesplitError(f"edit layers must lie in [0, {loaded.n_layers}), got {bad}")
    state = _State(edit, np.asarray(positions))
    on_rope = record_pre_rope(state.raw, state.edit.layers)
    with taps(loaded.model, loaded.attn, on_rope=on_rope, attention=_attention(state)) as block:
        state.run = block.run
        yield state


def intervened_nll(
    loaded: LoadedModel, input_ids: Any, edit: Edit | None, position_ids: Any = None
) -> np.ndarray:
    r"""The next-token loss ``(B, N - 1)`` of ``input_ids (B, N)`` under ``edit`` (None: as is).

    .. math:: \ell_{bn} = -\log p(x_{b,n+1} \mid x_{b,\le n}) \text{ with attention }
              \mathrm{softmax}(W + \Delta W)
    """
    ids = as_input_ids(loaded, input_ids, batch=True)  # (B, N)
    pos = as_position_ids(ids, position_ids)  # (B, N)
    check_positions(loaded, pos)
    with contextlib.ExitStack() as stack, torch.no_grad():
        if edit is None:  # eager, as the edits: a null edit is bit-identical
            out = model_pass(loaded.model, ids, pos)
        else:
            state = stack.enter_context(install(loaded, edit, pos.cpu().numpy()))
            out = state.run(model_pass, loaded.model, ids, pos)
    nll = token_nll(out.logits[:, :-1], ids[:, 1:]).cpu().numpy()  # (B, N - 1)
    if not np.all(np.isfinite(nll)):
        raise RopesplitError(f"edit {edit}: the loss is not finite (NaN or inf logits)")
    return nll
