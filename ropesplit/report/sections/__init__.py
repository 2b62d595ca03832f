r"""The report's sections, in reading order: one module each, listed in :data:`SECTIONS`.

Each module defines ``SECTION``, a :class:`SectionSpec`: an ``anchor`` (the
HTML id others link to), the JSON ``records`` it reads (``"derive"``,
``"bound"``, ``"analyze"``, ``"perturb"``, ``"run"``, or a new stage's name)
and ``build(inputs) -> list[Section]``, which reads every number from
``inputs.records`` (the run's JSON, exactly as written). A section whose
records are missing is left out and its stage listed as not run.

Adding a section is one module plus one line here (and, when it needs a new
JSON record, one :class:`~ropesplit.report.pipeline.Stage` line in
:data:`ropesplit.report.pipeline.STAGES`).
"""

from ropesplit.report.sections import (
    emergence,
    empirical,
    experiments,
    figures,
    numerics,
    protocol,
    run,
    summary,
    theory,
)
from ropesplit.report.sections.base import ReportInputs, SectionSpec

__all__ = ["SECTIONS", "ReportInputs", "SectionSpec"]

SECTIONS: list[SectionSpec] = [
    summary.SECTION,  # the paper's claims at a glance: prediction, measurement, verdict
    theory.SECTION,
    numerics.SECTION,
    empirical.SECTION,
    protocol.SECTION,  # what moves r_split: reference, kbar, tokens, layers; controls
    experiments.SECTION,  # one section per experiment of the registry's record
    emergence.SECTION,  # training: the pattern as it forms
    figures.SECTION,
    run.SECTION,  # run metadata, last
]
