r"""ropesplit.figures: the twenty-two figures, each a pure function of plain data.

Every figure function takes arrays or the JSON rows of the other commands
and returns a :class:`matplotlib.figure.Figure` (no pyplot state), so it is
testable on tiny synthetic inputs; :mod:`ropesplit.report.figure_data` builds
their data from the layers' APIs, and :func:`write_figures` writes each as
PDF and PNG at one-column (3.3 in) and two-column (6.9 in) width, byte-
identical on re-runs.

=====  ================  ==========================================================
 no.   name              shows (docs/theory.md)
=====  ================  ==========================================================
 1     decomposition     W, f, g, E of one head on one colour scale, f row-centred (3)
 2     r_split           r_split per layer and head, trained vs random init (5)
 3     pair_energy       deviation energy per RoPE pair; the bound's weight (3)
 4     bound             |E| against its bound, real heads and synthetic (3)
 5     sweep             r_split vs high-frequency share of key deviation (3)
 6     perturbation      loss ratio vs word-order / position-id perturbation (4)
 7     distance          key and distance components across dummy distances (4)
 8     length            ranges of f, g, E with and without a distance cap (4)
 9     reference         r_split under each reference rotation m_l (6)
 10    reference_pairs   |m_l| and key deviation energy per pair (6)
 11    emergence         the statistics against the training step (5)
 12    emergence_pairs   key deviation energy per pair during training (5)
 13    remainder         intervention: attention from f + g alone, E dropped
 14    keys              intervention: the keys' fast-pair deviation removed
 15    terms             intervention: which term carries length generalization
 16    shuffle           intervention: frequencies shuffled over the pairs
 17    recall_emergence  figure 11 for the associative recall task
 18    recall_pairs      figure 12 for the associative recall task
 19    tolerance         claim 1: damage against the share of tokens moved (4)
 20    forest            every claim's estimate across models (the claims grid)
 21    cells             every claim in every cell of the grid (the report's first screen)
 22    bothways          figure 11 for a causal model and encoders trained here (9)
=====  ================  ==========================================================

:mod:`ropesplit.figures.recorded` keeps each figure's data as JSON records and
redraws the figures from them (the gallery in ``docs/figures``).
"""

from ropesplit.figures.registry import FIGURES, FigureSpec, draw, figure_files, write_figures
from ropesplit.figures.style import DOUBLE, SINGLE, save_figure, styled

__all__ = [
    "DOUBLE",
    "FIGURES",
    "SINGLE",
    "FigureSpec",
    "draw",
    "figure_files",
    "save_figure",
    "styled",
    "write_figures",
]
