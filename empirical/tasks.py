r"""Synthetic training tasks where content or position decides the answer (issue 21).

Sequences of ``L`` tokens over ``V`` content tokens (ids ``0..V-1``;
``BOS = V`` first, ``EOS = V + 1`` as padding), every answer a label:

- ``recall`` (associative recall, an induction task): a store of ``M``
  key-value pairs ``k_i v_i`` (distinct keys; values drawn from the other
  tokens, so a key occurs only as a key), then ``M`` queries, each a
  stored pair re-stated, ``k_i v_i``: at the query key the model must
  predict ``v_i``, which it can find only by matching ``k_i``'s content,
  wherever it sits. The key's distance from its query is
  :math:`\Delta = 2(M - i + t) \ge` ``MIN_DISTANCE`` (query ``t``, pair ``i``
  drawn uniformly among those far enough), so from ``MIN_DISTANCE`` to
  about ``L``;
- ``offset`` (the control): the same layout and labels, but each answer is
  the token ``OFFSET`` places before it, :math:`x_{n+1} = x_{n+1-\mathrm{OFFSET}}`:
  a position, not a content, decides.

With ``M = (L - 1) // 4`` pairs. :func:`task_batch` returns ``(ids, labels,
distance, source)``, each ``(B, L)``: ``labels`` ``-100`` (ignored by the
loss) except at the answers, ``distance`` the query-to-key distance and
``source`` the position the answer is copied from (the stored value, or the
token ``OFFSET`` back), both ``-1`` except at the answers. Position ``n``
predicts the label at ``n + 1`` (transformers' shift), so the query row of
an answer at ``a`` is ``a - 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.errors import RopesplitError

__all__ = ["MIN_DISTANCE", "OFFSET", "TASKS", "task_batch"]

TASKS = ("lm", "recall", "offset")
MIN_DISTANCE = 8  # the nearest a recall key sits from its query
OFFSET = 16  # the offset task's answer: the token this many places before it
IGNORE = -100  # transformers' ignored label


def task_batch(task: str, rng: np.random.Generator, batch: int, length: int, vocab: int
               ) -> tuple[Any, Any, np.ndarray, np.ndarray]:  # fmt: skip
    """``(ids, labels, distance, source)`` of one batch of ``task`` (module docstring)."""
    import torch

    pairs = (length - 1) // 4
    if task not in ("recall", "offset"):
        raise RopesplitError(f"task must be recall or offset here, got {task!r}")
    if pairs < MIN_DISTANCE or pairs >= vocab or 2 * pairs < OFFSET:
        raise RopesplitError(f"a {task} sequence of {length} tokens holds {pairs} pairs: it needs "
                             f"{max(MIN_DISTANCE, OFFSET // 2)} to vocab {vocab}")  # fmt: skip
    ids = np.full((batch, length), vocab + 1)  # EOS padding after the queries
    ids[:, 0] = vocab
    labels = np.full((batch, length), IGNORE)
    distance = np.full((batch, length), -1)
    source = np.full((batch, length), -1)
    for b in range(batch):
        order = rng.permutation(vocab)
        keys = order[:pairs]  # distinct, and never a value: a key occurs only as a key
        values = order[pairs:][rng.integers(0, vocab - pairs, size=pairs)]
        ids[b, 1 : 1 + 2 * pairs : 2], ids[b, 2 : 2 + 2 * pairs : 2] = keys, values
        for t in range(pairs):
            at = 1 + 2 * pairs + 2 * t  # the query key's position; its answer at + 1
            if task == "recall":
                far = np.flatnonzero(at - (1 + 2 * np.arange(pairs)) >= MIN_DISTANCE)
                i = int(rng.choice(far))
                ids[b, at], ids[b, at + 1] = keys[i], values[i]
                distance[b, at + 1], source[b, at + 1] = at - (1 + 2 * i), 2 + 2 * i
            else:
                ids[b, at] = rng.integers(0, vocab)
                ids[b, at + 1] = ids[b, at + 1 - OFFSET]
                distance[b, at + 1], source[b, at + 1] = OFFSET, at + 1 - OFFSET
            labels[b, at + 1] = ids[b, at + 1]
    return (torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(labels.astype(np.int64)),
            distance, source)  # fmt: skip
