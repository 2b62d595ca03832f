"""The report's first screen: figure 21 (every claim in every cell of the grid, drawn from
claims.json) beside the five verdicts, each "over the grid" one line with its detail folded.

Offline and fast: a small claims record typed here in the shape ``ropesplit claims`` writes
(``tests/report/test_report.py`` checks the same on a real, tiny run).
"""

from __future__ import annotations

import copy
import re
import warnings

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer

from ropesplit.core.errors import RopesplitError
from ropesplit.figures import FIGURES, draw
from ropesplit.figures.cells import VERDICT_COLOURS
from ropesplit.report import figure_data
from ropesplit.report.document import FigureBlock, Folded
from ropesplit.report.figure_data import FigureSources, cells_data
from ropesplit.report.render import render_html, render_markdown
from ropesplit.report.sections import build_document, summary

GRID = next(spec for spec in FIGURES if spec.name == "cells")
FRAGILE_2 = ("fragile: agrees in 5, weaker than the paper in 2, inconclusive in 1 of 8 cells; "
             "by tokens 256/512: agrees 2/3, weaker than the paper 1/1, inconclusive 1/0 of 4 "
             "each; by heads mean/pooled: agrees 1/4, weaker than the paper 2/0, inconclusive "
             "1/0 of 4 each")  # fmt: skip
FRAGILE_4 = ("fragile: weaker than the paper in 1 of 4 (heads=mean, corpus=prose); agrees in 3 "
             "of 4 (the other cells)")  # fmt: skip


# each fragile statement's one line, as verdicts.robustness writes it beside the statement
LINES = {FRAGILE_2: "fragile: agrees in 5 of 8 cells", FRAGILE_4: "fragile: agrees in 3 of 4 cells"}


def interval(mean: float, half: float = 0.01) -> dict:
    return {"mean": mean, "low": mean - half, "high": mean + half, "level": 0.95, "n": 8,
            "sd": half, "method": "t", "unit": "passages"}  # fmt: skip


def condition(measure: str, threshold: float, direction: str, mean: float, origin: str) -> dict:
    return {
        "measure": measure,
        "compare": "level",
        "null": None,
        "direction": direction,
        "threshold": threshold,
        "why": "the toolkit's reading",
        "origin": origin,
        "unit": "passages",
        "n": 8,
        "interval": interval(mean),
        "outcome": "agrees",
    }


# claim: (measure, threshold, direction, origin, headline mean, verdict, robust_statement)
CLAIMS = {1: ("relative_5", 0.1, "below", "toolkit", 0.15, "weaker than the paper",
              "robust: weaker than the paper in all 2 cells"),
          2: ("r_split", 0.9, "above", "toolkit", 0.896, "weaker than the paper", FRAGILE_2),
          3: ("key_corr", 0.9, "above", "toolkit", 0.62, "weaker than the paper",
              "robust: weaker than the paper in all 2 cells"),
          4: ("lowfreq_share_k", 0.5, "above", "paper", 0.68, "agrees", FRAGILE_4),
          5: ("g_share", 0.5, "below", "toolkit", 0.54, "weaker than the paper", None)}  # fmt: skip
HEADLINE = {"tokens": 512, "split": "zero", "heads": "mean", "layers": "all", "corpus": "pydoc"}


def _grid(claim: int, axes: dict, verdicts: list[str], means: list[float]) -> dict:
    """A claim's grid entry over the product of ``axes``' values, in the record's order."""
    cells: list[dict] = [{}]
    for axis, values in axes.items():
        cells = [{**c, axis: v} for c in cells for v in values]
    return {"claim": claim, "axes": list(axes), "n_cells": len(cells),
            "statement": CLAIMS[claim][6],
            "robustness": CLAIMS[claim][6].split(":")[0],
            "cells": [{"cell": c, "verdict": v, "estimate": interval(m), "n": 8}
                      for c, v, m in zip(cells, verdicts, means, strict=True)]}  # fmt: skip


