r"""The THEORY.md section 5 statistics of a head, vectorised over the heads of a layer.

Over the causal pairs :math:`\mathcal M` (``j <= i``, and ``i - j < window``):

.. math::
    r_\mathrm{split} &= \mathrm{corr}_{\mathcal M}(W, f + g),\qquad
    \text{remainder share} = \|E\|_F / \|W - \overline W\|_F \\
    r_\mathrm{3axis} &= \mathrm{corr}_{\mathcal M}(W, \hat a_{i-j} + \hat b_i + \hat c_j),\qquad
    \text{tightness}_{ij} = |E_{ij}| / B_{ij}

Under a reference rotation :math:`m_l` (THEORY.md section 6, ``reference=``)
``g`` and ``E`` become :math:`g_m`, :math:`E_m` (:mod:`.reference`) and the
bound :math:`s\sum_l|\tilde q_l||\tilde\delta_l||e^{i\theta_l\Delta} - m_l|`;
``references=`` adds ``r_split``, ``r_split_rowcentred`` and
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

- ``W = s Qrot Krot^T`` and ``E = s (Qrot Drot^T - Q (D m)^T)`` are matrix
  products of rotated real features, and ``f + g = W - E``; all heads of a
  layer go through one batched product, in head chunks of bounded memory.
- ``r_3axis`` needs only the masked diagonal, row and column sums of ``W``
  (:mod:`.fit`: ``O(N)`` normal equations solved to convergence, cached per
  ``(N, window)``); its correlation is :math:`\sqrt{x^\top A^\top w / \|w\|^2}`
  for the centred logits ``w``.
- the bound is the only ``N^2 P`` term: ``E`` and ``B`` are evaluated term by
  term (:mod:`.bound`) and compared with the tolerance of
  :func:`.bound.violations`: compiled, one fused loop per pair
  (:func:`.bound.causal_ratios`), when positions are whole numbers of a step
  (every unperturbed sequence); in row chunks of batched tensors otherwise.
  Pairs with ``B = 0`` are left out of the tightness ratio (their ``E`` is
  0, else they count as violations); the median is selected exactly inside a
  bracket read off a sample (:func:`_order_statistics`), not by sorting.  The
  check is exact over every causal pair unless asked otherwise: when
  ``pair_budget`` (a number of causal pairs per head) is given and smaller
  than the number of causal pairs, the tightness and the violation count
  come from a seeded uniform sample of ``pair_budget`` pairs and
  ``sampled_pairs`` says how many; every other statistic stays exact.

Shapes::

    q       (H, N, d)     pre-RoPE queries of the layer's query heads
    k       (Hkv, N, d)   pre-RoPE keys; query head h reads k[kv_map[h]]
    theta   (d/2,)        frequencies, 0 for non-rotating pairs
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from ropesplit.numerics import _inputs
from ropesplit.numerics.bootstrap import Interval
from ropesplit.numerics.bound import causal_ratios, remainder_and_bound, violations
from ropesplit.numerics.fit import band_gram
from ropesplit.numerics.reference import Reference, canonical, resolve_reference
from ropesplit.numerics.rope import to_pairs

from ropesplit.errors import RopesplitError

__all__ = ["HeadStats", "head_statistics", "layer_statistics", "pooled_correlation",
           "pooled_correlation_ci"]

_WORK_BYTES = 2**29  # working memory of one chunk of (N, N) matrices or bound terms
_SAMPLE_CHUNK = 512  # sampled pairs per batched bound evaluation (all heads at once)
_EXACT_CHUNK = 2**19  # (head, pair, frequency) terms per chunk of the exact bound check
_BLOCK_ROWS = 64  # rows per block of the (N, N) products: 32 N acausal entries beyond N^2 / 2
_DISTANCE_TABLE = 64  # whole-number positions: distance-table rows per token, at most
_MEDIAN_SAMPLE = 4096  # values read to bracket a median before the exact selection


@dataclass(frozen=True)
class HeadStats:
    """THEORY.md section 5 for one head; plain Python numbers (NaN where undefined)."""

    r_split: float  # corr(W, f + g) over causal pairs
    r_split_rowcentred: float  # the same after removing each row's mean
    r_3axis: float  # corr(W, least-squares a_{i-j} + b_i + c_j)
    remainder_share: float  # ||E||_F / ||W - mean W||_F
    tightness_max: float  # max |E| / bound over pairs with bound > 0
    tightness_median: float  # median of the same
    lowfreq_share_k: float  # key-deviation energy in the low-frequency half
    lowfreq_share_q: float  # query-deviation energy in the low-frequency half
    n_pairs: int  # causal pairs
    sampled_pairs: int | None  # pairs in the tightness sample; None when exact
    violations: int  # pairs with |E| above the bound (checked pairs)
    reference: str = "zero"  # the reference rotation of every field above
    by_reference: dict[str, dict[str, float]] = field(default_factory=dict)  # spec -> r_split,
    # r_split_rowcentred, remainder_share under each reference asked for (and this one)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready)."""
        return asdict(self)


