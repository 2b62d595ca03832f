r"""The THEORY.md section 5 statistics of a head, vectorised over the heads of a layer.

Over the causal pairs :math:`\mathcal M` (``j <= i``, and ``i - j < window``):

.. math::
    r_\mathrm{split} &= \mathrm{corr}_{\mathcal M}(W, f + g),\qquad
    \text{remainder share} = \|E\|_F / \|W - \overline W\|_F \\
    r_\mathrm{3axis} &= \mathrm{corr}_{\mathcal M}(W, \hat a_{i-j} + \hat b_i + \hat c_j),\qquad
    \text{tightness}_{ij} = |E_{ij}| / B_{ij}

``r_split_rowcentred`` is the same correlation after subtracting each row's
mean over its causal pairs from both sides (what softmax can see).
``lowfreq_share`` is the share of deviation energy
:math:`\sum_j|\tilde\delta_{jl}|^2` in the lower-frequency half of the pairs
(pairs sorted by :math:`\theta`, non-rotating ones lowest; with an odd number
of pairs the middle one counts half), for keys about ``kbar`` and for
queries about their mean.

How it is computed (all float64):

- ``W = s Qrot Krot^T`` and ``E = s (Qrot Drot^T - Q D^T)`` are matrix
  products of rotated real features, and ``f + g = W - E``; all heads of a
  layer go through one batched product, in head chunks of bounded memory.
- ``r_3axis`` needs only the masked diagonal, row and column sums of ``W``
  (:mod:`.fit`: ``O(N)`` normal equations solved to convergence, cached per
  ``(N, window)``); its correlation is :math:`\sqrt{x^\top A^\top w / \|w\|^2}`
  for the centred logits ``w``.
- the bound is the only ``N^2 P`` term: ``E`` and ``B`` are evaluated term by
  term (:mod:`.bound`) in row chunks, and compared with the tolerance of
  :func:`.bound.violations`.  Pairs with ``B = 0`` are left out of the
  tightness ratio (their ``E`` is 0, else they count as violations).  When
  ``pairs * P`` exceeds ``pair_budget`` the tightness and the violation count
  come from a seeded uniform sample of ``pair_budget // P`` causal pairs and
  ``sampled_pairs`` says how many; every other statistic stays exact.

Shapes::

    q       (H, N, d)     pre-RoPE queries of the layer's query heads
    k       (Hkv, N, d)   pre-RoPE keys; query head h reads k[kv_map[h]]
    theta   (d/2,)        frequencies, 0 for non-rotating pairs
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from ropesplit.numerics import _inputs
from ropesplit.numerics.bound import remainder_and_bound, violations
from ropesplit.numerics.fit import band_gram
from ropesplit.numerics.rope import to_pairs

from ropesplit.errors import RopesplitError

__all__ = ["PAIR_BUDGET", "HeadStats", "head_statistics", "layer_statistics"]

PAIR_BUDGET = 2**21  # (pair, frequency) terms of the exact bound check before sampling
_WORK_BYTES = 2**29  # working memory of one chunk of (N, N) matrices or bound terms


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
    pair_budget: int | None = PAIR_BUDGET,
    seed: int = 0,
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
                            pair_budget=pair_budget, seed=seed)[0]  # fmt: skip


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
    pair_budget: int | None = PAIR_BUDGET,
    seed: int = 0,
) -> list[HeadStats]:
    r"""The section 5 statistics of every query head of a layer, batched.

    ``q (H, N, d)`` and ``k (Hkv, N, d)`` are pre-RoPE (numpy or CPU torch);
    head ``h`` reads KV head ``kv_map[h]``; ``kbar (Hkv, d)`` defaults to each
    KV head's mean key; ``positions`` is ``(N,)`` or ``(positions_q,
    positions_k)``; ``pair_budget`` caps the exact bound check (None: always
    exact); ``seed`` fixes the pair sample.

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
    if pair_budget is not None and pair_budget < th.size:
        raise RopesplitError(f"pair_budget must be at least d/2 = {th.size}, got {pair_budget}")
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
    sums = _logit_sums(qc, kc, dc, kv, th, pq, pk, s, w)
    tight = [_tightness(qc[i], dc[kv[i]], th, pq, pk, s, w, pair_budget, seed) for i in range(h)]
    gram = band_gram(n, w)
    x, _ = gram.solve(sums["rhs"])  # (K, H)
    fit_share = np.maximum((x * sums["rhs"]).sum(0), 0.0)  # (H,) ||fit - mean||^2
    out = []
    for i in range(h):
        tww, twe, tee = sums["tww"][i], sums["twe"][i], sums["tee"][i]
        cww, cwe, cee = sums["cww"][i], sums["cwe"][i], sums["cee"][i]
        out.append(HeadStats(
            r_split=_corr(tww - twe, tww, tww - 2 * twe + tee),
            r_split_rowcentred=_corr(cww - cwe, cww, cww - 2 * cwe + cee),
            r_3axis=_corr(fit_share[i], tww, fit_share[i]),
            remainder_share=math.sqrt(sums["e_sq"][i] / tww) if tww > 0 else math.nan,
            tightness_max=tight[i][0], tightness_median=tight[i][1],
            lowfreq_share_k=float(low_k[i]), lowfreq_share_q=float(low_q[i]),
            n_pairs=gram.pairs, sampled_pairs=tight[i][2], violations=tight[i][3],
        ))  # fmt: skip
    return out


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


