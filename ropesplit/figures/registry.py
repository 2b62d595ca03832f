"""The twenty-two figures by number and name, and the writer of their PDF/PNG files.

``data[name]`` holds the keyword arguments of figure ``name``'s function
(plain arrays and JSON rows, as :mod:`ropesplit.report.figure_data` returns
them); :func:`write_figures` draws each at each width and saves it in each
format as ``fig{number}-{name}-{width}.{format}``.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ropesplit.core.errors import RopesplitError
from ropesplit.figures.bound import bound_figure, sweep_figure
from ropesplit.figures.cells import cells_figure
from ropesplit.figures.claims import forest_figure, tolerance_figure
from ropesplit.figures.decomposition import decomposition_figure
from ropesplit.figures.emergence import FIGURE_11, FIGURE_12, FIGURE_17, FIGURE_18, FIGURE_22
from ropesplit.figures.experiments import distance_figure
from ropesplit.figures.heads import r_split_figure
from ropesplit.figures.interventions import intervention_figure
from ropesplit.figures.length import length_figure
from ropesplit.figures.pairs import pair_energy_figure
from ropesplit.figures.perturbation import perturbation_figure
from ropesplit.figures.reference import reference_figure, reference_pairs_figure
from ropesplit.figures.style import FORMATS, WIDTHS, save_figure

__all__ = ["FIGURES", "FigureSpec", "draw", "figure_files", "write_figures"]


@dataclass(frozen=True)
class FigureSpec:
    """One figure: number, file name, title, what it shows, and its drawing function."""

    number: int
    name: str
    title: str
    caption: str
    function: Callable[..., Figure]
    # what its data is built from: the run's records by stage name ("analyze", "perturb",
    # "train", ...) and "load" (the model in memory, for fresh captures); the report's
    # one gather step (ropesplit.report.figure_data) builds it from these and no others
    needs: tuple[str, ...]


FIGURES = (
    FigureSpec(1, "decomposition", "Logit decomposition of one head",
               "The logits W of one head and their exact split W = f + g + E: positional "
               "relevance f (no key), semantic importance g (no position) and the remainder E, "
               "on one colour scale; only causal pairs j <= i are shown. Right: f minus its "
               "mean over each row's causal pairs, on its own colour scale: f is mostly an "
               "offset per query (the stripes), which softmax ignores; what is left is the "
               "part of f that moves attention between keys, its dependence on i - j.",
               decomposition_figure, ("load", "analyze")),
    FigureSpec(2, "r_split", "r_split for every layer and head",
               "Pearson correlation of W with f + g per head (a), and its distribution over "
               "heads for the trained model and the same architecture at random "
               "initialisation (b), with the paper's 0.959 marked.", r_split_figure,
               ("analyze",)),
    FigureSpec(3, "pair_energy", "Deviation energy per RoPE pair",
               "Share of key (a) and query (b) deviation energy per rotation pair, mean over "
               "layers with the 10-90% range across layers, trained against random init; (c) "
               "the bound's weight 2|sin(theta_l Delta/2)| per pair for typical distances, on "
               "its own axis: deviation in a pair costs in proportion to it.",
               pair_energy_figure, ("load",)),
    FigureSpec(4, "bound", "The remainder against its bound",
               "|E_ij| against its bound for sampled causal pairs of real heads and of "
               "synthetic patterns; every point lies on or below the line |E| = bound.",
               bound_figure, ("load", "analyze")),
    FigureSpec(5, "sweep", "Synthetic sweep",
               "r_split of synthetic heads against the share of key deviation energy in the "
               "high-frequency half of the pairs, for several RoPE bases.", sweep_figure, ()),
    FigureSpec(6, "perturbation", "Word-order and position-id perturbation",
               "Prediction (paper, claim 1): moving up to ~5% of the context's tokens barely "
               "moves the continuation loss, ~10% or more hurts. Measured: the loss ratio "
               "(perturbed / original) against the measured share of tokens moved (a) and the "
               "position-id shift t (b), per scheme, with 95% bootstrap intervals over seeds; "
               "(c) how far the logits move: the mean bound on the change of W for each "
               "pair's actual distance change beside the measured change (same q, k, where g "
               "does not change at all), and g's change in the perturbed run's own capture, "
               "where q and k move too (layers >= 1); colours: schemes as in (b).",
               perturbation_figure, ("perturb",)),
    FigureSpec(7, "distance", "Controlled distance",
               "Prediction (paper, claim 3): at a dummy distance D the distance component moves "
               "and the key component stays put. Measured, per D (mean over heads, 10-90% "
               "band): (a) the correlation of the key effect of the two-axis fit u_i + v_j of "
               "W^D with that of g (exactly 1 when E = 0); (b) the share of W^D - W^0 a "
               "query-only term explains (exactly 1 when E = 0) and the remainder's share "
               "||E^D|| / ||W^D - mean||.", distance_figure,
               ("perturb",)),
    FigureSpec(8, "length", "Length extrapolation with LM-Infinite",
               "Real text beyond the training length L, four settings each from its own forward "
               "pass (vanilla, cap only, mask only, LM-Infinite): the loss against position "
               "beside the in-length loss of the same tokens (a; black dashed; dotted lines at "
               "L, 2L, 4L), and the 1-99% range of f (b) "
               "and g (c) per length in units of the range seen at distances <= L, with the "
               "share of pairs outside it.", length_figure, ("length",)),
    FigureSpec(9, "reference", "r_split under each reference rotation",
               "Prediction (docs/theory.md 6): the mean rotation m_l is the best Delta-free value for each query and key deviation, so it should raise r_split over m_l = 1 (zero) and fixed C. Measured: mean r_split over heads with its bootstrap 95% interval per reference, trained model and controls.", reference_figure, ("analyze",)),  # noqa: E501
    FigureSpec(10, "reference_pairs", "Mean rotation and key deviation per pair",
               "Per RoPE pair: the mean rotation's modulus |m_l| over the analysed causal pairs beside the share of key deviation energy (a; mean over layers), and the share the mean reference leaves in the remainder, energy x (1 - |m_l|^2) (b), trained against random init.", reference_pairs_figure, ("load",)),  # noqa: E501
    FigureSpec(11, *FIGURE_11, needs=("train",)),
    FigureSpec(12, *FIGURE_12, needs=("train",)),
    FigureSpec(13, "remainder", "Remove the remainder E (intervention)",
               "Attention from f + g alone in every layer and head (E dropped), against dropping the remainder the heads would have under shuffled frequencies, rows at E's norms: (a) the log loss ratio of each edit with its 95% t interval over passages; (b) the paired difference (E minus the structured term) against 0, the predicted side shaded, with each row's verdict.", functools.partial(intervention_figure, experiment="remainder"), ("interventions",)),  # noqa: E501
    FigureSpec(14, "keys", "Remove the fast-pair deviation of the keys (intervention)",
               "The jitter sensitivity S = log(loss at t=16 / loss at t=1) after replacing the keys' fast-pair deviation by kbar, against a slow-pair removal matched in damage at the true positions, the same energy removed from the slow pairs, and the unedited model: (a) S of each edit and its null, 95% t intervals over passages; (b) the paired differences against 0, with verdicts.", functools.partial(intervention_figure, experiment="keys"), ("interventions",)),  # noqa: E501
    FigureSpec(15, "terms", "Which term carries length generalization (intervention)",
               "On a model trained here, the rise of the loss beyond the training length L over the in-length loss of the same targets, per setting (vanilla; f capped at L; g + E capped; all capped; LM-Infinite): (a) the rise with its 95% t interval over passages; (b) the paired test against half the vanilla rise (vanilla: against 0), with verdicts.", functools.partial(intervention_figure, experiment="terms"), ("terms",)),  # noqa: E501
    FigureSpec(16, "shuffle", "Shuffled frequencies inside the model (intervention)",
               "The frequencies reassigned over the pairs in every layer (3 seeded permutations): (a) the log loss ratio of the trained model, and of the null that reassigns them within the slow and the fast half only, 95% t intervals over passages; (b) their paired difference against 0, with the verdict.", functools.partial(intervention_figure, experiment="shuffle"), ("interventions",)),  # noqa: E501
    FigureSpec(17, *FIGURE_17, needs=("recall",)),
    FigureSpec(18, *FIGURE_18, needs=("recall",)),
    FigureSpec(19, "tolerance", "Claim 1: damage against the share of tokens moved",
               "The damage D (the log perplexity ratio over every target after the first moved token) at 2.5, 5, 10, 20 and 50% of the tokens moved by nested adjacent swaps, mean with its 95% t interval over passages per corpus at the headline length; dotted: the chord from 0 to D(50%), a damage linear in the share moved; dashed: the paper's 5% and 10%.", tolerance_figure, ("claims",)),  # noqa: E501
    FigureSpec(20, "forest", "Every claim across models",
               "Per claim and primary condition (claim.condition), each model's headline estimate with the 95% interval (squares), the null beside the first condition (grey), the threshold (solid: the paper's; dashed: the toolkit's) and the paper's own value where it gives one (red); each row names its verdict and whether it is robust over the grid.", forest_figure, ("compare",)),  # noqa: E501
    FigureSpec(21, "cells", "Every claim in every cell of the grid",
               "Each claim's primary statistic per cell of the grid, mean and 95% interval coloured by the cell's verdict (headline cell: diamond, bold); line: the threshold (solid: the paper's, dashed: the toolkit's), the predicted side shaded.", cells_figure, ("claims",)),  # noqa: E501
    FigureSpec(22, *FIGURE_22, ("train", "encoder")),
)  # fmt: skip
_BY_NAME = {spec.name: spec for spec in FIGURES}


def draw(name: str, data: Mapping[str, Any], width: float | str = "double") -> Figure:
    """Figure ``name`` drawn from its keyword arguments ``data`` at ``width``."""
    if name not in _BY_NAME:
        raise RopesplitError(f"figure must be one of {', '.join(_BY_NAME)}, got {name!r}")
    return _BY_NAME[name].function(**data, width=width)


def figure_files(spec: FigureSpec, width: str, fmt: str) -> str:
    """The file name of one figure, e.g. ``fig1-decomposition-double.png``."""
    return f"fig{spec.number}-{spec.name}-{width}.{fmt}"


def write_figures(
    data: Mapping[str, Mapping[str, Any]],
    out: str | Path,
    *,
    widths: Sequence[str] = tuple(WIDTHS),
    formats: Sequence[str] = FORMATS,
    on_figure: Callable[[str], Any] | None = None,
    workers: int | None = None,
) -> list[Path]:
    """Draw every figure present in ``data`` at each width and save it in each format.

    Returns the paths written, in figure order. ``on_figure(name)`` is called
    after each figure (progress). Figures absent from ``data`` are skipped.
    Each file is drawn on a fresh figure by itself, so the files are drawn by
    ``workers`` processes side by side (default: the CPUs this process may use;
    forked, so ``data`` is not copied): the same bytes as one process draws.
    """
    folder = Path(out)
    if not folder.is_dir():
        raise RopesplitError(f"cannot write figures to {folder}: folder does not exist")
    unknown = sorted(set(data) - set(_BY_NAME))
    if unknown:
        raise RopesplitError(f"unknown figure {unknown[0]!r}; known: {', '.join(_BY_NAME)}")
    jobs = [(spec.name, width, folder / figure_files(spec, width, fmt))
            for spec in FIGURES if spec.name in data for width in widths for fmt in formats]
    per_figure = len(widths) * len(formats)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    workers = min(workers, len(jobs))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        results: Iterator[Path] = (_write_one(data, *job) for job in jobs)
        return _collect(results, jobs, per_figure, on_figure)
    global _DATA
    _DATA = data  # what the forked workers read (fork copies it on write only)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            return _collect(pool.map(_write_forked, jobs), jobs, per_figure, on_figure)
    finally:
        _DATA = None


_DATA: Mapping[str, Mapping[str, Any]] | None = None  # write_figures' data, for its workers


def _write_one(data: Mapping[str, Mapping[str, Any]], name: str, width: str, path: Path) -> Path:
    """One file: figure ``name`` drawn afresh at ``width`` (the layout never depends on
    which format was saved first)."""
    return save_figure(draw(name, data[name], width), path)


def _write_forked(job: tuple[str, str, Path]) -> Path:
    assert _DATA is not None
    return _write_one(_DATA, *job)


def _collect(results: Iterator[Path], jobs: list[tuple[str, str, Path]], per_figure: int,
             on_figure: Callable[[str], Any] | None) -> list[Path]:  # fmt: skip
    """The paths in job order, ``on_figure(name)`` after each figure's last file."""
    written = []
    for index, path in enumerate(results):
        written.append(path)
        if on_figure is not None and (index + 1) % per_figure == 0:
            on_figure(jobs[index][0])
    return written
