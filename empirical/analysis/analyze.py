r"""The statistics of docs/theory.md section 5, measured on every head of a real model.

For each layer the captured pre-RoPE queries ``(H, N, d)`` and keys
``(Hkv, N, d)`` go through ``ropesplit.numerics.stats.layer_statistics`` with
the frequencies, scale ``s``, query-to-KV map, layout and window the capture
derived from the model itself; nothing here recomputes a statistic. Per head:

- ``r_split``: Pearson correlation of ``W`` with ``f + g`` (the paper's 0.959),
  and ``r_split_rowcentred`` on row-centred logits;
- ``r_3axis``: correlation with the model-free fit ``a_{i-j} + b_i + c_j``;
- ``remainder_share`` ``||E||_F / ||W - mean W||_F``;
- ``tightness`` ``|E_ij| / bound_ij`` (max, median; never above 1);
- ``lowfreq_share_k`` / ``_q``: share of key (query) deviation energy in the
  lower-frequency half of the pairs: the pattern training is claimed to learn.

Every head is also measured under each reference rotation of docs/theory.md
section 6 (``reference.COMPARED``: ``zero``, ``distance:256``,
``distance:1000``, ``mean``): ``by_reference`` in each row, means with
bootstrap 95% intervals over heads in the record.  ``reference`` chooses the
split every other column is measured under (default :data:`DEFAULT_REFERENCE`).

Per-layer and overall means summarise them; the same run on the same
architecture at random initialisation is the control.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ropesplit.core.errors import RopesplitError, ValidationError
from ropesplit.core.paper import PAPER_R_SPLIT
from ropesplit.empirical.model.capture import LayerCapture, capture_batch
from ropesplit.empirical.model.inputs import as_position_ids
from ropesplit.empirical.model.loaded import LoadedModel
from ropesplit.empirical.model.memory import GROWTH
from ropesplit.numerics.mask import Mask
from ropesplit.numerics.measure import KBAR_RULES, Measure
from ropesplit.numerics.reference import COMPARED
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.statistics import names
from ropesplit.numerics.workers import map_each, side_by_side

if TYPE_CHECKING:  # pragma: no cover
    from ropesplit.empirical.model.loading import Placement

__all__ = [
    "DEFAULT_MEASURE",
    "DEFAULT_REFERENCE",
    "KBARS",
    "STATISTICS",
    "Analysis",
    "analysis_record",
    "analyze",
    "analyze_pair",
    "analyze_batch",
    "analyze_capture",
    "capture_rows",
    "check_memory",
    "load_subject",
    "paired_difference",
    "reference_summary",
    "memory_estimate",
]

# the split of the columns (every reference is in by_reference anyway): the paper's own,
# reference distance 0, the same default as numerics.stats (the split that judges the
# paper is fixed before the data, not the one that scores best on it). The mean rotation, the
# toolkit's best Delta-free term (docs/theory.md 6), stays one --reference away and in by_reference.
DEFAULT_REFERENCE = "zero"
KBARS = KBAR_RULES  # the reference key: mean key, or without the first token
# what every analysis measures unless told otherwise: the paper's split, every compared
# reference beside it, the bound on every causal pair
DEFAULT_MEASURE = Measure(reference=DEFAULT_REFERENCE, references=COMPARED)

STATISTICS = names()  # every per-head statistic, in order (numerics.statistics)


@dataclass
class Analysis:
    """One model's per-head statistics on one token sequence."""

    model: str
    random_init: bool
    token_ids: list[int]
    reconstruction_max_abs_diff: float
    heads: list[dict[str, Any]]  # one row per (layer, head): ids, rope_base, STATISTICS
    seconds: dict[str, float] = field(default_factory=dict)  # "capture", "analysis"
    validation: dict[str, float] = field(default_factory=dict)  # Capture.validation(): logit level
    dtype: str = "float32"  # the model's; the statistics are float64 whatever it is
    n_tokens: int | None = None  # tokens when there are no token ids (raw q/k: analyze_qk)
    # the model's layers left out, with their kind (NoPE, linear attention, ...): the survey's
    layers_not_analysed: dict[int, str] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, float]:
        """Mean of each statistic over all heads."""
        return _means(self.heads)

    def __repr__(self) -> str:
        """One line: model, tokens, heads, split and mean r_split (not every head)."""
        split = self.heads[0]["reference"] if self.heads else "-"
        mean = self.summary.get("r_split", math.nan) if self.heads else math.nan
        tokens = self.n_tokens if self.n_tokens is not None else len(self.token_ids)
        return (f"Analysis({self.model!r}, tokens={tokens}, heads={len(self.heads)}, "
                f"reference {split}, mean r_split {mean:.3f})")  # fmt: skip

    def layer_summary(self) -> list[dict[str, float]]:
        """Mean of each statistic over the heads of each layer, in layer order."""
        layers = sorted({row["layer"] for row in self.heads})
        return [
            {"layer": layer, **_means([r for r in self.heads if r["layer"] == layer])}
            for layer in layers
        ]

    def tidy(self, *, frame: bool | None = None) -> Any:
        """One row per head, the run's metadata attached
        (:func:`ropesplit.empirical.analysis.tidy.tidy`)."""
        from ropesplit.empirical.analysis.tidy import tidy

        return tidy(self.to_dict(), frame=frame)

    @property
    def layers_analysed(self) -> list[int]:
        """The layers whose heads were measured (RoPE softmax attention), in order."""
        return sorted({int(row["layer"]) for row in self.heads})

    @property
    def summary_rope_subhead(self) -> dict[str, float] | None:
        """Multi-head latent attention: the means of :data:`SUBHEAD` over its heads (None
        for a model whose heads are whole RoPE heads)."""
        rows = [row for row in self.heads if "rotary_share" in row]
        return {name: float(np.mean([row[name] for row in rows])) for name in SUBHEAD} if rows \
            else None

    @property
    def summary_three_term(self) -> dict[str, Any] | None:
        """Heads measured both ways (an encoder's): the mean of each ``three_term_*`` field
        (arXiv 2602.20449's fit beside the split) and the coefficient of variation of
        ``log Var(a)/Var(b)`` across heads and across layers with its 95% chi-square interval
        (their formula, :func:`~ropesplit.numerics.threeterm.cv_interval`); None otherwise."""
        rows = [row for row in self.heads if "three_term_r_logits" in row]
        if not rows:
            return None
        out: dict[str, Any] = {name: float(np.mean([row[name] for row in rows]))
                               for name in rows[0] if name.startswith("three_term_")}  # fmt: skip
        layers = sorted({row["layer"] for row in rows})
        for fitted in ("logits", "probs"):
            grid = [[row[f"three_term_log_var_ratio_{fitted}"] for row in rows
                     if row["layer"] == layer] for layer in layers]  # fmt: skip
            out[f"three_term_cv_{fitted}"] = _cvs(grid)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The analysis as a JSON record (without the control)."""
        subhead, three = self.summary_rope_subhead, self.summary_three_term
        return {
            "model": self.model,
            "tokens": self.n_tokens if self.n_tokens is not None else len(self.token_ids),
            "token_ids": self.token_ids,
            "dtype": self.dtype,
            "reconstruction_max_abs_diff": self.reconstruction_max_abs_diff,
            **self.validation,
            "layers_analysed": self.layers_analysed,
            "layers_not_analysed": [{"layer": layer, "kind": kind}
                                    for layer, kind in sorted(self.layers_not_analysed.items())],
            "heads": self.heads,
            "summary": self.summary,
            **({"summary_rope_subhead": subhead} if subhead is not None else {}),
            **({"summary_three_term": three} if three is not None else {}),
            "by_reference": reference_summary(self.heads),
        }


def _cvs(grid: list[list[float]]) -> dict[str, dict[str, float]]:
    """The CV of a ``(layers, heads)`` grid of log ratios across heads (per layer, averaged)
    and across layers, each ``{cv, low, high}`` (95%); an axis of one value has none."""
    from ropesplit.numerics.threeterm import cv_interval

    x = np.asarray(grid, dtype=np.float64)
    out = {}
    for unit, axis in (("heads", 1), ("layers", 0)):
        if x.ndim == 2 and x.shape[axis] >= 2 and np.isfinite(x).all():
            ci = cv_interval(x, axis=axis)
            out[unit] = {"cv": ci.cv, "low": ci.low, "high": ci.high}
    return out


def _means(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean of each statistic over ``rows`` (NaN where a head's value is undefined)."""
    return {name: float(np.mean([row[name] for row in rows])) for name in STATISTICS}