def claims_record() -> dict:
    """Five claims as claims.json holds them; claim 5's grid left out (its headline alone)."""
    claims = []
    for n, (measure, threshold, direction, origin, mean, verdict, grid) in CLAIMS.items():
        claims.append({"claim": n, "statement": f"claim {n}'s words", "prediction": "p",
                       "statistic": f"{measure}, per passage", "cell": dict(HEADLINE),
                       "unit": "passages", "n": 8, "min_n": 8,
                       "conditions": [condition(measure, threshold, direction, mean, origin)],
                       "gate": None, "nulls": [], "secondary": [], "verdict": verdict,
                       "reason": "r.", "robustness": grid.split(":")[0] if grid else None,
                       "robust_statement": grid, "robust_line": LINES.get(grid, grid)})  # fmt: skip
    w, a, i = "weaker than the paper", "agrees", "inconclusive"
    grid = [
        _grid(1, {"tokens": [256, 512], "corpus": ["pydoc"]}, [w, w], [0.14, 0.15]),
        _grid(
            2,
            {
                "tokens": [256, 512],
                "split": ["zero"],
                "heads": ["mean", "pooled"],
                "layers": ["all"],
                "corpus": ["pydoc", "prose"],
            },
            [a, i, a, a, w, w, a, a],
            [0.91, 0.9, 0.96, 0.96, 0.896, 0.89, 0.96, 0.96],
        ),
        _grid(
            3,
            {"tokens": [256, 512], "heads": ["mean"], "layers": ["all"], "corpus": ["pydoc"]},
            [w, w],
            [0.7, 0.62],
        ),
        _grid(
            4,
            {
                "tokens": [512],
                "heads": ["mean", "pooled"],
                "layers": ["all"],
                "corpus": ["pydoc", "prose"],
            },
            [a, w, a, a],
            [0.68, 0.49, 0.7, 0.7],
        ),
    ]
    header = {"model": "tiny", "corpus": "pydoc", "corpora": ["pydoc", "prose"], "tokens": 512,
              "grid": {"tokens": [256, 512]}, "passages": 8, "order_passages": 8,
              "control_seeds": [0, 1], "power": "enough"}  # fmt: skip
    return {"header": header, "claims": claims, "grid": grid}


# ------------------------------------------------------------- figure 21, declared from claims.json


def test_figure_21_is_declared_from_claims_json_alone():
    """Its spec needs the claims stage's record and nothing else; its builder reads it
    through a view that refuses any other record, and gives cells_data of it."""
    assert (GRID.number, GRID.needs) == (21, ("claims",))
    record = claims_record()
    sources = FigureSources(records={"claims": record}, settings=None)
    assert figure_data.figure_data(GRID, sources) == cells_data(record)
    with pytest.raises(RopesplitError, match=r"^figure 21 \(cells\) needs record 'claims', "):
        figure_data.figure_data(GRID, FigureSources(records={"analyze": {}}, settings=None))
    assert "cells" in summary.SECTION.figures  # the claims section places it (the first screen)


def test_grid_data_reads_every_number_from_the_record():
    """Per claim: the first condition's measure, threshold, side and origin; per cell of the
    grid its label (the axis values in order), estimate, verdict, and which is the headline;
    a claim without a grid shows its headline cell alone."""
    record = claims_record()
    data = cells_data(record)["claims"]
    assert [d["claim"] for d in data] == [1, 2, 3, 4, 5]
    two = data[1]
    assert (two["measure"], two["threshold"], two["direction"], two["origin"]) == (
        "r_split",
        0.9,
        "above",
        "toolkit",
    )
    assert two["axes"] == ["tokens", "split", "heads", "layers", "corpus"]
    cells = record["grid"][1]["cells"]
    assert [c["label"] for c in two["cells"]][:2] == [
        "256 zero mean all pydoc",
        "256 zero mean all prose",
    ]
    assert [c["estimate"] for c in two["cells"]] == [c["estimate"] for c in cells]
    assert [c["verdict"] for c in two["cells"]] == [c["verdict"] for c in cells]
    assert [c["label"] for c in two["cells"] if c["headline"]] == ["512 zero mean all pydoc"]
    assert data[3]["origin"] == "paper"
    five = data[4]
    assert five["axes"] == [] and len(five["cells"]) == 1 and five["cells"][0]["headline"]
    assert five["cells"][0]["estimate"] == record["claims"][4]["conditions"][0]["interval"]
    changed = copy.deepcopy(record)  # nothing is a constant: change the record, change the data
    changed["claims"][1]["conditions"][0]["threshold"] = 0.77
    changed["grid"][1]["cells"][3]["estimate"]["mean"] = 0.5
    again = cells_data(changed)["claims"][1]
    assert again["threshold"] == 0.77 and again["cells"][3]["estimate"]["mean"] == 0.5


