r"""The report's sections, in reading order: one module each, listed in :data:`SECTIONS`.

Each module defines ``SECTION``, a :class:`SectionSpec`: an ``anchor`` (the
HTML id others link to), the JSON ``records`` it reads (``"derive"``,
``"bound"``, ``"analyze"``, ``"perturb"``, ``"run"``, or a new stage's name),
the ``figures`` it shows (registry names) and ``build(inputs) ->
list[Section]``, which reads every number from ``inputs.records`` (the run's
JSON, exactly as written) and computes nothing a stage should have. A section
whose records are missing is left out and its stage listed as not run.

:func:`build_document` assembles them; the building blocks it uses come from
:mod:`ropesplit.report.document`, which imports nothing from here.

Adding a section is one module plus one line here (and, when it needs a new
JSON record, one :class:`~ropesplit.report.pipeline.Stage` line in
:data:`ropesplit.report.pipeline.STAGES`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ropesplit.report.document import Document, FigureBlock, Section, run_line
from ropesplit.report.sections import (
    bothways,
    emergence,
    empirical,
    experiments,
    models,
    numerics,
    protocol,
    recall,
    run,
    summary,
    theory,
)
from ropesplit.report.sections.base import ReportInputs, SectionSpec

__all__ = ["SECTIONS", "ReportInputs", "SectionSpec", "build_document"]

SECTIONS: list[SectionSpec] = [
    summary.SECTION,  # the paper's claims at a glance: verdict, robustness; figure 19
    models.SECTION,  # every model's claims in one table; figure 20
    theory.SECTION,
    numerics.SECTION,  # figures 4, 5
    empirical.SECTION,  # figures 1, 2, 3
    protocol.SECTION,  # what moves r_split: reference, kbar, tokens, layers; figures 9, 10
    experiments.SECTION,  # one section per experiment of the registry's record; 6-8, 13-16
    emergence.SECTION,  # training: the pattern as it forms; figures 11, 12
    recall.SECTION,  # associative recall, where the pattern must appear; figures 17, 18
    bothways.SECTION,  # encoders trained here, attention both ways; figure 22
    run.SECTION,  # run metadata, last
]


def _placed(sections: Sequence[Section]) -> set[int]:
    return {id(block) for s in sections for block in s.figures}


def build_document(
    records: Mapping[str, Mapping[str, Any]], figures: Sequence[FigureBlock] = ()
) -> Document:
    """The report from the run's JSON ``records`` and the figures, section by section.

    ``records`` maps each stage's name (``derive``, ``bound``, ``analyze``,
    ``perturb``, ``run``, ...) to the JSON it wrote. Every entry of
    :data:`SECTIONS` whose records are present is built, in order, each
    placing its figures (drawn, or a line saying why not). Then, before the run
    metadata: the stages whose records are missing ("Steps not run", with
    the figures not drawn whose sections were left out) and any drawn figure
    no section shows ("Other figures"); no figure is dropped silently.
    """
    inputs = ReportInputs(records, tuple(figures))
    sections: list[Section] = []
    missing: list[str] = []
    for spec in SECTIONS:
        absent = [name for name in spec.records if name not in records]
        missing += [name for name in absent if name not in missing]
        if absent:
            continue
        sections += spec.build(inputs)
    placed = _placed(sections)
    unplaced = [block for block in figures if id(block) not in placed]
    extra: list[Section] = []
    not_drawn = [block for block in unplaced if block.missing]
    if missing or not_drawn:
        extra.append(Section("Steps not run", [", ".join(missing)] if missing else [],
                             figures=not_drawn, anchor="not-run"))  # fmt: skip
    drawn = [block for block in unplaced if not block.missing]
    if drawn:
        extra.append(Section("Other figures", ["Figures no section shows."], figures=drawn,
                             anchor="other-figures"))  # fmt: skip
    at = next((i for i, s in enumerate(sections) if s.anchor == "run"), len(sections))
    sections[at:at] = extra
    return Document("ropesplit report", sections, run_line(records.get("run", {})))
