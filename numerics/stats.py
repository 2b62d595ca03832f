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
  term (:mod:`.bound`) in row chunks, and compared with the tolerance of
  :func:`.bound.violations`.  Pairs with ``B = 0`` are left out of the
  tightness ratio (their ``E`` is 0, else they count as violations).  The
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

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from ropesplit.numerics import _inputs
from ropesplit.numerics.bootstrap import Interval
from ropesplit.numerics.bound import ATOL, RTOL, remainder_and_bound, violations
from ropesplit.numerics.fit import band_gram
from ropesplit.numerics.reference import Reference, canonical, resolve_reference
from ropesplit.numerics.rope import to_pairs

from ropesplit.errors import RopesplitError

__all__ = ["HeadStats", "head_statistics", "layer_statistics", "pooled_correlation",
           "pooled_correlation_ci"]

_WORK_BYTES = 2**29  # working memory of one chunk of (N, N) matrices or bound terms
_SAMPLE_CHUNK = 512  # sampled pairs per batched bound evaluation (all heads at once)
_EXACT_CHUNK = 2**19  # (head, pair, frequency) terms per chunk of the exact bound check


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
    i = torch.arange(n)
    lo = torch.from_numpy(gram.first_col)  # row i: columns lo_i .. i
    hi = torch.from_numpy(gram.last_row + 1)  # column j: rows j .. hi_j - 1
    cx = torch.cat([x.new_zeros(h, 1, c), x.cumsum(1)], 1) if columns else None  # (H, N+1, c)
    cy = torch.cat([y.new_zeros(y.shape[0], 1, c), y.cumsum(1)], 1)  # (Hkv, N + 1, c)
    rows = (x * (cy[:, i + 1] - cy[:, lo])[heads]).sum(-1)  # (H, N)
    cols = None if cx is None else (y[heads] * (cx[:, hi] - cx[:, i])).sum(-1)  # (H, N)
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
    causal part only, centred by the product's bias (``baddbmm``), and reduced
    to per-row norms at once: ``W . E`` per row is
    :math:`(\|w + e\|^2 - \|w\|^2 - \|e\|^2)/2`.  ``E_m`` is
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
    row_e = [_band_sums(q_both, d_both_kv, window, heads, diagonals=False)[0]]  # E_0's rows
    row_e += [row_e[0] + _band_sums(q_plain, g, window, heads, diagonals=False, columns=False)[0]
              for g in d_gap_kv]  # fmt: skip  # E_r = E_0 + x_r, row by row
    mean_w = row_w.sum(-1) / gram.pairs  # (H,)
    mean_e = [r.sum(-1) / gram.pairs for r in row_e]  # each (H,)
    row_w = row_w - mean_w[:, None] * count_b  # centred row sums
    row_e = [r - m[:, None] * count_b for r, m in zip(row_e, mean_e, strict=True)]
    n_ref = len(refs)
    ww = torch.zeros(h, n, dtype=torch.float64)  # per-row centred products
    we, ee = torch.zeros(2, n_ref, h, n, dtype=torch.float64)
    # rows per block (all heads): a few blocks skip most of the acausal half, memory bounded
    block = max(1, min(max(128, -(-n // 4)), _WORK_BYTES // ((3 + (n_ref > 1)) * 8 * n * h)))
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        j0 = 0 if window is None else max(0, i0 - window + 1)
        w = _centred_block(q_rot, k_rot, mean_w, i0, i1, j0, window)
        ww[:, i0:i1] = torch.linalg.vector_norm(w, dim=-1) ** 2
        e_0 = _centred_block(q_both, d_both, mean_e[0], i0, i1, j0, window)
        for r in range(n_ref):
            if r == 0:
                e = e_0 if n_ref == 1 else e_0.clone()
            else:  # centred E_r = centred E_0 + centred <q, delta conj(m_0 - m_r)>
                e = _centred_block(q_plain, d_gap[r - 1], mean_e[r] - mean_e[0], i0, i1, j0,
                                   window).add_(e_0)  # fmt: skip
            ee[r, :, i0:i1] = torch.linalg.vector_norm(e, dim=-1) ** 2
            both = torch.linalg.vector_norm(e.add_(w), dim=-1) ** 2
            we[r, :, i0:i1] = 0.5 * (both - ww[:, i0:i1] - ee[r, :, i0:i1])
            del e
        del w, e_0
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
) -> torch.Tensor:
    """Rows ``i0:i1``, cols ``j0:i1`` of ``x y^T - mean``, 0 off the band: ``(H, rows, cols)``."""
    h = x.shape[0]
    m = torch.baddbmm(-mean[:, None, None].expand(h, i1 - i0, i1 - j0),
                      x[:, i0:i1], y[:, j0:i1].mT)  # fmt: skip
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
    Exact over every causal pair, in row chunks with all heads at once (the
    angles are shared), unless ``pair_budget`` is below the number of causal
    pairs: then on one seeded uniform sample of ``pair_budget`` pairs shared
    by every head (the same pairs for a given seed).
    """
    h, n, p = qc.shape
    n_pairs = band_gram(n, window).pairs
    q_parts = [torch.from_numpy(np.ascontiguousarray(z)) for z in (qc.real, qc.imag)]
    d_parts = [torch.from_numpy(np.ascontiguousarray(z)) for z in (dc.real, dc.imag)]
    ratios: list[list[torch.Tensor]] = [[] for _ in range(h)]
    bad = [0] * h
    sampled = None
    if pair_budget is not None and pair_budget < n_pairs:
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
    elif _evenly_spaced(pq, pk):
        step = pq[1] - pq[0] if n > 1 else 1.0
        return _tightness_toeplitz(qc, dc, theta * step, s, window, gap)
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


def _evenly_spaced(pq: np.ndarray, pk: np.ndarray) -> bool:
    """True when queries and keys share one evenly spaced sequence: ``Delta = step (i - j)``."""
    steps = np.diff(pq)
    return bool(np.array_equal(pq, pk) and (steps.size == 0 or (steps == steps[0]).all()))


def _tightness_toeplitz(
    qc: np.ndarray,
    dc: np.ndarray,
    theta: np.ndarray,
    s: float,
    window: int | None,
    gap: np.ndarray | None,
) -> list[tuple[float, float, int | None, int]]:
    r"""Exact :func:`_tightness` over every causal pair when ``Delta = i - j`` (``theta`` per step).

    Diagonal by diagonal: the pairs at distance :math:`\Delta` share
    :math:`u_l = e^{i\theta_l\Delta} - m_l` (from half angles and ``gap = 1 - m``, no
    cancellation), so per diagonal

    .. math:: E = s\,\mathrm{Re}\sum_l \big(\tilde q_{i,l}\overline{\tilde\delta_{i-\Delta,l}}\big)
              u_l,\qquad B = s\sum_l |\tilde q_{i,l}||\tilde\delta_{i-\Delta,l}|\,|u_l|

    are one elementwise product and one matrix-vector product over the heads:
    term by term like :func:`.bound.remainder_and_bound`, without a sine per term.
    """
    h, n, _ = qc.shape
    span = n if window is None else min(n, window)
    x = np.arange(span, dtype=np.float64)[:, None] * theta  # (D, P) angles theta_l Delta
    half_sin, half_cos = np.sin(0.5 * x), np.cos(0.5 * x)
    u_re, u_im = -2.0 * half_sin * half_sin, 2.0 * half_sin * half_cos  # e^{ix} - 1
    if gap is not None:
        u_re, u_im = u_re + gap.real, u_im + gap.imag  # e^{ix} - m
    u = torch.from_numpy(u_re + 1j * u_im)  # (D, P)
    u_abs = torch.from_numpy(np.hypot(u_re, u_im))  # (D, P)
    q_t, d_t = torch.from_numpy(qc), torch.from_numpy(np.conj(dc))  # (H, N, P) each
    q_abs, d_abs = torch.from_numpy(np.abs(qc)), torch.from_numpy(np.abs(dc))
    ratio = torch.empty(h, span * n - span * (span - 1) // 2, dtype=torch.float64)  # (H, pairs)
    bad = torch.zeros(h, dtype=torch.int64)
    at = 0
    for delta in range(span):
        e, bound = _diagonal_terms(q_t, d_t, q_abs, d_abs, u, u_abs, delta, s)  # (H, N - Delta)
        bad += (e.abs() > bound * (1.0 + RTOL) + ATOL).sum(-1)  # as bound.violations, per head
        ratio[:, at : at + n - delta] = torch.where(bound > 0, e.abs() / bound, math.nan)
        at += n - delta
    out = []
    for x in range(h):
        r = ratio[x][~torch.isnan(ratio[x])]  # pairs with B > 0
        out.append(_summary(r, None, int(bad[x])))
    return out


def _diagonal_terms(
    q_t: torch.Tensor,
    d_t: torch.Tensor,
    q_abs: torch.Tensor,
    d_abs: torch.Tensor,
    u: torch.Tensor,
    u_abs: torch.Tensor,
    delta: int,
    s: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(E, B)`` ``(H, N - Delta)`` on the diagonal ``i - j = Delta``: see the caller."""
    n = q_t.shape[1]
    z = q_t[:, delta:] * d_t[:, : n - delta]  # (H, N - Delta, P)  q~_i conj(delta~_j)
    e = s * (z @ u[delta]).real  # (H, N - Delta)
    bound = s * ((q_abs[:, delta:] * d_abs[:, : n - delta]) @ u_abs[delta])
    return e, bound


def _summary(
    ratio: torch.Tensor, sampled: int | None, bad: int
) -> tuple[float, float, int | None, int]:
    """``(max, median, sampled, violations)`` of one head's ratios (NaN when there are none)."""
    r = ratio.numpy()
    if r.size == 0:
        return math.nan, math.nan, sampled, bad
    return float(r.max()), float(np.median(r)), sampled, bad


def _ratio(e: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """``|E| / B`` at the pairs with ``B > 0``."""
    pos = bound > 0
    return e[pos].abs() / bound[pos]
