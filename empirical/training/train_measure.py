r"""Measure a training checkpoint: validation loss and docs/theory.md section 5 on held-out text.

For each checkpoint folder (loaded with :func:`load_model`, exactly as
``ropesplit analyze --model`` loads it):

- ``val_loss``: mean next-token cross-entropy (nats) over the held-out
  windows (:func:`continuation_loss`, from the second token on); for the masked-LM
  objective the masked tokens' (:func:`masked_token_loss`, the same windows with a seeded
  ``MASK_RATE`` of their tokens masked: :func:`masked_windows`), the statistics measured
  on the windows as they are;
- per head (one streamed capture of every validation window,
  ``numerics.stats.layer_statistics`` per window, means over windows)
  ``r_split``, ``remainder_share``, ``tightness_max``, ``lowfreq_share_k``,
  ``lowfreq_share_q`` and the rest of ``analyze.STATISTICS``, with ``kbar``
  the mean key **without the BOS token** (one outlier key can
  dominate the energy shares), and ``weighted_slow_share``, the share of
  the bound's weight :math:`|\tilde q_l||\tilde\delta_l|` in the slow pairs,
  :math:`\theta_l L < 1` (``numerics.emergence.weighted_slow_share``);
- for the synthetic tasks (``numerics.tasks``): the answer's accuracy, in
  all and per distance bucket, and each head's ``retrieval`` score, its
  attention from the query to the answer's source (the stored pair token
  holding the query's key for ``recall``, the token ``OFFSET`` back for
  ``offset``; ``numerics.emergence.retrieval_score``);
  the head that attends there most is the run's retrieval head;
- per head and pair the deviation energy :math:`\sum_j|\tilde\delta_{j,l}|^2`
  of keys and queries (``numerics.emergence.deviation_energy`` on the pairs view);
- model-wide means with percentile-bootstrap intervals over heads
  (``numerics.bootstrap.bootstrap_ci``).

Nothing here computes a statistic itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from ropesplit.empirical.analysis.analyze import STATISTICS
from ropesplit.empirical.model.loaded import LoadedModel
from ropesplit.empirical.model.loading import load_model
from ropesplit.empirical.model.passes import continuation_loss, masked_token_loss, model_pass
from ropesplit.empirical.training.train_setup import (
    BOS,
    TrainConfig,
    model_config,
    split_text,
    torch_threads,
)
from ropesplit.numerics.bootstrap import bootstrap_ci
from ropesplit.numerics.emergence import deviation_energy, unigram_entropy
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.tasks import TEXT_TASKS

__all__ = ["Measurer", "control_record", "held_out_ids", "masked_windows", "measure_loaded",
           "task_scores", "validation"]

def held_out_ids(cfg: TrainConfig) -> np.ndarray:
    """``(val_windows, L)`` ids of consecutive held-out windows, each BOS + ``L - 1`` bytes."""
    _, held = split_text(cfg)
    data = np.frombuffer(held.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    width = cfg.seq_len - 1
    rows = data[: cfg.val_windows * width].reshape(cfg.val_windows, width)  # (V, L-1)
    return np.concatenate([np.full((cfg.val_windows, 1), BOS), rows], axis=1)  # (V, L)


def _window_heads(
    loaded: LoadedModel, windows: np.ndarray, sources: np.ndarray | None, seed: int
) -> tuple[list[dict[str, Any]], list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Per head the means over ``windows (V, L)`` of the statistics (kbar without BOS), the
    weighted slow share and, with ``sources (V, L)`` (the answers' source positions, -1
    elsewhere), the retrieval score: the attention from each answer's query row to its
    source; per layer the key and query energies ``(P,)``; theta."""
    from ropesplit.empirical.analysis.analyze import capture_rows
    from ropesplit.empirical.model.capture import capture_batch
    from ropesplit.numerics.emergence import retrieval_score, weighted_slow_share

    heads: list[dict[str, Any]] = []
    energy_k, energy_q = [], []
    theta = np.zeros(0)
    positions = np.arange(windows.shape[1])

    # every pair checked, the zero reference, BOS left out of kbar (the model's sink)
    watched = Measure(seed=seed, kbar_rule="mean-skip-first")

    def measure_layer(layers: list[Any]) -> None:
        nonlocal theta
        first = layers[0]
        theta = first.theta
        per_window = [capture_rows(one, positions, watched) for one in layers]
        shares, scores = [], []
        views = [one.pairs() for one in layers]
        for b, (one, view) in enumerate(zip(layers, views, strict=True)):
            kbar = watched.rule_kbar(view.kc_kv)  # (Hkv, P): the mean key's pairs
            dc = (view.kc_kv - kbar[:, None])[first.kv_map]  # (H, N, P), BOS left out of kbar
            shares.append(weighted_slow_share(view.qc, dc, one.theta))  # (H,)
            if sources is not None and one.probs is not None:
                scores.append(retrieval_score(one.probs.double().numpy(), sources[b]))  # (H,)
        ek = np.mean([deviation_energy(view.kc_kv[:, 1:]) for view in views], axis=0)  # (Hkv, P)
        eq = np.mean([deviation_energy(view.qc) for view in views], axis=0)  # (H, P)
        energy_k.append(ek.sum(0))
        energy_q.append(eq.sum(0))
        for h, row in enumerate(per_window[0]):
            mean = {name: float(np.mean([rows[h][name] for rows in per_window]))
                    for name in STATISTICS}  # fmt: skip
            heads.append({**{k: row[k] for k in ("layer", "head", "kv_head", "rope_base")},
                          **mean, "n_pairs": row["n_pairs"], "sampled_pairs": None,
                          "windows": len(layers),
                          "weighted_slow_share": float(np.mean([s[h] for s in shares])),
                          "retrieval": float(np.mean([s[h] for s in scores])) if scores
                          else None,
                          "energy_k": ek[int(row["kv_head"])].tolist(),
                          "energy_q": eq[h].tolist()})  # fmt: skip

    capture_batch(loaded, windows, on_layer=measure_layer, keep_probs=sources is not None)
    return heads, energy_k, energy_q, theta