def head_statistics(
    q: Any,
    k: Any,
    theta: Any,
    scale: float,
    *,
    positions: Any = None,
    kbar: Any = None,
    layout: str = "half",
    rotary_dim: int | None = None,
    window: int | None = None,
    pair_budget: int | None = None,
    seed: int = 0,
    reference: str | Reference = "zero",
    references: tuple[str, ...] = (),
) -> HeadStats:
    r"""The section 5 statistics of one head: ``q, k (N, d)``; see :func:`layer_statistics`.

    .. math:: W_{ij} = f(q_i, \Delta_{ij}) + g(q_i, k_j) + E_{ij},\quad
              \Delta_{ij} = p_i - p'_j,\ j \le i

    >>> import numpy as np
    >>> from ropesplit.numerics.rope import frequencies
    >>> q, k = np.random.default_rng(0).normal(size=(2, 64, 8))
    >>> st = head_statistics(q, k, frequencies(8), 8**-0.5)
    >>> st.n_pairs, st.violations, st.tightness_max <= 1
    (2080, 0, True)
    """
    q = _inputs.as_float64("q", q, 2)
    k = _inputs.as_float64("k", k, 2)
    kb = None if kbar is None else _inputs.as_float64("kbar", kbar, 1)[None]
    return layer_statistics(q[None], k[None], [0], theta, scale, positions=positions, kbar=kb,
                            layout=layout, rotary_dim=rotary_dim, window=window,
                            pair_budget=pair_budget, seed=seed, reference=reference,
                            references=references)[0]  # fmt: skip


