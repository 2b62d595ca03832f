r"""LM-Infinite's attention inside a real model, and each setting's own capture.

docs/theory.md section 4 (length extrapolation) on real forward passes: the
formulas (Lambda mask, distance cap, blockwise attention with one shared
softmax) are :func:`ropesplit.numerics.lambda_attention.lambda_attention`;
this module only installs them in a model, through the one adapter
:func:`ropesplit.empirical.adapter.taps`:

- ``on_rope`` keeps each layer's pre-RoPE ``q``/``k`` and its ``cos``/``sin``
  table (the cap needs the unrotated key and the query turned by ``L``, as
  the reference implementation's "stationary" states);
- ``attention=function`` makes :func:`lambda_attention_function` the
  model's attention (through transformers' ``AttentionInterface``) for the block.

The four settings of the experiment (:func:`settings`)::

    vanilla       the unmodified model (eager attention, no swap)
    cap only      every causal pair, distances min(Delta, L)
    mask only     Lambda mask (n_global starting tokens + n_local window), true distances
    LM-Infinite   Lambda mask and the cap

:func:`run_setting` runs the model once under a setting and returns the
next-token loss at every position and, for the layers asked for, the
pre-RoPE ``q (H, N, d)``, ``k (Hkv, N, d)``, ``theta``, scale and pair layout
that setting's own forward pass produced. Each recorded layer is checked as
the capture checks its own: the pre-RoPE queries/keys rotated by the applied
``cos``/``sin`` must reproduce the tensors the model's RoPE produced
(``rope_max_rel_diff`` <= ``ROPE_TOL``), and the table must fit one
frequency per pair (``theta`` derived from it).

Supported: models whose attention calls ``apply_rotary_pos_emb`` and then an
attention function (every model ``analyze`` accepts), full attention without
soft-capping, a batch of one sequence without padding (the mask is causal by
index, built here).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError, ValidationError
from ropesplit.empirical.adapter import AttentionCall, record_pre_rope, taps
from ropesplit.empirical.adapter.configs import bos_token_id
from ropesplit.empirical.model.capture import LayerCapture, RopeSeen, finish_layer
from ropesplit.empirical.model.geometry import cached_geometry, full_theta, with_rest
from ropesplit.empirical.model.inputs import as_input_ids, as_position_ids, check_positions
from ropesplit.empirical.model.loaded import LoadedModel
from ropesplit.empirical.model.passes import model_pass, token_nll
from ropesplit.empirical.model.validate import ROPE_TOL
from ropesplit.numerics.lambda_attention import (
    N_GLOBAL,
    LambdaSpec,
    far_query_key,
    lambda_attention,
)

__all__ = [
    "LAMBDA_SETTINGS",
    "LambdaSpec",
    "SettingRun",
    "install",
    "lambda_attention_function",
    "run_setting",
    "settings",
    "window_starts",
    "windowed_nll",
]

LAMBDA_SETTINGS = ("vanilla", "cap only", "mask only", "LM-Infinite")


def settings(length: int, n_global: int = N_GLOBAL) -> dict[str, LambdaSpec]:
    """The experiment's four settings at training length ``L`` (window and cap both ``L``)."""
    if length < 1:
        raise RopesplitError(f"training length must be at least 1, got {length}")
    return {
        "vanilla": LambdaSpec(),
        "cap only": LambdaSpec(cap=length),
        "mask only": LambdaSpec(n_local=length, n_global=n_global),
        "LM-Infinite": LambdaSpec(n_local=length, n_global=n_global, cap=length),
    }


@dataclass
class _State:
    """What the taps and the attention function share during one forward pass."""

    spec: LambdaSpec
    keep: frozenset[int]  # layers whose pre-RoPE q/k are kept
    run: Any = None  # the adapter block's run: the forward pass, its errors in one line
    raw: dict[int, dict[str, Any]] = field(default_factory=dict)  # layer -> q, k, cos, sin
    kept: dict[int, dict[str, Any]] = field(default_factory=dict)
    tables: dict[tuple[int, int], tuple[str, np.ndarray, float]] = field(default_factory=dict)


