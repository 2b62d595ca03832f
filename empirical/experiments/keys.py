r"""Remove the keys' fast-pair deviation: does the sensitivity to position jitter fall?

docs/theory.md section 4 (the perturbation bound): a change of positions by
:math:`\tau` moves a logit by at most
:math:`s\sum_l |\tilde q_l||\tilde k_l||e^{i\theta_l\tau} - 1|`, and the part of
it the split does not absorb comes from the keys' deviation
:math:`\delta` in the pairs that turn over the text. Replacing that deviation
by :math:`\bar k` in every layer and head (``fast_keys``:
``numerics.intervention.drop_pair_deviation`` with weight 1 on
``fast_pairs``) should make the model less sensitive to jitter; the control
removes the same deviation energy from the slow pairs (``slow_keys``,
``matched_slow_weights``).

Per passage and edit, the loss at the true positions and with the position
ids jittered by up to ``t`` (``numerics.schemes.jitter_positions``, BOS and
special tokens kept, seeded per passage and ``t``): the sensitivity

.. math:: S = \log\frac{\bar\ell(t = 16)}{\bar\ell(t = 1)}

and the edit's cost at the true positions, :math:`\log(\bar\ell^{\mathrm{edit}}/\bar\ell)`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ropesplit.empirical.experiments import edits
from ropesplit.empirical.experiments.base import Context, Experiment, Outcome, Row
from ropesplit.empirical.experiments.intervene import Edit
from ropesplit.empirical.model.inputs import special_positions
from ropesplit.numerics.schemes import jitter_positions, movable_positions

__all__ = ["EXPERIMENT", "PREDICTION"]

SMALL, LARGE = 1, 16  # the jitters compared
PREDICTION = (
    "The perturbation bound (docs/theory.md section 4) puts the position sensitivity the split "
    "does not absorb in the keys' deviation in fast pairs. Replacing it by kbar in every layer "
    f"should lower the jitter sensitivity S = log(loss at t={LARGE} / loss at t={SMALL}) more "
    "than removing the same deviation energy from the slow pairs: the paired difference "
    f"S(fast removed) - S(slow removed) over {edits.PASSAGES} passages has its 95% t interval "
    "below 0 (primary); shown: each removal against the unedited model."
)
COMPARISONS = (("fast_keys", "slow_matched"), ("fast_keys", "slow_keys"), ("fast_keys", "none"),
               ("slow_keys", "none"))
STEPS = 8  # bisection steps of the damage match (alpha to 1/256)


def _positions(context: Context, ids: torch.Tensor, t: int) -> torch.Tensor:
    """Jittered position ids ``(P, N)``, each passage its own seeded draw, shifted by ``t``
    (every id >= 0) and clipped into the model's context when it leaves less room."""
    n = ids.shape[1]
    limit = context.loaded.max_positions or n + 2 * t
    rows = []
    for p, row in enumerate(ids.numpy()):
        movable = movable_positions(n, special_positions(context.loaded, row).tolist())
        rng = np.random.default_rng([context.settings.seed, 20, p, t])
        rows.append(np.clip(jitter_positions(n, t, rng, movable) + t, 0, limit - 1))
    return torch.as_tensor(np.stack(rows), dtype=torch.int64)


def matched_strengths(cost: Any, fast: float, slow: float, steps: int = STEPS
                      ) -> tuple[float, float]:  # fmt: skip
    r"""``(alpha_fast, alpha_slow)``: the larger-damage removal scaled so that both cost the
    same, by bisection on ``cost(kind, alpha)`` (monotone in :math:`\alpha`), from the full
    removals' costs ``fast`` and ``slow``; the other stays at 1.

    >>> matched_strengths(lambda kind, a: a * 0.8, 0.4, 0.8)
    (1.0, 0.5)
    """
    kind, target = ("slow_keys", fast) if slow > fast else ("fast_keys", slow)
    lo, hi = 0.0, 1.0
    for _ in range(int(steps)):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cost(kind, mid) < target else (lo, mid)
    alpha = 0.5 * (lo + hi)
    return (1.0, alpha) if kind == "slow_keys" else (alpha, 1.0)


def _run(context: Context) -> list[Row]:
    data = edits.corpus(context)
    loaded = context.loaded
    kbars = data.kbars(loaded)
    layers = tuple(loaded.layers)
    calibration = data.calibration
    base = data.nll(loaded, None, ids=calibration)

    def cost(kind: str, alpha: float) -> float:  # on the calibration passages only
        edited = data.nll(loaded, Edit(kind, layers, kbars=kbars, strength=alpha), ids=calibration)
        return float(edits.ratios(edited, base).mean())

    alphas = matched_strengths(cost, cost("fast_keys", 1.0), cost("slow_keys", 1.0))
    shifted = {t: _positions(context, data.ids, t) for t in (SMALL, LARGE)}
    clean = data.nll(loaded, None)
    made: dict[str, Edit | None] = {"none": None,
                                    "fast_keys": Edit("fast_keys", layers, kbars=kbars),
                                    "slow_keys": Edit("slow_keys", layers, kbars=kbars)}
    for name, kind, alpha in (("fast_matched", "fast_keys", alphas[0]),
                              ("slow_matched", "slow_keys", alphas[1])):
        made[name] = made[kind] if alpha == 1.0 else Edit(kind, layers, kbars=kbars, strength=alpha)
    sens: dict[str, np.ndarray] = {}
    lost: dict[str, np.ndarray] = {}
    done: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for name, edit in made.items():
        if id(edit) not in done:  # an edit made twice (alpha 1) runs once
            at = data.nll(loaded, edit) if edit is not None else clean
            small, large = (data.nll(loaded, edit, shifted[t]) for t in (SMALL, LARGE))
            done[id(edit)] = (edits.ratios(large, small), edits.ratios(at, clean))
        sens[name], lost[name] = done[id(edit)]
    rows = []
    for kind, null in COMPARISONS:
        mine = "fast_matched" if null == "slow_matched" else kind
        rows.append({
            "edit": kind, "null": null, "alpha_fast": alphas[0], "alpha_slow": alphas[1],
            **edits.summary(sens[mine], "S"), **edits.summary(sens[null], "S_null"),
            **edits.summary(lost[mine], "lr_clean"), **edits.summary(lost[null], "lr_clean_null"),
            **edits.paired(sens[mine], sens[null], "below"),
        })  # fmt: skip
    return rows


def judge(row: Row) -> Outcome:
    """The edit's jitter sensitivity against its null's, paired over passages."""
    return edits.judge_paired(row, f"S({row['edit']}) - S({row['null']})")


def verdict(rows: list[Row]) -> Outcome:
    """The primary row: fast-pair removal against the damage-matched slow removal."""
    return judge(rows[0])


EXPERIMENT = Experiment(
    name="keys",
    title="Remove the keys' fast-pair deviation (the perturbation bound)",
    prediction=PREDICTION,
    needs=f"{edits.PASSAGES} corpus passages and {edits.CALIBRATION} calibration ones: a "
    f"calibration pass, the damage match on the calibration passages ({2 + STEPS} passes), "
    f"then per edit (none, fast, slow, matched) passes at t=0, {SMALL} and {LARGE}",
    run=_run,
    judge=judge,
    verdict=verdict,
    forward_count=lambda settings: 1 + 3 + STEPS + 4 * 3,
)