def test_grid_data_refuses_a_record_without_claims():
    with pytest.raises(RopesplitError, match="^the claims record holds no claim"):
        cells_data({"claims": [], "grid": []})


@pytest.mark.parametrize("width", ["single", "double"])
def test_figure_21_draws_each_cell_against_its_threshold(width):
    """One panel per claim, one point and interval per cell coloured by its verdict, the
    threshold a vertical line (dashed: the toolkit's, solid: the paper's), each cell's label,
    the headline's bold; all text inside the figure and the layout applied."""
    data = cells_data(claims_record())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # constrained_layout not applied would warn
        fig = draw("cells", data, width)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_title(loc="right")]
    assert len(panels) == 5
    renderer, edge = canvas.get_renderer(), fig.bbox
    for ax, claim in zip(panels, data["claims"], strict=True):
        assert ax.get_title(loc="right").startswith(f"claim {claim['claim']} (predicted ")
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(bars) == len(claim["cells"])
        means = sorted(bar.lines[0].get_xdata()[0] for bar in bars)
        assert means == sorted(c["estimate"]["mean"] for c in claim["cells"])
        colours = {bar.lines[0].get_color() for bar in bars}
        assert colours == {VERDICT_COLOURS[c["verdict"]] for c in claim["cells"]}
        (line,) = [ln for ln in ax.lines if list(ln.get_xdata()) == [claim["threshold"]] * 2]
        assert line.get_linestyle() == ("-" if claim["origin"] == "paper" else "--")
        labels = ax.get_yticklabels()
        assert [t.get_text() for t in labels] == [c["label"] for c in claim["cells"]]
        assert [t.get_fontweight() == "bold" for t in labels] == [
            c["headline"] for c in claim["cells"]
        ]
        for text in (ax.title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *labels):
            if text.get_visible() and text.get_text():
                box = text.get_window_extent(renderer)
                assert edge.x0 - 1 <= box.x0 and box.x1 <= edge.x1 + 1, text.get_text()


def test_figure_21_refuses_cells_without_their_fields():
    data = cells_data(claims_record())
    del data["claims"][1]["cells"][0]["verdict"]
    with pytest.raises(RopesplitError, match="^claim 2's cells row 0 has no 'verdict'"):
        draw("cells", data)


# ------------------------------------------------------------- over the grid: one line, folded


@pytest.mark.parametrize(
    ("statement", "line", "detail"),
    [
        ("robust: agrees in all 16 cells", "robust: agrees in all 16 cells", None),
        (FRAGILE_2, "fragile: agrees in 5 of 8 cells", tuple(FRAGILE_2[9:].split("; "))),
        (FRAGILE_4, "fragile: agrees in 3 of 4 cells",
         ("weaker than the paper in 1 of 4 (heads=mean, corpus=prose)",
          "agrees in 3 of 4 (the other cells)")),
        ("fragile: disagrees in 3, agrees in 3 of 6 cells; by corpus pydoc/prose: disagrees 3/0",
         "fragile: disagrees in 3 of 6 cells", None),
        ("no cell was evaluated", "no cell was evaluated", None),
        (None, "n/a", None),
    ],
)  # fmt: skip
def test_grid_line_is_one_line_with_the_rest_folded(statement, line, detail):
    """The record's one line (the most common verdict's count of cells) over the record's
    whole statement, folded; a robust statement is its own line."""
    shown = summary.grid_line({"robust_statement": statement, "robust_line": line})
    if statement is None or not statement.startswith("fragile"):
        assert shown == line
        return
    assert isinstance(shown, Folded) and shown.summary == line
    assert shown.detail == (detail or tuple(statement[len("fragile: ") :].split("; ")))
    bare = summary.grid_line({"robust_statement": statement})  # a record without its line
    assert isinstance(bare, Folded) and bare.summary == "fragile" and bare.detail == shown.detail


