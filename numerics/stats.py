r"""The docs/theory.md section 5 statistics of a head, vectorised over the heads of a layer.

Over the causal pairs :math:`\mathcal M` (``j <= i``, and ``i - j < window``):

.. math::
    r_\mathrm{split} &= \mathrm{corr}_{\mathcal M}(W, f + g),\qquad
    \text{remainder share} = \|E\|_F / \|W - \overline W\|_F \\
    r_\mathrm{3axis} &= \mathrm{corr}_{\mathcal M}(W, \hat a_{i-j} + \hat b_i + \hat c_j),\qquad
    \text{tightness}_{ij} = |E_{ij}| / B_{ij}

Under a reference rotation :math:`m_l` (docs/theory.md section 6, ``Measure.reference``)
``g`` and ``E`` become :math:`g_m`, :math:`E_m` (:mod:`.reference`) and the
bound :math:`s\sum_l|\tilde q_l||\tilde\delta_l||e^{i\theta_l\Delta} - m_l|`;
``Measure.references`` adds ``r_split``, ``r_split_rowcentred`` and
``remainder_share`` under each further reference (``by_reference``), from the
same pass (one more block product per reference).

``r_split_rowcentred`` is the same correlation after subtracting each row's
mean over its causal pairs from both sides (what softmax can see).
``lowfreq_share`` is the share of deviation energy
:math:`\sum_j|\tilde\delta_{jl}|^2` in the lower-frequency half of the pairs
(pairs sorted by :math:`\theta`, non-rotating ones lowest; with an odd number
of pairs the middle one counts half), for keys about ``kbar`` and for
queries about their mean.

How it is computed (all float64):

- ``W / s = a . y`` and ``E_m / s = a . b - u . delta`` are bilinear in real
  features (``a = R q``, ``y = R k``, ``b = R delta``, ``u = q m``), and
  ``f + g = W - E``.  The split statistics need only the sums over rows of
  :math:`\sum_j W^2`, :math:`\sum_j W E` and :math:`\sum_j E^2` over each
  row's pairs, plus row sums: with no window, the columns before a block of
  :data:`.pairing.BLOCK_ROWS` rows give, summed over the block, inner products of
  prefix sums of the key features' outer products with the block's own
  (``O(N P^2)``, matrix products, the same work for any number of references),
  and the block's own triangle is a compiled pair loop; with a window the
  compiled loop takes the whole band.  No ``(N, N)`` matrix is formed.
- ``r_3axis`` needs only the masked diagonal, row and column sums of ``W``
  (:mod:`.fit`: ``O(N)`` normal equations solved to convergence, cached per
  ``(N, window)``); its correlation is :math:`\sqrt{x^\top A^\top w / \|w\|^2}`
  for the centred logits ``w``.
- the bound is the only ``N^2 P`` term: ``E`` and ``B`` are evaluated term by
  term (:mod:`.bound`) and compared with the tolerance of
  :func:`.bound.violations`: compiled, one fused loop per pair, when
  positions are whole numbers of a step (every unperturbed sequence): a
  float32 screen of every pair, then float64 for the pairs that could be the
  largest ratio, the median or a violation (:func:`_screened_summary`, the
  numbers of :func:`.bound.causal_ratios` on every pair); in row chunks of
  batched tensors otherwise.
  Pairs with ``B = 0`` are left out of the tightness ratio (their ``E`` is
  0, else they count as violations); the median is selected exactly inside a
  bracket read off a sample (:func:`_order_statistics`), not by sorting.  The
  check is exact over every causal pair unless asked otherwise: when
  ``pair_budget`` (a number of causal pairs per head) is given and smaller
  than the number of causal pairs, the tightness and the violation count
  come from a seeded uniform sample of ``pair_budget`` pairs and
  ``sampled_pairs`` says how many; every other statistic stays exact.
- with ``Measure.device`` everything above runs in torch on that device
  (:mod:`.stats_torch`: the same prefix sums, the bound fused pair by pair),
  the features built there from ``q`` and ``k`` as given.

Shapes::

    q       (H, N, d)     pre-RoPE queries of the layer's query heads
    k       (Hkv, N, d)   pre-RoPE keys; query head h reads k[kv_map[h]]
    theta   (d/2,)        frequencies, 0 for non-rotating pairs
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import _inputs, masked, pairing
from ropesplit.numerics.bound import (
    RTOL,
    CausalPairs,
    pair_ratios,
    remainder_and_bound,
    violations,
)
from ropesplit.numerics.fit import BandGram, band_gram, mask_gram
from ropesplit.numerics.mask import Mask, causal_window
from ropesplit.numerics.measure import EXACT, Measure
from ropesplit.numerics.pairing import (
    BoundCheck,
    Factors,
    Moments,
    pair_indices,
    pair_plan,
    prefix_moments,
    real_pairs,
)
from ropesplit.numerics.reference import Reference, canonical, resolve_reference
from ropesplit.numerics.rope import check_rotary_dim, low_half, pair_coordinates, to_pairs
from ropesplit.numerics.spec import RopeSpec, as_spec, layer_inputs
from ropesplit.numerics.types import (
    HeadFeatures,
    KeyMean,
    LayerKeyMeans,
    LayerKeys,
    LayerQueries,
    Positions,
)
from ropesplit.numerics.workers import serial

__all__ = ["HeadStats", "head_statistics", "layer_statistics", "row_moments", "tightness"]

_SAMPLE_CHUNK = 512  # sampled pairs per batched bound evaluation (all heads at once)
_EXACT_CHUNK = 2**19  # (head, pair, frequency) terms per chunk of the exact bound check
_MEDIAN_SAMPLE = 4096  # values read to bracket a median before the exact selection
_ROUNDING = 1e-12  # a sum of squares about a mean below this share of the raw one is rounding


@dataclass(frozen=True)
class HeadStats:
    """docs/theory.md section 5 for one head; plain Python numbers (NaN where undefined)."""

    r_split: float  # corr(W, f + g) over causal pairs
    r_split_rowcentred: float  # the same after removing each row's mean
    r_3axis: float  # corr(W, least-squares a_{i-j} + b_i + c_j)
    remainder_share: float  # ||E||_F / ||W - mean W||_F
    tightness_max: float  # max |E| / bound over pairs with bound > 0
    tightness_median: float  # median of the same
    lowfreq_share_k: float  # key-deviation energy in the low-frequency half
    lowfreq_share_q: float  # query-deviation energy in the low-frequency half
    n_pairs: int  # pairs of the mask (causal pairs by default)
    sampled_pairs: int | None  # pairs in the tightness sample; None when exact
    violations: int  # pairs with |E| above the bound (checked pairs)
    reference: str = "zero"  # the reference rotation of every field above
    by_reference: dict[str, dict[str, float]] = field(default_factory=dict)  # spec -> r_split,
    # r_split_rowcentred, remainder_share under each reference asked for (and this one)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return asdict(self)


def head_statistics(
    q: HeadFeatures,
    k: HeadFeatures,
    spec: RopeSpec,
    measure: Measure = EXACT,
    *,
    positions: Positions = None,
    kbar: KeyMean | None = None,
    mask: Mask | None = None,
) -> HeadStats:
    r"""The section 5 statistics of one head: ``q, k (N, d)``; see :func:`layer_statistics`.

    .. math:: W_{ij} = f(q_i, \Delta_{ij}) + g(q_i, k_j) + E_{ij},\quad
              \Delta_{ij} = p_i - p'_j,\ j \le i

    >>> import numpy as np
    >>> q, k = np.random.default_rng(0).normal(size=(2, 64, 8))
    >>> st = head_statistics(q, k, RopeSpec.from_base(8, 10000.0))
    >>> st.n_pairs, st.violations, st.tightness_max <= 1
    (2080, 0, True)
    """
    q = _inputs.as_float64("q", q, 2)
    k = _inputs.as_float64("k", k, 2)
    kb = None if kbar is None else _inputs.as_float64("kbar", kbar, 1)[None]
    one = replace(as_spec(spec, q.shape[-1]), kv_map=(0,))
    return layer_statistics(q[None], k[None], one, measure, positions=positions, kbar=kb,
                            mask=mask)[0]


def layer_statistics(
    q: LayerQueries,
    k: LayerKeys,
    spec: RopeSpec,
    measure: Measure = EXACT,
    *,
    positions: Positions = None,
    kbar: LayerKeyMeans | None = None,
    mask: Mask | None = None,
) -> list[HeadStats]:
    r"""The section 5 statistics of every query head of a layer, batched.

    ``q (H, N, d)`` and ``k (Hkv, N, d)`` are pre-RoPE (numpy or CPU torch);
    ``spec`` is the layer's geometry (frequencies, scale, layout, rotary dim,
    window; head ``h`` reads KV head ``spec.kv_heads(H, Hkv)[h]``, grouped-query
    attention's ``h // (H / Hkv)`` unless the spec maps them); ``positions``
    is ``(N,)`` or ``(positions_q, positions_k)`` (default ``0..N-1``);
    ``kbar (Hkv, d)`` is each KV head's reference key (default: the
    ``measure.kbar_rule`` mean).  ``measure`` (:class:`~.measure.Measure`)
    holds the options: ``reference`` (``"zero"``, ``"distance:C"``, ``"mean"``
    over this layer's causal pairs, docs/theory.md section 6) sets the split of
    every field; ``references`` adds ``r_split``, ``r_split_rowcentred`` and
    ``remainder_share`` under each of those specs (``by_reference``, which also
    holds ``reference``'s own); ``pair_budget`` is the number of causal pairs
    per head whose bound is checked (None: every pair; a smaller number: a
    sample of that many fixed by ``seed``, reported as ``sampled_pairs``);
    ``device`` (None: the compiled CPU path) runs everything in torch on that device
    (:mod:`.stats_torch`: CUDA where the model sits on a GPU): ``q`` and ``k`` may be
    tensors there, the features, row moments (prefix sums), FFT band sums, the
    three-axis fit's right side and the fused bound check stay there, and only the
    per-head sums come back; the same numbers to float64 rounding (1e-12 relative on
    the golden fixture, tests/numerics/test_golden.py).  ``mask``
    (:class:`~.mask.Mask`, None: the causal pairs within ``spec.window``) says which pairs
    every statistic runs over: a causal band by the prefix sums, any other mask (both
    ways, blocks, padding; docs/theory.md section 9) by :mod:`.masked`, the mean reference
    then over the mask's offsets of both signs.

    .. math:: E_{ij} = s\,\big(\langle R(p_i)q_i, R(p'_j)\delta_j\rangle
                               - \langle q_i, \delta_j\rangle\big)
    """
    device = getattr(measure, "device", None)  # (a geometry given loose fails just below)
    dev = None if device is None else torch.device(device)
    q, k, spec, kv = layer_inputs(q, k, spec, device=dev)  # tensors on dev when one is given
    (h, n, d), th = q.shape, spec.frequencies
    mask = _layer_mask(mask, spec.window)
    pq, pk = _inputs.check_positions(positions, n)
    if kbar is None:
        kbar = measure.rule_kbar(k)  # (Hkv, d), or None: each KV head's mean key below
    w, allowed, refs = _pairs_and_references(mask, measure, th, pq, pk)
    qc, kc = (_pairs(x, spec.layout, spec.rotary_dim) for x in (q, k))  # (H, N, P), (Hkv, N, P)
    dc = _key_deviations(kc, kbar, d, spec)  # (Hkv, N, P) delta~
    low_k = _lowfreq_share(_energy(dc), th)[kv]  # (H,)
    low_q = _lowfreq_share(_energy(qc - qc.mean(1, keepdim=True)), th)  # (H,)
    layer = _Pairs(qc, kc, dc, kv, th, pq, pk, w, allowed, None if allowed is None else mask)
    sums = _logit_sums(layer, [None if r.is_zero else r.m for r in refs], dev,
                       three_axis=not measure.split_only)  # fmt: skip
    gram = band_gram(n, w) if allowed is None else mask_gram(n, mask)
    if measure.split_only:  # no bound check, no three-axis fit (Measure.split_only)
        tight: list[tuple[float, float, int | None, int]] = [(math.nan, math.nan, 0, 0)] * h
        fit_share = np.full(h, math.nan)
    else:
        tight = _bound_tightness(layer, spec.scale, refs[0], measure, dev)  # one per head
        fit_share = _fit_share(sums, gram)
    out = []
    for i in range(h):
        tww = sums["tww"][i]
        split = {ref.name: _split_stats(sums, r, i, spec.scale, gram.pairs)
                 for r, ref in enumerate(refs)}  # fmt: skip
        primary = split[refs[0].name]
        out.append(HeadStats(
            **{key: primary[key] for key in ("r_split", "r_split_rowcentred", "remainder_share")},
            r_3axis=_corr(fit_share[i], tww, fit_share[i]),
            tightness_max=tight[i][0], tightness_median=tight[i][1],
            lowfreq_share_k=float(low_k[i]), lowfreq_share_q=float(low_q[i]),
            n_pairs=gram.pairs, sampled_pairs=tight[i][2], violations=tight[i][3],
            reference=refs[0].name, by_reference=split,
        ))  # fmt: skip
    return out


def _layer_mask(mask: Mask | None, window: int | None) -> Mask:
    """The mask a layer is measured over: ``mask``, or the causal pairs within the spec's
    ``window``; a mask and a window that disagree are refused."""
    if mask is None:
        return Mask.causal(window)
    if not isinstance(mask, Mask):
        raise RopesplitError(f"mask must be a Mask, got {type(mask).__name__}")
    if window is not None and not (mask.is_causal_band and mask.window == window):
        raise RopesplitError(f"the spec's window ({window}) and the mask ({mask}) disagree: "
                             "give the window on one of them")  # fmt: skip
    return mask


def _pairs_and_references(mask: Mask, measure: Measure, theta: np.ndarray, pq: np.ndarray,
                          pk: np.ndarray) -> tuple[int | None, np.ndarray | None, list[Reference]]:
    """``(window, allowed, references)``: a causal band's window and no pair matrix, or any
    other mask's ``(N, N)`` pairs (a mask that lets none through is refused); the references
    of the split, the primary first, ``mean`` over the pairs measured."""
    n = pq.size
    if mask.is_causal_band:
        window, allowed = mask.window, None
        pairs_at: dict[str, Any] = {"n": n, "window": window, "positions": (pq, pk)}
    else:
        window, allowed = None, mask.allowed(n)
        if not allowed.any():
            raise RopesplitError(f"the mask ({mask}) lets no pair through on {n} tokens")
        pairs_at = {"distances": pq[:, None] - pk[None, :], "mask": allowed}
    refs = [resolve_reference(name, theta, **pairs_at)
            for name in _unique([measure.reference, *measure.references])]  # fmt: skip
    return window, allowed, refs


def _key_deviations(kc: torch.Tensor, kbar: Any, d: int, spec: RopeSpec) -> torch.Tensor:
    r"""The key deviations :math:`\tilde\delta_j = \tilde k_j - \tilde{\bar k}` ``(Hkv, N, P)``
    of the key pairs ``kc (Hkv, N, P)``: ``kbar (Hkv, d)`` each KV head's reference key,
    None its mean key."""
    hkv = kc.shape[0]
    if kbar is None:
        kbc = kc.mean(1, keepdim=True)  # (Hkv, 1, P)
    else:
        kb = _inputs.as_float64("kbar", kbar, 2)
        if kb.shape != (hkv, d):
            raise RopesplitError(f"kbar must have shape ({hkv}, {d}), got {kb.shape}")
        kbc = _pairs(kb, spec.layout, spec.rotary_dim)[:, None, :].to(kc.device)  # (Hkv, 1, P)
    return kc - kbc


def _bound_tightness(
    layer: _Pairs, s: float, ref: Reference, measure: Measure, dev: torch.device | None
) -> list[tuple[float, float, int | None, int]]:
    r"""Per head :func:`tightness` of :math:`|E_{ij}| / B_{ij}` under the reference ``ref``:
    the compiled kernels on the CPU (they read numpy arrays: CPU tensors, no copy), else
    :mod:`.stats_torch` on ``dev``; ``measure``'s pair budget and seed."""
    qc, dc, kv = layer.qc, layer.dc, layer.kv
    th, pq, pk, w = layer.theta, layer.pq, layer.pk, layer.window
    gap = None if ref.is_zero else ref.one_minus
    if layer.allowed is not None:  # any other mask: every pair it allows, both signs
        check = BoundCheck(qc.cpu().numpy(), dc[torch.from_numpy(kv).to(dc.device)].cpu().numpy(),
                           th, pq, pk, s, None, gap)  # fmt: skip
        budget = measure.pair_budget
        every = budget is None or budget >= int(layer.allowed.sum())
        band = masked.band_ratios(check, layer.mask) if every and layer.mask else None
        if band is not None:  # a band, whole steps: compiled, both signs (masked.band_ratios)
            return [_summary(r, None, b) for r, b in zip(*band, strict=True)]
        ratios, bad, sampled = masked.mask_ratios(check, layer.allowed, budget, measure.seed)
        return [_summary(r, sampled, b) for r, b in zip(ratios, bad, strict=True)]
    if dev is None:
        check = BoundCheck(qc.numpy(), dc[kv].numpy(), th, pq, pk, s, w, gap)
        return tightness(check, measure.pair_budget, measure.seed)
    from ropesplit.numerics import stats_torch

    check = BoundCheck(qc, dc[torch.from_numpy(kv).to(dev)], th, pq, pk, s, w, gap)
    return stats_torch.tightness(check, measure.pair_budget, measure.seed, dev)


def _fit_share(sums: dict[str, Any], gram: Any) -> np.ndarray:
    r"""``(H,)`` :math:`\|\hat a_{i-j} + \hat b_i + \hat c_j - \mu\|^2`: the centred logits'
    sum of squares the three-axis fit explains, from ``sums["rhs"] (K, H)`` (:func:`_logit_sums`)
    and the band's normal equations ``gram`` (:func:`.fit.band_gram`)."""
    # (K, H); a head whose logits have no spread has no fit (its sums are rounding noise)
    # solved for the unit right side and scaled back (the fit is linear in it): logits
    # near the underflow range (1e-160) would otherwise stall the iteration in subnormals
    if gram.n_a == 1:  # a window of 1: each pair alone in its row and column, b_i + c_i
        return np.asarray(sums["tww"], dtype=np.float64)  # fits it exactly (a null
        # space of N directions b_i - c_i, which rounding in the sums would excite)
    rhs = np.where(sums["tww"] > 0, sums["rhs"], 0.0)  # (K, H)
    norm = np.linalg.norm(rhs, axis=0)  # (H,)
    unit = rhs / np.where(norm > 0, norm, 1.0)
    x, _ = gram.solve(unit)
    return np.maximum((x * unit).sum(0), 0.0) * norm**2  # (H,) ||fit - mean||^2


def _unique(names: list[str | Reference]) -> list[str | Reference]:
    """References in order, each once (``distance:256.0`` is ``distance:256``)."""
    seen, out = set(), []
    for name in names:
        key = name.name if isinstance(name, Reference) else canonical(name)
        if key not in seen:
            seen.add(key)
            out.append(name)
    return out


def _split_stats(sums: dict[str, Any], r: int, i: int, s: float, n: int) -> dict[str, float]:
    """The split statistics of head ``i`` under reference ``r``, and its pair moments.

    Moments over the ``n`` causal pairs, in logit units: ``w_mean, w_var``
    (of ``W``), ``fg_mean, fg_var`` (of ``f + g``), ``w_fg_cov``: what
    :func:`.pooling.pooled_correlation` combines across heads.
    """
    tww, cww = sums["tww"][i], sums["cww"][i]
    twe, tee, cwe, cee, e_sq = (sums[key][r][i] for key in ("twe", "tee", "cwe", "cee", "e_sq"))
    mean_w, mean_e = float(sums["mean_w"][i]), float(sums["mean_e"][r][i])
    fg_sq = 2 * (sums["w_sq"][i] + e_sq)  # bounds the raw sum of squares of f + g = W - E
    tff = float(_resolved(tww - 2 * twe + tee, fg_sq))
    cff = float(_resolved(cww - 2 * cwe + cee, fg_sq))
    return {
        "r_split": _corr(tww - twe, tww, tff),
        "r_split_rowcentred": _corr(cww - cwe, cww, cff),
        "remainder_share": math.sqrt(e_sq / tww) if tww > 0 else math.nan,
        "w_mean": s * mean_w, "w_var": float(s * s * tww / n),
        "fg_mean": s * (mean_w - mean_e), "fg_var": float(s * s * tff / n),
        "w_fg_cov": float(s * s * (tww - twe) / n),
    }  # fmt: skip


def _resolved(x: Any, raw: Any) -> Any:
    r"""A sum of squares about a mean, 0 where it is within rounding of 0 (:data:`_ROUNDING`).

    It is computed as :math:`S - 2\mu R + n\mu^2` from the raw sum of squares
    ``raw`` (:math:`S`), whose rounding error is a few ulps of ``raw``; below
    that it is no spread at all, and the statistic dividing by it is NaN.
    """
    return np.where(np.asarray(x) > _ROUNDING * np.asarray(raw), x, 0.0)


def _corr(cov: float, var_a: float, var_b: float) -> float:
    """``cov / sqrt(var_a var_b)`` as a float, NaN when a variance is 0."""
    den = math.sqrt(max(var_a, 0.0)) * math.sqrt(max(var_b, 0.0))  # no underflow of the product
    return float(min(max(cov / den, -1.0), 1.0)) if den > 0 else math.nan


def _energy(z: torch.Tensor) -> torch.Tensor:
    """``|z|^2`` of complex pairs, as ``Re^2 + Im^2`` (no square root)."""
    return torch.view_as_real(z).square().sum(-1)


def _lowfreq_share(energy: torch.Tensor, theta: np.ndarray) -> np.ndarray:
    r"""Share of ``energy (..., N, P)`` (summed over tokens) in the lower-frequency half of pairs.

    .. math:: \sum_{l \in \mathrm{low}} e_l \Big/ \sum_l e_l,\quad
              \mathrm{low} = \text{the } \lfloor P/2\rfloor \text{ smallest } \theta_l
              \ (+\tfrac12 \text{ the middle one when } P \text{ is odd})

    The token sum runs where ``energy`` lives; the ``(..., P)`` sums come to the host.
    """
    per_pair = energy.sum(-2).cpu().numpy()  # (..., P)
    weight = low_half(theta)  # (P,)
    total = per_pair.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (per_pair @ weight) / total, np.nan)


@dataclass(frozen=True)
class _Pairs:
    """One layer's complex pairs (torch, on one device) and what places them."""

    qc: torch.Tensor  # (H, N, P) queries
    kc: torch.Tensor  # (Hkv, N, P) keys
    dc: torch.Tensor  # (Hkv, N, P) key deviations from kbar
    kv: np.ndarray  # (H,) the KV head each query head reads
    theta: np.ndarray  # (P,)
    pq: np.ndarray  # (N,) query positions
    pk: np.ndarray  # (N,) key positions
    window: int | None  # the causal band's window (None: every earlier key, or a mask)
    allowed: np.ndarray | None = None  # (N, N) the pairs of any mask but a causal band
    mask: Mask | None = None  # that mask


def _pairs(x: Any, layout: str, rotary_dim: int | None) -> torch.Tensor:
    """``(..., d)`` float64 -> ``(..., P)`` complex128 pairs (:func:`.rope.to_pairs`): built in
    torch where ``x`` is a tensor (on its device), else numpy's own as a CPU tensor."""
    if not isinstance(x, torch.Tensor):
        return torch.from_numpy(np.ascontiguousarray(to_pairs(x, layout, rotary_dim)))
    d = x.shape[-1]
    re, im = (torch.from_numpy(i).to(x.device)
              for i in pair_coordinates(d, check_rotary_dim(d, rotary_dim), layout))  # fmt: skip
    return torch.complex(x.index_select(-1, re), x.index_select(-1, im))


def _turn(z: torch.Tensor, positions: np.ndarray, theta: np.ndarray) -> torch.Tensor:
    r"""``z (..., N, P)`` turned by :math:`e^{i p_n \theta_l}`, its table ``(N, P)`` built on the
    host in numpy and moved to ``z``'s device."""
    return z * torch.from_numpy(np.exp(1j * positions[:, None] * theta)).to(z.device)


def _band_rows(
    xs: list[torch.Tensor] | torch.Tensor, y: torch.Tensor, window: int | None, heads: torch.Tensor
) -> list[torch.Tensor]:
    r"""Row sums :math:`\sum_{j \in \mathcal M_i} x_i\cdot y_j` over the band, ``x (H, N, c)`` each
    (a list, or a stacked ``(M, H, N, c)``).

    One prefix sum of ``y (Hkv, N, c)`` (query head ``h`` reads ``y[heads[h]]``)
    serves every ``x``; each returned sum is ``(H, N)``.
    """
    n = y.shape[1]
    if window is None:  # row i: columns 0 .. i
        band = y.cumsum(1)[heads]
    else:
        lo = torch.from_numpy(band_gram(n, window).first_col).to(y.device)  # columns lo_i .. i
        cy = torch.cat([y.new_zeros(y.shape[0], 1, y.shape[2]), y.cumsum(1)], 1)  # (Hkv, N+1, c)
        band = (cy[:, 1:] - cy[:, lo])[heads]
    return [torch.linalg.vecdot(x, band) for x in xs]


def _band_sums(
    x: torch.Tensor, y: torch.Tensor, window: int | None, heads: torch.Tensor, device: Any = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Row, column and diagonal sums of :math:`M = x y^\top` over the band, without ``M``.

    ``x (H, N, c)``, ``y (Hkv, N, c)`` with query head ``h`` reading
    ``y[heads[h]]`` (prefix sums and transforms of ``y`` are taken once per KV
    head); returns ``(rows (H, N), cols (H, N), diags (H, n_a))``:

    .. math:: \sum_{j \in \mathcal M_i} x_i\cdot y_j,\quad
              \sum_{i \in \mathcal M^j} x_i\cdot y_j,\quad \sum_i x_i\cdot y_{i-D}

    by prefix sums (rows, columns) and a zero-padded FFT cross-correlation
    (diagonals): ``O(N c log N)`` instead of ``O(N^2 c)``; numpy's on the host,
    torch's where ``x`` and ``y`` are when ``device`` is given.
    """
    h, n, c = x.shape
    gram = band_gram(n, window)
    (rows,) = _band_rows([x], y, window, heads)
    if window is None:  # column j: rows j .. N-1, a suffix sum
        cols = torch.linalg.vecdot(y[heads], x.flip(1).cumsum(1).flip(1))  # (H, N)
    else:
        hi = torch.from_numpy(gram.last_row + 1).to(x.device)  # column j: rows j .. hi_j - 1
        cx = torch.cat([x.new_zeros(h, 1, c), x.cumsum(1)], 1)  # (H, N + 1, c)
        cols = torch.linalg.vecdot(y[heads], cx[:, hi] - cx[:, :-1])  # (H, N)
    length = 2 * n  # zero padding: no circular wrap for lags 0 .. N-1
    if device is not None:  # vecdot conjugates its first argument: sum_c conj(Y) X
        fy = torch.fft.rfft(y, length, dim=1)[heads]  # (H, N + 1, c)
        spec = torch.linalg.vecdot(fy, torch.fft.rfft(x, length, dim=1))
        return rows, cols, torch.fft.irfft(spec, length, dim=1)[:, : gram.n_a].contiguous()
    # on the CPU numpy's FFT (faster than torch's there: benchmarks/bench_numerics.py)
    fy = np.fft.rfft(y.numpy(), length, axis=1).conj()[heads.numpy()]  # (H, N + 1, c)
    spec = np.einsum("hfc,hfc->hf", np.fft.rfft(x.numpy(), length, axis=1), fy)
    diags = np.fft.irfft(spec, length, axis=1)[:, : gram.n_a]  # (H, n_a) sum_i x_i . y_{i-D}
    return rows, cols, torch.from_numpy(np.ascontiguousarray(diags))


def _logit_sums(
    layer: _Pairs, refs: list[np.ndarray | None], device: Any = None, *, three_axis: bool = True
) -> dict[str, Any]:
    r"""Masked second moments of ``W / s`` and ``E_m / s`` per head, and the three-axis right side.

    Per head: ``tww`` and ``cww`` (sums of squares of ``W`` about the masked
    mean, about each row's mean); per reference ``m`` of ``refs`` (``None``
    for :math:`m_l = 1`) lists of ``twe, tee, cwe, cee`` and ``e_sq``
    (:math:`\|E_m\|_F^2`); and ``rhs (K,)``: the distance, row and column sums
    of the centred ``W`` (without ``three_axis``: not formed, no ``rhs``).  The scale ``s``
    cancels from every statistic, so it is left out.  Both are bilinear in real features,

    .. math:: W_{ij} = a_i\cdot y_j,\qquad E^m_{ij} = a_i\cdot b_j - u^m_i\cdot\delta_j,
              \qquad a = Rq,\ y = Rk,\ b = R\delta,\ u^m = q\,m

    (pairs with :math:`\theta_l = 0` and every :math:`m_l = 1` have no share
    in ``E`` and are left out of it exactly).  Each row's raw moments
    :math:`S^{WW}_i = \sum_j W_{ij}^2`, :math:`S^{WE}_i`, :math:`S^{EE}_i`
    come from :func:`row_moments` (no ``(N, N)`` matrix), and are centred
    with the row sums :math:`R_i` and the masked means. Everything runs where
    ``layer``'s tensors are (``device`` None: the CPU, compiled moments and numpy's FFT);
    only the per-head sums come back to the host:

    .. math:: \sum_j (W_{ij} - \mu_W)(E_{ij} - \mu_E) = S^{WE}_i - \mu_E R^W_i - \mu_W R^E_i
              + n_i\mu_W\mu_E
    """
    n, window = layer.qc.shape[1], layer.window
    factors = _features(layer, refs)
    if layer.allowed is not None:  # any mask but a causal band: dense row blocks
        dense = masked.mask_sums(factors, layer.allowed)
        pairs = float(dense.counts[1].sum())
        band = _BandTotals(dense.row_w, dense.row_e, dense.row_w.sum(-1) / pairs,
                           [r.sum(-1) / pairs for r in dense.row_e], dense.col_w, dense.diag_w)
        counts = tuple(torch.from_numpy(c).to(layer.qc.device) for c in dense.counts)
        return _sums_of(dense.moments, band, counts, dense.products, factors.a.shape[-1],
                        three_axis)
    gram = band_gram(n, window)
    heads = torch.from_numpy(layer.kv).to(layer.qc.device)
    counts = tuple(torch.from_numpy(v).to(layer.qc.device)
                   for v in (gram.count_a, gram.count_b, gram.count_c))  # fmt: skip
    band = _band_totals(factors, window, gram, heads, device, three_axis)
    whole = window is None or window >= n  # then every row sees all columns before it
    moments = _raw_moments(factors, None if whole else window, device)
    a, y = factors.a, factors.y
    (products,) = _band_rows([(a * a).sum(-1, keepdim=True)], (y * y).sum(-1, keepdim=True),
                             window, heads)  # fmt: skip  # (H, N) sum_j |a_i|^2 |y_j|^2
    return _sums_of(moments, band, counts, products, a.shape[-1], three_axis)


def _sums_of(moments: Moments, band: _BandTotals, counts: tuple[torch.Tensor, ...],
             products: torch.Tensor, width: int, three_axis: bool) -> dict[str, Any]:  # fmt: skip
    r""":func:`_logit_sums`' result from the raw row moments, the row (column, offset) sums
    and ``counts`` (pairs per offset, row, column; ``width`` the features' ``c``),
    whichever algorithm summed them:
    centred about the masked means (:class:`_Centred`), summed per head
    (:func:`_head_sums`), and the three-axis fit's right side."""
    count_a, count_b, count_c = counts
    centred = _Centred.of(moments, band, count_b)
    # each logit is a product of rotated features, rounded to within (c + 4) u |a_i||y_j|:
    # a head whose logits all lie within that of 0 has none to speak of (no spread, NaN)
    res = _head_sums(moments, centred, count_b, products, width)
    res["mean_w"] = band.mean_w.cpu().numpy()
    res["mean_e"] = [m.cpu().numpy() for m in band.mean_e]
    if three_axis:
        assert band.col_w is not None and band.diag_w is not None
        rhs = torch.cat([band.diag_w - band.mean_w[:, None] * count_a, centred.row_w,
                         band.col_w - band.mean_w[:, None] * count_c], -1)  # (H, K)  # fmt: skip
        res["rhs"] = rhs.T.contiguous().cpu().numpy()  # (K, H): the three-axis fit's input
    return res


def _features(layer: _Pairs, refs: list[np.ndarray | None]) -> Factors:
    r"""The real features of :math:`W = a\cdot y` and :math:`E_m = a\cdot b - u^m\cdot\delta`
    (:class:`.pairing.Factors`): :math:`a = R q`, :math:`y = R k`, :math:`b = R\delta`, and
    :math:`\delta` itself, zero in the pairs where every :math:`E_m` is (:math:`\theta_l = 0`
    and every :math:`m_l = 1`: ``refs``, None for :math:`m_l = 1`)."""
    theta, dev = layer.theta, layer.qc.device
    ms = [np.ones(theta.size) if m is None else np.asarray(m) for m in refs]
    silent = (theta == 0) & np.logical_and.reduce([m == 1 for m in ms])  # E_m = 0 there, all m
    de = layer.dc.masked_fill(torch.from_numpy(silent).to(dev), 0.0)  # (Hkv, N, P) what E reads
    a = real_pairs(_turn(layer.qc, layer.pq, theta))  # (H, N, 2P)  R(p_i) q_i
    y = real_pairs(_turn(layer.kc, layer.pk, theta))  # (Hkv, N, 2P)  R(p'_j) k_j
    b = real_pairs(_turn(de, layer.pk, theta))  # (Hkv, N, 2P)  R(p'_j) delta_j
    dp = real_pairs(de)  # (Hkv, N, 2P)  delta_j
    m = torch.from_numpy(np.stack(ms).astype(np.complex128)).to(dev)  # (M, P)
    return Factors(a, y, b, dp, real_pairs(layer.qc), m, layer.kv)


@dataclass(frozen=True)
class _BandTotals:
    r"""Sums over each row's band: :math:`R^W_i = \sum_{j \in \mathcal M_i} W_{ij}` and, per
    reference, :math:`R^{E}_i` ``(H, N)`` (raw, in units of ``s``); the masked means
    :math:`\mu_W`, :math:`\mu_E` ``(H,)``; with the three-axis fit, ``W``'s column sums
    ``(H, N)`` and diagonal sums ``(H, n_a)``."""

    row_w: torch.Tensor
    row_e: list[torch.Tensor]
    mean_w: torch.Tensor
    mean_e: list[torch.Tensor]
    col_w: torch.Tensor | None = None
    diag_w: torch.Tensor | None = None


def _band_totals(f: Factors, window: int | None, gram: BandGram, heads: torch.Tensor,
                 device: Any, three_axis: bool) -> _BandTotals:  # fmt: skip
    """:class:`_BandTotals` of the features ``f`` (prefix sums, :func:`_band_rows`; the
    columns and diagonals by :func:`_band_sums` where ``three_axis``)."""
    col_w = diag_w = None
    if three_axis:
        row_w, col_w, diag_w = _band_sums(f.a, f.y, window, heads, device)  # (H, N) x2, (H, n_a)
    else:
        (row_w,) = _band_rows([f.a], f.y, window, heads)  # (H, N): _band_sums' rows, the same code
    (row_ab,) = _band_rows([f.a], f.b, window, heads)
    row_e = [row_ab - r for r in _band_rows(f.us, f.dp, window, heads)]  # (H, N) each, raw
    mean_w = row_w.sum(-1) / gram.pairs  # (H,)
    mean_e = [r.sum(-1) / gram.pairs for r in row_e]  # each (H,)
    return _BandTotals(row_w, row_e, mean_w, mean_e, col_w, diag_w)


def _raw_moments(f: Factors, band: int | None, device: Any) -> Moments:
    """:func:`row_moments` of ``f`` over the band (None: every causal pair), compiled on the
    CPU, in torch on ``device`` (:mod:`.stats_torch`)."""
    if device is None:
        return row_moments(f, band)
    from ropesplit.numerics import stats_torch

    return stats_torch.row_moments(f, band, device)


@dataclass(frozen=True)
class _Centred:
    r"""Each row's products about the masked means ``(H, N)``: :math:`\sum_j (W_{ij} -
    \mu_W)^2` and per reference :math:`\sum_j (W_{ij} - \mu_W)(E_{ij} - \mu_E)`,
    :math:`\sum_j (E_{ij} - \mu_E)^2`; and the centred row sums of ``W`` and each ``E``."""

    ww: torch.Tensor
    we: list[torch.Tensor]
    ee: list[torch.Tensor]
    row_w: torch.Tensor
    row_e: list[torch.Tensor]

    @classmethod
    def of(cls, moments: Moments, band: _BandTotals, count_b: torch.Tensor) -> _Centred:
        r"""From the raw moments :math:`S_i` and row sums :math:`R_i` (``count_b (N,)``: each
        row's pairs :math:`n_i`):

        .. math:: \sum_j (W_{ij} - \mu_W)(E_{ij} - \mu_E) = S^{WE}_i - \mu_E R^W_i
                  - \mu_W R^E_i + n_i\mu_W\mu_E
        """
        s_ww, s_we, s_ee = moments.ww, moments.we, moments.ee
        mean_w, row_w, mean_e, row_e = band.mean_w, band.row_w, band.mean_e, band.row_e
        nw = count_b * mean_w[:, None]  # (H, N) n_i mu_W
        ww = s_ww - mean_w[:, None] * (2 * row_w - nw)  # per-row products about the masked means
        we = [s - m[:, None] * row_w - mean_w[:, None] * r + nw * m[:, None]
              for s, m, r in zip(s_we, mean_e, row_e, strict=True)]  # fmt: skip
        ee = [s - m[:, None] * (2 * r - count_b * m[:, None])
              for s, m, r in zip(s_ee, mean_e, row_e, strict=True)]  # fmt: skip
        row_w = row_w - nw  # centred row sums
        row_e = [r - m[:, None] * count_b for r, m in zip(row_e, mean_e, strict=True)]
        return cls(ww, we, ee, row_w, row_e)


def _head_sums(moments: Moments, c: _Centred, count_b: torch.Tensor, products: torch.Tensor,
               width: int) -> dict[str, Any]:  # fmt: skip
    r""":func:`_logit_sums`' per-head sums on the host: ``tww``, ``cww``, and per reference
    ``twe, tee, cwe, cee``, with the raw ``w_sq``, ``e_sq`` (each row's products over its
    block, plus the columns before the block); ``tww`` and ``cww`` 0 for a head whose logits
    all lie within rounding of 0 (``products (H, N)``: :math:`\sum_j |a_i|^2 |y_j|^2`,
    ``width`` the features' ``c``)."""
    several = count_b > 1  # a row of one pair has no spread about its mean: exactly 0

    def host(x: torch.Tensor, before: torch.Tensor | None = None) -> np.ndarray:
        """A per-head sum ``(H,)`` of ``x (H, N)``, with the pairs ``before`` the rows' blocks
        ``(H,)`` where given, on the host."""
        return (x.sum(-1) if before is None else x.sum(-1) + before).cpu().numpy()

    def row_centred(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, before: torch.Tensor
                    ) -> np.ndarray:  # fmt: skip
        """The same of each row's products about its own mean: a row of one pair has none,
        and its pair is its block's first, so no column lies before it."""
        return host(torch.where(several, x - u * v / count_b, 0.0), before)

    # sums of squares: >= 0 but for rounding
    ww0, ee0 = moments.ww_before.clamp(min=0.0), moments.ee_before.clamp(min=0.0)
    we0 = moments.we_before
    w_sq = host(moments.ww, ww0)  # (H,) raw: the scale of the rounding in tww and cww
    e_sq = [host(s, b0) for s, b0 in zip(moments.ee, ee0, strict=True)]
    some = w_sq > ((width + 4) * 2.0**-53) ** 2 * host(products)  # (H,)
    return {
        "tww": np.where(some, _resolved(host(c.ww, ww0), w_sq), 0.0),
        "cww": np.where(some, _resolved(row_centred(c.ww, c.row_w, c.row_w, ww0), w_sq), 0.0),
        "twe": [host(x, b0) for x, b0 in zip(c.we, we0, strict=True)],
        "tee": [_resolved(host(x, b0), r) for x, b0, r in zip(c.ee, ee0, e_sq, strict=True)],
        "cwe": [row_centred(x, c.row_w, r, b0)
                for x, r, b0 in zip(c.we, c.row_e, we0, strict=True)],
        "cee": [_resolved(row_centred(x, r, r, b0), s)
                for x, r, b0, s in zip(c.ee, c.row_e, ee0, e_sq, strict=True)],
        "w_sq": w_sq, "e_sq": e_sq,
    }  # fmt: skip


def row_moments(f: Factors, window: int | Mask | None) -> Moments:
    r"""Raw moments over the band: :math:`\sum_j W_{ij}^2`, and per reference
    :math:`\sum_j W_{ij}E_{ij}`, :math:`\sum_j E_{ij}^2` (:class:`.pairing.Moments`); no
    ``(N, N)`` matrix.

    With no window, rows go in blocks of :data:`.pairing.BLOCK_ROWS`: the columns
    before a row's block come from prefix sums of outer products, summed over the rows
    (:func:`.pairing.prefix_moments`, ``O(N c^2)``), the block's own triangle per row from
    the compiled pair loop (:func:`_band_kernel`).  With a window the compiled
    loop takes every pair of the band (``O(N\,\mathrm{window}\,c)``).  A causal band's
    :class:`~.mask.Mask` may stand for ``window``; any other mask is refused (:mod:`.masked`
    sums those).
    """
    window = causal_window(window, "row_moments (prefix sums over earlier columns)")
    h, n, _ = f.a.shape
    i = np.arange(n, dtype=np.int64)
    moments = Moments.zeros(h, n, len(f.m), f.a.device)
    if window is None:
        first = i // pairing.BLOCK_ROWS * pairing.BLOCK_ROWS
        prefix_moments(f, pairing.BLOCK_ROWS, moments)
    else:
        first = np.maximum(0, i - window + 1)
    features = (x.numpy() for x in (f.a, f.y, f.b, f.dp, f.us))
    _band_kernel(not serial())(*features, f.kv.astype(np.int64), first, pairing.BLOCK_ROWS,
                               *(x.numpy() for x in moments.fields()[:3]))  # fmt: skip  # in place
    return moments


@functools.cache
def _band_kernel(parallel: bool = True) -> Any:
    """Compiled: the row moments of the pairs ``first[i] <= j <= i``, added into the outputs.

    ``(a, y, b, delta, u, kv, first, block, s_ww, s_we, s_ee)``: rows ``a (H, N, c)``,
    ``u (M, H, N, c)``, columns ``y, b, delta (Hkv, N, c)`` read through
    ``kv (H,)``; per pair :math:`W = a_i\\cdot y_j`, :math:`E_m = a_i\\cdot b_j
    - u^m_i\\cdot\\delta_j`, and ``s_ww (H, N) += W^2``, ``s_we (M, H, N) +=
    W E_m``, ``s_ee += E_m^2``.  Parallel over (head, ``block`` rows); ``parallel=False``:
    the single-threaded build a worker of :mod:`.workers` runs.
    """
    import numba

    loop = numba.prange if parallel else range  # a closure variable: each build its own cache

    @numba.njit(parallel=parallel, cache=True, nogil=True, fastmath={"reassoc", "contract"})
    def kernel(a, y, b, dp, u, kv, first, block, s_ww, s_we, s_ee):  # type: ignore[no-untyped-def]
        h, n, c = a.shape
        refs = u.shape[0]
        nb = (n + block - 1) // block
        for task in loop(h * nb):
            hh = task // nb
            g = kv[hh]
            we = np.empty(refs)
            ee = np.empty(refs)
            for i in range((task - hh * nb) * block, min(n, (task - hh * nb + 1) * block)):
                ww = 0.0
                we[:] = 0.0
                ee[:] = 0.0
                for j in range(first[i], i + 1):
                    w = 0.0
                    ab = 0.0
                    for l in range(c):
                        w += a[hh, i, l] * y[g, j, l]
                        ab += a[hh, i, l] * b[g, j, l]
                    ww += w * w
                    for r in range(refs):
                        x = 0.0
                        for l in range(c):
                            x += u[r, hh, i, l] * dp[g, j, l]
                        e = ab - x
                        we[r] += w * e
                        ee[r] += e * e
                s_ww[hh, i] += ww
                for r in range(refs):
                    s_we[r, hh, i] += we[r]
                    s_ee[r, hh, i] += ee[r]

    return kernel


def tightness(
    check: BoundCheck, pair_budget: int | None = None, seed: int = 0
) -> list[tuple[float, float, int | None, int]]:
    r"""Per head ``(max, median, sampled_pairs, violations)`` of :math:`|E_{ij}| / B_{ij}`.

    ``check`` (:class:`~.pairing.BoundCheck`) holds ``qc, dc (H, N, P)``: the
    query pairs and the key-deviation pairs each head reads, the frequencies,
    positions, scale and window, and ``gap``, ``1 - m`` of the reference
    (None: :math:`m_l = 1`).
    Exact over every causal pair unless ``pair_budget`` is below the number
    of causal pairs: then on one seeded uniform sample of ``pair_budget``
    pairs shared by every head (the same pairs for a given seed).  The exact
    check runs compiled (:class:`.bound.CausalPairs`, screened in float32 and
    rechecked in float64: :func:`_screened_summary`) when the positions are
    whole numbers of a step (:func:`whole_steps`), else in row chunks with
    all heads at once (the angles are shared).
    """
    qc, dc, theta, pq, pk = check.qc, check.dc, check.theta, check.pq, check.pk
    s, window, gap = check.scale, check.window, check.gap
    h, n, p = qc.shape
    n_pairs, flat, whole = pair_plan(n, window, pair_budget, seed, pq, pk)
    if whole is not None:  # every pair, compiled; heads in chunks of bounded memory
        iq, ik, step = whole
        out = []
        for h0 in range(0, h, chunk := max(1, pairing.WORK_BYTES // (8 * n_pairs))):
            pairs = CausalPairs(qc[h0 : h0 + chunk], dc[h0 : h0 + chunk], theta * step, iq, ik,
                                s, window=window, one_minus_m=gap)  # fmt: skip
            ratio, top, unsure = pairs.screen()
            out += [_screened_summary(pairs, x, ratio[x], float(top[x]), int(unsure[x]))
                    for x in range(ratio.shape[0])]  # fmt: skip
        return out
    if flat is not None:  # a sample: cache-sized chunks of pairs, ~2x faster than one pass
        i, j = pair_indices(n, window, flat)  # (S,) each
        sampled, bad = pair_ratios(qc, dc, theta, (i, j), pq[i] - pk[j], s, gap, _SAMPLE_CHUNK)
        return [_summary(sampled[x], flat.size, bad[x]) for x in range(h)]
    q_parts = [torch.from_numpy(np.ascontiguousarray(z)) for z in (qc.real, qc.imag)]
    d_parts = [torch.from_numpy(np.ascontiguousarray(z)) for z in (dc.real, dc.imag)]
    ratios: list[list[torch.Tensor]] = [[] for _ in range(h)]
    bad = [0] * h
    rows = max(1, _EXACT_CHUNK // (n * max(p, 1) * h))  # cache-sized: (H, rows, cols, P)
    for i0 in range(0, n, rows):
        i1 = min(n, i0 + rows)
        j0 = 0 if window is None else max(0, i0 - window + 1)
        e, bound = remainder_and_bound(
            (q_parts[0][:, i0:i1, None], q_parts[1][:, i0:i1, None]),
            (d_parts[0][:, None, j0:i1], d_parts[1][:, None, j0:i1]),
            theta, pq[i0:i1, None] - pk[None, j0:i1], s, one_minus_m=gap,
        )  # (H, rows, cols)  # fmt: skip
        ii, jj = np.arange(i0, i1)[:, None], np.arange(j0, i1)[None, :]
        keep = torch.from_numpy((jj <= ii) & (ii - jj < (n if window is None else window)))
        e, bound = e[:, keep], bound[:, keep]  # (H, pairs in chunk)
        for x in range(h):
            ratios[x].append(_ratio(e[x], bound[x]))
            bad[x] += violations(e[x], bound[x])
    return [_summary(torch.cat(ratios[x]) if ratios[x] else torch.zeros(0), None, bad[x])
            for x in range(h)]  # fmt: skip


def _summary(ratio: Any, sampled: int | None, bad: int) -> tuple[float, float, int | None, int]:
    """``(max, median, sampled, violations)`` of one head's ratios (NaN when there are none).

    ``ratio`` (a tensor or an array) holds ``-inf`` for pairs left out (``B = 0``).
    """
    r = np.ascontiguousarray(ratio.numpy() if isinstance(ratio, torch.Tensor) else ratio)
    top, left_out = _scan()(r)
    valid = r.size - left_out
    if valid == 0:
        return math.nan, math.nan, sampled, bad
    low, high = _order_statistics(r, [left_out + (valid - 1) // 2, left_out + valid // 2])
    return float(top), 0.5 * (low + high), sampled, bad


def _screened_summary(pairs: CausalPairs, head: int, screened: np.ndarray, top: float,
                      unsure_count: int, sample: int = _MEDIAN_SAMPLE,
                      ) -> tuple[float, float, int | None, int]:  # fmt: skip
    r""":func:`_summary` of head ``head``'s exact ratios, read off their float32 screen.

    ``screened (pairs,)``, ``top`` and ``unsure_count`` (:meth:`.bound.CausalPairs.screen`):
    each ratio to within ``eps`` (NaN where float32 cannot say: those are evaluated in
    float64 first, in place), the largest and the count of NaN.  One compiled pass then
    gathers the pairs that could be the largest (within ``2 eps`` of the screened
    largest), a violation (above ``1 + RTOL - 2 eps``) or one of the median's two order
    statistics (inside a bracket read off an evenly strided sample, widened by ``2 eps``:
    every pair below it is below the exact median, every pair above it above; the
    screened order statistics inside narrow it to ``2 eps`` about them), and counts the
    pairs below; only those are evaluated in float64 (:meth:`~.bound.CausalPairs.exact`).
    Should the bracket miss a rank, every pair is (slower, never wrong).  The numbers are
    those of :func:`_summary` of every float64 ratio (to the rounding of two compiled
    float64 loops: the order of a sum's terms may differ).
    """
    unsure = np.flatnonzero(np.isnan(screened)) if unsure_count else np.zeros(0, np.int64)
    if unsure.size:
        exact = pairs.exact(head, unsure)[0]  # -inf where B = 0
        screened[unsure] = exact
        top = max(top, float(exact.max()))
    left_out = int(np.count_nonzero(screened[unsure] == -math.inf)) if unsure.size else 0
    valid = screened.size - left_out
    eps = pairs.eps(top)
    ranks = [left_out + (valid - 1) // 2, left_out + valid // 2]
    bracket = _sample_bracket(screened, ranks, sample)  # None: the bracket is every pair
    lo, hi = (-math.inf, math.inf) if bracket is None else (bracket[0] - 2.0 * eps,
                                                            bracket[1] + 2.0 * eps)
    below, inside, tops, suspects = _candidates()(screened, lo, hi, top - 2.0 * eps,
                                                  1.0 + RTOL - 2.0 * eps)  # fmt: skip
    bad = int(pairs.exact(head, np.union1d(unsure, suspects))[1].sum())
    if valid == 0:
        return math.nan, math.nan, None, bad
    exact_top = float(pairs.exact(head, tops)[0].max())
    if not (below <= ranks[0] and below + inside.size > ranks[1]):  # the bracket missed
        below, inside = 0, np.arange(screened.size)
    # the screened order statistics narrow it further: the exact ones lie within eps of them
    near = screened[inside]
    order = np.partition(near, [k - below for k in ranks])
    lo, hi = order[ranks[0] - below] - 2.0 * eps, order[ranks[1] - below] + 2.0 * eps
    below += int(np.count_nonzero(near < lo))
    inside = inside[(near >= lo) & (near <= hi)]
    values = pairs.exact(head, inside)[0]
    values.partition([k - below for k in ranks])
    low, high = (float(values[k - below]) for k in ranks)
    return exact_top, 0.5 * (low + high), None, bad


@functools.cache
def _candidates() -> Any:
    """Compiled, one pass: ``(count below lo, indices inside [lo, hi], indices at or above
    top, indices above limit)`` of a 1-d float64 array."""
    import numba

    @numba.njit(cache=True, nogil=True)
    def candidates(r, lo, hi, top, limit):  # type: ignore[no-untyped-def]
        n = r.size
        inside = np.empty(n, dtype=np.int64)
        tops = np.empty(n, dtype=np.int64)
        over = np.empty(n, dtype=np.int64)
        below, c_in, c_top, c_over = 0, 0, 0, 0
        for i in range(n):
            x = r[i]
            below += x < lo
            inside[c_in] = i  # kept only when the count moves on (branch-free)
            c_in += (x >= lo) & (x <= hi)
            if x >= top:
                tops[c_top] = i
                c_top += 1
            if x > limit:
                over[c_over] = i
                c_over += 1
        return below, inside[:c_in].copy(), tops[:c_top].copy(), over[:c_over].copy()

    return candidates


def _order_statistics(r: np.ndarray, ranks: list[int], sample: int = _MEDIAN_SAMPLE) -> list[float]:
    """The values of rank ``ranks`` (0-based, ascending) in ``r``, exactly, without sorting ``r``.

    A bracket ``[lo, hi]`` around the ranks is read off an evenly strided
    sample of about ``sample`` values; one compiled pass counts the values
    below ``lo`` and gathers those inside, and when the bracket holds every
    asked rank only the values inside are partitioned (otherwise all of
    ``r``: slower, never wrong).
    """
    n = r.size
    bracket = _sample_bracket(r, ranks, sample)
    if bracket is not None:
        inside = np.empty(n)
        below, count = _bracket()(r, *bracket, inside)
        if below <= min(ranks) and below + count > max(ranks):
            inside = inside[:count]
            inside.partition([k - below for k in ranks])
            return [float(inside[k - below]) for k in ranks]
    part = np.partition(r, ranks)
    return [float(part[k]) for k in ranks]


def _sample_bracket(r: np.ndarray, ranks: list[int], sample: int) -> tuple[float, float] | None:
    """``(lo, hi)`` likely to hold the values of rank ``min(ranks)`` .. ``max(ranks)`` of
    ``r``, read off an evenly strided sample of about ``sample`` values (four standard
    deviations of a sample rank to either side); None when that sample is all of ``r``."""
    n = r.size
    step = max(1, n // sample)
    if step == 1:
        return None
    drawn = np.sort(r[::step])
    margin = 2.0 * math.sqrt(drawn.size) + 8  # four standard deviations of a sample rank
    at = [int(np.clip(k / n * drawn.size + d, 0, drawn.size - 1))
          for k, d in ((min(ranks), -margin), (max(ranks), margin))]  # fmt: skip
    return float(drawn[at[0]]), float(drawn[at[1]])


@functools.cache
def _scan() -> Any:
    """Compiled: ``(max, count of -inf)`` of a 1-d float64 array in one pass."""
    import numba

    @numba.njit(cache=True, nogil=True)
    def scan(r):  # type: ignore[no-untyped-def]
        top, left_out = -math.inf, 0
        for x in r:
            if x == -math.inf:
                left_out += 1
            elif x > top:
                top = x
        return top, left_out

    return scan


@functools.cache
def _bracket() -> Any:
    """Compiled: ``(count below lo, count inside [lo, hi])``; the inside values go to ``out``."""
    import numba

    @numba.njit(cache=True, nogil=True)
    def bracket(r, lo, hi, out):  # type: ignore[no-untyped-def]
        below, count = 0, 0
        for x in r:  # branch-free: the values fall on either side unpredictably
            below += x < lo
            out[count] = x  # kept only when the count moves on
            count += (x >= lo) & (x <= hi)
        return below, count

    return bracket


def _ratio(e: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """``|E| / B`` at the pairs with ``B > 0``."""
    pos = bound > 0
    return e[pos].abs() / bound[pos]
