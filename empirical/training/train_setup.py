r"""What a training run is, apart from running it: its config, its byte-level and task
tokenisers, the model it builds, its text split into train and held-out parts, and the
threads it runs on. :mod:`.train` trains from it, :mod:`.train_measure` measures its
checkpoints from it (neither imports the other's loop).

Shapes: a batch is ``(B, L)`` token ids, each row BOS + ``L - 1`` bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError

__all__ = ["BOS", "EOS", "MASK", "VOCAB", "TrainConfig", "byte_tokenizer", "checkpoint_steps",
           "model_config", "split_text", "task_tokenizer", "torch_threads"]

BOS, EOS, VOCAB = 256, 257, 258  # byte ids 0..255, then the two specials
MASK = VOCAB  # the masked-LM objective's <mask>: one id past the causal model's vocabulary


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
    # "lm" (next byte of the text: a Llama), "mlm" (masked bytes: a EuroBERT encoder, the
    # same blocks attending both ways), "recall" or "offset" (numerics.tasks)
    task: str = "lm"
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
        from ropesplit.numerics.tasks import TASKS, TEXT_TASKS

        if self.task not in TASKS:
            raise RopesplitError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.task not in TEXT_TASKS:
            from ropesplit.numerics.tasks import check_task

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


def byte_tokenizer(masked: bool = False) -> Any:
    """Byte-level ``PreTrainedTokenizerFast``: id = byte value, BOS 256 prepended, EOS 257
    (``masked``: and ``<mask>`` 258, the masked-LM objective's).

    Built with the ``tokenizers`` library (a BPE with the 256 byte symbols and
    no merges), so ``AutoTokenizer.from_pretrained(checkpoint)`` loads it.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {c: b for b, c in bytes_to_unicode().items()}  # 256 byte symbols, id = byte
    vocab |= {"<s>": BOS, "</s>": EOS} | ({"<mask>": MASK} if masked else {})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.add_special_tokens(["<s>", "</s>", *(["<mask>"] if masked else [])])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   **({"mask_token": "<mask>"} if masked else {}))  # fmt: skip


def model_config(cfg: TrainConfig) -> Any:
    """The ``LlamaConfig`` of a run (``mlm``: the ``EuroBertConfig`` of the same blocks, a
    bidirectional encoder with a masked-LM head); the context allows 8 ``L_train`` for
    extrapolation studies."""
    from transformers import LlamaConfig

    if cfg.task == "mlm":
        return _encoder_config(cfg)
    if cfg.task == "lm":
        vocab, bos, eos = VOCAB, BOS, EOS
    else:
        from ropesplit.numerics.tasks import task_vocab

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


def _encoder_config(cfg: TrainConfig) -> Any:
    """EuroBERT: Llama's blocks (RMSNorm, SwiGLU, RoPE) attending both ways, a masked-LM
    head; the causal run's shape, its base, and ``<mask>`` past the bytes and specials."""
    from transformers import EuroBertConfig

    settings: dict[str, Any] = dict(
        vocab_size=VOCAB + 1, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads, head_dim=cfg.head_dim,
        max_position_embeddings=8 * cfg.seq_len,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_base)},
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=EOS, mask_token_id=MASK,
        tie_word_embeddings=True, initializer_range=cfg.init_std,
        ropesplit_train_length=cfg.seq_len, ropesplit_task=cfg.task,
    )  # fmt: skip
    return EuroBertConfig(**settings)


def task_tokenizer(vocab: int) -> Any:
    """A word-level tokenizer of a synthetic task over ``vocab`` content tokens: keys
    ``k0 ..``, values ``v0 ..``, one word per stored pair ``k3=v1`` (``numerics.tasks``), then
    ``<s>`` (BOS) and ``</s>`` (EOS, also what an unknown word reads as), so checkpoints load
    like any model."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from ropesplit.numerics.tasks import task_vocab

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
    """(training bytes ``(n,)`` uint8, held-out text): the held-out part is the text's tail (a
    FASTA file's text is its sequences, one a line).

    The cut is moved back to a line start so the held-out text is whole lines.
    """
    from ropesplit.empirical.model.corpus import is_fasta, read_fasta
    from ropesplit.empirical.model.text import default_text, read_text

    text = read_text(cfg.text) if cfg.text else default_text()
    if cfg.text and is_fasta(cfg.text, text):  # proteins: the sequences, one a line
        text = "\n".join(p.text for p in read_fasta(text, f"FASTA file {cfg.text}")) + "\n"
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