def report_html() -> tuple[str, str]:
    block = FigureBlock(21, GRID.title, GRID.caption, b"\x89PNG stand-in", name="cells")
    doc = build_document({"claims": claims_record()}, [block])
    return render_html(doc), render_markdown(doc, {21: "figures/fig21-cells-double.png"})


def test_the_grid_cells_show_one_line_with_the_detail_in_details():
    """In the claims table and the first screen's: a fragile claim's cell is its one line
    as the <summary> of a <details> holding the rest, each clause a line; a robust one is
    its statement, not folded; the claim's section says the one line too."""
    html, md = report_html()
    claims = html[html.index('<h2 id="claims">') : html.index('<h2 id="claim-1">')]
    lead = html[html.index('<section class="lead"') : html.index('<nav class="toc">')]
    for part in (claims, lead):
        rows = re.findall(r"<tr><td.*?</tr>", part)
        assert len(rows) == 5
        two = rows[1].rsplit("<td", 1)[1]
        assert two.startswith(
            ' class="prose"><details><summary>fragile: agrees in 5 of 8 '
            "cells</summary><ul><li>agrees in 5, weaker than the paper in 2, "
            "inconclusive in 1 of 8 cells</li><li>by tokens 256/512: "
        )
        assert two.count("<li>") == 3 and two.endswith("</li></ul></details></td></tr>")
        assert "fragile: weaker than the paper in 1 of 4" not in rows[3]  # not the first clause
        assert "<summary>fragile: agrees in 3 of 4 cells</summary>" in rows[3]
        one = rows[0].rsplit("<td", 1)[1]
        assert one == ' class="prose">robust: weaker than the paper in all 2 cells</td></tr>'
        assert rows[4].endswith('<td class="prose">n/a</td></tr>')  # no grid statement
    section = html[html.index('<h2 id="claim-2">') : html.index('<h2 id="claim-3">')]
    assert "Over the grid: fragile: agrees in 5 of 8 cells.</p>" in section
    row = next(line for line in md.splitlines() if line.startswith("| [2. claim 2"))
    assert "<details><summary>fragile: agrees in 5 of 8 cells</summary>agrees in 5, " in row


def test_the_first_screen_is_the_figure_beside_the_verdicts_above_the_contents():
    """Title, run line, then the lead (figure 21 and the verdict table, no heading), then the
    contents (a narrow sticky column on a wide window), then the sections."""
    html, md = report_html()
    lead_at = html.index('<section class="lead" id="glance" aria-label="The claims at a glance">')
    assert html.index("<h1>") < lead_at < html.index('<nav class="toc">') < html.index("<main>")
    lead = html[lead_at : html.index("</section>", lead_at)]
    assert lead.index('<figure id="figure-21">') < lead.index('<div class="verdicts"><div ')
    assert "<h2" not in lead and 'href="#glance"' not in html  # not in the contents
    links = re.findall(r'<tr><td[^>]*><a href="#(claim-\d)">', lead)
    assert links == [f"claim-{n}" for n in range(1, 6)]
    assert "@media (min-width: 70rem)" in html and "position: sticky" in html
    assert md.index("| claim | verdict | over the grid |") < md.index("1. [The paper's claims")
