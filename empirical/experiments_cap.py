r"""LM-Infinite's distance cap inside a real model: logits at ``min(Delta, L)``.

THEORY.md section 4: beyond the training length ``L`` only the positional
term ``f`` meets unseen angles; capping the distance keeps it in its trained
range:

.. math:: W_{ij} = s \langle R(p_i) q_i, R(p_j) k_j \rangle \ \text{if } \Delta_{ij} \le L,
          \qquad W_{ij} = s \langle R(L)\, q_i, k_j \rangle \ \text{if } \Delta_{ij} > L,
          \qquad \Delta_{ij} = p_i - p_j

(``R(L) q`` against the unrotated ``k`` is ``s q^T R(-L) k``, the logit at
distance ``L``). The model is not re-implemented: :func:`distance_cap`
uses :func:`ropesplit.empirical.taps.taps` to keep the unrotated ``q``/``k``
of the running layer (``on_rope``, as the capture does) and to register
:func:`capped_attention` in transformers' ``AttentionInterface`` under
:data:`CAP_ATTENTION` for the block. The mask, softmax and value product are
those of ``eager_attention_forward``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from ropesplit.empirical.models import LoadedModel
from ropesplit.empirical.taps import TapState, taps

from ropesplit.errors import RopesplitError

__all__ = ["CAP_ATTENTION", "capped_attention", "capped_logits", "distance_cap"]

CAP_ATTENTION = "ropesplit_capped"  # the name registered in transformers' AttentionInterface


@dataclass
class _CapState:
    """What the wrappers share during a capped forward pass."""

    cap: int  # L: distances above it are evaluated at L
    positions: torch.Tensor  # (B, N) the position ids of the batch
    rotary: Any  # the model's rotary embedding module
    raw: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    taps: TapState | None = None  # says which attention module is running
    far: int = 0  # pairs evaluated at the cap so far (all layers, heads count once)


_STATE: list[_CapState] = []  # the active cap (a stack of at most one)


def _rotary_module(loaded: LoadedModel) -> Any:
    found = [m for m in loaded.model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    if len(found) != 1:
        raise RopesplitError(
            f"the distance cap needs exactly one rotary embedding module, {loaded.name} has "
            f"{len(found)}"
        )
    return found[0]


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``(B, Hkv, N, d)`` -> ``(B, Hkv n_rep, N, d)``: each KV head serves ``n_rep`` query heads."""
    (batch, n_kv, n_tokens, d) = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None].expand(batch, n_kv, n_rep, n_tokens, d)  # (B, Hkv, n_rep, N, d)
    return x.reshape(batch, n_kv * n_rep, n_tokens, d)  # (B, H, N, d)


