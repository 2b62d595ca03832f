r"""What every experiment is: a prediction in words, a run, rows, and a verdict from the numbers.

An :class:`Experiment` is a frozen record of functions (no subclassing):

- ``prediction``: what docs/theory.md section 4 (and the paper) predict, in
  words, with the thresholds the verdict uses, fixed before anything runs;
- ``needs``: the forward passes and captures it needs, in words;
- ``run(context) -> rows``: flat dicts of measured numbers (JSON-ready);
- ``judge(row) -> Outcome``: each row's verdict, from that row's numbers;
- ``verdict(rows) -> Outcome``: the experiment's verdict, from its rows;
- ``forward_count(settings) -> int``: forward passes at most (a progress
  bar's total).

A :class:`Context` hands an experiment the model, the token ids, the
:class:`ExperimentSettings` and two services: :meth:`Context.capture` (the text's own
capture, shared and cached, or a capture at other position ids, each
recorded in :attr:`Context.captured`) and :meth:`Context.forwarded` (a
progress callback). No formula lives here: experiments call numerics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ropesplit.core.errors import RopesplitError
from ropesplit.core.outcome import OUTCOMES, Outcome
from ropesplit.empirical.experiments.settings import ExperimentSettings
from ropesplit.empirical.model.capture import Capture, capture
from ropesplit.empirical.model.loaded import LoadedModel, default_layers

__all__ = [
    "OUTCOMES",
    "Context",
    "Experiment",
    "Row",
    "ExperimentSettings",
    "combine",
    "interval_rise",
    "rows_then_schemes",
]

Row = dict[str, Any]


def combine(verdicts: Sequence[Outcome], what: str) -> Outcome:
    """One verdict for many: any ``disagrees`` wins, then ``inconclusive``, else ``agrees``.

    The reason counts the outcomes and quotes the first reason of the winning kind.
    """
    if not verdicts:
        return Outcome("inconclusive", f"no {what} to judge")
    counts = {o: sum(v.outcome == o for v in verdicts) for o in OUTCOMES}
    for outcome in ("disagrees", "inconclusive", "agrees"):
        if counts[outcome]:
            first = next(v for v in verdicts if v.outcome == outcome)
            tally = ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o])
            return Outcome(outcome, f"{tally} of {len(verdicts)} {what}; e.g. {first.reason}")
    raise AssertionError("unreachable")


def rows_then_schemes(
    rows: Sequence[Row],
    judge: Callable[[Row], Outcome],
    per_scheme: Callable[[list[Row], str], Outcome],
    what: str,
) -> Outcome:
    """:func:`combine` of every row's ``judge`` and then ``per_scheme(rows, scheme)`` for each
    scheme in order of first appearance (the shape of the order and position verdicts)."""
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    checks = [judge(r) for r in rows] + [per_scheme(list(rows), s) for s in schemes]
    return combine(checks, what)


def interval_rise(small: Row, large: Row, what: str, rise: str, fall: str) -> Outcome:
    """Whether ``large``'s interval ``[ci_low, ci_high]`` lies above ``small``'s (agrees),
    below it (disagrees) or overlaps it (inconclusive); ``rise``/``fall`` name the outcome."""
    text = (f"{what}: [{small['ci_low']:.3f}, {small['ci_high']:.3f}] vs "
            f"[{large['ci_low']:.3f}, {large['ci_high']:.3f}]")  # fmt: skip
    ends = [small["ci_low"], small["ci_high"], large["ci_low"], large["ci_high"]]
    if not all(math.isfinite(float(x)) for x in ends):
        # one draw has no interval (a zero-width interval is never decisive)
        return Outcome("inconclusive", f"{text}: no interval (fewer than 2 draws)")
    if large["ci_low"] > small["ci_high"]:
        return Outcome("agrees", f"{text}: {rise}")
    if large["ci_high"] < small["ci_low"]:
        return Outcome("disagrees", f"{text}: {fall}")
    return Outcome("inconclusive", f"{text}: the intervals overlap (more seeds would tell)")




def check_layers(layers: Sequence[int], analysed: Sequence[int]) -> list[int]:
    """The layer indices, checked to be among the ``analysed`` ones."""
    bad = [layer for layer in layers if layer not in analysed]
    if bad or not layers:
        span = (f"[0, {len(analysed)})" if list(analysed) == list(range(len(analysed)))
                else f"the analysed layers {list(analysed)}")  # fmt: skip
        raise RopesplitError(f"layers must lie in {span}, got {list(layers)}")
    return list(layers)


@dataclass
class Context:
    """The model, the text's token ids ``(N,)`` and the settings, with capture and progress.

    ``captured`` lists, in order, the label of every capture read (``"text"``
    for the text at positions ``0..N-1``, else the caller's label, one model
    run each): the record's proof of which settings were measured from their
    own forward pass.
    """

    loaded: LoadedModel
    ids: torch.Tensor  # (N,) int64 token ids
    settings: ExperimentSettings = field(default_factory=ExperimentSettings)
    on_forward: Callable[[int], Any] | None = None
    captured: list[str] = field(default_factory=list)
    passages: Any = None  # the interventions' corpus: (P, N) token ids; None: the default corpus
    _text: Capture | None = field(default=None, repr=False)

    @property
    def n_tokens(self) -> int:
        return int(self.ids.shape[0])

    @property
    def layers(self) -> list[int]:
        """The fitted layers: the settings' own, or six evenly spaced; checked."""
        analysed = self.loaded.layers
        chosen = self.settings.layers
        return check_layers(default_layers(analysed) if chosen is None else list(chosen), analysed)

    def forwarded(self, count: int) -> None:
        """Report ``count`` forward passes done (a progress bar's ``update``)."""
        if self.on_forward is not None:
            self.on_forward(count)

    def capture(
        self, position_ids: Any = None, *, label: str = "text", keep_logits: bool = False
    ) -> Capture:
        """The text's capture at ``position_ids`` (default ``0..N-1``, cached), recorded.

        Every call other than the cached default runs the model once and is
        validated like any capture (``empirical.model.capture``).
        """
        if position_ids is None and not keep_logits:
            if self._text is None:
                self._text = capture(self.loaded, self.ids, keep_probs=False)
            self.captured.append("text")
            return self._text
        cache = capture(self.loaded, self.ids, position_ids, keep_probs=False,
                        keep_logits=keep_logits)  # fmt: skip
        self.captured.append(label)
        return cache


@dataclass(frozen=True)
class Experiment:
    """One experiment of the registry (see the module docstring for each field)."""

    name: str
    title: str
    prediction: str
    needs: str
    run: Callable[[Context], list[Row]]
    judge: Callable[[Row], Outcome]
    verdict: Callable[[list[Row]], Outcome]
    forward_count: Callable[[ExperimentSettings], int]
    check: Callable[[Context], None] = lambda context: None  # fails early on bad input
