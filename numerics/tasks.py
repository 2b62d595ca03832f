r"""Synthetic training tasks where content or position decides the answer.

Sequences of ``L`` tokens over ``V`` content tokens (:func:`task_vocab`):
``K = V - V // 4`` keys (ids ``0..K-1``) and ``V // 4`` values (ids
``K..V-1``); every stored key-value pair is one token of its own (id ``V +
k (V // 4) + v``), then ``BOS`` and ``EOS`` (padding). Every answer is a label:

- ``recall`` (associative recall): a store of ``M`` pair tokens (distinct
  keys), then ``M`` queries, each a stored key followed by its value: at the
  query key the model must predict the value, which it can find only by
  matching the key's content with the pair token that holds it, wherever it
  sits (one attention hop: a head that reads the pair token's value). The
  key's distance from its query is :math:`\Delta \ge` ``MIN_DISTANCE`` (the
  pair drawn uniformly among those far enough), so from ``MIN_DISTANCE`` to
  about ``L``;
- ``offset`` (the control): the same layout and labels, but each answer is
  the token ``OFFSET`` places before it, :math:`x_{n+1} = x_{n+1-\mathrm{OFFSET}}`:
  a position, not a content, decides.

With ``M = (L - 1) // 3`` pairs. :func:`task_batch` returns ``(ids, labels,
distance, source)``, each ``(B, L)``: ``labels`` ``-100`` (ignored by the
loss) except at the answers, ``distance`` the query-to-key distance and
``source`` the position the answer is read from (the stored pair token, or the
token ``OFFSET`` back), both ``-1`` except at the answers. Position ``n``
predicts the label at ``n + 1`` (transformers' shift), so the query row of
an answer at ``a`` is ``a - 1``.

A stored pair is one token because the two-token store (``k v``, found by an
induction head: a previous-token head, then a match) did not form in the
budget of 2 CPU cores: at 1500 steps, three learning rates and head widths
stayed within 3 points of chance (5.5-6.1% against 3%).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError

__all__ = ["MASK_RATE", "MIN_DISTANCE", "OFFSET", "TASKS", "TEXT_TASKS", "check_task",
           "masked_tokens", "pairs_in", "task_batch", "task_vocab"]

TASKS = ("lm", "mlm", "recall", "offset")
# the objectives on a text's bytes: next-token (a causal decoder) and masked-token (an
# encoder that attends both ways, docs/theory.md section 9)
TEXT_TASKS = ("lm", "mlm")
MASK_RATE = 0.15  # the masked-LM objective's share of masked tokens (BERT's; ours to change)
MIN_DISTANCE = 8  # the nearest a recall key sits from its query
OFFSET = 16  # the offset task's answer: the token this many places before it
IGNORE = -100  # transformers' ignored label


def masked_tokens(ids: np.ndarray, rng: np.random.Generator, mask_id: int,
                  rate: float = MASK_RATE) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    r"""The masked-LM objective's ``(inputs, labels)`` of token rows ``ids (B, L)``: each token
    but the first (BOS) is masked with probability ``rate``, at least one a row, its input
    replaced by ``mask_id``; ``labels`` hold the original token there and ``IGNORE``
    elsewhere, so the loss is

    .. math:: -\frac{1}{|\mathcal S|}\sum_{(b,n)\in\mathcal S}\log p(x_{b,n} \mid
              x_{b,\setminus\mathcal S})

    >>> x, y = masked_tokens(np.arange(8)[None], np.random.default_rng(0), 99, rate=0.5)
    >>> chosen = y >= 0
    >>> bool(((x == 99) == chosen).all()), bool((y == np.arange(8))[chosen].all())
    (True, True)
    """
    b, n = ids.shape
    if n < 2 or not 0.0 < rate <= 1.0:
        raise RopesplitError(f"masking needs rows of 2 tokens or more and a rate in (0, 1], "
                             f"got {n} tokens and {rate}")  # fmt: skip
    chosen = rng.random((b, n)) < rate
    chosen[:, 0] = False  # BOS stays
    lone = ~chosen.any(1)
    chosen[lone, rng.integers(1, n, size=int(lone.sum()))] = True  # at least one a row
    inputs = np.where(chosen, mask_id, ids)
    labels = np.where(chosen, ids, IGNORE)
    return inputs.astype(np.int64), labels.astype(np.int64)


def task_vocab(vocab: int) -> tuple[int, int, int]:
    """``(keys, values, size)`` of ``vocab`` content tokens: ``keys = vocab - vocab // 4``,
    ``values = vocab // 4``, and the ids in all (content, one per pair, BOS, EOS)."""
    values = vocab // 4
    keys = vocab - values
    return keys, values, vocab + keys * values + 2


def pairs_in(length: int) -> int:
    """``M``, the stored pairs (and queries) of a task sequence of ``length`` tokens."""
    return (length - 1) // 3


def check_task(length: int, vocab: int) -> None:
    """A one-line error unless ``length`` tokens hold the pairs ``vocab`` can give distinct keys
    (at least ``MIN_DISTANCE`` and ``OFFSET`` of them, two values or more)."""
    keys, values, _ = task_vocab(vocab)
    pairs = pairs_in(length)
    need = max(MIN_DISTANCE, OFFSET)
    if pairs < need or pairs > keys or values < 2:
        raise RopesplitError(
            f"a task sequence of {length} tokens holds (L - 1) // 3 = {pairs} pairs: it needs "
            f"{need} to the {keys} keys of vocab {vocab} (vocab // 4 >= 2 values)")  # fmt: skip


def task_batch(task: str, rng: np.random.Generator, batch: int, length: int, vocab: int
               ) -> tuple[Any, Any, np.ndarray, np.ndarray]:  # fmt: skip
    """``(ids, labels, distance, source)`` of one batch of ``task`` (module docstring)."""
    import torch

    if task not in ("recall", "offset"):
        raise RopesplitError(f"task must be recall or offset here, got {task!r}")
    check_task(length, vocab)
    n_keys, n_values, size = task_vocab(vocab)
    pairs = pairs_in(length)
    ids = np.full((batch, length), size - 1)  # EOS padding after the queries
    ids[:, 0] = size - 2  # BOS
    labels = np.full((batch, length), IGNORE)
    distance = np.full((batch, length), -1)
    source = np.full((batch, length), -1)
    at = 1 + pairs + 2 * np.arange(pairs)  # (pairs,) each query key's position; answers at + 1
    far = np.minimum(pairs, at - MIN_DISTANCE)  # recall: stored pairs i < far sit far enough
    for b in range(batch):
        keys = rng.permutation(n_keys)[:pairs]  # distinct: only content tells them apart
        values = rng.integers(0, n_values, size=pairs)
        ids[b, 1 : 1 + pairs] = vocab + keys * n_values + values  # one token per stored pair
        if task == "recall":  # each drawn uniformly among the far pairs, one draw per query
            i = np.array([rng.integers(0, f) for f in far.tolist()])  # rng.choice's own draw
            ids[b, at], ids[b, at + 1] = keys[i], n_keys + values[i]
            distance[b, at + 1], source[b, at + 1] = at - (1 + i), 1 + i
        else:
            for t in range(pairs):  # one at a time: a query may copy an earlier one's answer
                ids[b, at[t]] = rng.integers(0, n_keys)
                ids[b, at[t] + 1] = ids[b, at[t] + 1 - OFFSET]
            distance[b, at + 1], source[b, at + 1] = OFFSET, at + 1 - OFFSET
        labels[b, at + 1] = ids[b, at + 1]
    return (torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(labels.astype(np.int64)),
            distance, source)  # fmt: skip
