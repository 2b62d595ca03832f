r"""The report's first screen and the claims: per claim of the paper its verdict and robustness.

Every verdict here is the claim's pre-registered primary test
(``ropesplit.claims.registry``) in the headline cell of the grid, evaluated over the
corpus's passages by the ``claims`` stage (``claims.json``): the statistic,
each condition's 95% interval with whose threshold it is (the paper's or the
toolkit's), the number of units, the verdict (``ropesplit.claims.registry.VERDICTS``)
and, beside it, whether the verdict is *robust* over every cell of the grid
the claim depends on or *fragile* (naming the cells that differ).

The first screen (a lead section, no heading) is figure 21, every claim's primary
statistic in every cell of the grid against its threshold, beside a compact table:
claim, verdict, and over the grid one line (:func:`grid_line`: "fragile: agrees in 22
of 32 cells"), the rest of the record's statement folded under it. Then the claims'
section: one line per claim with its primary test and numbers, each linking to the
claim's detail section: the paper's words, its prediction and verdict in two lines,
then, collapsed, every condition, the nulls, the positive control where there is one,
the secondary statistics (one-sided, Holm-corrected, shown only), the verdict in every
cell of the grid and, under claims 1 and 5, the length experiment's checks as the
``length`` stage judged them. Claim 1's detail shows figure 19, the tolerance curve.
The experiment sections further down are descriptive: none of their checks decides a
claim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ropesplit.claims.registry import VERDICTS, primary
from ropesplit.claims.text import condition_text, condition_word
from ropesplit.claims.text import interval_text as core_interval_text
from ropesplit.core.paper import PAPER_CITATION, QUOTES
from ropesplit.report.document import Cell, Details, Folded, Section, Table, cell_text, fmt
from ropesplit.report.sections.base import ReportInputs, SectionSpec

__all__ = ["SECTION", "claim_cells", "grid_line", "interval_text"]


def interval_text(interval: Mapping[str, Any] | None) -> str:
    """``mean [low, high]`` in the report's number format, or n/a."""
    return core_interval_text(interval, fmt)


def _condition_text(c: Mapping[str, Any]) -> str:
    return condition_text(c, fmt)


def grid_line(claim: Mapping[str, Any]) -> Cell:
    """A claim's robustness over the grid in one line (the record's ``robust_line``), the
    record's ``robust_statement`` folded under it.

    A robust statement is one line already; a fragile one reads as its most common verdict
    ("fragile: agrees in 22 of 32 cells"), its whole statement (each verdict's cells, the
    counts by axis) the detail, one line per clause.

    >>> grid_line({"robust_statement": "robust: agrees in all 16 cells"})
    'robust: agrees in all 16 cells'
    >>> grid_line({"robust_statement": "fragile: agrees in 22, inconclusive in 10 of 32 cells; "
    ...            "by heads mean/pooled: agrees 6/16, inconclusive 10/0 of 16 each",
    ...            "robust_line": "fragile: agrees in 22 of 32 cells"})
    Folded(summary='fragile: agrees in 22 of 32 cells', detail=('agrees in 22, inconclusive in 10 of 32 cells', 'by heads mean/pooled: agrees 6/16, inconclusive 10/0 of 16 each'))
    """  # noqa: E501
    statement = claim.get("robust_statement")
    if not statement:
        return "n/a"
    word, _, rest = statement.partition(": ")
    if word != "fragile" or not rest:
        return statement
    return Folded(claim.get("robust_line") or "fragile", tuple(rest.split("; ")))


def claim_cells(claim: Mapping[str, Any]) -> list[Cell]:
    """A claim's row: claim, primary test, this run's numbers, verdict, robustness."""
    numbers = "; ".join(_condition_text(c) for c in claim["conditions"])
    return [f"{claim['claim']}. {claim['statement']}", claim["statistic"],
            f"{numbers}; n = {claim['n']} {claim['unit']}", claim["verdict"],
            grid_line(claim)]  # fmt: skip


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


def _cell_text(cell: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in cell.items())


def _grid_table(claim: Mapping[str, Any], grid: Mapping[str, Any] | None) -> Table | None:
    if not grid:
        return None
    rows = [[_cell_text(c["cell"]), interval_text(c["estimate"]), str(c["n"]), c["verdict"]]
            for c in grid["cells"]]  # fmt: skip
    return Table(["cell", "estimate (first condition)", "n", "verdict"], rows,
                 f"claim {claim['claim']} in every cell of the grid: {grid['statement']}")


def _quotes(claim: int) -> list[str]:
    """The paper's words for a claim: verbatim sentences quoted, paraphrases said to be so."""
    out = []
    for key in primary(claim).quotes:
        quote = QUOTES[key]
        if quote.verbatim:
            out.append(f'The paper ({quote.where}): "{quote.text}"')
        else:
            out.append(f"The paper's {quote.where}, as the toolkit reads it (not a quote): "
                       f"{quote.text}.")  # fmt: skip
    return out


