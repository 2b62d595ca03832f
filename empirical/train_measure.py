r"""Measure a training checkpoint: validation loss and docs/theory.md section 5 on held-out text.

For each checkpoint folder (loaded with :func:`load_model`, exactly as
``ropesplit analyze --model`` loads it):

- ``val_loss``: mean next-token cross-entropy (nats) over the held-out
  windows (:func:`continuation_loss`, from the second token on);
- per head (:func:`analyze`, i.e. ``capture`` + ``numerics.stats.layer_statistics``)
  ``r_split``, ``remainder_share``, ``tightness_max``, ``lowfreq_share_k``,
  ``lowfreq_share_q`` and the rest of ``analyze.STATISTICS``, on the first
  held-out window of ``L_train`` tokens;
- per head and pair the deviation energy :math:`\sum_j|\tilde\delta_{j,l}|^2`
  of keys and queries (``numerics.emergence.pair_energy``);
- model-wide means with percentile-bootstrap intervals over heads
  (``numerics.bootstrap.bootstrap_ci``).

Nothing here computes a statistic itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from ropesplit.empirical.analyze import STATISTICS, analyze
from ropesplit.empirical.capture import capture
from ropesplit.empirical.models import LoadedModel, continuation_loss, load_model
from ropesplit.empirical.train import BOS, TrainConfig, model_config, split_text, torch_threads
from ropesplit.numerics.bootstrap import bootstrap_ci
from ropesplit.numerics.emergence import pair_energy, unigram_entropy

__all__ = ["FIGURE_STATS", "Measurer", "control_record", "held_out_ids", "measure_loaded"]

FIGURE_STATS = ("r_split", "remainder_share", "tightness_max", "lowfreq_share_k",
                "lowfreq_share_q")  # fmt: skip  # the issue's statistics, in figure order


def held_out_ids(cfg: TrainConfig) -> np.ndarray:
    """``(val_windows, L)`` ids of consecutive held-out windows, each BOS + ``L - 1`` bytes."""
    _, held = split_text(cfg)
    data = np.frombuffer(held.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    width = cfg.seq_len - 1
    rows = data[: cfg.val_windows * width].reshape(cfg.val_windows, width)  # (V, L-1)
    return np.concatenate([np.full((cfg.val_windows, 1), BOS), rows], axis=1)  # (V, L)


def measure_loaded(
    loaded: LoadedModel, windows: np.ndarray, *, n_boot: int, seed: int
) -> dict[str, Any]:
    """One model's record: ``val_loss``, ``heads`` (statistics, energies), ``summary`` (CIs)."""
    start = time.perf_counter()
    losses = [continuation_loss(loaded, row) for row in windows]  # one per window
    ids = windows[0]  # (L,) the statistics' window
    analysis = analyze(loaded, ids, seed=seed, pair_budget=None)  # exact bound check
    cache = capture(loaded, ids, keep_probs=False)
    heads = analysis.heads
    energy_k, energy_q = [], []
    for layer in cache.layers:
        ek = pair_energy(layer.k, layout=layer.layout, rotary_dim=layer.rotary_dim)  # (Hkv, P)
        eq = pair_energy(layer.q, layout=layer.layout, rotary_dim=layer.rotary_dim)  # (H, P)
        energy_k.append(ek.sum(0))  # (P,) summed over KV heads
        energy_q.append(eq.sum(0))
        for row in (r for r in heads if r["layer"] == layer.layer):
            row["energy_k"] = ek[int(row["kv_head"])].tolist()
            row["energy_q"] = eq[int(row["head"])].tolist()
    return {
        "val_loss": float(np.mean(losses)),
        "val_loss_windows": len(losses),
        "theta": cache.layers[0].theta.tolist(),
        "heads": heads,
        "energy_k": np.stack(energy_k).tolist(),  # (layers, P)
        "energy_q": np.stack(energy_q).tolist(),
        "summary": summarise(heads, n_boot=n_boot, seed=seed),
        "seconds_measure": time.perf_counter() - start,
    }


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


class Measurer:
    """``measure(folder, step) -> record`` for :func:`ropesplit.empirical.train.train`."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.windows = held_out_ids(cfg)  # (V, L)

    def __call__(self, folder: Path, step: int) -> dict[str, Any]:
        loaded = load_model(str(folder))
        record = measure_loaded(loaded, self.windows, n_boot=self.cfg.n_boot, seed=self.cfg.seed)
        return {"step": step, "tokens_seen": step * self.cfg.batch * self.cfg.seq_len, **record}


def control_record(cfg: TrainConfig, control_seed: int) -> dict[str, Any]:
    """The same config at random initialisation under another seed: step 0's control."""
    loaded = load_model(model_config(cfg), seed=control_seed)
    with torch_threads(1):  # as train measures its checkpoints
        record = measure_loaded(loaded, held_out_ids(cfg), n_boot=cfg.n_boot, seed=cfg.seed)
    return {"kind": "random-init", "seed": control_seed, **record}


def corpus_entropy(cfg: TrainConfig) -> float:
    """Unigram entropy (nats per byte) of the training split: the context-free baseline loss."""
    train_bytes, _ = split_text(cfg)
    return unigram_entropy(train_bytes, 256)
