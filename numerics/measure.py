r"""How a head is measured: every option of the split statistics in one frozen object.

:func:`.stats.layer_statistics`, :func:`.stats.head_statistics` and
:func:`.split.split_head` take the geometry as one :class:`~.spec.RopeSpec`
and their options as one :class:`Measure`, as nanoGPT's ``GPTConfig`` holds a
model's: each field with its default, documented where it is declared.  The
defaults are an exact check under the zero reference (:math:`m_l = 1`, the
split of docs/theory.md section 2); ``replace(measure, seed=1)`` changes one.

>>> Measure().reference, Measure(pair_budget=4096).pair_budget
('zero', 4096)
>>> Measure(kbar_rule="median")
Traceback (most recent call last):
...
ropesplit.core.errors.RopesplitError: kbar_rule must be one of mean, mean-skip-first, got 'median'
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.reference import Reference, parse_reference

__all__ = ["EXACT", "KBAR_RULES", "Measure"]

# the reference key kbar of each KV head, unless one is given: the mean key over every
# token, or over every token but the first (the attention sink)
KBAR_RULES = ("mean", "mean-skip-first")


def _whole(x: Any) -> bool:
    """An integer (numpy's too), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool | np.bool_)


@dataclass(frozen=True)
class Measure:
    """The options of one measurement (see the module docstring)."""

    # m_l of g and E (docs/theory.md section 6): "zero", "distance:C", "mean" or a Reference
    reference: str | Reference = "zero"
    # further references whose r_split, r_split_rowcentred, remainder_share are added
    # (HeadStats.by_reference), from the same pass
    references: tuple[str, ...] = ()
    # causal pairs per head whose bound is checked (None: every pair; fewer: a seeded sample,
    # reported as sampled_pairs); every other statistic stays exact
    pair_budget: int | None = None
    seed: int = 0  # fixes the pair sample
    kbar_rule: str = "mean"  # the reference key when none is given: one of KBAR_RULES
    # split_head: E term by term with its bounds (False: E = W - f - g, no bounds)
    bounds: bool = True
    # layer_statistics: the torch device the statistics run on, from the features to the
    # per-head sums (None: the compiled CPU path; "cpu": the same torch code a GPU runs)
    device: Any = None
    # layer_statistics: the split alone (r_split, its moments and the low-frequency shares
    # under every reference); the bound check and the three-axis fit are skipped: tightness
    # and r_3axis read NaN, sampled_pairs 0 (no pair checked), and the rest is the same bits
    split_only: bool = False

    def __post_init__(self) -> None:
        budget = self.pair_budget
        if budget is not None and not (_whole(budget) and budget >= 1):
            raise RopesplitError(
                f"pair_budget must be a positive number of pairs, got {self.pair_budget}")
        if not _whole(self.seed) or self.seed < 0:
            raise RopesplitError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.kbar_rule not in KBAR_RULES:
            raise RopesplitError(
                f"kbar_rule must be one of {', '.join(KBAR_RULES)}, got {self.kbar_rule!r}")
        if not isinstance(self.references, tuple) or not all(
                isinstance(r, str) for r in self.references):  # fmt: skip
            raise RopesplitError(f"references must be a tuple of names, got {self.references!r}")
        for name in (self.reference, *self.references):  # one line for a bad name, now
            if not isinstance(name, Reference):
                parse_reference(name)

    def rule_kbar(self, k: np.ndarray) -> np.ndarray | None:
        """The reference key ``kbar_rule`` fixes for keys ``k (..., N, d)``: the mean over the
        tokens but the first for ``"mean-skip-first"``, ``(..., d)``; None for ``"mean"``
        (each caller takes the plain mean on its own path)."""
        return k[..., 1:, :].mean(axis=-2) if self.kbar_rule == "mean-skip-first" else None


EXACT = Measure()  # the defaults: every pair checked, the zero reference, bounds evaluated
