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
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ropesplit.core.errors import RopesplitError

__all__ = [
    "BUILDERS",
    "OBJECTS",
    "FigureSources",
    "FigureView",
    "figure_data",
    "gather_figures",
    "label",
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
    ``figure_tokens``). Captures are taken once, when a figure first asks.
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
        first ``figure_tokens`` tokens): one capture each, kept for the other figures."""
        if which not in self._captures:
            from ropesplit.empirical.capture import capture

            if which == "text":
                self._captures[which] = capture(self.loaded, self.ids, keep_probs=False)
            elif which == "control":
                self._captures[which] = (None if self.control is None else
                                         capture(self.control, self.ids, keep_probs=False))
            elif which == "short":
                short = self.ids[: self.settings.figure_tokens]
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


def _gather() -> Any:
    from ropesplit.figures import gather

    return gather


def _head(view: FigureView) -> tuple[int, int]:
    """Figure 1's (layer, head): the run's ``--head``, else the median r_split."""
    chosen = view.settings.head
    return chosen or _gather().median_head(view.record("analyze")["heads"])


def _decomposition(view: FigureView) -> dict[str, Any]:
    analysis = view.record("analyze")
    return _gather().decomposition_data(view.capture("short"), *_head(view),
                                        model=analysis["model"])  # fmt: skip


def _bound(view: FigureView) -> dict[str, Any]:
    """Figure 4: the lowest, the chosen and the highest r_split head, on the short capture."""
    ordered = sorted(view.record("analyze")["heads"], key=lambda r: float(r["r_split"]))
    lowest, highest = ordered[0], ordered[-1]
    real = [(int(lowest["layer"]), int(lowest["head"])), _head(view),
            (int(highest["layer"]), int(highest["head"]))]  # fmt: skip
    return _gather().bound_data(view.capture("short"), list(dict.fromkeys(real)),
                                seed=view.settings.seed)  # fmt: skip


def _emergence(name: str, stage: str = "train") -> Callable[[FigureView], dict[str, Any]]:
    def build(view: FigureView) -> dict[str, Any]:
        from ropesplit.figures.emergence import emergence_data

        return dict(emergence_data(view.record(stage))[name])

    return build


def _intervention(name: str, stage: str) -> Callable[[FigureView], dict[str, Any]]:
    def build(view: FigureView) -> dict[str, Any]:
        return _gather().intervention_data(view.record(stage), name)

    return build


# one function per figure of ropesplit.figures.FIGURES: its keyword arguments from its needs
BUILDERS: dict[str, Callable[[FigureView], dict[str, Any]]] = {
    "decomposition": _decomposition,
    "r_split": lambda v: _gather().r_split_data(v.record("analyze")),
    "pair_energy": lambda v: _gather().pair_energy_data(v.capture("text"), v.capture("control")),
    "bound": _bound,
    "sweep": lambda v: _gather().sweep_data(seed=v.settings.seed),
    "perturbation": lambda v: _gather().perturbation_data(v.record("perturb")),
    "distance": lambda v: _gather().distance_data(v.record("perturb")),
    "length": lambda v: _gather().length_data(v.record("length")),
    "reference": lambda v: _gather().reference_data(v.record("analyze")),
    "reference_pairs": lambda v: _gather().reference_pairs_data(v.capture("text"),
                                                                v.capture("control")),
    "emergence": _emergence("emergence"),
    "emergence_pairs": _emergence("emergence_pairs"),
    "remainder": _intervention("remainder", "interventions"),
    "keys": _intervention("keys", "interventions"),
    "terms": _intervention("terms", "terms"),
    "shuffle": _intervention("shuffle", "interventions"),
    "recall_emergence": _emergence("emergence", "recall"),
    "recall_pairs": _emergence("emergence_pairs", "recall"),
    "tolerance": lambda v: _gather().tolerance_data(v.record("claims")),
    "forest": lambda v: _gather().forest_data(v.record("compare")),
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

    ``planned`` names the stages of this run: a need one of them should have made but did
    not is an error (a stage broke its contract), not a figure quietly left out.
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