def layer_statistics(
    q: Any,
    k: Any,
    kv_map: Any,
    theta: Any,
    scale: float,
    *,
    positions: Any = None,
    kbar: Any = None,
    layout: str = "half",
    rotary_dim: int | None = None,
    window: int | None = None,
    pair_budget: int | None = None,
    seed: int = 0,
    reference: str | Reference = "zero",
    references: tuple[str, ...] = (),
) -> list[HeadStats]:
    r"""The section 5 statistics of every query head of a layer, batched.

    ``q (H, N, d)`` and ``k (Hkv, N, d)`` are pre-RoPE (numpy or CPU torch);
    head ``h`` reads KV head ``kv_map[h]``; ``kbar (Hkv, d)`` defaults to each
    KV head's mean key; ``positions`` is ``(N,)`` or ``(positions_q,
    positions_k)``; ``pair_budget`` is the number of causal pairs per head
    whose bound is checked (None, the default: every pair; a smaller number:
    a seeded sample of that many, reported as ``sampled_pairs``); ``seed``
    fixes the pair sample.  ``reference`` (``"zero"``, ``"distance:C"``,
    ``"mean"`` over this layer's causal pairs, THEORY.md section 6) sets the
    split of every field; ``references`` adds ``r_split``,
    ``r_split_rowcentred`` and ``remainder_share`` under each of those specs
    (``by_reference``, which also holds ``reference``'s own).

    .. math:: E_{ij} = s\,\big(\langle R(p_i)q_i, R(p'_j)\delta_j\rangle
                               - \langle q_i, \delta_j\rangle\big)
    """
    q = _inputs.as_float64("q", q, 3)
    k = _inputs.as_float64("k", k, 3)
    (h, n, d), (hkv, nk, dk) = q.shape, k.shape
    if (nk, dk) != (n, d):
        raise RopesplitError(f"k must have shape (Hkv, {n}, {d}) like q, got {k.shape}")
    if n < 1:
        raise RopesplitError("need at least one token, got 0")
    kv = np.asarray(kv_map, dtype=np.int64)
    if kv.shape != (h,) or (kv < 0).any() or (kv >= hkv).any():
        raise RopesplitError(f"kv_map must be {h} indices into {hkv} KV heads, got {kv.tolist()}")
    th = _inputs.check_theta(theta, d)
    s = _inputs.check_scale(scale)
    pq, pk = _inputs.check_positions(positions, n)
    w = _inputs.check_window(window)
    if pair_budget is not None and pair_budget < 1:
        raise RopesplitError(f"pair_budget must be a positive number of pairs, got {pair_budget}")
    refs = [resolve_reference(spec, th, n=n, window=w, positions=(pq, pk))
            for spec in _unique([reference, *references])]  # fmt: skip  # primary first
    qc = to_pairs(q, layout, rotary_dim)  # (H, N, P)
    kc = to_pairs(k, layout, rotary_dim)  # (Hkv, N, P)
    if kbar is None:
        kbc = kc.mean(axis=1, keepdims=True)  # (Hkv, 1, P)
    else:
        kb = _inputs.as_float64("kbar", kbar, 2)
        if kb.shape != (hkv, d):
            raise RopesplitError(f"kbar must have shape ({hkv}, {d}), got {kb.shape}")
        kbc = to_pairs(kb, layout, rotary_dim)[:, None, :]  # (Hkv, 1, P)
    dc = kc - kbc  # (Hkv, N, P) key deviations
    low_k = _lowfreq_share(np.abs(dc) ** 2, th)[kv]  # (H,)
    low_q = _lowfreq_share(np.abs(qc - qc.mean(axis=1, keepdims=True)) ** 2, th)  # (H,)
    sums = _logit_sums(qc, kc, dc, kv, th, pq, pk, w, [None if r.is_zero else r.m for r in refs])
    gap = None if refs[0].is_zero else refs[0].one_minus
    tight = _tightness(qc, dc[kv], th, pq, pk, s, w, pair_budget, seed, gap)  # one per head
    gram = band_gram(n, w)
    x, _ = gram.solve(sums["rhs"])  # (K, H)
    fit_share = np.maximum((x * sums["rhs"]).sum(0), 0.0)  # (H,) ||fit - mean||^2
    out = []
    for i in range(h):
        tww = sums["tww"][i]
        split = {ref.spec: _split_stats(sums, r, i, s, gram.pairs) for r, ref in enumerate(refs)}
        primary = split[refs[0].spec]
        out.append(HeadStats(
            **{key: primary[key] for key in ("r_split", "r_split_rowcentred", "remainder_share")},
            r_3axis=_corr(fit_share[i], tww, fit_share[i]),
            tightness_max=tight[i][0], tightness_median=tight[i][1],
            lowfreq_share_k=float(low_k[i]), lowfreq_share_q=float(low_q[i]),
            n_pairs=gram.pairs, sampled_pairs=tight[i][2], violations=tight[i][3],
            reference=refs[0].spec, by_reference=split,
        ))  # fmt: skip
    return out


def _unique(specs: list[str | Reference]) -> list[str | Reference]:
    """Specs in order, each reference once (``distance:256.0`` is ``distance:256``)."""
    seen, out = set(), []
    for spec in specs:
        key = spec.spec if isinstance(spec, Reference) else canonical(spec)
        if key not in seen:
            seen.add(key)
            out.append(spec)
    return out


def _split_stats(sums: dict[str, Any], r: int, i: int, s: float, n: int) -> dict[str, float]:
    """The split statistics of head ``i`` under reference ``r``, and its pair moments.

    Moments over the ``n`` causal pairs, in logit units: ``w_mean, w_var``
    (of ``W``), ``fg_mean, fg_var`` (of ``f + g``), ``w_fg_cov``: what
    :func:`pooled_correlation` combines across heads.
    """
    tww, cww = sums["tww"][i], sums["cww"][i]
    twe, tee, cwe, cee, e_sq = (sums[key][r][i] for key in ("twe", "tee", "cwe", "cee", "e_sq"))
    mean_w, mean_e = float(sums["mean_w"][i]), float(sums["mean_e"][r][i])
    return {
        "r_split": _corr(tww - twe, tww, tww - 2 * twe + tee),
        "r_split_rowcentred": _corr(cww - cwe, cww, cww - 2 * cwe + cee),
        "remainder_share": math.sqrt(e_sq / tww) if tww > 0 else math.nan,
        "w_mean": s * mean_w, "w_var": float(s * s * tww / n),
        "fg_mean": s * (mean_w - mean_e), "fg_var": float(s * s * (tww - 2 * twe + tee) / n),
        "w_fg_cov": float(s * s * (tww - twe) / n),
    }  # fmt: skip


