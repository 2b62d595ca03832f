r"""What the intervention experiments share: passages, calibration, paired tests, rows.

Every intervention experiment (``remainder``, ``keys``, ``terms``,
``shuffle``; :mod:`ropesplit.empirical.experiments.intervene`) measures a corpus, not
the one text: the first :data:`PASSAGES` passages of the default corpus
(``empirical.model.corpus``) at the run's ``--tokens`` are the replicates, and the
next :data:`CALIBRATION` passages give each layer's reference key
:math:`\bar k` (disjoint from the scored ones, so no query sees its own
text's future through it). The unit of every interval is the passage; each
decision is a Student t interval of a paired difference over passages
(``numerics.intervals``), at least :data:`MIN_PASSAGES` of them, as the
claims registry fixes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ropesplit.claims.registry import LEVEL, MIN_PASSAGES
from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.experiments.base import Context, Outcome, Row
from ropesplit.empirical.experiments.intervene import Edit, calibrate_kbars, intervened_nll
from ropesplit.empirical.model.corpus import default_corpus, passage_ids
from ropesplit.empirical.model.loaded import LoadedModel
from ropesplit.numerics.intervals import UnitInterval, decide, paired_interval, t_interval
from ropesplit.numerics.intervention import log_ratio

__all__ = ["CALIBRATION", "PASSAGES", "Corpus", "corpus", "judge_paired", "paired", "ratios",
           "summary"]

PASSAGES = MIN_PASSAGES  # scored passages (the claims registry's minimum)
CALIBRATION = 2  # further passages estimating kbar


class Corpus:
    """The scored passages ``ids (P, N)``, the calibration ones and the loss under an edit."""

    def __init__(self, context: Context) -> None:
        total = PASSAGES + CALIBRATION
        if context.passages is None:
            chosen = passage_ids(context.loaded, default_corpus(), context.n_tokens, count=total,
                                 min_count=total)  # fmt: skip
            ids = torch.as_tensor(chosen.ids)
        else:
            ids = torch.as_tensor(getattr(context.passages, "ids", context.passages))
            if ids.ndim != 2 or ids.shape[0] < total:
                raise RopesplitError(f"the interventions need {total} passages ({PASSAGES} "
                                     f"scored, {CALIBRATION} calibration), got "
                                     f"{tuple(ids.shape)}")  # fmt: skip
        self.ids, self.calibration = ids[:PASSAGES], ids[PASSAGES:total]
        self.context = context
        self._kbars: dict[int, dict[int, np.ndarray]] = {}

    def kbars(self, loaded: LoadedModel) -> dict[int, np.ndarray]:
        """Each layer's mean pre-RoPE key over the calibration passages, for ``loaded``."""
        key = id(loaded)
        if key not in self._kbars:
            self._kbars[key] = calibrate_kbars(loaded, self.calibration)
            self.context.forwarded(1)
        return self._kbars[key]

    def nll(self, loaded: LoadedModel, edit: Edit | None, positions: Any = None, *,
            ids: Any = None) -> np.ndarray:  # fmt: skip
        """``(P, N - 1)`` losses of the scored passages (or ``ids``) under ``edit``, in
        batches."""
        size = self.context.settings.batch_size
        rows = self.ids if ids is None else ids
        parts = []
        for b0 in range(0, len(rows), size):
            pos = None if positions is None else positions[b0 : b0 + size]
            parts.append(intervened_nll(loaded, rows[b0 : b0 + size], edit, pos))
        self.context.forwarded(1)
        return np.concatenate(parts)


def corpus(context: Context) -> Corpus:
    """The experiment's passages (built once per context)."""
    cached = getattr(context, "_edit_corpus", None)
    if cached is None:
        cached = Corpus(context)
        context._edit_corpus = cached  # type: ignore[attr-defined]
    return cached


def summary(values: np.ndarray, prefix: str) -> Row:
    """``{prefix}``, ``{prefix}_low``, ``{prefix}_high``: mean and t interval over passages."""
    ci = t_interval(values, level=LEVEL, unit="passages")
    return {prefix: ci.mean, f"{prefix}_low": ci.low, f"{prefix}_high": ci.high}


def paired(a: np.ndarray, b: np.ndarray, direction: str) -> Row:
    """The paired difference ``a - b`` over passages: ``diff``, ``diff_low``, ``diff_high``,
    ``diff_sd``, ``n`` and the predicted ``direction`` of 0 (``"below"`` or ``"above"``)."""
    ci = paired_interval(a, b, level=LEVEL, unit="passages")
    return {"diff": ci.mean, "diff_low": ci.low, "diff_high": ci.high, "diff_sd": ci.sd,
            "n": ci.n, "direction": direction}  # fmt: skip


def judge_paired(row: Row, what: str) -> Outcome:
    """The pre-registered decision on a :func:`paired` row: does the paired difference's
    interval lie on the predicted side of 0 (with at least ``MIN_PASSAGES`` passages)?"""
    ci = UnitInterval(row["diff"], row["diff_low"], row["diff_high"], LEVEL, int(row["n"]),
                      row["diff_sd"], "paired t", "passages")  # fmt: skip
    decision = decide(ci, 0.0, row["direction"], min_n=MIN_PASSAGES, what=what)
    return Outcome(decision.outcome, decision.reason)


def ratios(edited: np.ndarray, clean: np.ndarray, start: int = 0) -> np.ndarray:
    """Per passage log loss ratio over the targets from ``start`` on."""
    return log_ratio(edited[:, start:], clean[:, start:])
