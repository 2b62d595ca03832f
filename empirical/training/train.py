r"""Train a small RoPE language model here and keep log-spaced checkpoints.

The paper's claim is that training creates the pattern behind the split
(docs/theory.md section 5: key deviations in the slow pairs, ``lowfreq_share_k``
high, ``r_split`` near 1) and that random initialisation lacks it. This
module trains a ``transformers`` ``LlamaForCausalLM`` (or, with the masked-LM objective
``task="mlm"``, a ``EuroBertForMaskedLM`` of the same blocks attending both ways) whose
training length
``L_train`` and RoPE base ``b`` (:math:`\theta_l = b^{-2l/d}`) we choose, on
a byte-level tokenisation of a text, and writes checkpoints that every other
part of ropesplit loads like any Hugging Face model. Each checkpoint is
measured by :mod:`ropesplit.empirical.training.train_measure` as it is written.

Run folder layout (``TrainConfig.out``)::

    run.json                 the TrainConfig (a resumed run must match it)
    step-000000/             one complete checkpoint per log-spaced step
        config.json          LlamaConfig (+ ropesplit_train_length = L_train)
        model.safetensors    weights (float32)
        tokenizer.json, tokenizer_config.json     byte-level: id = byte, 256 BOS, 257 EOS
        trainer_state.pt     optimizer, data-sampler RNG and torch RNG state, step
        metrics.json         the checkpoint's record (val loss, statistics per head, means;
                             ropesplit.core.io's JSON: an undefined value is null)
    step-000001/ ...

A checkpoint folder is written as ``.tmp-step-NNNNNN`` in the same folder,
every file fsynced, then renamed: a folder named ``step-*`` is always
complete. A run started again on the same folder with the same config resumes
from its last complete checkpoint (weights, optimizer, RNG states), so its
metrics equal an uninterrupted run's for the same thread count.

Shapes: a batch is ``(B, L)`` token ids, each row BOS + ``L - 1`` bytes.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ropesplit.core.clock import MODEL_CLOCK
from ropesplit.core.errors import RopesplitError
from ropesplit.core.io import read_json, write_json
from ropesplit.empirical.training.train_setup import (
    BOS,
    EOS,
    MASK,
    TrainConfig,
    byte_tokenizer,
    checkpoint_steps,
    model_config,
    split_text,
    task_tokenizer,
    torch_threads,
)
from ropesplit.numerics.tasks import TEXT_TASKS, masked_tokens

__all__ = [
    "BOS",
    "EOS",
    "TrainConfig",
    "byte_tokenizer",
    "checkpoint_steps",
    "checkpoints",
    "model_config",
    "remeasure",
    "split_text",
    "task_tokenizer",
    "torch_threads",
    "train",
]

_STATE = "trainer_state.pt"
_METRICS = "metrics.json"


def checkpoints(out: str | Path) -> list[Path]:
    """The complete checkpoint folders of a run, in step order."""
    folder = Path(out)
    return sorted(p for p in folder.glob("step-*") if p.is_dir() and (p / _METRICS).is_file())


def _fsync_tree(folder: Path) -> None:
    """fsync every file in ``folder`` and the folder itself."""
    for path in folder.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _lr(cfg: TrainConfig, step: int) -> float:
    """Learning rate of step ``step`` (0-based): linear warmup, cosine decay to 10%."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))


def _batch(train_bytes: np.ndarray, rng: np.random.Generator, cfg: TrainConfig) -> Any:
    """``(ids, labels)``, each ``(B, L)`` int64: for ``lm`` BOS then ``L - 1`` bytes from seeded
    random offsets (every next token a label); for ``mlm`` the same rows with a seeded
    ``MASK_RATE`` of their tokens masked (those the labels: ``numerics.tasks.masked_tokens``);
    else the task's sequences (one label each)."""
    import torch

    if cfg.task not in TEXT_TASKS:
        from ropesplit.numerics.tasks import task_batch

        ids, labels, _, _ = task_batch(cfg.task, rng, cfg.batch, cfg.seq_len, cfg.vocab)
        return ids, labels
    starts = rng.integers(0, train_bytes.size - cfg.seq_len, size=cfg.batch)  # (B,)
    rows = np.stack([train_bytes[s : s + cfg.seq_len - 1] for s in starts])  # (B, L-1)
    ids = torch.from_numpy(np.concatenate([np.full((cfg.batch, 1), BOS), rows], axis=1))
    ids = ids.to(torch.int64)  # (B, L)
    if cfg.task == "mlm":
        inputs, labels = masked_tokens(ids.numpy(), rng, MASK)
        return torch.from_numpy(inputs), torch.from_numpy(labels)
    return ids, ids


