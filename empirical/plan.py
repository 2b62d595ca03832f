r"""A run's plan, stated before its first forward pass: passes by kind and the minutes.

A long command (``claims``, ``perturb``, ``report``) first counts the forward passes it
will make, by kind, with the sequences and tokens of each, and times a short warm-up on
the model itself: one captured sequence (the capture with its validation and one
layer's statistics, :func:`ropesplit.empirical.analyze.analyze`) and one plain forward
pass (the model's fastest attention) of ``W`` tokens. The estimate scales each kind's
warm-up time per token linearly to its tokens,

.. math:: T \approx \sum_{\text{kinds}} n_\text{sequences} \, N \, t_\text{kind} / W,

a floor rather than a bound where the quadratic attention dominates (long ``N``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ropesplit.empirical.models import LoadedModel

__all__ = ["WARMUP_TOKENS", "Kind", "Plan", "claims_plan", "experiments_plan", "warmup"]

WARMUP_TOKENS = 64  # tokens of the timed warm-up


@dataclass(frozen=True)
class Kind:
    """One kind of forward pass: ``passes`` passes, ``sequences`` sequences of ``tokens``;
    ``captured``: through the capture (validated, statistics), else a plain loss pass."""

    name: str
    passes: int
    sequences: int
    tokens: int
    captured: bool


@dataclass(frozen=True)
class Plan:
    """The forward passes of a run by kind, and the warm-up's seconds per token."""

    kinds: list[Kind]
    per_token: dict[bool, float] = field(default_factory=dict)  # captured? -> seconds/token

    @property
    def passes(self) -> int:
        return sum(k.passes for k in self.kinds)

    @property
    def seconds(self) -> float:
        """The linear estimate of the module docstring (NaN without a warm-up)."""
        if not self.per_token:
            return math.nan
        return sum(k.sequences * k.tokens * self.per_token[k.captured] for k in self.kinds)

    def text(self) -> str:
        """A few lines: each kind, the total, the estimate."""
        lines = [f"plan: {self.passes} forward passes"]
        for k in self.kinds:
            how = "captured" if k.captured else "loss only"
            lines.append(f"  {k.name}: {k.passes} passes, {k.sequences} sequences of "
                         f"{k.tokens} tokens ({how})")  # fmt: skip
        if self.per_token:
            lines.append(f"  about {self.seconds / 60:.1f} min (linear in tokens from a "
                         f"{WARMUP_TOKENS}-token warm-up; longer sequences take more)")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"kinds": [vars(k) for k in self.kinds], "passes": self.passes,
                "estimated_seconds": self.seconds}  # fmt: skip


def warmup(loaded: LoadedModel, tokens: int = WARMUP_TOKENS) -> dict[bool, float]:
    """Seconds per token of a captured sequence and of a plain forward pass, timed once each
    on ``tokens`` tokens of the model itself, each after one untimed pass (a first capture
    loads the statistics' compiled kernels: timed, it made a claims run's estimate 150
    minutes for a run of a few)."""
    import torch

    from ropesplit.empirical.analyze import analyze
    from ropesplit.empirical.models import forward

    n = max(8, min(tokens, loaded.max_positions or tokens))
    ids = torch.arange(n) % int(loaded.config.vocab_size)
    forward(loaded, ids)  # untimed: first-call costs
    start = time.perf_counter()
    forward(loaded, ids)
    plain = time.perf_counter() - start
    analyze(loaded, ids)  # untimed: the compiled kernels load once a process (1.5 s or more)
    start = time.perf_counter()
    analyze(loaded, ids)
    captured = time.perf_counter() - start
    return {True: captured / n, False: plain / n}


def claims_plan(lengths: Sequence[int], corpora: int, measured: range, ordered: range,
                batch_size: int) -> Plan:  # fmt: skip
    """The claims run's passes (``empirical.passages``, ``experiments.order_passages``):
    per corpus, each measured passage captured twice on the trained model (its text's
    positions and jittered), twice under shuffled frequencies and once on its random-init
    twin, in batches; each word-order passage's original and perturbed rows as loss passes
    of up to ``batch_size`` rows; all at the longest length (every cell reads its prefix)."""
    from collections import Counter

    from ropesplit.empirical.experiments.order_passages import DRAWS, RATES
    from ropesplit.empirical.passages import BATCH, GROUP, control_seed

    n, m, o = int(max(lengths)), len(measured), len(ordered)
    per_seed = Counter(control_seed(i) for i in measured)  # a twin's passages, in groups
    groups = corpora * sum(math.ceil(count / GROUP) for count in per_seed.values())
    rows = 1 + len(RATES) * DRAWS
    return Plan([
        Kind("trained model", corpora * math.ceil(m / BATCH), corpora * 2 * m, n, True),
        Kind("shuffled-frequency null", groups, corpora * 2 * m, n, True),
        Kind("random-init twins", groups, corpora * m, n, True),
        Kind("word order", corpora * o * math.ceil(rows / batch_size), corpora * o * rows, n,
             False),
    ])  # fmt: skip


def experiments_plan(counts: dict[str, int], tokens: int) -> Plan:
    """``perturb``'s passes: each experiment's forward passes at most (its
    ``forward_count``), loss passes of ``tokens`` tokens."""
    return Plan([Kind(name, count, count, tokens, False) for name, count in counts.items()])
