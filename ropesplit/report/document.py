r"""The report as a plain document (headings, text, tables, figures), built from the run's JSON.

Every number in the report is read here from the JSON records of one run
(``derive``, ``bound``, ``analyze``, ``perturb``) and from the run header;
the only constants are the seed paper's reference values
(:data:`PAPER_R_SPLIT` = 0.959 and the ~5% / ~10% word-order thresholds),
labelled as the paper's wherever they appear. The HTML and Markdown
renderers (:mod:`ropesplit.report.html`, :mod:`ropesplit.report.markdown`)
only format this document; neither reads the JSON itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ropesplit.errors import RopesplitError
from ropesplit.figures.paper import PAPER_ORDER_HARMFUL, PAPER_ORDER_HARMLESS, PAPER_R_SPLIT

__all__ = [
    "Document",
    "FigureBlock",
    "Table",
    "build_document",
    "fmt",
]



@dataclass
class Table:
    """A table: column titles and rows of already formatted cells."""

    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class FigureBlock:
    """One figure: its number, title, caption and the PNG bytes to embed."""

    number: int
    title: str
    caption: str
    png: bytes
    files: list[str] = field(default_factory=list)  # the PDF/PNG files written beside


@dataclass
class Section:
    """A titled section: paragraphs of plain text, then tables, then figures."""

    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[FigureBlock] = field(default_factory=list)


@dataclass
class Document:
    """The whole report: a title, a header table, then sections in order."""

    title: str
    header: Table
    sections: list[Section]


def fmt(value: Any, digits: int = 3) -> str:
    """A cell: floats to ``digits`` decimals (scientific when tiny/huge), None as 'n/a'.

    >>> [fmt(0.95912), fmt(None), fmt(3), fmt(True), fmt(1.2e-7), fmt(float("nan"))]
    ['0.959', 'n/a', '3', 'yes', '1.20e-07', 'n/a']
    """
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        if value != 0 and (abs(value) < 10**-digits or abs(value) >= 1e6):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v, digits) for v in value)
    return str(value)


def _need(record: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in record:
        raise RopesplitError(f"{what} JSON has no {key!r}; was it written by this version?")
    return record[key]


def _header(header: Mapping[str, Any]) -> Table:
    """Run metadata: package versions, model, text hash, tokens, seed, run time."""
    rows = [[key, fmt(value)] for key, value in header.items() if key != "versions"]
    rows += [[f"version of {name}", str(v)] for name, v in header.get("versions", {}).items()]
    return Table(["run", "value"], rows)


def _theory(derive: Mapping[str, Any]) -> Section:
    steps = _need(derive, "steps", "derive")
    rows = [
        [s["id"], s["kind"], "checked" if s["checked"] else ("not run" if s["checked"] is None
         else "FAILED"), fmt(s.get("seconds"), 2), ", ".join(s.get("lemmas", [])) or "-",
         s.get("method", "")]
        for s in steps
    ]  # fmt: skip
    n_ok = sum(bool(s["checked"]) for s in steps)
    return Section(
        "Theory: every step of THEORY.md checked with sympy",
        [f"{n_ok} of {len(steps)} steps checked symbolically "
         f"({'all checked' if derive.get('all_checked') else 'NOT all checked'})."],  # fmt: skip
        [Table(["step", "kind", "status", "seconds", "lemmas", "method"], rows)],
    )


_BOUND_COLUMNS = (
    "pattern", "d", "base", "tokens", "r_split", "r_split_rowcentred", "r_3axis",
    "remainder_share", "tightness_max", "tightness_median", "lowfreq_share_k",
)  # fmt: skip


def _numerics(bound: Mapping[str, Any]) -> Section:
    cases = _need(bound, "cases", "bound")
    rows = [[fmt(case.get(c)) for c in _BOUND_COLUMNS] for case in cases]
    violations = _need(bound, "violations", "bound")
    return Section(
        "Numerics: the bound on synthetic queries and keys",
        ["Synthetic heads whose key deviation sits in low-frequency pairs (structured), "
         "is spread evenly (random) or sits in the fastest pairs (adversarial). "
         f"Bound violations: {violations} (the theory says 0; tightness never above 1)."],
        [Table(list(_BOUND_COLUMNS), rows)],
    )  # fmt: skip


_LAYER_STATS = ("r_split", "r_split_rowcentred", "r_3axis", "remainder_share", "tightness_max",
                "lowfreq_share_k", "lowfreq_share_q")  # fmt: skip


def _mean(values: Sequence[Any]) -> float:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(finite) / len(finite) if finite else math.nan


def _per_layer(heads: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean of each statistic over the heads of each layer: ``{layer: {stat: mean}}``."""
    layers = sorted({int(h["layer"]) for h in heads})
    return {
        str(layer): {s: _mean([h.get(s) for h in heads if int(h["layer"]) == layer])
                     for s in _LAYER_STATS}
        for layer in layers
    }  # fmt: skip