def _prepare(cfg: TrainConfig) -> Path:
    """Create or check the run folder; remove half-written checkpoints; return it."""
    out = Path(cfg.out)
    if not out.parent.exists():
        raise RopesplitError(f"cannot write run folder {out}: folder {out.parent} does not exist")
    out.mkdir(exist_ok=True)
    saved = out / "run.json"
    if saved.is_file():
        before = read_json(saved, "run config")
        now = cfg.to_dict()
        diff = [k for k in now if k != "out" and before.get(k) != now[k]]
        if diff:
            raise RopesplitError(
                f"run folder {out} holds a run with another config ({diff[0]}: "
                f"{before.get(diff[0])} vs {now[diff[0]]}); use another --out"
            )
    else:
        _replace_json(saved, cfg.to_dict())
    for stale in out.glob(".tmp-step-*"):
        shutil.rmtree(stale)  # a checkpoint whose write was interrupted
    return out


def _replace_json(path: Path, obj: Any) -> None:
    """Write ``obj`` through :func:`ropesplit.core.io.write_json` (NaN and inf as null) beside
    ``path``, fsync it, and rename it over ``path``: readers see the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp")
    write_json(tmp, obj)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _metrics(folder: Path) -> dict[str, Any]:
    """A checkpoint's record as written (JSON: an undefined statistic is null)."""
    record: dict[str, Any] = read_json(folder / _METRICS, "checkpoint record")
    return record