def memory_estimate(loaded: LoadedModel, n_tokens: int, sequences: int = 1) -> int:
    r"""Bytes one streamed capture plus analysis of ``B`` sequences of ``N`` tokens needs.

    .. math:: \text{weights} + B N\,\big(4(4D + 2F) + 12\,(H + H_{kv})\,d
              + 72 H d + 24 H_{kv} d\big) + B N^2 (8 H + 8)
              + \min(B, T)\,\min(W, 4 H N^2) + 64\ \text{MiB} + G

    what the code allocates (:func:`analyze_batch`):

    - per token: the model's own activations, about four residual streams
      ``D`` and two MLP widths ``F`` in float32 (the capture's pass stops
      after the last attention: no ``(N, vocab)`` output logits), the one layer's captured
      ``q``, ``k`` in float32 and float64 (layers stream: each is measured and
      released before the next), and the statistics' float64 features of
      that layer (rotated queries and, per reference, scaled ones; rotated
      keys, deviations);
    - per pair: the eager attention's scores and probabilities ``(B, H, N,
      N)`` float32 (the logit tap holds the scores) and its masks;
    - ``W``: the bound check's ratios, a float64 per causal pair and head of
      one sequence, up to ``numerics.stats``' chunk bound, for each of the
      ``min(B, T)`` sequences measured side by side (``T``:
      :func:`ropesplit.numerics.workers.side_by_side`, torch's CPU threads; 1 on a GPU), and
      64 MiB of state.

    ``G``: the growth past the first layer that a streamed run allows before
    the C heap's free pages go back (:data:`~ropesplit.empirical.model.memory.GROWTH`,
    :func:`~ropesplit.empirical.model.capture.release_growth`): without that,
    glibc's per-thread arenas grew the process layer after layer, past this
    count.
    ``tests/empirical/test_empirical_analyze.py`` measures the peak of a run against it.
    """
    from ropesplit.empirical.adapter.configs import largest_head_shape, widths
    from ropesplit.numerics.pairing import WORK_BYTES

    analysed = [m for m, i in zip(loaded.attn.modules, loaded.attn.index, strict=True)
                if i in loaded.attn.analysed]  # fmt: skip
    n_heads, n_kv, d = largest_head_shape(loaded.config, analysed)
    width, ffn = widths(loaded.config, n_heads * d)
    weights = _weight_bytes(loaded)
    per_token = 4 * (4 * width + 2 * ffn) + 12 * (n_heads + n_kv) * d + (72 * n_heads
                                                                         + 24 * n_kv) * d
    per_pair = 8 * n_heads + 8
    work = min(sequences, side_by_side(loaded.device)) * min(WORK_BYTES, 4 * n_heads * n_tokens**2)
    return int(weights + sequences * (n_tokens * per_token + n_tokens**2 * per_pair)
               + work + 2**26 + GROWTH)  # fmt: skip