def measure_loaded(
    loaded: LoadedModel, windows: np.ndarray, *, n_boot: int, seed: int,
    task: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    masked: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Any]:
    """One model's record: ``val_loss``, ``heads`` (statistics, energies), ``summary`` (CIs).

    ``task`` = ``(labels, distances, sources)``, each ``(V, L)``, of a synthetic task's
    windows: the loss and accuracy are the answers', per distance bucket too. ``masked`` =
    ``(inputs, labels)`` (:func:`masked_windows`): the loss is the masked tokens'.
    """
    start = time.perf_counter()
    sources = None if task is None else task[2]
    heads, energy_k, energy_q, theta = _window_heads(loaded, windows, sources, seed)
    record: dict[str, Any] = {}
    if masked is not None:  # the masked-LM objective's loss, on its own masked windows
        losses = [masked_token_loss(loaded, x, y) for x, y in zip(*masked, strict=True)]
    elif task is None:
        losses = [continuation_loss(loaded, row) for row in windows]  # one per window
    else:
        record = task_scores(loaded, windows, task[0], task[1])
        losses = record.pop("losses")
        best = max(heads, key=lambda r: r["retrieval"])
        record["retrieval_head"] = {k: best[k] for k in ("layer", "head", "retrieval",
                                                         "r_split", "weighted_slow_share",
                                                         "lowfreq_share_k", "lowfreq_share_q")}
    return {
        "val_loss": float(np.mean(losses)),
        "val_loss_windows": len(losses),
        "theta": np.asarray(theta).tolist(),
        "heads": heads,
        "energy_k": np.stack(energy_k).tolist(),  # (layers, P)
        "energy_q": np.stack(energy_q).tolist(),
        "summary": summarise(heads, n_boot=n_boot, seed=seed),
        **record,
        "seconds_measure": time.perf_counter() - start,
    }


BUCKETS = 4  # distance buckets of the accuracy curve


def task_scores(loaded: LoadedModel, windows: np.ndarray, labels: np.ndarray,
                distances: np.ndarray) -> dict[str, Any]:  # fmt: skip
    """Each window's answer loss, the accuracy, and the accuracy per distance bucket (equal
    widths from ``MIN_DISTANCE`` to the sequence length)."""
    import torch

    from ropesplit.empirical.adapter import fast_attention
    from ropesplit.numerics.tasks import MIN_DISTANCE

    with torch.no_grad(), fast_attention(loaded.model, loaded.attn):  # nothing is captured
        ids = torch.as_tensor(windows)
        logits = model_pass(loaded.model, ids).logits.double()  # (V, L, vocab)
    at = np.nonzero(labels >= 0)  # (window, position) of every answer
    scores = logits[at[0], at[1] - 1]  # (A, vocab): the query rows
    target = torch.as_tensor(labels[at])
    loss = torch.nn.functional.cross_entropy(scores, target, reduction="none").numpy()
    right = (scores.argmax(-1) == target).numpy().astype(np.float64)  # (A,)
    per_window = [float(loss[at[0] == v].mean()) for v in range(windows.shape[0])]
    edges = np.linspace(MIN_DISTANCE, windows.shape[1], BUCKETS + 1)
    which = np.clip(np.searchsorted(edges, distances[at], side="right") - 1, 0, BUCKETS - 1)
    return {"losses": per_window, "accuracy": float(right.mean()),
            "accuracy_by_distance": [float(right[which == k].mean()) if (which == k).any()
                                     else float("nan") for k in range(BUCKETS)],
            "distance_edges": edges.tolist()}  # fmt: skip