def _detail(claim: Mapping[str, Any], records: Mapping[str, Any], grid: Mapping[str, Any] | None,
            inputs: ReportInputs) -> Section:  # fmt: skip
    rows = [[("primary: " if c["compare"] == "level" else "primary, paired: ") + c["why"],
             _condition_text(c), str(c["n"]), condition_word(c)] for c in claim["conditions"]]
    if claim.get("gate"):
        g = claim["gate"]
        rows.append([f"validity: {g['why']}", _condition_text(g), str(g["n"]), g["outcome"]])
    rows += [[f"null: {n['measure']}", interval_text(n["interval"]), str(n["n"]), "shown"]
             for n in claim["nulls"]]  # fmt: skip
    rows += [[f"secondary: {s['what']}", _condition_text(s) + f" (Holm p {fmt(s['p_holm'])})",
              str(s["n"]), "shown"] for s in claim["secondary"]]  # fmt: skip
    rows += _length_rows(int(claim["claim"]), records)
    table = Table(["test", "95% interval", "n", "outcome"], rows,
                  f"claim {claim['claim']} in the headline cell ({_cell_text(claim['cell'])}): "
                  "conditions fixed in ropesplit.claims.registry before the run; the verdict reads "
                  "them as ropesplit.claims.registry.VERDICTS defines")  # fmt: skip
    detail = Details(f"every test of claim {claim['claim']} ({len(rows)}: primary, nulls, "
                     "secondaries)", tables=[table])  # fmt: skip
    details = [detail]
    cells = _grid_table(claim, grid)
    if cells is not None:
        details.append(Details(f"claim {claim['claim']} in every cell of the grid "
                               f"({len(cells.rows)} cells)", tables=[cells]))  # fmt: skip
    details.insert(0, Details(f"the paper's words for claim {claim['claim']}",
                              _quotes(int(claim["claim"]))))  # fmt: skip
    figures = inputs.figure("tolerance") if int(claim["claim"]) == 1 else []
    over = cell_text(grid_line(claim)) if claim.get("robust_statement") else "not evaluated"
    return Section(f"Claim {claim['claim']}: {claim['statement']}",
                   [f"Prediction: {claim['prediction']}.",
                    f"Verdict: {claim['verdict']}. {claim['reason']} Over the grid: "
                    f"{over}."],
                   anchor=f"claim-{claim['claim']}", details=details,
                   figures=figures)  # fmt: skip


def build(inputs: ReportInputs) -> list[Section]:
    record = inputs.records["claims"]
    head = record["header"]
    claims = record["claims"]
    grids = {int(g["claim"]): g for g in record.get("grid", [])}
    links = [f"claim-{c['claim']}" for c in claims]
    table = Table(["claim (docs/paper.md)", "primary test", "this run (95% intervals)",
                   "verdict", "over the grid"], [claim_cells(c) for c in claims],
                  "one pre-registered primary test per claim in the headline cell, and its "
                  "robustness over the grid; each line links to its detail",
                  links=links)  # fmt: skip
    verdicts = Table(["claim", "verdict", "over the grid"],
                     [[f"{c['claim']}. {c['statement']}", c["verdict"],
                       grid_line(c)] for c in claims],
                     f"The paper's claims ({PAPER_CITATION}) on {head['model']}: each verdict "
                     "in the headline cell, and over the grid", links=links)  # fmt: skip
    lead = Section("The claims at a glance", tables=[verdicts], figures=inputs.figure("cells"),
                   anchor="glance", lead=True)  # fmt: skip
    grid = head.get("grid", {})
    intro = (f"{PAPER_CITATION}: each claim judged by one primary test fixed before the run, on "
             f"{head['model']}, {head['passages']} passages of each corpus "
             f"({', '.join(head.get('corpora', [head['corpus']]))}; "
             f"{head['order_passages']} for word order), read at "
             f"{', '.join(map(str, grid.get('tokens', [head['tokens']])))} tokens; the headline "
             f"cell is {head['tokens']} tokens of {head['corpus']}, every other choice at its "
             f"default. Each passage beside its random-init twin (seeds "
             f"{', '.join(map(str, head['control_seeds']))}). Power: {head['power']}.")  # fmt: skip
    if head.get("partial"):  # shards merged with --partial: judged on the passages there are
        intro = f"Partial: {head['partial']}. " + intro
    words = "; ".join(f"{word}: {meaning}" for word, meaning in VERDICTS.items())
    return [lead,
            Section("The paper's claims and their primary tests",
                    [intro, f"Verdicts. {words}."], [table], anchor=SECTION.anchor),
            *(_detail(c, inputs.records, grids.get(int(c["claim"])), inputs) for c in claims),
            ]  # fmt: skip


SECTION = SectionSpec("claims", ("claims",), build, figures=("cells", "tolerance"))
