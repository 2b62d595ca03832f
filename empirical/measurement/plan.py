r"""A run's plan, stated before its first forward pass: passes by kind and the minutes.

A long command (``claims``, ``perturb``, ``report``) first counts the forward passes it
will make, by kind, with the sequences and tokens of each, and times a short warm-up on
the model itself: one captured sequence (the capture with its validation and every
layer's statistics under the run's measure, :func:`ropesplit.empirical.analysis.analyze.analyze`)
and one plain forward pass (the model's fastest attention), each at ``W`` and ``2W``
tokens. A sequence's time is taken as affine in its tokens, a fixed part (the layers'
Python and per-call costs, which dominate a short warm-up) and a part per token, read off
the two lengths; the estimate sums it over the sequences of each kind,

.. math:: T \approx \sum_{\text{kinds}} n_\text{sequences} \, (a_\text{kind}
          + b_\text{kind} N), \qquad b = (t_{2W} - t_W) / W,\ a = t_W - b W,

a floor rather than a bound where the quadratic attention dominates (long ``N``). Scaled
from ``W`` alone (per token, no fixed part), a claims run of 512-token passages on the
default model was overestimated by half; the affine form comes closer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ropesplit.empirical.model.loaded import LoadedModel

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
    """The forward passes of a run by kind, and the warm-up's cost of a sequence."""

    kinds: list[Kind]
    cost: dict[bool, tuple[float, float]] = field(default_factory=dict)  # captured? ->
    # (seconds a sequence, seconds a token): :func:`warmup`

    @property
    def passes(self) -> int:
        return sum(k.passes for k in self.kinds)

    @property
    def seconds(self) -> float:
        """The affine estimate of the module docstring (NaN without a warm-up)."""
        if not self.cost:
            return math.nan
        return sum(k.sequences * (self.cost[k.captured][0] + k.tokens * self.cost[k.captured][1])
                   for k in self.kinds)  # fmt: skip

    def text(self) -> str:
        """A few lines: each kind, the total, the estimate."""
        lines = [f"plan: {self.passes} forward passes"]
        for k in self.kinds:
            how = "captured" if k.captured else "loss only"
            lines.append(f"  {k.name}: {k.passes} passes, {k.sequences} sequences of "
                         f"{k.tokens} tokens ({how})")  # fmt: skip
        if self.cost:
            lines.append(f"  about {self.seconds / 60:.1f} min (affine in tokens from "
                         f"{WARMUP_TOKENS}- and {2 * WARMUP_TOKENS}-token warm-ups; longer "
                         "sequences take more)")  # fmt: skip
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"kinds": [vars(k) for k in self.kinds], "passes": self.passes,
                "estimated_seconds": self.seconds}  # fmt: skip


def warmup(loaded: LoadedModel, tokens: int = WARMUP_TOKENS, measure: Any = None
           ) -> dict[bool, tuple[float, float]]:  # fmt: skip
    """``(seconds a sequence, seconds a token)`` of a captured sequence (statistics under
    ``measure``, None: ``analyze``'s default) and of a plain forward pass: each timed once
    at ``tokens`` and at twice that many tokens of the model itself, after one untimed
    pass (a first capture loads the statistics' compiled kernels: timed, it made a claims
    run's estimate dozens of times too long). The per-token part is the slope
    between the two lengths (the whole time over the longer one should noise make it
    negative); the fixed part is what the shorter one leaves, never below 0."""
    import torch

    from ropesplit.empirical.adapter.configs import vocab_size
    from ropesplit.empirical.analysis.analyze import analyze
    from ropesplit.empirical.model.passes import forward

    options = {} if measure is None else {"measure": measure}
    longest = loaded.max_positions or 2 * tokens
    n = max(8, min(tokens, longest // 2))
    lengths = (n, min(2 * n, longest))
    ids = torch.arange(lengths[1]) % vocab_size(loaded.config)

    def timed(run: Any) -> tuple[float, float]:
        run(ids[: lengths[0]])  # untimed: first-call costs, compiled kernels
        seconds = []
        for m in lengths:
            start = time.perf_counter()
            run(ids[:m])
            seconds.append(time.perf_counter() - start)
        if not (lengths[1] > lengths[0] and seconds[1] > seconds[0]):  # no slope to read
            return 0.0, seconds[1] / lengths[1]
        slope = (seconds[1] - seconds[0]) / (lengths[1] - lengths[0])
        return max(0.0, seconds[0] - slope * lengths[0]), slope

    return {False: timed(lambda x: forward(loaded, x)),
            True: timed(lambda x: analyze(loaded, x, **options))}


def claims_plan(lengths: Sequence[int], corpora: int, measured: range, ordered: range,
                batch_size: int, run: int | None = None, *, both_ways: bool = False
                ) -> Plan:  # fmt: skip
    """The claims run's passes (``empirical.measurement.passages``, ``measurement.order_passages``):
    per corpus, each measured passage captured twice on the trained model (its text's
    positions and jittered), twice under shuffled frequencies and once on its random-init
    twin, in the batches ``passages.passes`` forms from the run's ``run`` passages (default
    ``measured.stop``; a shard's batches carry the others of their batch along); each
    word-order passage's original and perturbed rows as loss passes of up to
    ``batch_size`` rows; all at the longest length (every cell reads its prefix), or, for a
    model whose attention looks both ways, at each length."""
    from ropesplit.claims.registry import SWAP_RATES
    from ropesplit.empirical.measurement.order_passages import DRAWS
    from ropesplit.empirical.measurement.passages import passes

    o = len(ordered)
    batches, groups = passes(measured, measured.stop if run is None else run)
    trained, grouped = sum(map(len, batches)), sum(map(len, groups))
    rows = 1 + len(SWAP_RATES) * DRAWS
    each = sorted({int(t) for t in lengths}) if both_ways else [int(max(lengths))]
    kinds = []
    for n in each:
        at = f" at {n} tokens" if len(each) > 1 else ""
        kinds += [
            Kind("trained model" + at, corpora * len(batches), corpora * 2 * trained, n, True),
            Kind("shuffled-frequency null" + at, corpora * len(groups), corpora * 2 * grouped,
                 n, True),
            Kind("random-init twins" + at, corpora * len(groups), corpora * grouped, n, True),
            Kind("word order" + at, corpora * o * math.ceil(rows / batch_size),
                 corpora * o * rows, n, False),
        ]  # fmt: skip
    return Plan(kinds)


def experiments_plan(counts: dict[str, int], tokens: int) -> Plan:
    """``perturb``'s passes: each experiment's forward passes at most (its
    ``forward_count``), loss passes of ``tokens`` tokens."""
    return Plan([Kind(name, count, count, tokens, False) for name, count in counts.items()])
