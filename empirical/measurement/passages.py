r"""The claims' statistics per passage in every cell of the grid, from one capture per model.

The unit of replication is the passage (``empirical.model.corpus``). Passage ``p``
is read at the longest length of the grid's ``tokens`` axis, once by each
model; a causal model's queries and keys at positions ``< L`` do not depend
on later tokens, so the first ``L`` positions of that capture *are* the
capture of the passage's first ``L`` tokens, and every length of the axis
is measured from it. An encoder's do (attention both ways, docs/theory.md section 9):
it reads the passage's first ``L`` tokens once per length ``L``, and every statistic
runs over the pairs its attention lets through (the call's mask). Three kinds of forward
pass per group of passages:

- the **trained** model at the text's positions and, in the same batch,
  with its position ids jittered by up to :data:`JITTER` (BOS and special
  tokens kept);
- the **shuffled-frequency** model: the same weights with the RoPE
  frequencies reassigned to the pairs (``shuffled.shuffled_frequencies``,
  seeded by the twin seed), at both sets of positions: the null of claim 5,
  a model whose own run still moves with the positions;
- the **random-init twin** (seed ``CONTROL_SEEDS[p mod 5]``; passages of one
  seed run together) at the text's positions.

The batches are formed from the whole run's passages (:func:`passes`), so a shard
measures each passage beside the same others as the whole run does.

Each layer's heads are measured as the layer streams past (one layer in
memory at a time; a group's passages side by side on the CPU threads). Per
head: ``r_split`` and its pair moments under each reference rotation of
the ``split`` axis (and the toolkit's mean rotation), the key-deviation
energy in the low-frequency half of the pairs, the controlled-distance key
correlation at ``D = L/2`` (fitted layers), the remainder's share of the
rotation-only change under the jitter, and the mean ``|W' - W|`` and
``|g' - g|`` between the text's run and the jittered run. A passage's value
in a cell is then an aggregate over the cell's layers and heads (mean of
per-head values, or pooled: ``numerics.pooling``); the row keeps every cell:

- ``r_split`` (``_control``, ``_shuffled``: the trained q/k with each
  layer's frequencies assigned to the pairs in a seeded order), under the
  cell's split; ``r_split_mean``: the toolkit's own split, never the paper's;
- ``lowfreq_share_k`` (``_control``, ``_shuffled``);
- ``key_corr`` (``_control``), ``visible_change`` (``_control``);
- ``g_share`` (``_shuffled``: the shuffled-frequency model's run),
  ``e_share`` (the trained model only: a secondary of claim 5).

No formula lives here: it turns captures into arrays and calls numerics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ropesplit.claims.registry import CONTROL_SEEDS, axis
from ropesplit.empirical.measurement.shuffled import ShuffledFrequencies, shuffled_frequencies
from ropesplit.empirical.model.capture import LayerCapture, Pairs, capture_batch
from ropesplit.empirical.model.corpus import PassageIds
from ropesplit.empirical.model.inputs import special_positions
from ropesplit.empirical.model.loaded import LoadedModel, default_layers
from ropesplit.numerics.pooling import MOMENTS
from ropesplit.numerics.schemes import movable_positions, perturbed_positions
from ropesplit.numerics.workers import map_each, side_by_side

__all__ = [
    "JITTER",
    "PAIR_BUDGET",
    "SPLITS",
    "TOOLKIT_SPLIT",
    "control_seed",
    "measure_passages",
    "passes",
]

JITTER = 4  # position ids move by up to this many places (claim 5)
PAIR_BUDGET = 1024  # pairs per layer (of the attention's mask) for e_share and g_share
SPLITS: tuple[str, ...] = tuple(axis("split").values)  # the grid's reference rotations
TOOLKIT_SPLIT = "mean"  # the toolkit's own best split (docs/theory.md 6); never judges the paper
# a measure's value in one cell: (the run's heads, the layers kept, pooled?, the split)
Statistic = Callable[["_Heads", Any, bool, str], float]
GROUP = 3  # passages of one twin seed measured in one batch
BATCH = 4  # passages of the trained model in one batch (each twice: text and jittered)


def control_seed(passage: int) -> int:
    """The random-init twin passage ``passage`` is paired with: seeds rotate over the corpus."""
    return CONTROL_SEEDS[passage % len(CONTROL_SEEDS)]


def passes(span: range, run: int) -> tuple[list[list[int]], list[list[int]]]:
    """The batches that measure passages ``span`` of a run of passages ``0..run-1``, as
    global passage indices: the trained model's (:data:`BATCH` passages from a multiple of
    it) and the twin groups (in each block of ``GROUP * len(CONTROL_SEEDS)`` passages from a
    multiple of it, the passages of one twin seed: :data:`GROUP` at most), each one that
    holds a passage of ``span``, whole.

    A batch is formed from the whole run, never from the shard's own list, so a passage
    is measured beside the same others whatever shard measures it (a GPU's float32
    products may differ with the batch's size). The others in a shard's batch go through
    the forward pass unmeasured.

    >>> passes(range(0, 8), 8)
    ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 5], [1, 6], [2, 7], [3], [4]])
    >>> batches, groups = passes(range(4, 8), 8)
    >>> groups
    [[0, 5], [1, 6], [2, 7], [4]]
    """
    if not span:  # a shard past the run's passages (it measures word order only)
        return [], []
    if not 0 <= span.start < span.stop <= run or span.step != 1:
        raise ValueError(f"passages {span.start}:{span.stop} are not in a run of {run}")
    batches = [list(range(lo, min(lo + BATCH, run)))
               for lo in range(span.start - span.start % BATCH, span.stop, BATCH)]  # fmt: skip
    block = GROUP * len(CONTROL_SEEDS)
    starts = range(span.start - span.start % block, span.stop, block)
    groups = []
    for seed in CONTROL_SEEDS:
        for lo in starts:
            group = [p for p in range(lo, min(lo + block, run)) if control_seed(p) == seed]
            if any(p in span for p in group):
                groups.append(group)
    return batches, groups


@dataclass
class _Heads:
    """Per-head values of one passage at one length, gathered layer by layer."""

    layer: list[np.ndarray] = field(default_factory=list)  # (H,) each: the head's layer
    values: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, layer: int, **arrays: np.ndarray) -> None:
        count = len(next(iter(arrays.values())))
        for name, x in arrays.items():
            self.values.setdefault(name, []).append(np.asarray(x, dtype=np.float64))
            self.values.setdefault("layer:" + name, []).append(np.full(count, layer))

    def get(self, name: str, mask: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """``name``'s values (concatenated over layers) of the heads ``mask(layer)`` keeps."""
        if name not in self.values:
            return np.full(0, np.nan)
        x = np.concatenate(self.values[name])
        return x[mask(np.concatenate(self.values["layer:" + name]))]