def pooled_correlation(moments: Any, counts: Any, weights: Any = None) -> Any:
    r"""Pearson correlation of ``W`` with ``f + g`` over the pairs of several heads pooled.

    ``moments``: per head dicts with ``w_mean, w_var, fg_mean, fg_var,
    w_fg_cov`` (``HeadStats.by_reference[spec]``), ``counts (H,)`` their pair
    counts; ``weights (..., H)`` optional head multiplicities (a bootstrap
    resample), giving ``(...)`` correlations:

    .. math:: r = \frac{\sum_h n_h[c_h + (\mu^w_h - \mu^w)(\mu^{fg}_h - \mu^{fg})]}
                  {\sqrt{\sum_h n_h[v^w_h + (\mu^w_h - \mu^w)^2]
                          \sum_h n_h[v^{fg}_h + (\mu^{fg}_h - \mu^{fg})^2]}}
    """
    names = ("w_mean", "w_var", "fg_mean", "fg_var", "w_fg_cov")
    mw, vw, mf, vf, c = (np.array([float(m[key]) for m in moments]) for key in names)  # (H,)
    n = np.asarray(counts, dtype=np.float64) * (1.0 if weights is None else np.asarray(weights))
    total = n.sum(-1, keepdims=True)
    mu_w = (n * mw).sum(-1, keepdims=True) / total
    mu_f = (n * mf).sum(-1, keepdims=True) / total
    cov = (n * (c + (mw - mu_w) * (mf - mu_f))).sum(-1)
    var_w = (n * (vw + (mw - mu_w) ** 2)).sum(-1)
    var_f = (n * (vf + (mf - mu_f) ** 2)).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return cov / np.sqrt(var_w * var_f)


