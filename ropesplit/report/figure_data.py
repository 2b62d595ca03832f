r"""The report's one gather step: every figure's data, built from the records it declares.

Each :class:`~ropesplit.figures.registry.FigureSpec` names in ``needs`` what
its data is drawn from: records by the name of the stage that writes them
(``"analyze"``, ``"perturb"``, ``"length"``, ``"interventions"``, ``"terms"``,
``"train"``) and ``"load"``, the model in memory (for the fresh captures of
figures 1, 3, 4 and 10). :data:`BUILDERS` holds one function per figure,
``build(view) -> kwargs``; the :class:`FigureView` it gets hands out only
what the figure declares, so a figure cannot read a record it does not name.

:func:`gather_figures` runs after every compute stage (the pipeline checks
the order before anything runs) and returns the data of every figure whose
inputs this run made, and for the others one line saying what is missing.
No compute stage writes figure data.

Nothing here re-implements the maths: the split of one head is
``numerics.split.split_head`` (docs/theory.md section 3), the synthetic heads are
``numerics.synthetic``, pairs are a capture's pairs view
(``LayerCapture.pairs``) and figure 3's per-pair deviation energy (docs/theory.md
section 5, the summand of ``lowfreq_share``) is ``numerics.emergence.deviation_energy``
summed over heads:

.. math::

    e^{(k)}_l = \sum_{h}\sum_j |\tilde\delta_{h,j,l}|^2,\qquad
    \tilde\delta_{h,j} = \tilde k_{h,j} - \frac1N\sum_{j'} \tilde k_{h,j'}

per layer, summed over the layer's KV heads ``h`` (and the same for queries
with the mean query). Every ``*_data`` function returns the keyword arguments of
one figure function, as plain arrays and JSON rows: the figures package draws
from these and imports neither numerics nor empirical.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ropesplit.claims.registry import cell_key
from ropesplit.core.errors import RopesplitError
from ropesplit.core.paper import PAPER_ORDER_HARMFUL, PAPER_ORDER_HARMLESS, PAPER_R_SPLIT

__all__ = [
    "BUILDERS",
    "OBJECTS",
    "FigureSources",
    "FigureView",
    "bound_data",
    "decomposition_data",
    "distance_data",
    "figure_data",
    "forest_data",
    "gather_figures",
    "cells_data",
    "head_split",
    "intervention_data",
    "label",
    "length_data",
    "median_head",
    "pair_energy",
    "pair_energy_data",
    "parse_head",
    "perturbation_data",
    "r_split_data",
    "reference_data",
    "reference_pairs_data",
    "sweep_data",
    "tolerance_data",
]

OBJECTS = ("load",)  # needs that name objects in memory, not JSON records


def label(spec: Any) -> str:
    """``figure 11 (emergence)``: how messages name a figure."""
    return f"figure {spec.number} ({spec.name})"


@dataclass
class FigureSources:
    """What the gather step may read: the run's records and, after ``load``, the model.

    ``records`` maps a stage name to the record it returned; ``loaded``,
    ``control`` and ``ids`` are the ``load`` stage's model, its random-init
    twin (or None) and the token ids ``(N,)``; ``settings`` the run's
    :class:`~ropesplit.report.pipeline.RunSettings` (seed, head,
    ``figure_length``). Captures are taken once, when a figure first asks.
    """

    records: Mapping[str, Mapping[str, Any]]
    settings: Any
    loaded: Any = None
    control: Any = None
    ids: Any = None
    _captures: dict[str, Any] = field(default_factory=dict, repr=False)

    def has(self, name: str) -> bool:
        """Whether this run made ``name`` (a record, or ``load``'s model in memory)."""
        return name in self.records or (name == "load" and self.loaded is not None)

    def capture(self, which: str) -> Any:
        """``"text"`` (every token), ``"control"`` (the twin, or None) or ``"short"`` (the
        first ``figure_length`` tokens): one capture each, kept for the other figures."""
        if which not in self._captures:
            from ropesplit.empirical.model.capture import capture

            if which == "text":
                self._captures[which] = capture(self.loaded, self.ids, keep_probs=False)
            elif which == "control":
                self._captures[which] = (None if self.control is None else
                                         capture(self.control, self.ids, keep_probs=False))
            elif which == "short":
                short = self.ids[: self.settings.figure_length]
                self._captures[which] = capture(self.loaded, short, keep_probs=False)
            else:
                raise RopesplitError(f"capture must be text, control or short, got {which!r}")
        return self._captures[which]


@dataclass(frozen=True)
class FigureView:
    """One figure's window on :class:`FigureSources`: only the inputs it declares."""

    spec: Any  # FigureSpec
    sources: FigureSources

    def _check(self, name: str) -> None:
        if name not in self.spec.needs:
            declared = ", ".join(self.spec.needs) or "nothing"
            raise RopesplitError(f"{label(self.spec)} reads {name!r} but declares needs "
                                 f"({declared}); add it to its FigureSpec")  # fmt: skip
        if not self.sources.has(name):
            raise RopesplitError(f"{label(self.spec)} needs record {name!r}, which is missing")

    def record(self, name: str) -> Mapping[str, Any]:
        """The record of stage ``name`` (declared in the figure's ``needs``)."""
        if name in OBJECTS:
            raise RopesplitError(f"{name!r} is the model in memory, not a record")
        self._check(name)
        return self.sources.records[name]

    def capture(self, which: str) -> Any:
        """A capture of the loaded model (the figure must declare ``load``)."""
        self._check("load")
        return self.sources.capture(which)

    @property
    def settings(self) -> Any:
        return self.sources.settings


# ------------------------------------------------------- each figure's data, from plain inputs

SYNTHETIC_PATTERNS = ("random", "structured", "adversarial")
SWEEP_BASES = (1e4, 1e5, 1e6)  # Llama-2, SmolLM2, Gemma-3 global layers (docs/theory.md section 1)


def parse_head(text: str) -> tuple[int, int]:
    """``"LAYER.HEAD"`` as two integers.

    >>> parse_head("3.1")
    (3, 1)
    """
    layer, dot, head = text.partition(".")
    if not (dot and layer.isdigit() and head.isdigit()):
        raise RopesplitError(f"head must be LAYER.HEAD (e.g. 3.1), got {text!r}")
    return int(layer), int(head)


def median_head(heads: Sequence[Mapping[str, Any]], stat: str = "r_split") -> tuple[int, int]:
    """The (layer, head) whose ``stat`` is the median over heads (the lower one for even counts).

    Heads with an undefined (None/NaN) value are left out; ties go to the
    earlier (layer, head).
    """
    rows = [r for r in heads if r.get(stat) is not None and np.isfinite(float(r[stat]))]
    if not rows:
        raise RopesplitError(f"no head has a finite {stat}")
    ordered = sorted(rows, key=lambda r: (float(r[stat]), int(r["layer"]), int(r["head"])))
    chosen = ordered[(len(ordered) - 1) // 2]
    return int(chosen["layer"]), int(chosen["head"])


def _layer(cache: Any, layer: int) -> Any:
    """The capture of layer ``layer`` (its own index; a hybrid's analysed layers are sparse)."""
    analysed = [one.layer for one in cache.layers]
    if layer not in analysed:
        span = (f"[0, {len(analysed)})" if analysed == list(range(len(analysed)))
                else f"the analysed layers {analysed}")  # fmt: skip
        raise RopesplitError(f"layer must lie in {span}, got {layer}")
    return cache.layer(layer)


def head_split(cache: Any, layer: int, head: int) -> Any:
    r"""``numerics.split.split_head`` of query head ``head`` of ``layer`` in a capture.

    The head reads KV head ``kv_map[head]``; frequencies, scale ``s``, layout,
    rotary dimension, positions and window are the capture's own.
    """
    from ropesplit.numerics.split import split_head

    lc = _layer(cache, layer)
    n_heads = lc.q.shape[0]
    if not 0 <= head < n_heads:
        raise RopesplitError(f"head must lie in [0, {n_heads}) for layer {layer}, got {head}")
    return split_head(
        lc.q[head].double().numpy(),  # (N, d)
        lc.k[int(lc.kv_map[head])].double().numpy(),  # (N, d)
        lc.spec, positions=cache.positions.numpy(),
    )  # fmt: skip


def decomposition_data(cache: Any, layer: int, head: int, model: str = "") -> dict[str, Any]:
    """Figure 1: ``W, f, g, E`` and the causal mask of one head."""
    split = head_split(cache, layer, head)
    title = f"{model}, layer {layer}, head {head}, {cache.n_tokens} tokens".lstrip(", ")
    return {"W": split.W, "f": split.f, "g": split.g, "E": split.E, "mask": split.mask,
            "title": title}  # fmt: skip


def r_split_data(analysis: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 2: the ``analyze`` record's heads and its control's heads, and the paper's value."""
    control = analysis.get("control")
    return {"heads": analysis["heads"], "control_heads": control["heads"] if control else None,
            "paper": PAPER_R_SPLIT}  # fmt: skip


def pair_energy(cache: Any, which: str = "k") -> np.ndarray:
    r"""Per-layer, per-pair deviation energy ``(L, P)``: :math:`\sum_h\sum_j|\tilde x_{h,j,l} - \bar{\tilde x}_{h,l}|^2`.

    ``which`` is ``"k"`` (keys, deviation from the mean key of each KV head)
    or ``"q"`` (queries, from the mean query of each head); each layer read through its
    pairs view (:meth:`~ropesplit.empirical.model.capture.LayerCapture.pairs`).
    """  # noqa: E501
    from ropesplit.numerics.emergence import deviation_energy

    if which not in ("k", "q"):
        raise RopesplitError(f"which must be 'k' or 'q', got {which!r}")
    rows = []
    for lc in cache.layers:
        view = lc.pairs()
        rows.append(deviation_energy(view.qc if which == "q" else view.kc_kv).sum(axis=0))  # (P,)
    return np.stack(rows)  # (L, P)


def reference_data(analysis: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 9: mean ``r_split`` with its CI per reference: trained, control, protocol controls."""
    series = {"trained": {s: v["r_split"] for s, v in analysis["by_reference"].items()}}
    control = analysis.get("control")
    if control is not None:
        series["random init"] = {s: v["r_split"] for s, v in control["by_reference"].items()}
    for name, entry in (analysis.get("protocol") or {}).get("controls", {}).items():
        series[f"{name} ({entry['runs']} run(s))"] = {
            s: v["control"] for s, v in entry["by_reference"].items()}  # fmt: skip
    return {"series": series, "paper": PAPER_R_SPLIT}


def reference_pairs_data(cache: Any, control_cache: Any | None = None) -> dict[str, Any]:
    """Figure 10: layer 0's ``theta``, ``|m_l|`` over its causal pairs, key deviation energies."""
    from ropesplit.numerics.reference import mean_rotation

    first = cache.layers[0]
    m = mean_rotation(first.theta, cache.n_tokens, first.window).m  # (P,)
    return {"theta": first.theta, "m_abs": np.abs(m), "energy_k": pair_energy(cache, "k"),
            "energy_k_control": pair_energy(control_cache, "k") if control_cache else None}


def pair_energy_data(cache: Any, control_cache: Any | None = None) -> dict[str, Any]:
    """Figure 3: key and query energies (trained, control), layer 0's ``theta``, distances.

    The distances whose weight is drawn: 1 token, 16 tokens and the median
    causal distance of the analysed context (about ``0.29 N``).
    """
    n_tokens = cache.n_tokens
    i, j = np.tril_indices(n_tokens)
    typical = float(np.median(i - j))
    return {
        "theta": cache.layers[0].theta,
        "energy_k": pair_energy(cache, "k"),
        "energy_k_control": pair_energy(control_cache, "k") if control_cache else None,
        "energy_q": pair_energy(cache, "q"),
        "energy_q_control": pair_energy(control_cache, "q") if control_cache else None,
        "distances": tuple(sorted({1.0, min(16.0, typical), round(typical)})),
    }


def _sample(split: Any, rng: np.random.Generator, points: int) -> tuple[np.ndarray, np.ndarray]:
    """``(bound, |E|)`` at up to ``points`` seeded random causal pairs of a HeadSplit."""
    bound, abs_e = split.bound[split.mask], np.abs(split.E[split.mask])  # (n_pairs,) each
    if bound.size > points:
        keep = np.sort(rng.choice(bound.size, size=points, replace=False))
        bound, abs_e = bound[keep], abs_e[keep]
    return bound, abs_e


def bound_data(
    cache: Any,
    heads: Sequence[tuple[int, int]],
    *,
    seed: int = 0,
    points: int = 600,
) -> dict[str, Any]:
    """Figure 4: ``(bound, |E|)`` samples from real ``heads`` and the three synthetic patterns.

    The synthetic heads (``numerics.synthetic.make_qk``) share the capture's
    head dimension, RoPE base and token count.
    """
    from ropesplit.numerics.split import split_head
    from ropesplit.numerics.synthetic import make_qk

    rng = np.random.default_rng(seed)
    samples: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for layer, head in heads:
        samples[f"layer {layer} head {head}"] = _sample(head_split(cache, layer, head), rng, points)
    first = cache.layers[0]
    d = int(first.q.shape[-1])
    base = float(first.rope_base or 10000.0)
    for pattern in SYNTHETIC_PATTERNS:
        synthetic = make_qk(pattern, d=d, base=base, tokens=cache.n_tokens, seed=seed)
        split = split_head(synthetic.q, synthetic.k, synthetic.spec)
        samples[f"synthetic: {pattern}"] = _sample(split, rng, points)
    return {"samples": samples}


def sweep_data(*, d: int = 64, tokens: int = 256, seed: int = 0,
               bases: Sequence[float] = SWEEP_BASES) -> dict[str, Any]:  # fmt: skip
    """Figure 5: ``numerics.synthetic.sweep`` rows for each RoPE base."""
    from ropesplit.numerics.synthetic import sweep

    rows: list[dict[str, Any]] = []
    for base in bases:
        rows += [dict(r) | {"base": base} for r in sweep(d=d, base=base, tokens=tokens, seed=seed)]
    return {"rows": rows}


def _experiment(perturb: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    if name not in perturb:
        raise RopesplitError(f"perturb JSON has no {name!r} experiment; run it with --experiment")
    return list(perturb[name])


def intervention_data(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Figures 13-16: the rows of intervention experiment ``name``."""
    return {"rows": _experiment(record, name)}


def perturbation_data(perturb: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 6: the ``order`` and ``position`` rows and the paper's thresholds."""
    return {"order": _experiment(perturb, "order"),
            "position": _experiment(perturb, "position") if "position" in perturb else None,
            "paper_thresholds": (PAPER_ORDER_HARMLESS, PAPER_ORDER_HARMFUL)}  # fmt: skip


def distance_data(perturb: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 7: the ``distance`` experiment's rows."""
    return {"rows": _experiment(perturb, "distance")}


def length_data(perturb: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 8: the ``length`` experiment's rows."""
    return {"rows": _experiment(perturb, "length")}


def tolerance_data(claims: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 19: claim 1's damage per rate with its 95% t interval over passages, one curve
    per corpus at the headline length (``claims.json``'s ``order`` rows)."""
    from ropesplit.claims.registry import SWAP_RATES, rate_label
    from ropesplit.numerics.intervals import t_interval

    head = claims["header"]
    key = cell_key({"tokens": head["tokens"]}, "order")
    curves = []
    for corpus in head.get("corpora", [head["corpus"]]):
        rows = [r for r in claims["order"] if r.get("corpus", corpus) == corpus]
        if len(rows) < 2:
            continue
        means, lows, highs = [], [], []
        for rate in SWAP_RATES:
            values = [r["cells"][key][f"damage_{rate_label(rate)}"] for r in rows]
            ci = t_interval(np.asarray(values, dtype=float), unit="passages")
            means.append(ci.mean)
            lows.append(ci.low)
            highs.append(ci.high)
        curves.append({"label": f"{corpus}, {head['tokens']} tokens", "n": len(rows),
                       "rates": [100 * r for r in SWAP_RATES], "mean": means, "low": lows,
                       "high": highs})  # fmt: skip
    if not curves:
        raise RopesplitError("the claims record has fewer than 2 word-order passages")
    return {"curves": curves, "paper": [PAPER_ORDER_HARMLESS, PAPER_ORDER_HARMFUL]}


def forest_data(compare: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 20: one row per model, claim and primary condition of a compare record (the
    paper's value and the null beside the first, a level condition; a paired condition's
    null is inside its difference)."""
    from ropesplit.claims.text import condition_label

    rows = []
    for row in compare["rows"]:
        for k, c in enumerate(row["conditions"], start=1):
            first = k == 1
            rows.append({"model": row["model"], "claim": row["claim"], "condition": k,
                         "measure": condition_label(c), "estimate": c["estimate"],
                         "threshold": c["threshold"], "origin": c["origin"],
                         "verdict": row["verdict"], "robustness": row["robustness"],
                         "paper": row["paper"] if first else None,
                         "null": row["null"] if first else None})  # fmt: skip
    return {"rows": rows}


def cells_data(claims: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 21: per claim of a claims record (``claims.json``), its first primary
    condition's estimate in every cell of the grid (``grid``), each cell's verdict, the
    threshold it is read against and the headline cell; a claim the grid leaves out shows
    its headline cell alone."""
    from ropesplit.claims.text import condition_label

    grids = {int(g["claim"]): g for g in claims.get("grid", [])}
    out = []
    for claim in claims["claims"]:
        if not claim["conditions"]:
            raise RopesplitError(f"claim {claim['claim']} of the claims record has no condition")
        first = claim["conditions"][0]
        grid = grids.get(int(claim["claim"]))
        axes = list(grid["axes"]) if grid else []
        headline = {axis: claim["cell"].get(axis) for axis in axes}
        if grid:
            cells = [
                {
                    "label": " ".join(str(c["cell"][a]) for a in axes),
                    "estimate": c["estimate"],
                    "verdict": c["verdict"],
                    "headline": dict(c["cell"]) == headline,
                }
                for c in grid["cells"]
            ]
        else:
            cells = [
                {
                    "label": "headline cell",
                    "estimate": first["interval"],
                    "verdict": claim["verdict"],
                    "headline": True,
                }
            ]
        out.append(
            {
                "claim": claim["claim"],
                "measure": condition_label(first),
                "threshold": first["threshold"],
                "origin": first["origin"],
                "direction": first["direction"],
                "axes": axes,
                "cells": cells,
            }
        )
    if not out:
        raise RopesplitError("the claims record holds no claim")
    return {"claims": out}


# ------------------------------------------------------ the builders: one per figure, from a view


def _head(view: FigureView) -> tuple[int, int]:
    """Figure 1's (layer, head): the run's ``--head``, else the median r_split."""
    chosen = view.settings.head
    return chosen or median_head(view.record("analyze")["heads"])


def _decomposition(view: FigureView) -> dict[str, Any]:
    analysis = view.record("analyze")
    return decomposition_data(view.capture("short"), *_head(view),
                                        model=analysis["model"])  # fmt: skip


def _bound(view: FigureView) -> dict[str, Any]:
    """Figure 4: the lowest, the chosen and the highest r_split head, on the short capture."""
    ordered = sorted(view.record("analyze")["heads"], key=lambda r: float(r["r_split"]))
    lowest, highest = ordered[0], ordered[-1]
    real = [(int(lowest["layer"]), int(lowest["head"])), _head(view),
            (int(highest["layer"]), int(highest["head"]))]  # fmt: skip
    return bound_data(view.capture("short"), list(dict.fromkeys(real)),
                                seed=view.settings.seed)  # fmt: skip


def _emergence(name: str, stage: str = "train") -> Callable[[FigureView], dict[str, Any]]:
    def build(view: FigureView) -> dict[str, Any]:
        from ropesplit.figures.emergence import emergence_data

        return dict(emergence_data(view.record(stage))[name])

    return build


def _bothways(view: FigureView) -> dict[str, Any]:
    """Figure 22: the causal run and the encoders trained here (``train``, ``encoder``)."""
    from ropesplit.figures.emergence import bothways_data

    return bothways_data(view.record("train"), view.record("encoder"))


def _intervention(name: str, stage: str) -> Callable[[FigureView], dict[str, Any]]:
    def build(view: FigureView) -> dict[str, Any]:
        return intervention_data(view.record(stage), name)

    return build


# one function per figure of ropesplit.figures.FIGURES: its keyword arguments from its needs
BUILDERS: dict[str, Callable[[FigureView], dict[str, Any]]] = {
    "decomposition": _decomposition,
    "r_split": lambda v: r_split_data(v.record("analyze")),
    "pair_energy": lambda v: pair_energy_data(v.capture("text"), v.capture("control")),
    "bound": _bound,
    "sweep": lambda v: sweep_data(seed=v.settings.seed),
    "perturbation": lambda v: perturbation_data(v.record("perturb")),
    "distance": lambda v: distance_data(v.record("perturb")),
    "length": lambda v: length_data(v.record("length")),
    "reference": lambda v: reference_data(v.record("analyze")),
    "reference_pairs": lambda v: reference_pairs_data(v.capture("text"), v.capture("control")),
    "emergence": _emergence("emergence"),
    "emergence_pairs": _emergence("emergence_pairs"),
    "remainder": _intervention("remainder", "interventions"),
    "keys": _intervention("keys", "interventions"),
    "terms": _intervention("terms", "terms"),
    "shuffle": _intervention("shuffle", "interventions"),
    "recall_emergence": _emergence("emergence", "recall"),
    "recall_pairs": _emergence("emergence_pairs", "recall"),
    "tolerance": lambda v: tolerance_data(v.record("claims")),
    "forest": lambda v: forest_data(v.record("compare")),
    "cells": lambda v: cells_data(v.record("claims")),
    "bothways": _bothways,
}


def figure_data(spec: Any, sources: FigureSources) -> dict[str, Any]:
    """Figure ``spec``'s keyword arguments from its declared needs; a one-line error naming the
    figure and the record when one is missing or the figure has no builder."""
    if spec.name not in BUILDERS:
        raise RopesplitError(f"{label(spec)} has no data builder in "
                             "ropesplit.report.figure_data.BUILDERS")  # fmt: skip
    for name in spec.needs:
        if not sources.has(name):
            raise RopesplitError(f"{label(spec)} needs record {name!r}, which is missing")
    return BUILDERS[spec.name](FigureView(spec, sources))


def gather_figures(
    specs: Sequence[Any], sources: FigureSources, planned: Collection[str] = ()
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """``(data, missing)``: every figure whose needs this run made, and for each of the
    others why not (``missing[name]``, one line).

    ``planned`` names the records this run's stages make: a need one of them should have
    made but did not is an error (a stage broke its contract), not a figure left out.
    """
    data: dict[str, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    for spec in specs:
        absent = [name for name in spec.needs if not sources.has(name)]
        broken = [name for name in absent if name in planned]
        if broken:
            raise RopesplitError(f"{label(spec)} needs record {broken[0]!r}, which stage "
                                 f"{broken[0]!r} ran without making")  # fmt: skip
        if absent:
            what = ", ".join(repr(name) for name in absent)
            missing[spec.name] = (f"needs {what}, which this run does not make "
                                  f"(no {' or '.join(absent)} stage)")  # fmt: skip
            continue
        data[spec.name] = figure_data(spec, sources)
    return data, missing
