r"""Forward passes: one sequence's logits and loss, and the continuation loss of many inputs.

Every loss-based experiment compares the model's mean next-token loss on the
untouched continuation (the last 25% of the tokens) across perturbed inputs:

.. math:: L = -\frac{1}{N - c} \sum_{n=c}^{N-1} \log p(x_n \mid x_{<n}),
          \qquad c = \text{the context length}

Inputs are ``(B, N)`` token ids and ``(B, N)`` position ids; identical rows
are run once (so a 0% perturbation is the very same forward pass as the
baseline and its ratio is exactly 1), the rest in batches of ``batch_size``.

The position ids go to the model together with an all-ones attention mask:
without one, transformers reads any step other than +1 in the position ids
as the start of a new packed sequence and masks across it, which would turn
a position perturbation into a different attention pattern. With the mask
the attention stays causal by index, as docs/theory.md section 2 assumes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.adapter.configs import vocab_size
from ropesplit.empirical.model.inputs import as_input_ids, as_position_ids, check_positions
from ropesplit.empirical.model.loaded import LoadedModel

__all__ = [
    "NLL_CHUNK",
    "by_distinct_rows",
    "check_inputs",
    "continuation_loss",
    "continuation_losses",
    "masked_token_loss",
    "forward",
    "forward_batch",
    "logits_loss",
    "model_pass",
    "token_nll",
]


def model_pass(model: Any, ids: torch.Tensor, positions: torch.Tensor | None = None, *,
               keep: int | None = None) -> Any:  # fmt: skip
    r"""The one forward pass of ``ids (B, N)`` every caller makes: at ``positions (B, N)``
    (None: ``0..N-1``), no cache, ``keep`` the last rows of logits computed (None: all).

    An explicit all-ones attention mask keeps the mask causal by index: without it,
    transformers reads a step other than +1 in the position ids as the start of a packed
    sequence and masks across it. ``model`` is the causal LM, or its base model (no output
    head: the capture). The caller holds ``torch.no_grad()``. Its seconds count as model
    compute (:data:`ropesplit.core.clock.MODEL_CLOCK`).
    """
    import torch

    from ropesplit.core.clock import MODEL_CLOCK

    extra = {} if keep is None else {"logits_to_keep": keep}
    with MODEL_CLOCK.timing():
        return model(input_ids=ids, position_ids=positions,
                     attention_mask=torch.ones_like(ids), use_cache=False, **extra)  # fmt: skip


NLL_CHUNK = 2**22  # logits per chunk of token_nll: the float64 copy stays cache-sized


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    r"""Next-token losses (nats), float64: ``logits (..., T, vocab)`` row ``t`` predicts
    ``targets (..., T)``.

    .. math:: \ell_t = -\log \mathrm{softmax}(z_t)_{x_t}

    Rows go in chunks of about :data:`NLL_CHUNK` logits: each row's softmax is its own, so
    the losses are those of one pass bit for bit, without a float64 copy of every row
    (8 x 511 rows of 49152: 1.6 GB).
    """
    import torch

    vocab = logits.shape[-1]
    flat, goal = logits.reshape(-1, vocab), targets.to(logits.device).reshape(-1, 1).long()
    out = torch.empty(goal.shape[0], dtype=torch.float64, device=logits.device)
    rows = max(1, NLL_CHUNK // vocab)
    for r0 in range(0, flat.shape[0], rows):
        logp = torch.log_softmax(flat[r0 : r0 + rows].double(), dim=-1)  # (rows, vocab)
        out[r0 : r0 + rows] = -logp.gather(-1, goal[r0 : r0 + rows])[:, 0]
    return out.reshape(targets.shape)


def forward(loaded: LoadedModel, input_ids: Any, position_ids: Any = None) -> torch.Tensor:
    r"""The model's next-token logits ``(N, vocab)`` for ``input_ids`` at ``position_ids``.

    ``position_ids`` (default ``0..N-1``) may be any non-negative integers
    below the context: the RoPE angle of token ``n`` is ``position_ids[n]
    theta_l`` (docs/theory.md section 1); the causal mask stays by index. Nothing is
    captured: the model attends through its fastest attention (SDPA where it applies).
    """
    import torch

    from ropesplit.empirical.adapter import fast_attention

    ids = as_input_ids(loaded, input_ids)
    pos = as_position_ids(ids, position_ids)
    check_positions(loaded, pos)
    with torch.no_grad(), fast_attention(loaded.model, loaded.attn):  # nothing is captured
        out = model_pass(loaded.model, ids, pos)
    return out.logits[0].float()  # (N, vocab)


def continuation_loss(
    loaded: LoadedModel, input_ids: Any, position_ids: Any = None, *, start: int = 1
) -> float:
    r"""Mean next-token cross-entropy (nats) over the tokens from index ``start`` on.

    .. math:: L = -\frac{1}{N - s} \sum_{n=s}^{N-1} \log p(x_n \mid x_{<n})
    """

    ids = as_input_ids(loaded, input_ids)[0]  # (N,)
    (n_tokens,) = ids.shape
    if not 1 <= start < n_tokens:
        raise RopesplitError(f"start must lie in [1, {n_tokens}), got {start}")
    logits = forward(loaded, ids, position_ids)  # (N, vocab)
    value = float(token_nll(logits[start - 1 : n_tokens - 1], ids[start:]).mean())
    if not math.isfinite(value):
        raise RopesplitError("continuation loss is not finite (NaN or inf logits)")
    return value


def masked_token_loss(loaded: LoadedModel, inputs: Any, labels: Any) -> float:
    r"""Mean cross-entropy (nats) of the masked tokens given the rest, both ways: ``inputs (N,)``
    with ``<mask>`` where ``labels (N,)`` hold the original token (``-100`` elsewhere).

    .. math:: L = -\frac{1}{|\mathcal S|}\sum_{n \in \mathcal S} \log p(x_n \mid
              x_{\setminus\mathcal S})
    """
    import torch

    target = torch.as_tensor(np.asarray(labels, dtype=np.int64))
    at = target >= 0
    if not bool(at.any()):
        raise RopesplitError("no masked token to score (every label is -100)")
    logits = forward(loaded, inputs)  # (N, vocab): an encoder reads every position
    value = float(token_nll(logits[at], target[at]).mean())
    if not math.isfinite(value):
        raise RopesplitError("masked-token loss is not finite (NaN or inf logits)")
    return value


def forward_batch(
    loaded: LoadedModel, ids: torch.Tensor, positions: torch.Tensor, start: int,
    *, fast: bool = True,
) -> Any:  # fmt: skip
    r"""Logits ``(B, N - start + 1, vocab)`` of rows ``start - 1 .. N - 1``, one forward pass.

    ``ids`` and ``positions`` are ``(B, N)`` int64; the mask is causal by index
    (an explicit all-ones attention mask, see the module docstring). Nothing is
    captured, so with ``fast`` the model attends through its fastest attention
    (:func:`ropesplit.empirical.adapter.fast_attention`: SDPA where it applies; the same
    probabilities to float32 rounding), else through its eager attention.
    """
    from ropesplit.empirical.adapter import fast_attention

    n_tokens = ids.shape[1]
    with torch.no_grad(), (fast_attention(loaded.model, loaded.attn) if fast
                           else contextlib.nullcontext()):  # fmt: skip
        # only the rows that predict the continuation
        out = model_pass(loaded.model, ids, positions, keep=n_tokens - start + 1)
    return out.logits


def check_inputs(loaded: LoadedModel, ids: np.ndarray, positions: np.ndarray, start: int) -> None:
    """Refuse, with one line, ``ids``/``positions`` that are not one ``(B, N)`` shape, a
    continuation ``start`` outside ``[1, N)``, ids outside the vocabulary, negative positions."""
    if ids.ndim != 2 or positions.shape != ids.shape:
        raise RopesplitError(
            f"ids and positions must both be (B, N), got {ids.shape} and {positions.shape}"
        )
    (_, n_tokens) = ids.shape
    if not 1 <= start < n_tokens:
        raise RopesplitError(f"continuation start must lie in [1, {n_tokens}), got {start}")
    vocab = vocab_size(loaded.config)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise RopesplitError(f"token ids must lie in [0, {vocab}), got {int(ids.max())}")
    if ids.size and int(positions.min()) < 0:
        raise RopesplitError(f"positions must be >= 0, got {int(positions.min())}")


def by_distinct_rows(
    keys: np.ndarray,
    batch_size: int,
    score: Callable[[np.ndarray], Any],
    shape: tuple[int, ...],
    on_forward: Callable[[int], Any] | None = None,
) -> np.ndarray:
    """``score(chosen) -> (b, *shape)`` on the distinct rows of ``keys (B, K)``, at most
    ``batch_size`` rows a call (``chosen``: the indices in ``keys`` of its rows), and the
    results ``(B, *shape)`` float64 in the order of ``keys``: identical rows share one forward
    pass. ``on_forward(b)`` is called after each call with its rows (a progress bar's
    ``update``)."""
    if batch_size < 1:
        raise RopesplitError(f"batch_size must be at least 1, got {batch_size}")
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    out = np.full((len(first), *shape), np.nan)  # one row per distinct key
    for lo in range(0, len(first), batch_size):
        chosen = first[lo : lo + batch_size]
        out[lo : lo + len(chosen)] = score(chosen)
        if on_forward is not None:
            on_forward(len(chosen))
    return out[inverse.ravel()]


def continuation_losses(
    loaded: LoadedModel,
    ids: Any,
    positions: Any,
    start: int,
    *,
    batch_size: int = 8,
    on_forward: Callable[[int], Any] | None = None,
) -> np.ndarray:
    r"""Mean next-token loss (nats) over tokens ``start..N-1`` for each row, ``(B,)`` float64.

    .. math:: L_b = -\frac{1}{N - c} \sum_{n=c}^{N-1} \log p(x_{b,n} \mid x_{b,<n}; p_{b,\le n})

    ``ids`` and ``positions`` are ``(B, N)``. Identical (ids, positions) rows
    share one forward pass; ``on_forward(k)`` is called after each batch with
    the number of rows it ran (a progress bar's ``update``).
    """
    ids_np = np.asarray(ids, dtype=np.int64)
    pos_np = np.asarray(positions, dtype=np.int64)
    check_inputs(loaded, ids_np, pos_np, start)
    device = loaded.device

    def score(chosen: np.ndarray) -> list[float]:
        batch_ids = torch.as_tensor(ids_np[chosen], device=device)  # (b, N)
        batch_pos = torch.as_tensor(pos_np[chosen], device=device)  # (b, N)
        logits = forward_batch(loaded, batch_ids, batch_pos, start)  # (b, N - start + 1, vocab)
        return [logits_loss(logits[row, :-1], batch_ids[row, start:])
                for row in range(len(chosen))]  # fmt: skip

    keys = np.concatenate([ids_np, pos_np], axis=1)  # (B, 2N): one key per distinct input
    losses = by_distinct_rows(keys, batch_size, score, (), on_forward)
    if not np.all(np.isfinite(losses)):
        raise RopesplitError("continuation loss is not finite (NaN or inf logits)")
    return losses


def logits_loss(logits: torch.Tensor, targets: torch.Tensor) -> float:
    r"""Mean next-token loss (nats) of ``targets (T,)`` under ``logits (T, vocab)``.

    .. math:: L = -\frac1T \sum_t \log \mathrm{softmax}(z_t)_{x_t}

    Row ``t`` of ``logits`` predicts ``targets[t]`` (float64 log-softmax).
    """
    return float(token_nll(logits, targets.reshape(-1)).mean())