def _mask_(x: torch.Tensor, window: int | None) -> torch.Tensor:
    """Zero ``x (..., N, N)`` off the causal (banded) mask, in place."""
    x.tril_()
    if window is not None:
        x.triu_(-(window - 1))
    return x


def _diagonal_sums(x: torch.Tensor, n_a: int) -> torch.Tensor:
    r"""``(hc, n_a)`` diagonal sums :math:`\sum_i x_{i, i-D}` of lower-triangular ``x``.

    Read row-major with rows of ``N + 1`` instead of ``N``, entry ``(i, j)``
    lands in column ``(j - i) mod (N + 1)``: a column sum then sums a diagonal.
    """
    hc, n, _ = x.shape
    flat = torch.nn.functional.pad(x.reshape(hc, n * n), (0, n))  # (hc, N (N + 1))
    cols = flat.reshape(hc, n, n + 1).sum(1)  # (hc, N + 1); column (N + 1 - D) mod (N + 1)
    dist = torch.arange(n_a)
    return cols[:, (n + 1 - dist) % (n + 1)]


def _logit_sums(
    qc: np.ndarray,
    kc: np.ndarray,
    dc: np.ndarray,
    kv: np.ndarray,
    theta: np.ndarray,
    pq: np.ndarray,
    pk: np.ndarray,
    s: float,
    window: int | None,
) -> dict[str, np.ndarray]:
    r"""Masked second moments of ``W`` and ``E`` per head, and the three-axis right-hand side.

    Per head: ``tww, twe, tee`` (sums of centred products), ``cww, cwe, cee``
    (row-centred), ``e_sq`` (:math:`\|E\|_F^2`) and ``rhs (K,)`` the
    distance, row and column sums of the centred ``W``.
    """
    h, n, _ = qc.shape
    gram = band_gram(n, window)
    rot_q = np.exp(1j * pq[:, None] * theta)  # (N, P)
    rot_k = np.exp(1j * pk[:, None] * theta)  # (N, P)
    q_rot = _real(qc * rot_q)  # (H, N, 2P)
    q_both = torch.cat([q_rot, _real(qc)], -1)  # (H, N, 4P) [R(p_i) q_i, q_i]
    k_rot = _real(kc * rot_k)  # (Hkv, N, 2P)
    d_both = torch.cat([_real(dc * rot_k), -_real(dc)], -1)  # (Hkv, N, 4P) [R(p'_j) d_j, -d_j]
    counts = torch.from_numpy(gram.count_b)  # (N,) pairs per row
    n_pairs = float(gram.pairs)
    out: dict[str, list[Any]] = {key: [] for key in
                                 ("tww", "twe", "tee", "cww", "cwe", "cee", "e_sq", "rhs")}
    chunk = max(1, _WORK_BYTES // (3 * 8 * n * n))
    for h0 in range(0, h, chunk):
        heads = torch.from_numpy(kv[h0 : h0 + chunk])
        w = _mask_(s * (q_rot[h0 : h0 + chunk] @ k_rot[heads].mT), window)  # (hc, N, N)
        e = _mask_(s * (q_both[h0 : h0 + chunk] @ d_both[heads].mT), window)  # (hc, N, N)
        out["e_sq"].append((e * e).sum((1, 2)))
        for x in (w, e):  # centre on the mask, so the sums below do not cancel
            x.sub_((x.sum((1, 2)) / n_pairs)[:, None, None])
            _mask_(x, window)
        row_w, row_e = w.sum(-1), e.sum(-1)  # (hc, N)
        ww, we, ee = ((a * b).sum(-1) for a, b in ((w, w), (w, e), (e, e)))  # (hc, N) each
        out["tww"].append(ww.sum(-1))
        out["twe"].append(we.sum(-1))
        out["tee"].append(ee.sum(-1))
        out["cww"].append((ww - row_w * row_w / counts).sum(-1))
        out["cwe"].append((we - row_w * row_e / counts).sum(-1))
        out["cee"].append((ee - row_e * row_e / counts).sum(-1))
        out["rhs"].append(torch.cat([_diagonal_sums(w, gram.n_a), row_w, w.sum(-2)], -1))
        del w, e
    res = {key: torch.cat(val).numpy() for key, val in out.items()}
    res["rhs"] = res["rhs"].T.copy()  # (K, H)
    return res


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
) -> tuple[float, float, int | None, int]:
    r"""``(max, median, sampled_pairs, violations)`` of :math:`|E_{ij}| / B_{ij}` for one head.

    ``qc, dc (N, P)``: query pairs and key-deviation pairs.  Exact over all
    causal pairs in row chunks when ``pairs * P <= pair_budget``, else on a
    seeded uniform sample of ``pair_budget // P`` pairs.
    """
    n, p = qc.shape
    n_pairs = band_gram(n, window).pairs
    ratios, bad = [], 0
    if pair_budget is not None and n_pairs * p > pair_budget:
        size = pair_budget // p
        flat = np.sort(np.random.default_rng(seed).choice(n_pairs, size=size, replace=False))
        i, j = _pairs(n, window, flat)  # (S,) each
        e, bound = remainder_and_bound(qc[i], dc[j], theta, pq[i] - pk[j], s)  # (S,) each
        ratios.append(_ratio(e, bound))
        bad, sampled = violations(e, bound), size
    else:
        rows = max(1, _WORK_BYTES // (12 * 8 * n * max(p, 1)))
        for i0 in range(0, n, rows):
            i1 = min(n, i0 + rows)
            j0 = 0 if window is None else max(0, i0 - window + 1)
            e, bound = remainder_and_bound(qc[i0:i1, None, :], dc[None, j0:i1, :], theta,
                                           pq[i0:i1, None] - pk[None, j0:i1], s)  # (rows, cols)
            ii, jj = np.arange(i0, i1)[:, None], np.arange(j0, i1)[None, :]
            keep = torch.from_numpy((jj <= ii) & (ii - jj < (n if window is None else window)))
            e, bound = e[keep], bound[keep]  # (pairs in chunk,)
            ratios.append(_ratio(e, bound))
            bad += violations(e, bound)
        sampled = None
    ratio = torch.cat(ratios).numpy()
    if ratio.size == 0:
        return math.nan, math.nan, sampled, bad
    return float(ratio.max()), float(np.median(ratio)), sampled, bad


def _ratio(e: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """``|E| / B`` at the pairs with ``B > 0``."""
    pos = bound > 0
    return e[pos].abs() / bound[pos]
