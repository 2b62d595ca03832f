r"""Token ids and position ids checked and shaped for one forward pass.

Ids are ``(B, N)`` int64 on the model's device, within the vocabulary; positions are
``(B, N)`` (default ``0..N-1``), non-negative and inside the model's context (the RoPE
angle of token ``n`` is ``p_n theta_l``, docs/theory.md section 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.model.loaded import LoadedModel

__all__ = [
    "as_input_ids",
    "as_position_ids",
    "check_positions",
    "mask_id",
    "special_positions",
]


def as_position_ids(input_ids: torch.Tensor, position_ids: Any) -> torch.Tensor:
    """``(B, N)`` int64 position ids (default ``0..N-1``) on the ids' device, ids ``(B, N)``."""
    import torch

    (n_tokens,) = input_ids.shape[-1:]
    rows = input_ids.shape[0] if input_ids.ndim == 2 else 1
    if position_ids is None:
        return torch.arange(n_tokens, device=input_ids.device)[None].expand(rows, -1)  # (B, N)
    pos = torch.as_tensor(position_ids, device=input_ids.device)
    if pos.numel() not in (n_tokens, rows * n_tokens):
        raise RopesplitError(
            f"position_ids must have one entry per token ({n_tokens}), got {pos.shape[-1]}"
        )
    pos = pos.reshape(-1, n_tokens).expand(rows, -1)  # (B, N): one row serves every sequence
    return pos.long()


def check_positions(loaded: LoadedModel, positions: torch.Tensor) -> None:
    """Raise when a position lies beyond the model's context or is negative."""
    top = int(positions.max()) + 1
    if int(positions.min()) < 0:
        raise RopesplitError(f"positions must be >= 0, got {int(positions.min())}")
    limit = loaded.max_positions
    if limit is not None and top > limit:
        raise RopesplitError(
            f"{top} positions exceed the model's context of {limit} "
            "(max_position_embeddings); use fewer tokens"
        )


def as_input_ids(loaded: LoadedModel, input_ids: Any, *, batch: bool = False) -> torch.Tensor:
    """``(1, N)`` int64 token ids on the model's device, checked against the vocabulary.

    ``batch=True`` takes ``(B, N)`` (or ``(N,)``) and returns ``(B, N)``.
    """
    import torch

    ids = torch.as_tensor(input_ids)
    if batch and ids.ndim not in (1, 2):
        raise RopesplitError(f"a batch of input_ids must be (B, N), got shape {tuple(ids.shape)}")
    ids = ids.reshape(-1 if batch and ids.ndim == 2 else 1, ids.shape[-1] if ids.ndim else 1)
    ids = ids.long().to(loaded.device)  # (B, N)
    if ids.shape[-1] == 0:
        raise RopesplitError("input_ids must hold at least one token, got 0")
    from ropesplit.empirical.adapter.configs import vocab_size

    vocab = vocab_size(loaded.config)
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise RopesplitError(f"token ids must lie in [0, {vocab}), got {int(ids.max())}")
    return ids


def special_positions(loaded: LoadedModel, ids: Any) -> np.ndarray:
    """Indices of the special tokens (BOS, EOS, padding...) among ``ids (N,)`` (the tokenizer's)."""
    tokenizer = loaded.tokenizer
    special = set(getattr(tokenizer, "all_special_ids", None) or []) if tokenizer else set()
    values = np.asarray(torch.as_tensor(ids).reshape(-1).cpu(), dtype=np.int64)  # (N,)
    return np.flatnonzero(np.isin(values, sorted(special)))


def mask_id(loaded: LoadedModel) -> int:
    """The ``<mask>`` token's id a masked-token loss puts in place of its targets (the
    tokenizer's, else the config's); refused in one line for a model that has none."""
    from ropesplit.empirical.adapter.configs import mask_token_id

    tokenizer = loaded.tokenizer
    found = getattr(tokenizer, "mask_token_id", None) if tokenizer else None
    found = mask_token_id(loaded.config) if found is None else int(found)
    if found is None:
        raise RopesplitError(f"{loaded.name} has no <mask> token: an encoder's word-order "
                             "damage (claim 1) scores the masked-token loss")  # fmt: skip
    return found