def pooled_correlation_ci(
    moments: Any, counts: Any, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> Interval:
    r"""The pooled correlation of :func:`pooled_correlation` with a percentile-bootstrap interval.

    Heads are resampled with replacement (multinomial multiplicities ``(n_boot, H)``
    from ``numpy.random.default_rng(seed)``), each resample pooled as above:

    .. math:: \mathrm{CI} = \big[Q_{(1-\alpha)/2},\ Q_{(1+\alpha)/2}\big]
              \text{ of } r^*_b = r_\mathrm{pooled}(\text{heads with multiplicities } m_b)

    ``mean`` of the returned :class:`~.bootstrap.Interval` is the pooled
    correlation of all heads (not a mean of per-head values).
    """
    h = len(counts)
    if h == 0:
        raise RopesplitError("need at least one head, got 0")
    draws = np.random.default_rng(seed).multinomial(h, np.full(h, 1 / h), n_boot)  # (n_boot, H)
    boot = pooled_correlation(moments, counts, draws)  # (n_boot,)
    low, high = np.quantile(boot, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return Interval(float(pooled_correlation(moments, counts)), float(low), float(high),
                    float(level), h, int(n_boot))  # fmt: skip


def _corr(cov: float, var_a: float, var_b: float) -> float:
    """``cov / sqrt(var_a var_b)`` as a float, NaN when a variance is 0."""
    den = math.sqrt(max(var_a, 0.0) * max(var_b, 0.0))
    return float(min(max(cov / den, -1.0), 1.0)) if den > 0 else math.nan


def _lowfreq_share(energy: np.ndarray, theta: np.ndarray) -> np.ndarray:
    r"""Share of ``energy (..., N, P)`` (summed over tokens) in the lower-frequency half of pairs.

    .. math:: \sum_{l \in \mathrm{low}} e_l \Big/ \sum_l e_l,\quad
              \mathrm{low} = \text{the } \lfloor P/2\rfloor \text{ smallest } \theta_l
              \ (+\tfrac12 \text{ the middle one when } P \text{ is odd})
    """
    per_pair = energy.sum(axis=-2)  # (..., P)
    p = theta.size
    weight = np.zeros(p)
    order = np.argsort(theta, kind="stable")  # lowest frequency (incl. theta = 0) first
    weight[order[: p // 2]] = 1.0
    if p % 2:
        weight[order[p // 2]] = 0.5
    total = per_pair.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (per_pair @ weight) / total, np.nan)


def _real(z: np.ndarray) -> torch.Tensor:
    """Complex pairs ``(..., P)`` -> real features ``(..., 2P)`` as a float64 tensor."""
    return torch.from_numpy(np.concatenate([z.real, z.imag], axis=-1))


def _band_sums(
    x: torch.Tensor,
    y: torch.Tensor,
    window: int | None,
    heads: torch.Tensor,
    *,
    diagonals: bool = True,
    columns: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    r"""Row, column and diagonal sums of :math:`M = x y^\top` over the band, without ``M``.

    ``x (H, N, c)``, ``y (Hkv, N, c)`` with query head ``h`` reading
    ``y[heads[h]]`` (prefix sums and transforms of ``y`` are taken once per KV
    head); returns ``(rows (H, N), cols (H, N) or None, diags (H, n_a) or None)``
    (``columns`` / ``diagonals`` False skip them):

    .. math:: \sum_{j \in \mathcal M_i} x_i\cdot y_j,\quad
              \sum_{i \in \mathcal M^j} x_i\cdot y_j,\quad \sum_i x_i\cdot y_{i-D}

    by prefix sums (rows, columns) and a zero-padded FFT cross-correlation
    (diagonals): ``O(N c log N)`` instead of ``O(N^2 c)``.
    """
    h, n, c = x.shape
    gram = band_gram(n, window)
    if window is None:  # row i: columns 0 .. i, column j: rows j .. N-1: prefix and suffix sums
        rows = torch.linalg.vecdot(x, y.cumsum(1)[heads])  # (H, N)
        cols = (torch.linalg.vecdot(y[heads], x.flip(1).cumsum(1).flip(1))
                if columns else None)  # fmt: skip  # (H, N)
    else:
        i = torch.arange(n)
        lo = torch.from_numpy(gram.first_col)  # row i: columns lo_i .. i
        hi = torch.from_numpy(gram.last_row + 1)  # column j: rows j .. hi_j - 1
        cy = torch.cat([y.new_zeros(y.shape[0], 1, c), y.cumsum(1)], 1)  # (Hkv, N + 1, c)
        rows = torch.linalg.vecdot(x, (cy[:, i + 1] - cy[:, lo])[heads])  # (H, N)
        cols = None
        if columns:
            cx = torch.cat([x.new_zeros(h, 1, c), x.cumsum(1)], 1)  # (H, N + 1, c)
            cols = torch.linalg.vecdot(y[heads], cx[:, hi] - cx[:, i])  # (H, N)
    if not diagonals:
        return rows, cols, None
    length = 2 * n  # zero padding: no circular wrap for lags 0 .. N-1
    fy = torch.fft.rfft(y, length, dim=1).conj()[heads]  # (H, N + 1, c)
    spec = (torch.fft.rfft(x, length, dim=1) * fy).sum(-1)
    diags = torch.fft.irfft(spec, length, dim=1)[:, : gram.n_a]  # (H, n_a) sum_i x_i . y_{i-D}
    return rows, cols, diags


def _logit_sums(
    qc: np.ndarray,
    kc: np.ndarray,
    dc: np.ndarray,
    kv: np.ndarray,
    theta: np.ndarray,
    pq: np.ndarray,
    pk: np.ndarray,
    window: int | None,
    refs: list[np.ndarray | None],
) -> dict[str, Any]:
    r"""Masked second moments of ``W / s`` and ``E_m / s`` per head, and the three-axis right side.

    Per head: ``tww`` and ``cww`` (sums of squares of ``W`` about the masked
    mean, about each row's mean); per reference ``m`` of ``refs`` (``None``
    for :math:`m_l = 1`) lists of ``twe, tee, cwe, cee`` and ``e_sq``
    (:math:`\|E_m\|_F^2`); and ``rhs (K,)``: the distance, row and column sums
    of the centred ``W``.  The scale ``s`` cancels from every statistic, so it
    is left out.  Means, row, column and diagonal sums come from
    :func:`_band_sums`; the matrices themselves are built in row blocks of the
    causal part only (blocks of :data:`_BLOCK_ROWS` rows, into reused
    buffers), centred by the product's bias (``baddbmm``), and reduced to
    per-row norms and dot products at once.  ``E_m`` is
    :math:`\langle R q, R\delta\rangle - \langle q, \delta\bar m\rangle`.
    """
    h, n, _ = qc.shape
    gram = band_gram(n, window)
    heads = torch.from_numpy(kv)
    rot_k = np.exp(1j * pk[:, None] * theta)  # (N, P)
    q_rot = _real(qc * np.exp(1j * pq[:, None] * theta))  # (H, N, 2P)  R(p_i) q_i
    q_both = torch.cat([q_rot, _real(qc)], -1)  # (H, N, 4P)  [R(p_i) q_i, q_i]
    k_rot_kv = _real(kc * rot_k)  # (Hkv, N, 2P)  R(p'_j) k_j
    d_rot_kv = _real(dc * rot_k)  # (Hkv, N, 2P)  R(p'_j) delta_j
    m_first = refs[0]
    d_both_kv = torch.cat([d_rot_kv, -_real(dc if m_first is None else dc * np.conj(m_first))],
                          -1)  # fmt: skip  # (Hkv, N, 4P) [R d_j, -d_j conj(m)]
    k_rot = k_rot_kv[heads]  # (H, N, 2P)
    d_both = d_both_kv[heads]  # (H, N, 4P) the first reference's E, in one product
    # every further reference r: E_r = E_0 + <q, delta conj(m_0 - m_r)>, a 2P product
    q_plain = _real(qc)  # (H, N, 2P)
    m_0 = np.ones(theta.size) if m_first is None else m_first
    d_gap_kv = [_real(dc * np.conj(m_0 - (1.0 if m is None else m))) for m in refs[1:]]
    d_gap = [g[heads] for g in d_gap_kv]  # each (H, N, 2P)
    count_a, count_b, count_c = (torch.from_numpy(v)
                                 for v in (gram.count_a, gram.count_b, gram.count_c))  # fmt: skip
    row_w, col_w, diag_w = _band_sums(q_rot, k_rot_kv, window, heads)  # (H, N), (H, N), (H, n_a)
    assert col_w is not None and diag_w is not None
    row_e = [_band_sums(q_both, d_both_kv, window, heads, diagonals=False, columns=False)[0]]
    row_e += [row_e[0] + _band_sums(q_plain, g, window, heads, diagonals=False, columns=False)[0]
              for g in d_gap_kv]  # fmt: skip  # E_r = E_0 + x_r, row by row
    mean_w = row_w.sum(-1) / gram.pairs  # (H,)
    mean_e = [r.sum(-1) / gram.pairs for r in row_e]  # each (H,)
    row_w = row_w - mean_w[:, None] * count_b  # centred row sums
    row_e = [r - m[:, None] * count_b for r, m in zip(row_e, mean_e, strict=True)]
    n_ref = len(refs)
    ww = torch.zeros(h, n, dtype=torch.float64)  # per-row centred products
    we, ee = torch.zeros(2, n_ref, h, n, dtype=torch.float64)
    # rows per block (all heads): small blocks skip most of the acausal half, memory bounded;
    # three reused buffers (W, E_0, E_r) instead of fresh (H, rows, cols) tensors per product
    block = max(1, min(_BLOCK_ROWS, _WORK_BYTES // (3 * 8 * n * h)))
    buffers = [torch.empty(h * block * n, dtype=torch.float64) for _ in range(2 + (n_ref > 1))]
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        j0 = 0 if window is None else max(0, i0 - window + 1)
        w = _centred_block(q_rot, k_rot, mean_w, i0, i1, j0, window, buffers[0])
        ww[:, i0:i1] = torch.linalg.vector_norm(w, dim=-1) ** 2
        e_0 = _centred_block(q_both, d_both, mean_e[0], i0, i1, j0, window, buffers[1])
        for r in range(n_ref):
            # centred E_r = centred E_0 + centred <q, delta conj(m_0 - m_r)>
            if r == 0:
                e = e_0
            else:
                e = _centred_block(q_plain, d_gap[r - 1], mean_e[r] - mean_e[0], i0, i1, j0,
                                   window, buffers[2]).add_(e_0)  # fmt: skip
            ee[r, :, i0:i1] = torch.linalg.vector_norm(e, dim=-1) ** 2
            we[r, :, i0:i1] = torch.linalg.vecdot(w, e, dim=-1)
    several = count_b > 1  # a row of one pair has no spread about its mean: exactly 0
    res: dict[str, Any] = {
        "tww": ww.sum(-1).numpy(),
        "cww": torch.where(several, ww - row_w * row_w / count_b, 0.0).sum(-1).numpy(),
        "twe": [x.sum(-1).numpy() for x in we],
        "tee": [x.sum(-1).numpy() for x in ee],
        "cwe": [torch.where(several, we[r] - row_w * row_e[r] / count_b, 0.0).sum(-1).numpy()
                for r in range(n_ref)],
        "cee": [torch.where(several, ee[r] - row_e[r] * row_e[r] / count_b, 0.0).sum(-1).numpy()
                for r in range(n_ref)],
        "e_sq": [(ee[r].sum(-1) + gram.pairs * mean_e[r] ** 2).numpy() for r in range(n_ref)],
        "mean_w": mean_w.numpy(), "mean_e": [m.numpy() for m in mean_e],
    }  # fmt: skip
    rhs = torch.cat([diag_w - mean_w[:, None] * count_a, row_w,
                     col_w - mean_w[:, None] * count_c], -1)  # (H, K)  # fmt: skip
    res["rhs"] = rhs.T.contiguous().numpy()  # (K, H)
    return res


def _centred_block(
    x: torch.Tensor,
    y: torch.Tensor,
    mean: torch.Tensor,
    i0: int,
    i1: int,
    j0: int,
    window: int | None,
    buffer: torch.Tensor,
) -> torch.Tensor:
    """Rows ``i0:i1``, cols ``j0:i1`` of ``x y^T - mean``, 0 off the band: ``(H, rows, cols)``.

    Written into the front of ``buffer`` (flat, float64), which it returns a view of.
    """
    h = x.shape[0]
    m = buffer[: h * (i1 - i0) * (i1 - j0)].view(h, i1 - i0, i1 - j0)
    torch.baddbmm(-mean[:, None, None].expand(h, i1 - i0, i1 - j0), x[:, i0:i1],
                  y[:, j0:i1].mT, out=m)  # fmt: skip
    if window is None:
        m[..., j0 + (i0 - j0) :].tril_()  # columns i0 .. i1: the square block on the diagonal
        return m
    i = torch.arange(i0, i1)[:, None]
    j = torch.arange(j0, i1)[None, :]
    return m.mul_(((j <= i) & (i - j < window)).to(m.dtype))


def _pairs(n: int, window: int | None, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Causal pairs ``(i, j)`` numbered row by row: ``flat (S,)`` -> two ``(S,)`` int arrays."""
    gram = band_gram(n, window)
    ends = np.cumsum(gram.count_b.astype(np.int64))  # (N,) pairs up to and including row i
    i = np.searchsorted(ends, flat, side="right")
    first = np.maximum(0, i - gram.n_a + 1)  # first column of row i
    return i, first + (flat - (ends[i] - gram.count_b[i].astype(np.int64)))


def _tightness(
    qc: np.ndarray,
    dc: np.ndarray,
    theta: np.ndarray,
    pq: np.ndarray,
    pk: np.ndarray,
    s: float,
    window: int | None,
    pair_budget: int | None,
    seed: int,
    gap: np.ndarray | None = None,
) -> list[tuple[float, float, int | None, int]]:
    r"""Per head ``(max, median, sampled_pairs, violations)`` of :math:`|E_{ij}| / B_{ij}`.

    ``qc, dc (H, N, P)``: query pairs and the key-deviation pairs each head
    reads; ``gap`` is ``1 - m`` of the reference (None: :math:`m_l = 1`).
    Exact over every causal pair unless ``pair_budget`` is below the number
    of causal pairs: then on one seeded uniform sample of ``pair_budget``
    pairs shared by every head (the same pairs for a given seed).  The exact
    check runs compiled (:func:`.bound.causal_ratios`) when the positions are
    whole numbers of a step (:func:`_whole_steps`), else in row chunks with
    all heads at once (the angles are shared).
    """
    h, n, p = qc.shape
    n_pairs = band_gram(n, window).pairs
    sampling = pair_budget is not None and pair_budget < n_pairs
    whole = None if sampling else _whole_steps(pq, pk)
    if whole is not None:  # every pair, compiled; heads in chunks of bounded memory
        iq, ik, step = whole
        out = []
        for h0 in range(0, h, chunk := max(1, _WORK_BYTES // (8 * n_pairs))):
            ratio, bad_np = causal_ratios(qc[h0 : h0 + chunk], dc[h0 : h0 + chunk],
                                          theta * step, iq, ik, s, window=window,
                                          one_minus_m=gap)  # fmt: skip
            out += [_summary(r, None, int(b)) for r, b in zip(ratio, bad_np, strict=True)]
        return out
    q_parts = [torch.from_numpy(np.ascontiguousarray(z)) for z in (qc.real, qc.imag)]
    d_parts = [torch.from_numpy(np.ascontiguousarray(z)) for z in (dc.real, dc.imag)]
    ratios: list[list[torch.Tensor]] = [[] for _ in range(h)]
    bad = [0] * h
    sampled = None
    if sampling:
        assert pair_budget is not None
        sampled = int(pair_budget)
        flat = np.sort(np.random.default_rng(seed).choice(n_pairs, size=sampled, replace=False))
        i, j = _pairs(n, window, flat)  # (S,) each
        dist = pq[i] - pk[j]  # (S,)
        for c0 in range(0, sampled, _SAMPLE_CHUNK):  # cache-sized chunks: ~2x faster than one pass
            ti, tj = (torch.from_numpy(v[c0 : c0 + _SAMPLE_CHUNK]) for v in (i, j))
            e, bound = remainder_and_bound(
                (q_parts[0][:, ti], q_parts[1][:, ti]), (d_parts[0][:, tj], d_parts[1][:, tj]),
                theta, dist[c0 : c0 + _SAMPLE_CHUNK], s, one_minus_m=gap,
            )  # (H, chunk)  # fmt: skip
            for x in range(h):
                ratios[x].append(_ratio(e[x], bound[x]))
                bad[x] += violations(e[x], bound[x])
    else:
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
    return [_summary(torch.cat(ratios[x]) if ratios[x] else torch.zeros(0), sampled, bad[x])
            for x in range(h)]  # fmt: skip


def _whole_steps(pq: np.ndarray, pk: np.ndarray) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Positions as whole numbers of one step ``(iq, ik, step)``, or None.

    Queries and keys sharing one evenly spaced sequence count in steps of
    its spacing; otherwise whole-number positions count as they are, while
    their distances span at most :data:`_DISTANCE_TABLE` times ``N`` values.
    """
    n = pq.size
    steps = np.diff(pq)
    if np.array_equal(pq, pk) and (steps.size == 0 or (steps == steps[0]).all()):
        index = np.arange(n)
        return index, index, float(steps[0]) if n > 1 else 1.0  # a step of 0: Delta = 0
    whole = np.array_equal(pq, np.round(pq)) and np.array_equal(pk, np.round(pk))
    if whole and n and (pq.max() - pk.min()) - (pq.min() - pk.max()) < _DISTANCE_TABLE * n:
        return pq.astype(np.int64), pk.astype(np.int64), 1.0
    return None


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


def _order_statistics(r: np.ndarray, ranks: list[int], sample: int = _MEDIAN_SAMPLE) -> list[float]:
    """The values of rank ``ranks`` (0-based, ascending) in ``r``, exactly, without sorting ``r``.

    A bracket ``[lo, hi]`` around the ranks is read off an evenly strided
    sample of about ``sample`` values; one compiled pass counts the values
    below ``lo`` and gathers those inside, and when the bracket holds every
    asked rank only the values inside are partitioned (otherwise all of
    ``r``: slower, never wrong).
    """
    n = r.size
    step = max(1, n // sample)
    if step > 1:
        drawn = np.sort(r[::step])
        margin = 2.0 * math.sqrt(drawn.size) + 8  # four standard deviations of a sample rank
        at = [int(np.clip(k / n * drawn.size + d, 0, drawn.size - 1))
              for k, d in ((min(ranks), -margin), (max(ranks), margin))]  # fmt: skip
        inside = np.empty(n)
        below, count = _bracket()(r, float(drawn[at[0]]), float(drawn[at[1]]), inside)
        if below <= min(ranks) and below + count > max(ranks):
            inside = inside[:count]
            inside.partition([k - below for k in ranks])
            return [float(inside[k - below]) for k in ranks]
    part = np.partition(r, ranks)
    return [float(part[k]) for k in ranks]


@functools.cache
def _scan() -> Any:
    """Compiled: ``(max, count of -inf)`` of a 1-d float64 array in one pass."""
    import numba

    @numba.njit(cache=True)
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

    @numba.njit(cache=True)
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