def lambda_attention_function(state: _State) -> Any:
    """The attention function of one setting: an adapter call in, ``(out, None)`` out."""

    def attention(call: AttentionCall) -> tuple[torch.Tensor, None]:
        layer, query, key, value = call.layer, call.query, call.key, call.value
        if call.window or call.softcap:
            raise RopesplitError(
                f"LM-Infinite attention needs full attention without soft-capping (layer {layer})"
            )
        if query.shape[0] != 1:
            raise RopesplitError(f"LM-Infinite attention runs one sequence, got {query.shape[0]}")
        spec, raw = state.spec, state.raw[layer]
        positions = call.kwargs.get("position_ids")
        n_tokens = int(query.shape[2])
        pos = np.arange(n_tokens) if positions is None else positions[0].cpu().numpy()
        far = None
        if spec.cap is not None:
            cos, sin = raw["cos"][0], raw["sin"][0]  # (N, r): one sequence
            layout, theta_r, amplitude = cached_geometry(state.tables, cos, sin, pos)
            (d,), (r,) = query.shape[-1:], cos.shape[-1:]
            theta = full_theta(theta_r, d)  # (d/2,)
            far = far_query_key(
                with_rest(raw["q"], query).to(query.dtype), with_rest(raw["k"], key).to(key.dtype),
                theta, spec.cap, amplitude=amplitude, layout=layout, rotary_dim=r,
            )  # fmt: skip
        out = lambda_attention(query, key, value, call.scale, spec, far=far,
                               positions=pos)  # fmt: skip  # (1, H, N, dv)
        return out.transpose(1, 2).contiguous(), None  # (1, N, H, dv) as eager returns

    return attention


@contextlib.contextmanager
def install(loaded: LoadedModel, spec: LambdaSpec, *, keep: Any = ()) -> Iterator[_State]:
    """Within the block the model attends as ``spec`` says (vanilla: unchanged).

    ``keep`` names the layers whose tensors the state keeps after the block:
    ``state.kept[layer]`` holds the pre-RoPE ``q``/``k``, ``cos``/``sin``, the
    attention function's ``query``, ``key``, ``value``, ``scaling`` and its
    output ``out``. Everything is restored by
    :func:`~ropesplit.empirical.adapter.taps` in ``finally``.
    """
    state = _State(spec, frozenset(int(x) for x in keep))
    on_rope = record_pre_rope(state.raw)

    def on_attention(call: AttentionCall, result: Any) -> None:
        raw = state.raw.pop(call.layer, None)
        if raw is not None and call.layer in state.keep:
            raw["scaling"] = call.scale
            raw["query"], raw["key"] = call.query, call.key  # (B, H|Hkv, N, d)
            raw["value"], raw["out"] = call.value, result[0]  # (B, Hkv, N, dv), (B, N, H, dv)
            state.kept[call.layer] = raw

    attention = None if spec.is_vanilla else lambda_attention_function(state)
    with taps(loaded.model, loaded.attn, on_rope=on_rope, on_attention=on_attention,
              attention=attention) as block:  # fmt: skip
        state.run = block.run
        yield state


@dataclass(frozen=True)
class SettingRun:
    """One forward pass under a setting: per-position loss and the kept layers."""

    name: str
    spec: LambdaSpec
    nll: np.ndarray  # (N - 1,) -log p(x_{n+1} | x_{<=n}), indexed by the query position n
    layers: dict[int, LayerCapture]  # the capture's own record of each kept layer
    positions: np.ndarray  # (N,)


def _layer_capture(layer: int, raw: dict[str, Any], positions: np.ndarray, state: _State
                   ) -> LayerCapture:  # fmt: skip
    """A kept layer as the capture records one
    (:func:`~ropesplit.empirical.model.capture.finish_layer`),
    checked against the model's own rotation (LM-Infinite runs full attention without
    soft-capping: no window, no soft-cap; the probabilities are the setting's, not rebuilt,
    so ``reconstruction_max_abs_diff`` is NaN)."""
    cos, sin = raw["cos"][0], raw["sin"][0]  # (N, r): one sequence
    q, k = with_rest(raw["q"], raw["query"])[0], with_rest(raw["k"], raw["key"])[0]  # pre-RoPE
    seen = RopeSeen(q, k, raw["query"][0], raw["key"][0], cos, sin,  # rotated: (H|Hkv, N, d)
                    *cached_geometry(state.tables, cos, sin, positions))  # fmt: skip
    one = finish_layer(layer, seen, seen.spec(raw["scaling"]), raw["scaling"])
    if not one.rope_max_rel_diff <= ROPE_TOL:
        raise ValidationError(
            f"rope_max_rel_diff {one.rope_max_rel_diff:.2e} exceeds {ROPE_TOL:g}: the pre-RoPE "
            "q/k rotated by the applied cos/sin do not reproduce the model's rotation"
        )
    return one


def run_setting(
    loaded: LoadedModel,
    input_ids: Any,
    spec: LambdaSpec,
    *,
    name: str = "",
    layers: Any = (),
    position_ids: Any = None,
) -> SettingRun:
    r"""One forward pass under ``spec``: the loss at every position and the kept layers.

    .. math:: \ell_n = -\log p(x_{n+1} \mid x_{\le n}),\quad n = 0 .. N-2

    ``layers`` are the layers whose pre-RoPE ``q``/``k`` are returned
    (:class:`~ropesplit.empirical.model.capture.LayerCapture`, each validated against the
    model's own rotation).
    """
    ids = as_input_ids(loaded, input_ids)  # (1, N)
    pos = as_position_ids(ids, position_ids)  # (1, N)
    check_positions(loaded, pos)
    positions = pos[0].cpu().numpy()
    with install(loaded, spec, keep=layers) as state, torch.no_grad():
        out = state.run(model_pass, loaded.model, ids, pos)
    nll = token_nll(out.logits[0, :-1], ids[0, 1:]).cpu().numpy()  # (N - 1,)
    if not np.all(np.isfinite(nll)):
        raise RopesplitError(f"setting {name or spec}: the loss is not finite (NaN or inf logits)")
    kept = {layer: _layer_capture(layer, state.kept[layer], positions, state)
            for layer in sorted(state.kept)}  # fmt: skip
    return SettingRun(name=name, spec=spec, nll=nll, layers=kept, positions=positions)