def _available_bytes(device: Any) -> int | None:
    """Free memory on ``device`` (host RAM for CPU), or None when unknown."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _weight_bytes(loaded: LoadedModel) -> int:
    return sum(p.numel() * p.element_size() for p in loaded.model.parameters())


def check_memory(loaded: LoadedModel, n_tokens: int, sequences: int = 1) -> None:
    """Raise a one-line error when ``sequences`` of ``n_tokens`` tokens would not fit in memory:
    what the run adds to the loaded model (:func:`memory_estimate` less the weights, which
    are resident already) against the memory still available on its device."""
    need = memory_estimate(loaded, n_tokens, sequences) - _weight_bytes(loaded)
    have = _available_bytes(loaded.device)
    if have is not None and need > have:
        what = f"{n_tokens} tokens" if sequences == 1 else f"{sequences} x {n_tokens} tokens"
        raise RopesplitError(
            f"{what} need about {need / 2**30:.1f} GiB of memory beside the loaded model, "
            f"only {have / 2**30:.1f} GiB available; use fewer tokens (--tokens)"
            + ("" if sequences == 1 else " or smaller batches")
        )


def analyze(loaded: LoadedModel, input_ids: Any, position_ids: Any = None, **options: Any
            ) -> Analysis:  # fmt: skip
    r"""Capture (validated) and measure every head: docs/theory.md sections 5-6 per head.

    One sequence ``input_ids (N,)`` of :func:`analyze_batch`, whose keywords
    ``options`` takes (``measure``, ``on_layer``).
    """
    import torch

    ids = torch.as_tensor(input_ids).reshape(1, -1)
    (result,) = analyze_batch(loaded, ids, position_ids, **options)
    return result


def analyze_batch(
    loaded: LoadedModel,
    input_ids: Any,
    position_ids: Any = None,
    *,
    measure: Measure = DEFAULT_MEASURE,
    on_layer: Callable[[int], Any] | None = None,
) -> list[Analysis]:
    r"""Capture (validated) and measure every head of ``B`` sequences ``input_ids (B, N)``.

    Each layer's heads go through ``numerics.stats.layer_statistics`` at once
    with the captured :class:`~ropesplit.numerics.spec.RopeSpec` (``theta``,
    ``s = scale a^2``, ``kv_map``, layout, rotary dimension, sliding window)
    and positions (``position_ids``: ``(N,)`` for all, or ``(B, N)``).
    ``measure`` (:class:`~ropesplit.numerics.measure.Measure`, default
    :data:`DEFAULT_MEASURE`) holds the options: ``reference`` sets the split of the
    columns, ``references`` the others recorded in ``by_reference``,
    ``pair_budget`` (causal pairs per head, None: every pair) and ``seed`` as
    in numerics, ``kbar_rule`` ``"mean"`` or ``"mean-skip-first"`` (the mean
    key without the first token).

    Streamed (:func:`~ropesplit.empirical.model.capture.capture_batch`): as each
    layer finishes, every sequence's heads are measured (on a CPU side by
    side, one thread each: :func:`ropesplit.numerics.workers.map_each`; the
    numbers are those of each sequence measured alone in a worker) and the
    layer's captures released, so memory holds one layer at a time
    (:func:`memory_estimate`, checked first). One :class:`Analysis` per
    sequence; ``seconds`` are the batch's (``capture``: the forward pass with
    its validation, ``analysis``: the statistics), the same in each.
    ``on_layer(1)`` after each layer of each sequence.
    """
    import torch

    ids = torch.as_tensor(input_ids)
    batch, n_tokens = (1, ids.numel()) if ids.ndim < 2 else ids.shape[:2]
    check_memory(loaded, int(n_tokens), int(batch))
    ids = ids.reshape(int(batch), int(n_tokens))
    positions = as_position_ids(ids, position_ids).numpy()  # (B, N)
    rows: list[list[dict[str, Any]]] = [[] for _ in range(int(batch))]
    spent = 0.0

    def measure_layer(layers: list[LayerCapture]) -> None:
        nonlocal spent
        tick = time.perf_counter()

        def one(b: int) -> list[dict[str, Any]]:
            return capture_rows(layers[b], positions[b], measure)

        # the sequences side by side, one thread each (stacking them as heads bought nothing)
        for b, got in enumerate(map_each(one, range(len(layers)),
                                         side_by_side(layers[0].q.device))):  # fmt: skip
            rows[b] += got
        spent += time.perf_counter() - tick
        if on_layer is not None:
            on_layer(len(layers))

    start = time.perf_counter()
    caches = capture_batch(loaded, ids, position_ids, on_layer=measure_layer)
    total = time.perf_counter() - start
    seconds = {"capture": total - spent, "analysis": spent}
    out = []
    for cache, heads in zip(caches, rows, strict=True):
        _check_bound(heads)
        out.append(Analysis(
            model=loaded.name + (" (random init)" if loaded.random_init else ""),
            random_init=loaded.random_init,
            token_ids=[int(t) for t in cache.input_ids],
            reconstruction_max_abs_diff=cache.reconstruction_max_abs_diff,
            heads=heads, seconds=dict(seconds),
            validation=cache.validation(),  # logit-level numbers and tolerances for the record
            dtype=str(loaded.model.dtype).removeprefix("torch."),
            layers_not_analysed=dict(loaded.attn.not_analysed),
        ))  # fmt: skip
    return out


def analyze_capture(
    cache: Any,
    measure: Measure = DEFAULT_MEASURE,
    *,
    shuffle_frequencies: int | None = None,
    layers: Any = None,
    on_layer: Callable[[int], Any] | None = None,
) -> list[dict[str, Any]]:
    r"""One row per head of a validated capture, measured as ``measure`` says (see
    :func:`analyze_batch`).

    ``shuffle_frequencies`` (a seed) is the frequency-order control: the
    trained queries and keys are kept and each layer's frequencies
    :math:`\theta_l` are assigned to the pairs in a seeded random order.
    ``layers`` restricts the layers (default: all).
    """
    rows: list[dict[str, Any]] = []
    for layer in cache.layers:
        if layers is not None and layer.layer not in layers:
            continue
        rows += capture_rows(layer, cache.positions.numpy(), measure,
                             shuffle_frequencies=shuffle_frequencies)  # fmt: skip
        if on_layer is not None:
            on_layer(1)
    return rows


def capture_rows(
    layer: LayerCapture,
    positions: Any,
    measure: Measure = DEFAULT_MEASURE,
    *,
    shuffle_frequencies: int | None = None,
) -> list[dict[str, Any]]:
    """:func:`layer_rows` of one captured layer under its own spec (frequencies shuffled
    by the seed ``shuffle_frequencies`` when given), on the layer's own device."""
    spec = layer.spec
    if shuffle_frequencies is not None:
        order = np.random.default_rng([shuffle_frequencies, layer.layer]).permutation(
            len(spec.theta))  # fmt: skip
        spec = replace(spec, theta=tuple(spec.theta[i] for i in order))
    if layer.q.device.type != "cpu":  # a GPU: the statistics in torch there, q and k stay
        measure = replace(measure, device=layer.q.device)
        q, k = layer.q, layer.k
    else:
        q, k = layer.q.double().numpy(), layer.k.double().numpy()
    rows = layer_rows(layer.layer, q, k, spec, measure, positions=positions,
                      rope_base=layer.rope_base, mask=layer.mask)  # fmt: skip
    if layer.mask is not None:  # attention both ways: the protein paper's fit beside the split
        from ropesplit.numerics.threeterm import three_term_heads

        fits = three_term_heads(layer.q.double().cpu().numpy(), layer.k.double().cpu().numpy(),
                                spec, positions, layer.mask)  # fmt: skip
        for row in rows:
            row |= {f"three_term_{name}": float(v[row["head"]]) for name, v in fits.items()}
    if layer.sinks is not None:  # the sink logit each head's softmax normaliser adds
        for row in rows:
            row["sink"] = float(layer.sinks[row["head"]])
    if layer.absolute_share is not None:  # learned gains after RoPE: their i + j term's share
        for row in rows:
            row["absolute_share"] = float(layer.absolute_share[row["head"]])
    if layer.shared_key:  # MLA: the RoPE sub-head beside the whole head
        q, k = layer.q.double().cpu().numpy(), layer.k.double().cpu().numpy()  # MLA: the host
        for row, extra in zip(rows, rope_subhead_rows(q, k, spec, measure, positions),
                              strict=True):  # fmt: skip
            row |= extra
    return rows


