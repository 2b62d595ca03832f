r"""Remove the remainder: attention from ``f + g`` alone, against a removal of the same size.

Claim 2 made causal, by editing the forward pass. In every layer and head, the logits are
replaced by the split's two terms (:math:`W + \Delta W` with :math:`\Delta W
= -E^m`, ``numerics.intervention.drop_remainder``), under the paper's split
(``zero``, :math:`m = 1`; the primary row) and the mean rotation (``mean``;
the random-init twin under the paper's split only).
Per passage, the log loss ratio :math:`\log(\bar\ell^{\mathrm{edit}} /
\bar\ell)` over every target.

The null is a removal of the same size and kind that is not :math:`E`: the
remainder the same heads would have if their pairs turned at shuffled
frequencies (bilinear in the same queries and key deviations, rotating with
distance), each row rescaled to :math:`E`'s norm
(``numerics.intervention.structured_remainder``, seeded per layer). A seeded
Gaussian term with :math:`E`'s row norms (``same_norm_noise``) is shown beside
it: noise spread thinly over every pair is a weak null, any structured edit
hurts more. Dropping ``g`` is shown too (how much the semantic term carries),
and the same edits run on the random-init twin (its own calibration).
"""

from __future__ import annotations

from ropesplit.empirical.experiments import edits
from ropesplit.empirical.experiments.base import Context, Experiment, Outcome, Row
from ropesplit.empirical.experiments.intervene import Edit
from ropesplit.empirical.model.loading import random_init_twin

__all__ = ["EXPERIMENT", "PREDICTION"]

PREDICTION = (
    "If the model computes with the split (claim 2), attention from f + g alone (the remainder "
    "E dropped in every layer and head) raises the loss less than dropping a structured term "
    "of E's size and kind (the remainder under shuffled frequencies, rows at E's norms): the "
    "paired difference of log loss ratios (E dropped minus the structured term dropped) over "
    f"{edits.PASSAGES} passages has its 95% t interval below 0 (primary: the "
    "trained model under the paper's split, reference 0; shown: the mean rotation, and the "
    "random-init twin under the paper's split). Dropping g and a Gaussian term of E's row "
    "norms are reported beside it."
)
REFERENCES = ("zero", "mean")
KINDS = ("remainder", "structured", "noise", "semantic")  # E, its null, shown, shown


def _run(context: Context) -> list[Row]:
    data = edits.corpus(context)
    rows = []
    models = (("trained", context.loaded),
              ("random-init", random_init_twin(context.loaded, seed=context.settings.seed)))
    for run, loaded in models:
        kbars = data.kbars(loaded)
        layers = tuple(loaded.layers)
        clean = data.nll(loaded, None)
        for reference in REFERENCES if run == "trained" else REFERENCES[:1]:
            lr = {kind: edits.ratios(data.nll(loaded, Edit(kind, layers, kbars=kbars,
                                                            reference=reference,
                                                            seed=context.settings.seed)), clean)
                  for kind in KINDS}  # fmt: skip
            rows.append({
                "run": run, "reference": reference,
                **edits.summary(lr["remainder"], "lr_remainder"),
                **edits.summary(lr["structured"], "lr_structured"),
                **edits.summary(lr["noise"], "lr_noise"),
                **edits.summary(lr["semantic"], "lr_semantic"),
                **edits.paired(lr["remainder"], lr["structured"], "below"),
            })  # fmt: skip
    return rows


def judge(row: Row) -> Outcome:
    """E dropped against the structured term of its size dropped, paired over passages."""
    what = (f"{row['run']}, {row['reference']}: log ratio E dropped minus the structured term "
            "dropped")  # fmt: skip
    return edits.judge_paired(row, what)


def verdict(rows: list[Row]) -> Outcome:
    """The primary row's verdict: the trained model under the paper's split."""
    primary = next(r for r in rows if r["run"] == "trained" and r["reference"] == "zero")
    return judge(primary)


EXPERIMENT = Experiment(
    name="remainder",
    title="Remove the remainder E (causal claim 2)",
    prediction=PREDICTION,
    needs=f"{edits.PASSAGES} corpus passages and {edits.CALIBRATION} calibration ones; per "
    "model (trained, random-init twin): a calibration pass, a clean pass and four edited "
    "passes per reference (the twin: the paper's split only)",
    run=_run,
    judge=judge,
    verdict=verdict,
    forward_count=lambda settings: 2 + len(KINDS) * len(REFERENCES) + 2 + len(KINDS),
)