def _write_checkpoint(
    out: Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any],
    measure: Callable[[Path], dict[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """Write ``step-NNNNNN`` atomically: save into a temp folder, measure it, fsync, rename."""
    import torch

    final = out / f"step-{step:06d}"
    tmp = out / f".tmp-step-{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    torch.save(state, tmp / _STATE)
    record = measure(tmp)  # loads the checkpoint as any user would
    write_json(tmp / _METRICS, record)  # NaN -> null, as every JSON of ropesplit
    _fsync_tree(tmp)
    if final.exists():  # a complete checkpoint of the same step (same config): replace it
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(out)
    return _metrics(final)  # as a resumed run reads it back


def remeasure(
    cfg: TrainConfig, measure: Callable[[Path, int], dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Measure every complete checkpoint of ``cfg.out`` again with the current code.

    For when the statistics changed after the weights were written (the
    weights are never touched); each ``metrics.json`` is replaced atomically
    and keeps its ``seconds_train``. Returns the new records in step order.
    """
    cfg.check()
    out = _prepare(cfg)
    if measure is None:
        from ropesplit.empirical.training.train_measure import Measurer

        measure = Measurer(cfg)
    records = []
    for folder in checkpoints(out):
        old = _metrics(folder)
        with torch_threads(1):
            record = {**measure(folder, int(old["step"])), "seconds_train": old["seconds_train"]}
        _replace_json(folder / _METRICS, record)
        records.append(_metrics(folder))
    return records


def train(
    cfg: TrainConfig,
    *,
    measure: Callable[[Path, int], dict[str, Any]] | None = None,
    progress: bool = True,
    stop_after: int | None = None,
) -> list[dict[str, Any]]:
    r"""Train (or resume) the run of ``cfg``; return one record per checkpoint, in step order.

    Minimises the next-token cross-entropy
    :math:`-\frac{1}{B(L-1)}\sum_{b,n}\log p(x_{b,n} \mid x_{b,<n})` with AdamW (``mlm``:
    the masked tokens' cross-entropy given the rest, both ways).
    ``measure(folder, step)`` turns a just-saved checkpoint folder into its
    record (default: a :class:`ropesplit.empirical.training.train_measure.Measurer` of this config).
    ``stop_after`` ends the process's work after that step's
    checkpoint (tests: an interruption at a known point).
    """
    from tqdm import tqdm

    from ropesplit.empirical.model.loading import quiet_loading

    cfg.check()
    out = _prepare(cfg)
    if measure is None:
        from ropesplit.empirical.training.train_measure import Measurer

        measure = Measurer(cfg)
    text = cfg.task in TEXT_TASKS
    train_bytes = split_text(cfg)[0] if text else np.zeros(0, dtype=np.uint8)
    plan = checkpoint_steps(cfg.steps, cfg.checkpoints)
    done = checkpoints(out)
    records = [_metrics(p) for p in done]
    tokenizer = byte_tokenizer(cfg.task == "mlm") if text else task_tokenizer(cfg.vocab)
    with torch_threads(cfg.threads), quiet_loading():
        run = _Run.start(cfg, done[-1] if done else None)
        start = run.step
        bar = tqdm(total=cfg.steps, initial=start, desc=f"train b={cfg.rope_base:g}", unit="step",
                   file=sys.stderr, disable=None if progress else True)  # fmt: skip
        tokens, clock = 0, time.perf_counter()
        while True:
            if run.step in plan and (not done or run.step > start):
                seconds = time.perf_counter() - clock  # training since the last checkpoint
                records.append(run.checkpoint(out, tokenizer, measure, seconds))
                clock = time.perf_counter()  # speed counts training only
                tokens = 0
            if run.step >= cfg.steps or (stop_after is not None and run.step >= stop_after):
                break
            loss, batch_tokens = run.advance(cfg, train_bytes)
            tokens += batch_tokens
            speed = tokens / max(time.perf_counter() - clock, 1e-9)
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{speed:.0f}")
            bar.update(1)
        bar.close()
    return records


@dataclass
class _Run:
    """What a training run carries from step to step, and what a checkpoint saves of it: the
    model, its AdamW optimizer, the data sampler's RNG (torch's RNG is the global one) and
    the number of steps taken."""

    model: Any  # LlamaForCausalLM or EuroBertForMaskedLM (SDPA attention), train mode between
    optimizer: Any  # torch.optim.AdamW
    rng: np.random.Generator  # draws the batches
    step: int

    @classmethod
    def start(cls, cfg: TrainConfig, last: Path | None) -> _Run:
        """A fresh run from ``load_model(model_config(cfg), seed=cfg.seed)`` (the random
        init), or the run resumed from its ``last`` checkpoint (weights, optimizer, RNGs)."""
        import torch

        from ropesplit.empirical.model.loading import load_model

        if last is not None:
            from ropesplit.empirical.model.loading import model_class

            model = model_class(model_config(cfg)).from_pretrained(last,
                                                                   attn_implementation="sdpa")
            state = torch.load(last / _STATE, weights_only=False)
            step = int(state["step"])
        else:
            model = load_model(model_config(cfg), seed=cfg.seed).model  # the random init
            model.set_attn_implementation("sdpa")
            state, step = None, 0
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                                      weight_decay=0.0)  # fmt: skip
        rng = np.random.default_rng(cfg.seed)
        if state is not None:
            optimizer.load_state_dict(state["optimizer"])
            rng.bit_generator.state = state["data_rng"]
            torch.set_rng_state(state["torch_rng"])
        return cls(model, optimizer, rng, step)

    def advance(self, cfg: TrainConfig, train_bytes: np.ndarray) -> tuple[float, int]:
        """One AdamW step at the step's learning rate (gradients clipped to norm 1) on a
        fresh batch; ``(loss, tokens in the batch)``."""
        import torch

        for group in self.optimizer.param_groups:
            group["lr"] = _lr(cfg, self.step)
        ids, labels = _batch(train_bytes, self.rng, cfg)  # (B, L) each
        with MODEL_CLOCK.timing():  # model compute: forward, backward, step
            loss = self.model(input_ids=ids, labels=labels, use_cache=False).loss
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
        self.step += 1
        return float(loss.detach()), int(ids.numel())

    def checkpoint(self, out: Path, tokenizer: Any, measure: Callable[[Path, int], dict[str, Any]],
                   seconds: float) -> dict[str, Any]:  # fmt: skip
        """Save this step (:func:`_write_checkpoint`), measured in eval mode with one thread
        (statistics bit-identical whatever the machine's load); its record, with the
        ``seconds`` of training since the last checkpoint."""
        import torch

        self.model.eval()
        saved = {"step": self.step, "optimizer": self.optimizer.state_dict(),
                 "data_rng": self.rng.bit_generator.state,
                 "torch_rng": torch.get_rng_state()}  # fmt: skip

        def measured(folder: Path) -> dict[str, Any]:
            with torch_threads(1):
                return {**measure(folder, self.step), "seconds_train": seconds}

        record = _write_checkpoint(out, self.step, self.model, tokenizer, saved, measured)
        self.model.train()
        return record