# multi-head latent attention: what is informative beside the whole head (docs/theory.md,
# "Multi-head latent attention"): the RoPE sub-head's share of the row-centred logit
# variance, and the split of the sub-head W_pe alone (its key one head shared by all)
SUBHEAD = ("rotary_share", "r_split_rope_subhead", "remainder_share_rope_subhead",
           "tightness_max_rope_subhead", "lowfreq_share_k_rope_subhead")  # fmt: skip


def rope_subhead_rows(q: np.ndarray, k: np.ndarray, spec: RopeSpec, measure: Measure,
                      positions: Any) -> list[dict[str, float]]:  # fmt: skip
    """Per query head of an MLA layer, :data:`SUBHEAD`: whole heads ``q (H, N, d)``,
    ``k (H, N, d)`` with the ``r`` rotating coordinates first, the key's shared by every
    head (the capture's ``shared_key``)."""
    from ropesplit.numerics.partial_rotary import rotary_share
    from ropesplit.numerics.stats import layer_statistics

    r = spec.rotary_dim or spec.head_dim
    share = rotary_share(q, k, spec, positions=positions)
    sub = RopeSpec.from_arrays(spec.frequencies[: r // 2], spec.scale, spec.layout, r,
                               spec.window, np.zeros(q.shape[0], dtype=np.int64))  # fmt: skip
    stats = layer_statistics(np.ascontiguousarray(q[..., :r]), np.ascontiguousarray(k[:1, :, :r]),
                             sub, replace(measure, references=()), positions=positions)
    return [{"rotary_share": float(share[h]), "r_split_rope_subhead": float(s.r_split),
             "remainder_share_rope_subhead": float(s.remainder_share),
             "tightness_max_rope_subhead": float(s.tightness_max),
             "lowfreq_share_k_rope_subhead": float(s.lowfreq_share_k)}
            for h, s in enumerate(stats)]  # fmt: skip


def layer_rows(
    layer: int,
    q: np.ndarray,
    k: np.ndarray,
    spec: RopeSpec,
    measure: Measure = DEFAULT_MEASURE,
    *,
    positions: Any,
    rope_base: float | None,
    mask: Mask | None = None,
) -> list[dict[str, Any]]:
    """One row per query head of one layer's ``q (H, N, d)``, ``k (Hkv, N, d)`` (float64
    numpy, or tensors on ``measure.device``) under ``spec``
    (``numerics.stats.layer_statistics``), over ``mask``'s pairs (None: the causal band of
    ``spec.window``): the rows of :func:`analyze_capture`."""
    from ropesplit.numerics.stats import layer_statistics

    stats = layer_statistics(q, k, spec, measure, positions=positions, mask=mask)
    kv = spec.kv_heads(q.shape[0], k.shape[0])
    pairs = str(mask or Mask.causal(spec.window))  # the pairs measured (docs/theory.md 9)
    rows = []
    for head, head_stats in enumerate(stats):
        row = {"layer": layer, "head": head, "kv_head": int(kv[head]), "rope_base": rope_base,
               "mask": pairs}
        row |= {name: float(getattr(head_stats, name)) for name in STATISTICS}
        # tightness is exact unless a pair budget asked for a sample: say which
        row |= {"n_pairs": head_stats.n_pairs, "sampled_pairs": head_stats.sampled_pairs}
        row |= {"reference": head_stats.reference, "by_reference": head_stats.by_reference}
        rows.append(row)
    return rows


def reference_summary(
    heads: list[dict[str, Any]], *, seed: int = 0, n_boot: int = 2000
) -> dict[str, dict[str, Any]]:
    """Per reference: mean ``r_split`` (and ``remainder_share``) over heads, bootstrap 95% CI.

    Heads whose value is undefined (NaN) are left out and counted in ``left_out``.
    """
    from ropesplit.numerics.bootstrap import bootstrap_ci

    out: dict[str, dict[str, Any]] = {}
    for spec in heads[0]["by_reference"] if heads else ():
        entry: dict[str, Any] = {}
        for name in ("r_split", "remainder_share"):
            values = np.array([row["by_reference"][spec][name] for row in heads])
            keep = np.isfinite(values)
            ci = bootstrap_ci(values[keep], n_boot=n_boot, seed=seed) if keep.any() else None
            entry[name] = None if ci is None else ci.as_dict()
            entry[f"{name}_left_out"] = int((~keep).sum())
        out[spec] = entry
    return out


def paired_difference(
    trained: list[dict[str, Any]],
    controls: list[list[dict[str, Any]]],
    spec: str,
    *,
    name: str = "r_split",
    seed: int = 0,
) -> dict[str, Any] | None:
    """Trained minus control per head (controls averaged over their runs), mean and 95% CI.

    Heads are paired by ``(layer, head)``; the interval is a bootstrap over heads.
    """
    from ropesplit.numerics.bootstrap import bootstrap_ci

    def key(row: dict[str, Any]) -> tuple[int, int]:
        return int(row["layer"]), int(row["head"])

    runs = [{key(row): row["by_reference"][spec][name] for row in run} for run in controls]
    diffs = []
    for row in trained:
        base = [run.get(key(row), math.nan) for run in runs]
        diffs.append(row["by_reference"][spec][name] - float(np.mean(base)))
    values = np.array(diffs)
    values = values[np.isfinite(values)]
    return bootstrap_ci(values, seed=seed).as_dict() if values.size else None


def analysis_record(trained: Analysis, control: Analysis | None, seed: int) -> dict[str, Any]:
    """The ``ropesplit analyze --json`` record: the trained model, then its control.

    The summary carries the paper's ``r_split`` and the control's means of
    ``r_split`` and ``lowfreq_share_k`` beside the model's own.
    """
    record = trained.to_dict()
    summary = record["summary"]
    summary["r_split_paper"] = PAPER_R_SPLIT
    if control is not None:
        summary["r_split_control"] = control.summary["r_split"]
        summary["lowfreq_share_k_control"] = control.summary["lowfreq_share_k"]
        record["control"] = {
            "kind": "random-init",
            "seed": seed,
            "reconstruction_max_abs_diff": control.reconstruction_max_abs_diff,
            "heads": control.heads,
            "summary": control.summary,
            "by_reference": reference_summary(control.heads, seed=seed),
            "trained_minus_control": {
                spec: paired_difference(trained.heads, [control.heads], spec, seed=seed)
                for spec in record["by_reference"]
            },
        }
    return record


def _check_bound(rows: list[dict[str, Any]]) -> None:
    """Tightness above 1 would contradict the bound: refuse rather than report it."""
    worst = max(row["tightness_max"] for row in rows)
    if math.isfinite(worst) and worst > 1.0 + 1e-9:
        raise ValidationError(f"tightness_max {worst:.6f} exceeds 1: the remainder bound failed")


def load_subject(model: Any, gguf_file: str | None = None, *, text: str | None, tokens: int,
                 seed: int = 0, memory_tokens: int | None = None, tokenizer: Any = None,
                 placement: Placement | None = None) -> tuple[LoadedModel, Any, str]:  # fmt: skip
    """What ``ropesplit analyze`` and the report's ``load`` stage read: the model
    (:func:`~ropesplit.empirical.model.loading.load_model` with ``tokenizer`` and
    ``placement``: device, dtype, device_map), the first ``tokens`` token ids ``(N,)`` of
    the text file ``text`` (None:
    Python's language reference) and the text; refuses a text or context too short, and
    a sequence of ``memory_tokens`` (default ``tokens``) beyond memory (:func:`check_memory`)."""
    import sys

    from ropesplit.empirical.model.corpus import is_fasta, read_fasta
    from ropesplit.empirical.model.loading import Placement, load_model
    from ropesplit.empirical.model.text import default_text, read_text, tokenize

    body = read_text(text) if text else default_text()
    if sys.stderr.isatty():  # progress for a person; errors stay one line for scripts
        print("loading the model ...", file=sys.stderr, flush=True)
    loaded = load_model(model, gguf_file, tokenizer=tokenizer, seed=seed,
                        placement=placement or Placement())  # fmt: skip
    if text and is_fasta(text, body):  # proteins: the first sequence of enough tokens
        body, ids = _first_sequence(loaded, read_fasta(body, f"FASTA file {text}"), tokens)
    else:
        ids = tokenize(loaded, body, tokens)  # (N,); refuses more than the context
    check_memory(loaded, memory_tokens or tokens)
    return loaded, ids, body


def _first_sequence(loaded: LoadedModel, records: list[Any], tokens: int) -> tuple[str, Any]:
    """``(sequence, ids)``: the first FASTA record with at least ``tokens`` tokens (one sequence
    is one passage: sequences are never joined), else a one-line error naming the longest."""
    from ropesplit.empirical.model.text import tokenize

    longest = 0
    for record in records:
        try:
            return record.text, tokenize(loaded, record.text, tokens)
        except RopesplitError as exc:
            if not str(exc).startswith("text has only "):
                raise
            longest = max(longest, int(str(exc).split()[3]))
    raise RopesplitError(f"no sequence of the FASTA file has {tokens} tokens (--tokens); the "
                         f"longest has {longest}")  # fmt: skip


def analyze_pair(loaded: LoadedModel, control: LoadedModel | None, ids: Any,
                 measure: Measure = DEFAULT_MEASURE, *,
                 on_layer: Callable[[int], Any] | None = None,
                 ) -> tuple[dict[str, Any], Analysis, Analysis | None]:  # fmt: skip
    """The model and its random-init ``control`` (or None) analysed on the same ``ids``
    (:func:`analyze` under ``measure``): ``(record, trained, control)``, the record
    ``ropesplit analyze --json``'s and the report's ``analyze.json``
    (:func:`analysis_record`, its seed the measure's)."""
    runs = [analyze(m, ids, measure=measure, on_layer=on_layer)
            for m in (loaded, control) if m is not None]  # fmt: skip
    trained, twin = runs[0], (runs[1] if control is not None else None)
    return analysis_record(trained, twin, measure.seed), trained, twin
