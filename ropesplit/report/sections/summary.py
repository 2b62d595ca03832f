r"""The report's first screen: one line per claim of the paper, its primary test and verdict.

Every verdict here is the claim's pre-registered primary test
(``ropesplit.claims``), evaluated over the corpus's passages by the
``claims`` stage (``claims.json``): the statistic, its 95% t interval over
passages (and the paired difference against the random-init twin), the
number of passages, the verdict. Each line links to the claim's detail
section: its prediction and verdict in two lines, then, collapsed, every
condition, the nulls beside the primary, the positive control where there
is one, and the secondary statistics (one-sided, Holm-corrected, shown only)
and, under claims 1 and 5, the length experiment's checks as the ``length``
stage judged them (``length.json``'s ``checks``: loss behaviour under 1, f/g
behaviour under 5). The experiment sections further down are descriptive:
none of their checks decides a claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropesplit.paper import PAPER_CITATION
from ropesplit.report.document import Details, Section, Table, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec

__all__ = ["SECTION", "claim_cells", "interval_text"]


def interval_text(interval: Mapping[str, Any] | None) -> str:
    """``mean [low, high]``, or n/a."""
    if not interval:
        return "n/a"
    return f"{fmt(interval['mean'])} [{fmt(interval['low'])}, {fmt(interval['high'])}]"


def _condition_text(c: Mapping[str, Any]) -> str:
    what = c["measure"] if c["compare"] == "level" else f"{c['measure']} - {c['null']}"
    side = ">" if c["direction"] == "above" else "<"
    return f"{what} {interval_text(c['interval'])} (predicted {side} {c['threshold']:g})"


def claim_cells(claim: Mapping[str, Any]) -> list[str]:
    """The first screen's cells: claim, primary test, this run's numbers, verdict."""
    numbers = "; ".join(_condition_text(c) for c in claim["conditions"])
    return [f"{claim['claim']}. {claim['statement']}", claim["statistic"],
            f"{numbers}; n = {claim['n']} {claim['unit']}", claim["verdict"]]  # fmt: skip


# the length experiment (one text, the model the report trains) is shown under the claim each of
# its checks is about, descriptively: its loss behaviour under claim 1, its f/g behaviour under 5
LENGTH_ROUTES = {1: ("vanilla rises", "LM-Infinite near"),
                 5: ("f goes with the rise", "g in range")}


def _length_rows(claim: int, records: Mapping[str, Any]) -> list[list[str]]:
    """The length experiment's checks about ``claim``, as the length stage judged them."""
    checks = records.get("length", {}).get("checks", {})
    return [[f"descriptive (length experiment, one text): {name}", checks[name]["reason"], "-",
             checks[name]["outcome"]]
            for name in LENGTH_ROUTES.get(claim, ()) if name in checks]  # fmt: skip


def _detail(claim: Mapping[str, Any], records: Mapping[str, Any]) -> Section:
    rows = [[("primary: " if c["compare"] == "level" else "primary, paired: ") + c["why"],
             _condition_text(c), str(c["n"]), c["outcome"]] for c in claim["conditions"]]
    if claim.get("gate"):
        g = claim["gate"]
        rows.append([f"validity: {g['why']}", _condition_text(g), str(g["n"]), g["outcome"]])
    rows += [[f"null: {n['measure']}", interval_text(n["interval"]), str(n["n"]), "shown"]
             for n in claim["nulls"]]  # fmt: skip
    rows += [[f"secondary: {s['what']}", _condition_text(s) + f" (Holm p {fmt(s['p_holm'])})",
              str(s["n"]), "shown"] for s in claim["secondary"]]  # fmt: skip
    rows += _length_rows(int(claim["claim"]), records)
    table = Table(["test", "95% t interval over passages", "n", "outcome"], rows,
                  f"claim {claim['claim']}: conditions fixed in ropesplit.claims before the run; "
                  "the verdict is the intersection-union test of the primary conditions")
    detail = Details(f"every test of claim {claim['claim']} ({len(rows)}: primary, nulls, "
                     "secondaries)", tables=[table])  # fmt: skip
    return Section(f"Claim {claim['claim']}: {claim['statement']}",
                   [f"Prediction: {claim['prediction']}.",
                    f"Verdict: {claim['verdict']}. {claim['reason']}"],
                   anchor=f"claim-{claim['claim']}", details=[detail])  # fmt: skip


def build(inputs: ReportInputs) -> list[Section]:
    record = inputs.records["claims"]
    head = record["header"]
    claims = record["claims"]
    table = Table(["claim (docs/paper.md)", "primary test", "this run (95% t intervals)",
                   "verdict"], [claim_cells(c) for c in claims],
                  "one pre-registered primary test per claim; each line links to its detail",
                  links=[f"claim-{c['claim']}" for c in claims])  # fmt: skip
    intro = (f"{PAPER_CITATION}: each claim judged by one primary test fixed before the run, on "
             f"{head['model']}, {head['passages']} passages of {head['tokens']} tokens of the "
             f"{head['corpus']} corpus ({head['order_passages']} for word order), each beside "
             f"its random-init twin (seeds {', '.join(map(str, head['control_seeds']))}). "
             f"Power: {head['power']}.")  # fmt: skip
    return [Section("The paper's claims at a glance", [intro], [table], anchor=SECTION.anchor),
            *(_detail(c, inputs.records) for c in claims)]


SECTION = SectionSpec("claims", ("claims",), build)