def _empirical(analyze: Mapping[str, Any]) -> Section:
    heads = _need(analyze, "heads", "analyze")
    summary = _need(analyze, "summary", "analyze")
    control = analyze.get("control") or {}
    trained_rows = _per_layer(heads) | {"all heads": dict(summary)}
    control_rows = (_per_layer(control["heads"]) | {"all heads": dict(control["summary"])}
                    if control else {})  # fmt: skip
    others = [s for s in _LAYER_STATS if s != "r_split"]
    columns = ["layer", "r_split", "r_split (control)", "r_split (paper)", *others,
               "lowfreq_share_k (control)"]  # fmt: skip
    rows = []
    for label, values in trained_rows.items():
        ctrl = control_rows.get(label, {})
        rows.append([label, fmt(values.get("r_split")), fmt(ctrl.get("r_split")),
                     fmt(PAPER_R_SPLIT), *(fmt(values.get(s)) for s in others),
                     fmt(ctrl.get("lowfreq_share_k"))])  # fmt: skip
    text = [
        f"{analyze.get('model', 'model')}: {analyze.get('tokens')} tokens, {len(heads)} heads; "
        f"capture reconstructs the model's own attention to "
        f"{fmt(analyze.get('reconstruction_max_abs_diff'))} (max abs difference).",
        f"Mean r_split {fmt(summary['r_split'])} for this model"
        + (f", {fmt(control['summary']['r_split'])} for the random-init control" if control
           else "") + f"; the paper reports {PAPER_R_SPLIT} (Han & Ji 2025, a Llama-family model, "
        "mean over heads; the paper gives no per-layer values, so its mean is repeated).",
    ]  # fmt: skip
    return Section("Empirical: the split on every head, trained vs random init", text,
                   [Table(columns, rows, "per-layer means over heads")])  # fmt: skip


# The paper's own statement for each experiment (Han & Ji, ACL 2025), labelled as the paper's.
_PAPER_CLAIMS = {
    "distance": "Paper (claim 3): re-evaluating the same query/key pairs at a dummy distance "
    "shifts the distance component and leaves the key component unchanged.",
    "order": f"Paper (claim 1): shuffling up to about {PAPER_ORDER_HARMLESS:.0%} of the tokens "
    f"barely moves the loss; more than about {PAPER_ORDER_HARMFUL:.0%} hurts.",
    "position": "Paper (claim 5): small position perturbations move only the positional term.",
    "length": "Paper (claim 5): beyond the training length only the positional term leaves its "
    "trained range; capping the distance (LM-Infinite) keeps it inside.",
}
_EXPERIMENT_TITLES = {"distance": "Controlled distance", "order": "Word-order perturbation",
                      "position": "Position-id perturbation", "length": "Length extrapolation"}


def _rows_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """A table whose columns are the union of the rows' keys, in first-seen order."""
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    return Table(columns, [[fmt(r.get(c)) for c in columns] for r in rows])


def _experiments(perturb: Mapping[str, Any], predictions: Mapping[str, str]) -> list[Section]:
    found = [name for name in _PAPER_CLAIMS if name in perturb]
    if not found:
        raise RopesplitError("perturb JSON holds none of distance, order, position, length")
    sections = []
    for name in found:
        rows = [r for r in perturb[name] if r.get("scope", "all") != "head"]  # means only
        text = [_PAPER_CLAIMS[name]]
        if name in predictions:
            text.append(f"Theory's prediction (THEORY.md section 4): {predictions[name]}.")
        table = _rows_table(rows)
        table.caption = f"{name}: measured" + (
            " (per-layer and overall means; per-head rows in perturb.json)"
            if len(rows) < len(perturb[name]) else "")  # fmt: skip
        sections.append(Section(f"Experiment: {_EXPERIMENT_TITLES[name]}", text, [table]))
    return sections


def build_document(
    header: Mapping[str, Any],
    records: Mapping[str, Mapping[str, Any]],
    figures: Sequence[FigureBlock] = (),
    predictions: Mapping[str, str] | None = None,
) -> Document:
    """The report from the run header, the JSON ``records``, the figures and the predictions.

    ``records`` maps ``derive``, ``bound``, ``analyze`` and ``perturb`` to the
    JSON each step wrote (missing steps are left out of the report and
    listed as not run); ``predictions`` maps an experiment to THEORY.md's
    prediction in words (``ropesplit.empirical.experiments.PREDICTIONS``).
    """
    steps = ("derive", "bound", "analyze", "perturb")
    sections = [build(records[name]) for name, build in
                (("derive", _theory), ("bound", _numerics), ("analyze", _empirical))
                if name in records]  # fmt: skip
    if "perturb" in records:
        sections += _experiments(records["perturb"], predictions or {})
    missing = [name for name in steps if name not in records]
    if missing:
        sections.append(Section("Steps not run", [", ".join(missing)]))
    if figures:
        sections.append(Section("Figures", figures=list(figures)))
    return Document("ropesplit report", _header(header), sections)
