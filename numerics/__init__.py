r"""ropesplit.numerics: docs/theory.md sections 1-5 as vectorised numpy/torch code.

Modules, one idea each:

    rope        frequencies (a table of RoPE types), pair layouts, rotation (section 1)
    applied     the rotation a RoPE function applies, read off its response to unit vectors (1)
    bound       the remainder E and its bound, term by term      (sections 3, 6)
    reference   the reference rotation m_l: zero, distance C, mean (section 6)
    split       W = f + g + E as dense matrices for one head      (sections 2-3)
    fit         the three-axis fit a_{i-j} + b_i + c_j           (sections 4-5)
    perturbation  dummy distances and moved positions: the experiments' measures (3-4)
    mask        Mask: which pairs an attention call lets through (causal, both ways, ...) (9)
    stats       the section 5 statistics, batched over heads     (section 5)
    masked      the same over any other mask: dense row blocks, both signs of the offset (9)
    statistics  their names, in the one registry every reader lists them from
    partial_rotary  a partial-rotary (MLA) head: the rotating slice's share of rc(W) (7)
    gains       learned gains after RoPE: a relative logit plus a term in i + j (8)
    spec        RopeSpec: one layer's RoPE geometry (no config read); pre/post-RoPE detection (1)
    measure     Measure: the options of one measurement (reference, pair budget, seed, ...)
    types       the array types of the signatures, each with its shape
    stats_torch the two O(N^2) parts of stats as dense torch blocks on any device
    pairing     what both share: the logits' real features, row moments, the pair plan
    intervals   t, prediction and binomial intervals and the claims' decisions
    bootstrap   percentile bootstrap of a model-wide mean over heads
    pooling     a passage's value from its heads: mean of per-head, or pooled pairs
    tolerance   the damage a word-order perturbation does to the loss (claim 1)
    intervention  the change each edit of the split makes to a head's logits
    lambda_attention  LM-Infinite's Lambda-shaped attention with its distance cap (4)
    length      the length experiment's statistics: buckets, trained ranges, shares (4)
    emergence   what watching the pattern emerge in training needs (sections 3, 5)
    synthetic   queries and keys that satisfy, ignore or violate the pattern
    schemes     word-order and position-id perturbation schemes (index arrays, no model)
    tasks       the associative-recall and fixed-offset training tasks' token batches
    threeterm   the protein paper's fit a[i-j] + b[j] + c[i]: r, log Var(a)/Var(b), CVs (4-5)
    workers     independent statistics side by side, one thread per item

Shapes::

    q, k        (N, d)       one head's pre-RoPE features (H or Hkv leading for a layer)
    theta       (P,)         P = d/2 frequencies; 0 for non-rotating pairs
    qc, kc      (N, P)       complex pairs (rope.to_pairs)
    W, f, g, E  (N, N)       only the mask's pairs are meaningful (causal: j <= i)

The public functions take a layer's geometry as one RopeSpec and their options
as one Measure: ``layer_statistics(q, k, spec, Measure(reference="mean"))``.

Imports numpy and torch, never transformers; importing the package itself loads no
module (each public name loads its own on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ropesplit.core.lazy import lazy_names

if TYPE_CHECKING:
    from ropesplit.numerics.fit import three_axis_fit
    from ropesplit.numerics.mask import Mask
    from ropesplit.numerics.measure import EXACT, Measure
    from ropesplit.numerics.partial_rotary import rotary_share
    from ropesplit.numerics.reference import Reference, mean_rotation, resolve_reference
    from ropesplit.numerics.rope import frequencies, from_pairs, rotate, to_pairs
    from ropesplit.numerics.spec import RopeSpec
    from ropesplit.numerics.split import HeadSplit, split_head
    from ropesplit.numerics.stats import HeadStats, head_statistics, layer_statistics
    from ropesplit.numerics.threeterm import cv_interval, three_term_fit, three_term_fits

# each public name, by the module that defines it: loaded on first use, so a model-free
# reader (ropesplit.claims: intervals, pooling) imports no torch
_HOMES = {
    "three_axis_fit": "fit", "Mask": "mask", "EXACT": "measure", "Measure": "measure",
    "rotary_share": "partial_rotary", "Reference": "reference", "mean_rotation": "reference",
    "resolve_reference": "reference", "frequencies": "rope", "from_pairs": "rope",
    "rotate": "rope", "to_pairs": "rope", "RopeSpec": "spec", "HeadSplit": "split",
    "split_head": "split", "HeadStats": "stats", "head_statistics": "stats",
    "layer_statistics": "stats", "cv_interval": "threeterm", "three_term_fit": "threeterm",
    "three_term_fits": "threeterm",
}  # fmt: skip


__getattr__, __dir__ = lazy_names(
    __name__, {name: f"ropesplit.numerics.{home}" for name, home in _HOMES.items()})

__all__ = [
    "EXACT",
    "Mask",
    "Measure",
    "RopeSpec",
    "HeadSplit",
    "HeadStats",
    "Reference",
    "cv_interval",
    "frequencies",
    "from_pairs",
    "head_statistics",
    "layer_statistics",
    "mean_rotation",
    "resolve_reference",
    "rotary_share",
    "rotate",
    "split_head",
    "three_axis_fit",
    "three_term_fit",
    "three_term_fits",
    "to_pairs",
]