def _jittered(loaded: LoadedModel, ids: np.ndarray, seed: int) -> np.ndarray:
    """Position ids ``(N,)`` jittered by up to :data:`JITTER` (BOS and special tokens kept)."""
    n = ids.size
    movable = movable_positions(n, special_positions(loaded, ids).tolist())
    rng = np.random.default_rng([seed, 18, JITTER])
    # + JITTER keeps every id >= 0 (a common offset is invisible to RoPE)
    return perturbed_positions("jitter", n, JITTER, rng, movable).astype(np.int64) + JITTER


@dataclass(frozen=True)
class _View:
    """A captured layer beside its first ``n`` positions as pairs (:meth:`LayerCapture.pairs`)."""

    layer: LayerCapture
    pairs: Pairs

    @classmethod
    def of(cls, layer: LayerCapture, n: int) -> _View:
        return cls(layer, layer.pairs(n))


def _split_heads(v: _View, refs: Sequence[str], order: np.ndarray | None = None
                 ) -> dict[str, np.ndarray]:  # fmt: skip
    """``r_split`` and the pair moments under each of ``refs``, ``lowfreq_share_k`` and the
    low-frequency and total key-deviation energy, per query head (frequencies reassigned to the
    pairs by ``order`` when given); the split alone (``Measure.split_only``: no claim reads
    the bound's tightness or the three-axis fit)."""
    from ropesplit.numerics.emergence import deviation_energy
    from ropesplit.numerics.measure import Measure
    from ropesplit.numerics.rope import low_half
    from ropesplit.numerics.stats import layer_statistics

    spec = v.layer.spec
    if order is not None:
        spec = replace(spec, theta=tuple(spec.theta[i] for i in order))
    measure = Measure(reference=refs[0], references=tuple(refs), split_only=True)
    stats = layer_statistics(v.pairs.q, v.pairs.k, spec, measure, positions=np.arange(v.pairs.n),
                             mask=v.layer.mask)  # fmt: skip
    kv = spec.kv_heads(v.pairs.q.shape[0], v.pairs.k.shape[0])
    energy = deviation_energy(v.pairs.kc_kv)[kv]  # (H, P)
    out = {"lowfreq": np.array([s.lowfreq_share_k for s in stats]),
           "lowfreq_energy": energy @ low_half(spec.theta), "energy": energy.sum(-1),
           "n_pairs": np.array([s.n_pairs for s in stats], dtype=np.float64)}  # fmt: skip
    for ref in refs:
        out[f"r@{ref}"] = np.array([s.by_reference[ref]["r_split"] for s in stats])
        for name in MOMENTS:
            out[f"{name}@{ref}"] = np.array([s.by_reference[ref][name] for s in stats])
    return out


