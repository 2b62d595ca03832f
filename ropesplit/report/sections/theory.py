r"""Theory: every step of docs/theory.md checked with sympy (the ``derive`` record)."""

from __future__ import annotations

from ropesplit.report.document import Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec, need


def build(inputs: ReportInputs) -> list[Section]:
    derive = inputs.records["derive"]
    steps = need(derive, "steps", "derive")
    rows = [
        [s["id"], s["kind"], "checked" if s["checked"] else ("not run" if s["checked"] is None
         else "FAILED"), fmt(s.get("seconds"), 2), ", ".join(s.get("lemmas", [])) or "-",
         s.get("method", "")]
        for s in steps
    ]  # fmt: skip
    n_ok = sum(bool(s["checked"]) for s in steps)
    return [Section(
        "Theory: every step of docs/theory.md checked with sympy",
        [f"{n_ok} of {len(steps)} steps checked symbolically "
         f"({'all checked' if derive.get('all_checked') else 'NOT all checked'})."],
        [Table(["step", "kind", "status", "seconds", "lemmas", "method"], rows)],
        anchor=SECTION.anchor,
    )]  # fmt: skip


SECTION = SectionSpec("theory", ("derive",), build)
