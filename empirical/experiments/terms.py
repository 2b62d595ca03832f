r"""Which term carries length generalization: cap ``f`` alone against ``g + E`` alone beyond ``L``.

docs/theory.md section 4, tested by an edit inside the forward pass. On a model whose training
length ``L`` the passages exceed (the one ``ropesplit train`` makes), every
layer and head attends, at distances :math:`\Delta > L`, with

- ``cap_f``: :math:`W + f(q, L) - f(q, \Delta)` (the positional term held at
  its last trained distance; ``numerics.intervention.cap_positional``),
- ``cap_rest``: :math:`W + (W - f)(L) - (W - f)(\Delta)` (``g + E`` held there),
- ``cap_all``: :math:`W(L)` (both: LM-Infinite's distance cap without its mask),

beside the unedited model (``vanilla``) and LM-Infinite itself
(``empirical.experiments.lminfinite``: the cap and the :math:`\Lambda` mask). Per passage, the
rise of the loss beyond ``L`` over the in-length loss of the same targets
(``lminfinite.windowed_nll``: each target predicted inside a window of
``L`` tokens, the model's own regime):

.. math:: \rho = \log\frac{\bar\ell^{\mathrm{setting}}_{n \ge L}}{\bar\ell^{\mathrm{in}}_{n \ge L}}
"""

from __future__ import annotations

import numpy as np

from ropesplit.empirical.experiments import edits
from ropesplit.empirical.experiments.base import Context, Experiment, Outcome, Row
from ropesplit.empirical.experiments.intervene import Edit
from ropesplit.empirical.experiments.length import training_length
from ropesplit.empirical.experiments.lminfinite import run_setting, settings, windowed_nll

__all__ = ["EXPERIMENT", "PREDICTION"]

SHARE = 0.5  # "most of the rise": capping f alone must leave less than this share of it
PREDICTION = (
    "If the loss rises beyond the training length L because the positional term f leaves its "
    "trained range (docs/theory.md section 4), holding f at distance L (cap f) removes most of "
    f"the rise: per passage, rise(cap f) - {SHARE:g} rise(vanilla) has its 95% t interval over "
    f"{edits.PASSAGES} passages below 0 (primary), where rise = log(loss beyond L / in-length "
    "loss of the same targets); first the vanilla rise must lie above 0. Cap g + E, cap all "
    "and LM-Infinite are judged by the same test, shown."
)
EDIT_SETTINGS = ("vanilla", "cap_f", "cap_rest", "cap_all", "LM-Infinite")


def _length(context: Context) -> int | None:
    """The training length ``L`` when the passages exceed it, else None (nothing to measure)."""
    length = training_length(context.loaded)
    return length if length is not None and context.n_tokens > length + 1 else None


def _run(context: Context) -> list[Row]:
    length = _length(context)
    if length is None:
        return []
    data = edits.corpus(context)
    loaded = context.loaded
    kbars = data.kbars(loaded)
    layers = tuple(loaded.layers)
    inside = np.stack([windowed_nll(loaded, ids, length) for ids in data.ids])  # (P, N - 1)
    context.forwarded(1)
    nll = {"vanilla": data.nll(loaded, None)}
    for kind in ("cap_f", "cap_rest", "cap_all"):
        nll[kind] = data.nll(loaded, Edit(kind, layers, kbars=kbars, length=length))
    spec = settings(length)["LM-Infinite"]
    nll["LM-Infinite"] = np.stack([run_setting(loaded, ids, spec).nll for ids in data.ids])
    context.forwarded(1)
    rise = {name: edits.ratios(nll[name], inside, start=length) for name in EDIT_SETTINGS}
    rows = [{"setting": "vanilla", "L": length, **edits.summary(rise["vanilla"], "rise"),
             "null": "in-length loss",
             **edits.paired(rise["vanilla"], np.zeros_like(rise["vanilla"]), "above")}]  # fmt: skip
    for name in EDIT_SETTINGS[1:]:
        rows.append({"setting": name, "L": length, **edits.summary(rise[name], "rise"),
                     "null": f"{SHARE:g} x vanilla rise",
                     **edits.paired(rise[name], SHARE * rise["vanilla"], "below")})  # fmt: skip
    return rows


def judge(row: Row) -> Outcome:
    """The vanilla rise above 0; each cap's rise below half the vanilla one (paired)."""
    what = ("vanilla rise beyond L" if row["setting"] == "vanilla"
            else f"rise({row['setting']}) - {SHARE:g} rise(vanilla)")  # fmt: skip
    return edits.judge_paired(row, what)


def verdict(rows: list[Row]) -> Outcome:
    """No rise to explain is inconclusive; else the cap-f row's verdict."""
    if not rows:
        return Outcome("inconclusive", "the passages do not exceed the training length: "
                       "nothing beyond L to measure (a model trained here: ropesplit train)")
    rise = judge(rows[0])
    if rise.outcome != "agrees":
        return Outcome("inconclusive", f"no rise beyond L to explain: {rise.reason}")
    return judge(next(r for r in rows if r["setting"] == "cap_f"))


EXPERIMENT = Experiment(
    name="terms",
    title="Which term carries length generalization (cap f, cap g + E)",
    prediction=PREDICTION,
    needs=f"{edits.PASSAGES} corpus passages longer than the training length and "
    f"{edits.CALIBRATION} calibration ones: in-length windows, the vanilla pass, three "
    "capped passes and LM-Infinite's",
    run=_run,
    judge=judge,
    verdict=verdict,
    forward_count=lambda settings: 7,
)