def capped_logits(
    query: torch.Tensor,
    key: torch.Tensor,
    query_at_cap: torch.Tensor,
    key_raw: torch.Tensor,
    positions: torch.Tensor,
    cap: int,
    scaling: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Logits ``(B, H, N, N)`` with every distance above ``cap`` evaluated at ``cap``.

    .. math:: W_{ij} = s\,(R_i q_i)^\top (R_j k_j)\ [\Delta_{ij} \le L],
              \quad s\,(R(L) q_i)^\top k_j\ [\Delta_{ij} > L]

    ``query``/``key`` are rotated ``(B, H, N, d)``, ``query_at_cap`` is
    ``R(L) q`` and ``key_raw`` the unrotated keys (KV heads already repeated);
    ``positions`` ``(B, N)``. Returns the logits and the ``(B, N, N)`` mask of
    capped pairs.
    """
    near = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, H, N, N)
    far = torch.matmul(query_at_cap, key_raw.transpose(2, 3)) * scaling  # (B, H, N, N)
    delta = positions[:, :, None] - positions[:, None, :]  # (B, N, N): p_i - p_j
    beyond = delta > cap  # (B, N, N)
    return torch.where(beyond[:, None], far, near), beyond


def capped_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``eager_attention_forward`` with the logits of :func:`capped_logits`.

    .. math:: A = \mathrm{softmax}_j(W^{\mathrm{cap}}_{ij} + \mathrm{mask}_{ij}),
              \qquad \mathrm{out} = A V

    Only valid inside :func:`distance_cap`, which supplies the positions, the
    cap and the unrotated ``q``/``k`` of the running layer.
    """
    if not _STATE:
        raise RopesplitError(f"attention {CAP_ATTENTION!r} runs only inside distance_cap()")
    state = _STATE[-1]
    if kwargs.get("sliding_window") or kwargs.get("softcap"):
        raise RopesplitError("the distance cap supports full attention without soft-capping")
    assert state.taps is not None
    q_raw, k_raw = state.raw.pop(state.taps.running())
    n_rep = query.shape[1] // key.shape[1]
    cos, sin = state.rotary(q_raw, torch.full_like(state.positions[:, :1], state.cap))  # (B, 1, d)
    q_cap = q_raw * cos[:, None] + _rotate_half(q_raw) * sin[:, None]  # (B, H, N, d): R(L) q
    logits, beyond = capped_logits(
        query, _repeat_kv(key, n_rep), q_cap, _repeat_kv(k_raw, n_rep),
        state.positions, state.cap, scaling,
    )  # fmt: skip
    state.far += int(torch.tril(beyond).sum())
    if attention_mask is not None:
        logits = logits + attention_mask
    weights = torch.softmax(logits, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(weights, _repeat_kv(value, n_rep))  # (B, H, N, d)
    return out.transpose(1, 2).contiguous(), weights  # (B, N, H, d)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Half-split layout: pair ``l`` is ``(x_l, x_{l+P})``; returns ``(-x_{l+P}, x_l)``."""
    (d,) = x.shape[-1:]
    return torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)


def _check_table(q: torch.Tensor, cos: torch.Tensor) -> None:
    """The cap turns ``q`` by ``R(L)`` with ``rotate_half``: full, half-split RoPE only."""
    (d,), (r,) = q.shape[-1:], cos.shape[-1:]
    if r != d:
        raise RopesplitError(f"the distance cap needs full rotary (rotary_dim {r} < head_dim {d})")
    if not torch.equal(cos[..., : d // 2], cos[..., d // 2 :]):
        raise RopesplitError("the distance cap needs the half-split RoPE layout")


def _record_unrotated(state: _CapState) -> Any:
    def record(layer: int, arguments: Mapping[str, Any], rotated: Any) -> None:
        _check_table(arguments["q"], arguments["cos"])
        if int(arguments.get("unsqueeze_dim", 1)) != 1:
            raise RopesplitError("the distance cap needs q/k laid out (B, H, N, d)")
        state.raw[layer] = (arguments["q"], arguments["k"])  # unrotated

    return record


@contextlib.contextmanager
def distance_cap(loaded: LoadedModel, positions: torch.Tensor, cap: int) -> Iterator[_CapState]:
    r"""Within the block, the model's attention evaluates every distance above ``cap`` at ``cap``.

    ``positions`` ``(B, N)`` are the position ids the block's forward pass
    receives. The taps (``apply_rotary_pos_emb``, the registered attention,
    the model's attention implementation, the pre-hooks) are restored in
    ``finally``.
    """
    if cap < 0:
        raise RopesplitError(f"distance cap must be >= 0, got {cap}")
    if _STATE:
        raise RopesplitError("distance_cap() blocks do not nest")
    state = _CapState(int(cap), positions, _rotary_module(loaded))
    try:
        with taps(loaded, on_rope=_record_unrotated(state),
                  attention=(CAP_ATTENTION, capped_attention)) as tap_state:  # fmt: skip
            state.taps = tap_state
            _STATE.append(state)
            yield state
    finally:
        _STATE.clear()