def _distance_heads(v: _View) -> dict[str, np.ndarray]:
    """Key correlation, its weight and the visible change at ``D = n/2``, per query head."""
    from ropesplit.numerics.perturbation import controlled_distance

    lay, z = v.layer, v.pairs
    pairs = lay.window if lay.mask is None else lay.mask  # the causal band, or the call's mask
    out = controlled_distance(z.qc, z.kc, lay.theta, lay.scale, (z.n // 2,), window=pairs,
                              measures=("key_corr", "visible_change"))  # fmt: skip
    return {"key_corr": out["key_corr"][:, 0], "key_var": out["key_var"][:, 0],
            "visible": out["visible_change"][:, 0]}  # fmt: skip


def _layer_pairs(v: _View, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """:data:`PAIR_BUDGET` pairs the layer's attention lets through (the causal pairs of a
    decoder), drawn by the passage's seed and the layer."""
    from ropesplit.numerics.perturbation import mask_pairs

    rng = np.random.default_rng([seed, v.layer.layer])
    return mask_pairs(v.pairs.n, PAIR_BUDGET, rng, v.layer.mask)


def _e_share_heads(v: _View, after: np.ndarray, seed: int) -> np.ndarray:
    """``||dE|| / ||dW||`` per query head under the jitter ``after``, same q and k."""
    from ropesplit.numerics.perturbation import remainder_change_share

    lay, z = v.layer, v.pairs
    return remainder_change_share(z.qc, z.kc, lay.theta, lay.scale, np.arange(z.n, dtype=float),
                                  after[: z.n].astype(float), _layer_pairs(v, seed))  # fmt: skip


def _g_heads(v: _View, moved: _View, after: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Mean ``|W' - W|`` and, under each split, mean ``|g' - g|`` per query head: the text's
    run against the run at positions ``after`` (each with its own q, k and mean key)."""
    from ropesplit.numerics.perturbation import run_changes
    from ropesplit.numerics.reference import resolve_reference

    lay, z, w = v.layer, v.pairs, moved.pairs
    ms = np.stack([resolve_reference(ref, lay.theta, n=z.n).m for ref in SPLITS])  # (K, P)
    dw, dg = run_changes((z.qc, z.kc, np.arange(z.n)), (w.qc, w.kc, after[: z.n]),
                         lay.theta, lay.scale, _layer_pairs(v, seed), ms=ms)  # fmt: skip
    return {"dw": dw, **{f"dg@{ref}": dg[r] for r, ref in enumerate(SPLITS)}}


@dataclass
class _Passage:
    """One passage's per-head values at each length, by model: trained, shuffled, twin."""

    index: int
    seed: int
    after: np.ndarray  # (L_max,) jittered position ids
    heads: dict[tuple[str, int], _Heads] = field(default_factory=dict)

    def at(self, model: str, n: int) -> _Heads:
        return self.heads.setdefault((model, n), _Heads())


def _trained_layer(p: _Passage, text: LayerCapture, moved: LayerCapture, n: int,
                   fitted: set[int]) -> None:  # fmt: skip
    order = np.random.default_rng([p.seed, text.layer]).permutation(len(text.theta))
    v, w = _View.of(text, n), _View.of(moved, n)
    heads = p.at("trained", n)
    heads.add(text.layer, **_split_heads(v, (*SPLITS, TOOLKIT_SPLIT)))
    p.at("analysis_shuffled", n).add(text.layer, **_split_heads(v, SPLITS, order))
    if text.layer in fitted:
        heads.add(text.layer, **_distance_heads(v))
    heads.add(text.layer, e_share=_e_share_heads(v, p.after, p.seed))
    heads.add(text.layer, **_g_heads(v, w, p.after, p.seed))


def _shuffled_layer(p: _Passage, text: LayerCapture, moved: LayerCapture, n: int) -> None:
    g = _g_heads(_View.of(text, n), _View.of(moved, n), p.after, p.seed)
    p.at("model_shuffled", n).add(text.layer, **g)


def _twin_layer(p: _Passage, text: LayerCapture, n: int, fitted: set[int]) -> None:
    v = _View.of(text, n)
    heads = p.at("twin", n)
    heads.add(text.layer, **_split_heads(v, SPLITS))
    if text.layer in fitted:
        heads.add(text.layer, **_distance_heads(v))


def _stream(loaded: LoadedModel, ids: torch.Tensor, positions: np.ndarray,
            each: Callable[[int, int, list[LayerCapture]], None], measured: Sequence[int],
            lengths: Sequence[int], null: ShuffledFrequencies | None = None) -> None:  # fmt: skip
    """:func:`_pass` of ``ids (B, N)`` at ``positions (B, N)`` for every length of
    ``lengths``: one pass of the longest for a causal model, one pass per length, of the
    first ``L`` tokens, for a model whose attention looks both ways (its q and k at
    positions ``< L`` read the later tokens too: docs/theory.md section 9)."""
    if not loaded.attn.both_ways():
        return _pass(loaded, ids, positions, each, measured, lengths, null)
    for n in sorted(lengths, reverse=True):
        _pass(loaded, ids[:, :n], positions[:, :n], each, measured, [n], null)


def _pass(loaded: LoadedModel, ids: torch.Tensor, positions: np.ndarray,
          each: Callable[[int, int, list[LayerCapture]], None], measured: Sequence[int],
          lengths: Sequence[int], null: ShuffledFrequencies | None = None) -> None:  # fmt: skip
    """One validated forward pass of ``ids (B, N)`` at ``positions (B, N)``; per layer,
    ``each(b, n, layers)`` for every ``b`` of ``measured`` and length ``n`` of ``lengths``,
    side by side, in workers even alone (``map_each``'s ``in_worker``: an item's numbers do
    not depend on how many others a shard measures); ``layers``: the batch's captures;
    ``null``: the frequency-order null in force.

    The items go longest first, so that the short ones fill the threads' last gaps: three
    passages at 512 and 256 tokens on two threads take about the time of two long items,
    against about 2.7 when each thread took a whole passage (both lengths). Each ``(b, n)``
    writes only its own cells (``_Passage.at(model, n)``), in the order it always did: the
    numbers are the same."""
    items = [(b, n) for n in sorted(lengths, reverse=True) for b in measured]

    def on_layer(layers: list[LayerCapture]) -> None:
        map_each(lambda item: each(item[0], item[1], layers), items,
                 side_by_side(layers[0].q.device), in_worker=True)  # fmt: skip

    capture_batch(loaded, ids, torch.as_tensor(positions), on_layer=on_layer, null=null)


def _every(layer: np.ndarray) -> np.ndarray:
    return np.ones(layer.shape, dtype=bool)


def _from1(layer: np.ndarray) -> np.ndarray:
    return layer >= 1


_LAYERS = {"all": _every, "from1": _from1}  # the layers axis: which heads a cell keeps


def _r_split(h: _Heads, keep: Any, pooled: bool, ref: str) -> float:
    """The mean of the heads' ``r_split``, or one correlation over their pooled pairs."""
    from ropesplit.numerics.pooling import head_mean, pooled_correlation

    if not pooled:
        return head_mean(h.get(f"r@{ref}", keep))
    counts = h.get("n_pairs", keep)
    if not counts.size:
        return float("nan")
    columns = [h.get(f"{name}@{ref}", keep) for name in MOMENTS]
    moments = [dict(zip(MOMENTS, m, strict=True)) for m in zip(*columns, strict=True)]
    return float(pooled_correlation(moments, counts))


def _lowfreq(h: _Heads, keep: Any, pooled: bool) -> float:
    """The mean of the heads' low-frequency shares, or the share of their pooled energy."""
    from ropesplit.numerics.pooling import head_mean, pooled_share

    if pooled:
        return pooled_share(h.get("lowfreq_energy", keep), h.get("energy", keep))
    return head_mean(h.get("lowfreq", keep))


def _key_corr(h: _Heads, keep: Any, pooled: bool) -> float:
    """The mean of the heads' key correlations, or weighted by their key-effect variance."""
    from ropesplit.numerics.perturbation import weighted_key_corr
    from ropesplit.numerics.pooling import head_mean

    corr, var = h.get("key_corr", keep), h.get("key_var", keep)
    if not corr.size:
        return float("nan")
    return float(weighted_key_corr(corr, var)) if pooled else head_mean(corr)


def _g_share(h: _Heads, keep: Any, pooled: bool, ref: str) -> float:
    """The mean of the heads' ``|dg| / |dW|``, or the ratio of their pooled means."""
    from ropesplit.numerics.pooling import head_mean, pooled_share

    dg, dw = h.get(f"dg@{ref}", keep), h.get("dw", keep)
    if pooled:
        return pooled_share(dg, dw)
    with np.errstate(invalid="ignore", divide="ignore"):
        return head_mean(np.where(dw > 0, dg / dw, np.nan))


def _head_mean_of(name: str) -> Statistic:
    """The mean over heads of a per-head value stored as ``name`` (no pooled form)."""

    def statistic(h: _Heads, keep: Any, pooled: bool, split: str) -> float:
        from ropesplit.numerics.pooling import head_mean

        return head_mean(h.get(name, keep))

    return statistic


@dataclass(frozen=True)
class PassageMeasure:
    """One statistic of a passage's heads: ``statistic(heads, keep, pooled, split)`` in a
    cell (``keep`` the layers, ``pooled`` the heads axis: the mean over heads or one value
    over their pooled pairs, ``split`` the reference rotation), and ``runs``: each row name
    it is stored under and the run of the passage it is measured on (the trained model, its
    random-init twin, the analysis or the model under shuffled frequencies: the nulls)."""

    statistic: Statistic
    runs: dict[str, str]


# the passages' measure vocabulary, in the order of the rows; its names are exactly
# ropesplit.claims.registry.MEASURES["passages"] (checked below, at import)
PASSAGE_MEASURES: tuple[PassageMeasure, ...] = (
    PassageMeasure(_r_split, {"r_split": "trained", "r_split_control": "twin",
                              "r_split_shuffled": "analysis_shuffled"}),
    PassageMeasure(lambda h, keep, pooled, split: _r_split(h, keep, pooled, TOOLKIT_SPLIT),
                   {"r_split_mean": "trained"}),
    PassageMeasure(lambda h, keep, pooled, split: _lowfreq(h, keep, pooled),
                   {"lowfreq_share_k": "trained", "lowfreq_share_k_control": "twin",
                    "lowfreq_share_k_shuffled": "analysis_shuffled"}),
    PassageMeasure(lambda h, keep, pooled, split: _key_corr(h, keep, pooled),
                   {"key_corr": "trained", "key_corr_control": "twin"}),
    PassageMeasure(_head_mean_of("visible"),
                   {"visible_change": "trained", "visible_change_control": "twin"}),
    PassageMeasure(_g_share, {"g_share": "trained", "g_share_shuffled": "model_shuffled"}),
    PassageMeasure(_head_mean_of("e_share"), {"e_share": "trained"}),
    PassageMeasure(lambda h, keep, pooled, split: float(h.get("lowfreq", keep).size),
                   {"n_heads": "trained"}),
)  # fmt: skip


def measure_names() -> list[str]:
    """Every row name :data:`PASSAGE_MEASURES` produces, in order."""
    return [name for m in PASSAGE_MEASURES for name in m.runs]


def _check_vocabulary() -> None:
    """The names computed here are the registry's vocabulary, no more and no fewer."""
    from ropesplit.claims.registry import MEASURES

    ours, theirs = measure_names(), MEASURES["passages"]
    if sorted(ours) != sorted(theirs):
        raise ValueError(f"passage measures {sorted(set(ours) ^ set(theirs))} are in one of "
                         "measurement.passages.PASSAGE_MEASURES and claims.registry.MEASURES only")


_check_vocabulary()


def _cells(p: _Passage, lengths: Sequence[int]) -> dict[str, dict[str, float]]:
    """Every cell's statistics of one passage (module docstring), keyed by
    ``ropesplit.claims.registry.cell_key`` over tokens, split, heads and layers: each of
    :data:`PASSAGE_MEASURES` on each run it is measured on."""
    from ropesplit.claims.registry import cell_key

    cells: dict[str, dict[str, float]] = {}
    for n in lengths:
        for layers in axis("layers").values:
            keep = _LAYERS[layers]
            for heads in axis("heads").values:
                pooled = heads == "pooled"
                for split in SPLITS:
                    key = cell_key({"tokens": n, "split": split, "heads": heads,
                                    "layers": layers}, "passages")  # fmt: skip
                    cells[key] = {name: m.statistic(p.at(run, n), keep, pooled, split)
                                  for m in PASSAGE_MEASURES
                                  for name, run in m.runs.items()}  # fmt: skip
    return cells


def measure_passages(
    loaded: LoadedModel,
    controls: dict[int, LoadedModel],
    corpus: tuple[str, PassageIds],
    span: range,
    *,
    lengths: Sequence[int],
    seed: int = 0,
    run: int | None = None,
    on_passage: Callable[[int], Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per passage ``span`` of ``corpus`` (its label and its token ids ``chosen``, at
    least the longest of ``lengths`` each), each in every cell of ``lengths`` (the module
    docstring).

    Each row: ``corpus``, ``passage`` (its index in the corpus run, so a shard measures
    exactly what the whole run would; its seeds are ``seed + passage``), ``name``,
    ``control_seed`` and ``cells``. ``run``: the run's passages ``0..run-1`` (default
    ``span.stop``), which the batches are formed from (:func:`passes`). The
    controlled-distance fits read ``model.loaded.default_layers``. ``on_passage(1)``
    follows the progress.
    """
    label, chosen = corpus
    run = span.stop if run is None else run
    batches, groups = passes(span, run)
    lengths = sorted({int(t) for t in lengths})
    if chosen.ids.shape[-1] < lengths[-1]:
        raise ValueError(f"ids hold {chosen.ids.shape[-1]} tokens, the grid needs {lengths[-1]}")
    ids = {p: torch.as_tensor(chosen.ids[p, : lengths[-1]])
           for p in sorted({p for batch in batches + groups for p in batch})}  # fmt: skip
    fitted = set(default_layers(loaded.layers))
    n = lengths[-1]
    passages = {p: _Passage(p, seed + p, _jittered(loaded, x.numpy(), seed + p))
                for p, x in ids.items()}  # fmt: skip

    def pairs_of(group: list[int]) -> tuple[torch.Tensor, np.ndarray, list[int]]:
        x = torch.stack([ids[p] for p in group])  # (B, N)
        positions = np.concatenate([np.broadcast_to(np.arange(n), x.shape),
                                    np.stack([passages[p].after for p in group])])  # fmt: skip
        mine = [b for b, p in enumerate(group) if p in span]  # the others ride along
        return torch.cat([x, x]), positions, mine  # (2B, N): the text's positions, then jittered

    for group in batches:  # the trained model: its batches
        both, positions, mine = pairs_of(group)

        def trained(b: int, n: int, got: list[LayerCapture], group: list[int] = group) -> None:
            _trained_layer(passages[group[b]], got[b], got[len(group) + b], n, fitted)

        _stream(loaded, both, positions, trained, mine, lengths)
    rows: dict[int, dict[str, Any]] = {}
    for group in groups:  # passages of one twin seed: the shuffled-frequency model, the twin
        cs = control_seed(group[0])
        both, positions, mine = pairs_of(group)
        count = len(group)

        def shuffled(b: int, n: int, got: list[LayerCapture], group: list[int] = group) -> None:
            _shuffled_layer(passages[group[b]], got[b], got[len(group) + b], n)

        def twin(b: int, n: int, got: list[LayerCapture], group: list[int] = group) -> None:
            _twin_layer(passages[group[b]], got[b], n, fitted)

        with shuffled_frequencies(loaded, cs) as null:
            _stream(loaded, both, positions, shuffled, mine, lengths, null)
        _stream(controls[cs], both[:count], positions[:count], twin, mine, lengths)
        for b in mine:
            p = passages[group[b]]
            rows[p.index] = {"corpus": label, "passage": p.index, "name": chosen.names[p.index],
                             "control_seed": cs, "cells": _cells(p, lengths)}  # fmt: skip
            p.heads.clear()
            if on_passage is not None:
                on_passage(1)
    return [rows[p] for p in span]
