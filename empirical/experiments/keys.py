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
ids jittered by up to ``t`` (``empirical.perturb.jitter_positions``, BOS and
special tokens kept, seeded per passage and ``t``): the sensitivity

.. math:: S = \log\frac{\bar\ell(t = 16)}{\bar\ell(t = 1)}

and the edit's cost at the true positions, :math:`\log(\bar\ell^{\mathrm{edit}}/\bar\ell)`.
"""

from __future__ import annotations

import numpy as np
import torch
from ropesplit.empirical.experiments import edits
from ropesplit.empirical.experiments.base import Context, Experiment, Row, Verdict
from ropesplit.empirical.experiments.forward import special_positions
from ropesplit.empirical.intervene import Edit
from ropesplit.empirical.perturb import jitter_positions, movable_positions

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
COMPARISONS = (("fast_keys", "slow_keys"), ("fast_keys", None), ("slow_keys", None))


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


def _run(context: Context) -> list[Row]:
    data = edits.corpus(context)
    loaded = context.loaded
    kbar = data.kbar(loaded)
    layers = tuple(range(loaded.n_layers))
    shifted = {t: _positions(context, data.ids, t) for t in (SMALL, LARGE)}
    clean = data.nll(loaded, None)
    sens, cost = {}, {}
    for kind in (None, "fast_keys", "slow_keys"):
        edit = None if kind is None else Edit(kind, layers, kbar=kbar)
        at = data.nll(loaded, edit) if edit is not None else clean
        small, large = (data.nll(loaded, edit, shifted[t]) for t in (SMALL, LARGE))
        sens[kind] = edits.ratios(large, small)
        cost[kind] = edits.ratios(at, clean)
    rows = []
    for kind, null in COMPARISONS:
        rows.append({
            "edit": kind, "null": null or "none",
            **edits.summary(sens[kind], "S"), **edits.summary(sens[null], "S_null"),
            **edits.summary(cost[kind], "lr_clean"),
            **edits.paired(sens[kind], sens[null], "below"),
        })  # fmt: skip
    return rows


def judge(row: Row) -> Verdict:
    """The edit's jitter sensitivity against its null's, paired over passages."""
    return edits.judge_paired(row, f"S({row['edit']}) - S({row['null']})")


def verdict(rows: list[Row]) -> Verdict:
    """The primary row: fast-pair removal against the same energy from the slow pairs."""
    return judge(rows[0])


EXPERIMENT = Experiment(
    name="keys",
    title="Remove the keys' fast-pair deviation (the perturbation bound)",
    prediction=PREDICTION,
    needs=f"{edits.PASSAGES} corpus passages and {edits.CALIBRATION} calibration ones: a "
    f"calibration pass, then per edit (none, fast, slow) passes at t=0, {SMALL} and {LARGE}",
    run=_run,
    judge=judge,
    verdict=verdict,
    forward_count=lambda settings: 1 + 3 * 3,
)
