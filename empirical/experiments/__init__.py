r"""The paper's experiments, one module each, in a registry (``EXPERIMENTS``).

Each experiment states its prediction in words before it runs, measures,
and judges every row and itself from the measured numbers
(:class:`ropesplit.core.outcome.Outcome`: agrees, disagrees or inconclusive, with the
reason).

    distance   the same query/key pairs at dummy distances (claim 3)
    order      word-order perturbation of the context (claim 1)
    position   position-id perturbation (docs/theory.md section 4)
    length     distances beyond the training length, LM-Infinite's cap
    remainder  attention from f + g alone (E dropped) against a same-norm null (claim 2)
    keys       the keys' fast-pair deviation removed: jitter sensitivity (section 4)
    terms      f capped alone against g + E capped alone, beyond L (section 4)
    shuffle    the frequencies shuffled over the pairs (claim 4's causal null)

:func:`run_experiments` runs any of them and returns the JSON record
(:mod:`.registry`). Adding one: a module defining ``EXPERIMENT`` (an
:class:`~.base.Experiment`) and a line in :data:`EXPERIMENTS`. Beside them sit what they
share (``base``, ``registry``, ``settings``, ``continuation``, ``edits``) and the attention
they run inside the model (``intervene``: the split edited; ``lminfinite``: LM-Infinite's).

May import: the adapter, the model and analysis wings, and itself.

Importing this package imports none of its modules: each name below is looked up in its
module when first used (PEP 562), so :mod:`.settings` (plain data) imports without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ropesplit.core.lazy import lazy_names

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time: __getattr__
    from ropesplit.empirical.experiments.base import Context, Experiment, Outcome
    from ropesplit.empirical.experiments.registry import (
        EXPERIMENTS,
        INTERVENTIONS,
        PREDICTIONS,
        forward_count,
        run_experiments,
    )
    from ropesplit.empirical.experiments.settings import ExperimentSettings

# each public name -> the module that defines it
_HOMES = {
    "Context": "ropesplit.empirical.experiments.base",
    "Experiment": "ropesplit.empirical.experiments.base",
    "Outcome": "ropesplit.empirical.experiments.base",
    "EXPERIMENTS": "ropesplit.empirical.experiments.registry",
    "INTERVENTIONS": "ropesplit.empirical.experiments.registry",
    "PREDICTIONS": "ropesplit.empirical.experiments.registry",
    "forward_count": "ropesplit.empirical.experiments.registry",
    "run_experiments": "ropesplit.empirical.experiments.registry",
    "ExperimentSettings": "ropesplit.empirical.experiments.settings",
}

__all__ = [
    "EXPERIMENTS",
    "INTERVENTIONS",
    "PREDICTIONS",
    "Context",
    "Experiment",
    "ExperimentSettings",
    "Outcome",
    "forward_count",
    "run_experiments",
]

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