def window_starts(n_tokens: int, length: int) -> np.ndarray:
    r"""For each predicting position ``n`` (``0..N-2``), the start of its in-length window.

    Windows of ``L`` tokens start at multiples of ``h = max(1, L/2)`` (and at
    ``N - L``); position ``n`` is read in the earliest window that holds both
    ``x_n`` and the target ``x_{n+1}``, so it sees at least ``min(n, L - h - 1)``
    tokens of context, all at positions ``0 .. L-1``.

    >>> window_starts(10, 4).tolist()
    [0, 0, 0, 2, 2, 4, 4, 6, 6]
    """
    if length < 2:
        raise RopesplitError(f"training length must be at least 2, got {length}")
    if n_tokens <= length:
        return np.zeros(max(n_tokens - 1, 0), dtype=np.int64)
    step = max(1, length // 2)
    starts = sorted({*range(0, n_tokens - length + 1, step), n_tokens - length})
    n = np.arange(n_tokens - 1)  # (N - 1,)
    chosen = np.zeros(n_tokens - 1, dtype=np.int64)
    for s in reversed(starts):  # earlier windows win where they hold both x_n and x_{n+1}
        chosen = np.where((n >= s) & (n + 1 <= s + length - 1), s, chosen)
    return chosen


def windowed_nll(
    loaded: LoadedModel, input_ids: Any, length: int, *, batch_size: int = 8
) -> np.ndarray:
    r"""The in-length loss of every position: ``x_{n+1}`` predicted inside a window of ``L`` tokens.

    .. math:: \ell^{\mathrm{in}}_n = -\log p(x_{n+1} \mid x_{s_n .. n}),\quad
              \text{positions } 0 .. n - s_n,\quad s_n = \text{window\_starts}(N, L)_n

    The unmodified model, at positions it was trained on: the yardstick the
    settings' losses beyond ``L`` are compared with on the same tokens.

    When the text starts with the model's BOS token (``config.bos_token_id``)
    every window starts with it too, as every sequence the model was trained
    on did (a window cut mid-text without it measured the model off
    its training distribution): windows are ``BOS`` plus ``L - 1`` text
    tokens, ``s_n = window_starts(N - 1, L - 1)`` over the text after BOS.
    """
    ids = as_input_ids(loaded, input_ids)[0]  # (N,)
    (n_tokens,) = ids.shape
    bos = bos_token_id(loaded.config)
    if bos is not None and n_tokens > 2 and length > 2 and int(ids[0]) == int(bos):
        text = _window_nll(loaded, ids[1:], length - 1, batch_size, ids[:1])  # (N - 2,)
        first = _window_nll(loaded, ids[:2], 2, batch_size, None)  # x_1 after BOS: (1,)
        return np.concatenate([first, text])  # (N - 1,)
    return _window_nll(loaded, ids, length, batch_size, None)


def _window_nll(
    loaded: LoadedModel, ids: torch.Tensor, length: int, batch_size: int, prefix: Any
) -> np.ndarray:
    """:func:`windowed_nll` over ``ids (N,)`` in windows of ``length`` tokens, each after
    ``prefix (1,)`` when given (its prediction of the window's first token is not read)."""
    (n_tokens,) = ids.shape
    chosen = window_starts(n_tokens, length)  # (N - 1,)
    size = min(length, n_tokens)
    lead = 0 if prefix is None else 1  # window positions before the text's
    starts = sorted(set(chosen.tolist()))
    nll = np.empty(n_tokens - 1)
    for lo in range(0, len(starts), batch_size):
        batch = starts[lo : lo + batch_size]
        windows = torch.stack([ids[s : s + size] for s in batch])  # (b, L)
        if prefix is not None:
            windows = torch.cat([prefix.expand(len(batch), 1), windows], dim=1)  # (b, 1 + L)
        with torch.no_grad():
            logits = model_pass(loaded.model, windows).logits  # (b, lead + L, vocab)
        token = token_nll(logits[:, lead:-1], windows[:, lead + 1 :]).cpu().numpy()  # (b, L - 1)
        for row, s in enumerate(batch):
            at = np.flatnonzero(chosen == s)  # positions read in this window
            nll[at] = token[row, at - s]
    if not np.all(np.isfinite(nll)):
        raise RopesplitError("the in-length loss is not finite (NaN or inf logits)")
    return nll