def summarise(heads: list[dict[str, Any]], *, n_boot: int, seed: int) -> dict[str, Any]:
    """Per statistic: mean over heads with a bootstrap interval, and how many heads were finite."""
    out: dict[str, Any] = {}
    for name in STATISTICS:
        values = np.array([row[name] for row in heads], dtype=np.float64)
        finite = values[np.isfinite(values)]
        interval = bootstrap_ci(finite, n_boot=n_boot, seed=seed) if finite.size else None
        out[name] = {**(interval.as_dict() if interval else {"mean": float("nan")}),
                     "undefined_heads": int(values.size - finite.size)}  # fmt: skip
    return out


TASK_WINDOWS = 32  # validation sequences of a synthetic task (one fixed draw for every run)
TASK_VALIDATION_SEED = 2021  # the draw's seed: every seed and base is measured on the same


def validation(
    cfg: TrainConfig,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """``(windows (V, L), task)``: the held-out windows and, for a synthetic task, its
    ``(labels, distances, sources)``, each ``(V, L)`` (``numerics.tasks.task_batch``)."""
    if cfg.task in TEXT_TASKS:
        return held_out_ids(cfg), None
    from ropesplit.numerics.tasks import task_batch

    rng = np.random.default_rng(TASK_VALIDATION_SEED)
    ids, labels, distance, source = task_batch(cfg.task, rng, TASK_WINDOWS, cfg.seq_len,
                                               cfg.vocab)  # fmt: skip
    return ids.numpy(), (labels.numpy(), distance, source)


def masked_windows(cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """The masked-LM objective's held-out ``(inputs, labels)`` ``(V, L)`` each: the held-out
    windows with a ``MASK_RATE`` of their tokens masked, drawn once with
    :data:`TASK_VALIDATION_SEED` (every checkpoint scored on the same masks); None for any
    other objective."""
    if cfg.task != "mlm":
        return None
    from ropesplit.empirical.training.train_setup import MASK
    from ropesplit.numerics.tasks import masked_tokens

    return masked_tokens(held_out_ids(cfg), np.random.default_rng(TASK_VALIDATION_SEED), MASK)


class Measurer:
    """``measure(folder, step) -> record`` for :func:`ropesplit.empirical.training.train.train`."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.windows, self.task = validation(cfg)  # (V, L)
        self.masked = masked_windows(cfg)

    def __call__(self, folder: Path, step: int) -> dict[str, Any]:
        loaded = load_model(str(folder))
        record = measure_loaded(loaded, self.windows, n_boot=self.cfg.n_boot, seed=self.cfg.seed,
                                task=self.task, masked=self.masked)  # fmt: skip
        return {"step": step, "tokens_seen": step * self.cfg.batch * self.cfg.seq_len, **record}


def control_record(cfg: TrainConfig, control_seed: int) -> dict[str, Any]:
    """The same config at random initialisation under another seed: step 0's control."""
    loaded = load_model(model_config(cfg), seed=control_seed)
    windows, task = validation(cfg)
    with torch_threads(1):  # as train measures its checkpoints
        record = measure_loaded(loaded, windows, n_boot=cfg.n_boot, seed=cfg.seed, task=task,
                                masked=masked_windows(cfg))  # fmt: skip
    return {"kind": "random-init", "seed": control_seed, **record}


def corpus_entropy(cfg: TrainConfig) -> float:
    """Unigram entropy (nats per token) of the training data: the context-free baseline loss
    (a synthetic task's: of its answers, over the validation windows; recall's are uniform
    over the values, log(vocab // 4))."""
    if cfg.task not in TEXT_TASKS:
        from ropesplit.numerics.tasks import task_vocab

        _, task = validation(cfg)
        assert task is not None  # a synthetic task's windows come with their answers
        labels = task[0]
        return unigram_entropy(labels[labels >= 0], task_vocab(cfg.vocab)[2])
    train_bytes, _ = split_text(cfg)
    return unigram_entropy(train_bytes, 256)
