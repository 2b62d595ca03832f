r"""Train a small RoPE language model here and keep log-spaced checkpoints.

The paper's claim is that training creates the pattern behind the split
(docs/theory.md section 5: key deviations in the slow pairs, ``lowfreq_share_k``
high, ``r_split`` near 1) and that random initialisation lacks it. This
module trains a ``transformers`` ``LlamaForCausalLM`` whose training length
``L_train`` and RoPE base ``b`` (:math:`\theta_l = b^{-2l/d}`) we choose, on
a byte-level tokenisation of a text, and writes checkpoints that every other
part of ropesplit loads like any Hugging Face model. Each checkpoint is
measured by :mod:`ropesplit.empirical.train_measure` as it is written.

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

import contextlib
import dataclasses
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.core.io import read_json, write_json

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

BOS, EOS, VOCAB = 256, 257, 258  # byte ids 0..255, then the two specials
_STATE = "trainer_state.pt"
_METRICS = "metrics.json"


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides a training run (saved as ``run.json``)."""

    out: str = "train-run"  # run folder (checkpoints step-NNNNNN/ inside)
    steps: int = 400  # optimizer steps
    seq_len: int = 128  # L_train: tokens per training window, positions 0..L-1
    rope_base: float = 10000.0  # b in theta_l = b^(-2l/d)
    layers: int = 2
    d_model: int = 128
    heads: int = 4  # head_dim = d_model / heads
    d_ff: int = 384  # SwiGLU hidden width
    batch: int = 16  # windows per step
    lr: float = 3e-3  # peak AdamW learning rate (linear warmup, cosine to 10%)
    warmup: int = 30
    seed: int = 0  # weights (torch.manual_seed) and batch offsets (numpy)
    threads: int = 2  # torch intra-op threads: part of what makes a run reproducible
    checkpoints: int = 8  # log-spaced checkpoints, step 0 and the last included
    val_fraction: float = 0.1  # held-out tail of the text
    val_windows: int = 8  # held-out windows of seq_len tokens for the validation loss
    n_boot: int = 1000  # bootstrap resamples for the CIs over heads
    text: str | None = None  # UTF-8 file (default: ropesplit.empirical.default_text())
    task: str = "lm"  # "lm" (bytes of the text), "recall" or "offset" (empirical.tasks)
    vocab: int = 64  # content tokens of the synthetic tasks (3/4 keys, 1/4 values)
    init_std: float = 0.02  # weights drawn N(0, init_std^2) (transformers' initializer_range)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def check(self) -> None:
        """Raise a one-line error for a config that cannot train."""
        positive = ("steps", "seq_len", "layers", "d_model", "heads", "d_ff", "batch", "threads",
                    "val_windows", "n_boot")  # fmt: skip
        for name in positive:
            if getattr(self, name) < 1:
                raise RopesplitError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.seq_len < 8:
            raise RopesplitError(f"seq_len must be at least 8, got {self.seq_len}")
        from ropesplit.empirical.tasks import TASKS

        if self.task not in TASKS:
            raise RopesplitError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.task != "lm":
            from ropesplit.empirical.tasks import check_task

            check_task(self.seq_len, self.vocab)
        if not (math.isfinite(self.init_std) and self.init_std > 0):
            raise RopesplitError(f"init_std must be a positive number, got {self.init_std}")
        if self.d_model % self.heads or self.head_dim % 2:
            raise RopesplitError(
                f"d_model / heads must be an even integer, got {self.d_model}/{self.heads}"
            )
        if not (math.isfinite(self.rope_base) and self.rope_base > 1):
            raise RopesplitError(f"rope_base must be a finite number above 1, got {self.rope_base}")
        if not 0.0 < self.val_fraction < 0.5:
            raise RopesplitError(f"val_fraction must lie in (0, 0.5), got {self.val_fraction}")
        if self.checkpoints < 2:
            raise RopesplitError(f"checkpoints must be at least 2, got {self.checkpoints}")
        if not (self.lr > 0 and self.warmup >= 0):
            raise RopesplitError(
                f"lr must be positive and warmup >= 0, got {self.lr}, {self.warmup}"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def checkpoint_steps(steps: int, count: int) -> list[int]:
    """``count`` log-spaced checkpoint steps: 0, then geometric steps from 1 to ``steps``.

    >>> checkpoint_steps(100, 5)
    [0, 1, 5, 22, 100]
    """
    spaced = np.unique(np.round(np.geomspace(1, steps, max(count - 1, 1)))).astype(int)
    return sorted({0, *map(int, spaced), steps})


def byte_tokenizer() -> Any:
    """Byte-level ``PreTrainedTokenizerFast``: id = byte value, BOS 256 prepended, EOS 257.

    Built with the ``tokenizers`` library (a BPE with the 256 byte symbols and
    no merges), so ``AutoTokenizer.from_pretrained(checkpoint)`` loads it.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {c: b for b, c in bytes_to_unicode().items()}  # 256 byte symbols, id = byte
    vocab |= {"<s>": BOS, "</s>": EOS}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.add_special_tokens(["<s>", "</s>"])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def model_config(cfg: TrainConfig) -> Any:
    """The ``LlamaConfig`` of a run; the context allows 8 ``L_train`` for extrapolation studies."""
    from transformers import LlamaConfig

    if cfg.task == "lm":
        vocab, bos, eos = VOCAB, BOS, EOS
    else:
        from ropesplit.empirical.tasks import task_vocab

        vocab = task_vocab(cfg.vocab)[2]
        bos, eos = vocab - 2, vocab - 1
    settings: dict[str, Any] = dict(
        vocab_size=vocab, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads, head_dim=cfg.head_dim,
        max_position_embeddings=8 * cfg.seq_len, rope_theta=float(cfg.rope_base),
        bos_token_id=bos, eos_token_id=eos, tie_word_embeddings=True,
        initializer_range=cfg.init_std,
        ropesplit_train_length=cfg.seq_len,  # L_train, saved in config.json
        ropesplit_task=cfg.task,
    )  # fmt: skip
    return LlamaConfig(**settings)


def task_tokenizer(vocab: int) -> Any:
    """A word-level tokenizer of a synthetic task over ``vocab`` content tokens: keys
    ``k0 ..``, values ``v0 ..``, one word per stored pair ``k3=v1`` (``empirical.tasks``), then
    ``<s>`` (BOS) and ``</s>`` (EOS, also what an unknown word reads as), so checkpoints load
    like any model."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from ropesplit.empirical.tasks import task_vocab

    keys, values, size = task_vocab(vocab)
    names = ([f"k{i}" for i in range(keys)] + [f"v{i}" for i in range(values)]
             + [f"k{k}=v{v}" for k in range(keys) for v in range(values)])  # fmt: skip
    words = {name: i for i, name in enumerate(names)} | {"<s>": size - 2, "</s>": size - 1}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", size - 2)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="</s>")  # fmt: skip


def split_text(cfg: TrainConfig) -> tuple[np.ndarray, str]:
    """(training bytes ``(n,)`` uint8, held-out text): the held-out part is the text's tail.

    The cut is moved back to a line start so the held-out text is whole lines.
    """
    from ropesplit.empirical.text import default_text, read_text

    text = read_text(cfg.text) if cfg.text else default_text()
    cut = int(len(text) * (1.0 - cfg.val_fraction))
    cut = text.rfind("\n", 0, cut) + 1 or cut
    train_bytes = np.frombuffer(text[:cut].encode("utf-8"), dtype=np.uint8)
    held = text[cut:]
    need = cfg.val_windows * cfg.seq_len
    if len(held.encode("utf-8")) < need or train_bytes.size < 2 * cfg.seq_len:
        raise RopesplitError(
            f"text too short: the held-out part needs {need} bytes (val_windows x seq_len) "
            f"and training {2 * cfg.seq_len}, got {len(held.encode())} and {train_bytes.size}"
        )
    return train_bytes, held


def checkpoints(out: str | Path) -> list[Path]:
    """The complete checkpoint folders of a run, in step order."""
    folder = Path(out)
    return sorted(p for p in folder.glob("step-*") if p.is_dir() and (p / _METRICS).is_file())


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads and numba's (the compiled bound) set to ``n`` inside the block.

    Both are restored after; numba's never above the threads it started with.
    """
    import numba
    import torch

    before, before_numba = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(n)
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.set_num_threads(before)
        numba.set_num_threads(before_numba)


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
    random offsets (every next token a label), else the task's sequences (one label each)."""
    import torch

    if cfg.task != "lm":
        from ropesplit.empirical.tasks import task_batch

        ids, labels, _, _ = task_batch(cfg.task, rng, cfg.batch, cfg.seq_len, cfg.vocab)
        return ids, labels
    starts = rng.integers(0, train_bytes.size - cfg.seq_len, size=cfg.batch)  # (B,)
    rows = np.stack([train_bytes[s : s + cfg.seq_len - 1] for s in starts])  # (B, L-1)
    ids = torch.from_numpy(np.concatenate([np.full((cfg.batch, 1), BOS), rows], axis=1))
    ids = ids.to(torch.int64)  # (B, L)
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
        from ropesplit.empirical.train_measure import Measurer

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
    :math:`-\frac{1}{B(L-1)}\sum_{b,n}\log p(x_{b,n} \mid x_{b,<n})` with AdamW.
    ``measure(folder, step)`` turns a just-saved checkpoint folder into its
    record (default: a :class:`ropesplit.empirical.train_measure.Measurer` of this config).
    ``stop_after`` ends the process's work after that step's
    checkpoint (tests: an interruption at a known point).
    """
    import torch
    from tqdm import tqdm

    from ropesplit.empirical.models import load_model, quiet_loading

    cfg.check()
    out = _prepare(cfg)
    if measure is None:
        from ropesplit.empirical.train_measure import Measurer

        measure = Measurer(cfg)
    measure_step: Callable[[Path, int], dict[str, Any]] = measure
    train_bytes = split_text(cfg)[0] if cfg.task == "lm" else np.zeros(0, dtype=np.uint8)
    plan = checkpoint_steps(cfg.steps, cfg.checkpoints)
    done = checkpoints(out)
    records = [_metrics(p) for p in done]
    tokenizer = byte_tokenizer() if cfg.task == "lm" else task_tokenizer(cfg.vocab)
    with torch_threads(cfg.threads), quiet_loading():
        if done:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(done[-1], attn_implementation="sdpa")
            state = torch.load(done[-1] / _STATE, weights_only=False)
            start = int(state["step"])
        else:
            model = load_model(model_config(cfg), seed=cfg.seed).model  # the random init
            model.set_attn_implementation("sdpa")
            state, start = None, 0
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                                      weight_decay=0.0)  # fmt: skip
        rng = np.random.default_rng(cfg.seed)
        if state is not None:
            optimizer.load_state_dict(state["optimizer"])
            rng.bit_generator.state = state["data_rng"]
            torch.set_rng_state(state["torch_rng"])
        bar = tqdm(total=cfg.steps, initial=start, desc=f"train b={cfg.rope_base:g}", unit="step",
                   file=sys.stderr, disable=None if progress else True)  # fmt: skip
        tokens, clock = 0, time.perf_counter()
        step = start
        while True:
            if step in plan and (not done or step > start):
                model.eval()
                saved = {"step": step, "optimizer": optimizer.state_dict(),
                         "data_rng": rng.bit_generator.state,
                         "torch_rng": torch.get_rng_state()}  # fmt: skip
                seconds = time.perf_counter() - clock  # training since the last checkpoint

                def measured(folder: Path, s: int = step, t: float = seconds) -> dict[str, Any]:
                    with torch_threads(1):  # statistics bit-identical whatever the machine's load
                        return {**measure_step(folder, s), "seconds_train": t}

                records.append(_write_checkpoint(out, step, model, tokenizer, saved, measured))
                model.train()
                clock = time.perf_counter()  # speed counts training only
                tokens = 0
            if step >= cfg.steps or (stop_after is not None and step >= stop_after):
                break
            for group in optimizer.param_groups:
                group["lr"] = _lr(cfg, step)
            ids, labels = _batch(train_bytes, rng, cfg)  # (B, L) each
            loss = model(input_ids=ids, labels=labels, use_cache=False).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            tokens += ids.numel()
            speed = tokens / max(time.perf_counter() - clock, 1e-9)
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", tok_s=f"{speed:.0f}")
            bar.update(1)
        bar.close()
    return records
