r"""What the section 5 statistics share between their numpy/numba kernels (:mod:`.stats`)
and their dense torch blocks (:mod:`.stats_torch`): the real features of the logits and
the remainder, the row moments they give, and the plan of a tightness check's causal
pairs. Neither kernel module imports the other's private names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ropesplit.numerics.fit import band_gram
from ropesplit.numerics.workers import one_blas_thread

__all__ = ["BLOCK_ROWS", "DISTANCE_TABLE", "WORK_BYTES", "BoundCheck", "Factors", "Moments",
           "pair_indices", "pair_plan", "prefix_moments", "row_blocks", "whole_steps"]

DISTANCE_TABLE = 64  # whole-number positions: distance-table rows per token, at most
WORK_BYTES = 2**29  # working memory of one chunk: bound ratios, or a span's prefix sums
BLOCK_ROWS = 64  # rows per block sharing one prefix of the keys' outer products


Moments = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # S^WW (H, N), S^WE, S^EE (M, H, N)

@dataclass(frozen=True)
class BoundCheck:
    r"""What the check :math:`|E_{ij}| \le B_{ij}` of a layer's heads reads (docs/theory.md
    section 3): ``tightness`` of :mod:`.stats` and of :mod:`.stats_torch` take it whole."""

    qc: np.ndarray  # (H, N, P) complex query pairs
    dc: np.ndarray  # (H, N, P) complex key deviations, the ones each query head reads
    theta: np.ndarray  # (P,) frequencies
    pq: np.ndarray  # (N,) query positions
    pk: np.ndarray  # (N,) key positions
    scale: float  # the logit scale s
    window: int | None  # sliding window (None: every causal pair)
    gap: np.ndarray | None = None  # (P,) complex 1 - m_l of the reference (None: m_l = 1)


@dataclass(frozen=True)
class Factors:
    r"""The real features of :math:`W = a\cdot y` and :math:`E_m = a\cdot b - u^m\cdot\delta`."""

    a: torch.Tensor  # (H, N, c) R(p_i) q_i
    y: torch.Tensor  # (Hkv, N, c) R(p'_j) k_j
    b: torch.Tensor  # (Hkv, N, c) R(p'_j) delta_j
    dp: torch.Tensor  # (Hkv, N, c) delta_j
    us: torch.Tensor  # (M, H, N, c): q_i m, one per reference
    kv: np.ndarray  # (H,) the KV head each query head reads

def pair_indices(n: int, window: int | None, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Causal pairs ``(i, j)`` numbered row by row: ``flat (S,)`` -> two ``(S,)`` int arrays."""
    gram = band_gram(n, window)
    ends = np.cumsum(gram.count_b.astype(np.int64))  # (N,) pairs up to and including row i
    i = np.searchsorted(ends, flat, side="right")
    first = np.maximum(0, i - gram.n_a + 1)  # first column of row i
    return i, first + (flat - (ends[i] - gram.count_b[i].astype(np.int64)))

def pair_plan(
    n: int, window: int | None, pair_budget: int | None, seed: int, pq: np.ndarray, pk: np.ndarray
) -> tuple[int, np.ndarray | None, tuple[np.ndarray, np.ndarray, float] | None]:
    """``(n_pairs, flat, whole)`` of a tightness check: the causal pairs, the seeded sample of
    ``pair_budget`` of them (flat indices, sorted; None when every pair is checked) and, for an
    exact check, the positions as whole steps (:func:`whole_steps`)."""
    n_pairs = band_gram(n, window).pairs
    if pair_budget is not None and pair_budget < n_pairs:
        rng = np.random.default_rng(seed)
        return n_pairs, np.sort(rng.choice(n_pairs, size=int(pair_budget), replace=False)), None
    return n_pairs, None, whole_steps(pq, pk)


def whole_steps(pq: np.ndarray, pk: np.ndarray) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Positions as whole numbers of one step ``(iq, ik, step)``, or None.

    Queries and keys sharing one evenly spaced sequence count in steps of
    its spacing; otherwise whole-number positions count as they are, while
    their distances span at most :data:`DISTANCE_TABLE` times ``N`` values.
    """
    n = pq.size
    steps = np.diff(pq)
    if np.array_equal(pq, pk) and (steps.size == 0 or (steps == steps[0]).all()):
        index = np.arange(n)
        return index, index, float(steps[0]) if n > 1 else 1.0  # a step of 0: Delta = 0
    whole = np.array_equal(pq, np.round(pq)) and np.array_equal(pk, np.round(pk))
    if whole and n and (pq.max() - pk.min()) - (pq.min() - pk.max()) < DISTANCE_TABLE * n:
        return pq.astype(np.int64), pk.astype(np.int64), 1.0
    return None


def prefix_moments(f: Factors, block: int) -> Moments:
    r"""Row moments over the columns before each row's block of ``block`` rows, on the
    features' device (CPU or GPU: the same code).

    Every row of block ``t`` sees all columns ``j < tB``; their moments are
    quadratic forms in prefix sums of the key features' outer products (per
    KV head), :math:`G^{yb} = \sum_{j < tB} y_j b_j^\top` and so on:

    .. math:: \sum_{j < tB} W_{ij}^2 = a_i^\top G^{yy} a_i,\quad
              \sum_{j < tB} W_{ij}E_{ij} = a_i^\top G^{yb} a_i - a_i^\top G^{y\delta} u_i,

    .. math:: \sum_{j < tB} E_{ij}^2 = a_i^\top G^{bb} a_i - 2 a_i^\top G^{b\delta} u_i
              + u_i^\top G^{\delta\delta} u_i

    Blocks go in spans of bounded memory, the prefix sums carried across.
    On the CPU the float64 products go through numpy's BLAS (:func:`_mm`), held to one
    thread (:func:`.workers.one_blas_thread`); on a GPU through torch.
    """
    a, y, b, dp, us = f.a, f.y, f.b, f.dp, f.us
    h, n, c = a.shape
    hkv, dev = y.shape[0], a.device
    groups = [torch.from_numpy(np.flatnonzero(f.kv == g)).to(dev) for g in range(hkv)]
    per_block = 8 * (2 * hkv * 6 * c * c + h * block * 6 * c)  # bytes of work
    span = max(1, WORK_BYTES // per_block)
    # the upper blocks of sum z z^T, z = (y, b, delta): rows y (3c columns), b (2c), delta (c)
    carry = [torch.zeros(hkv, 1, c, width, dtype=torch.float64, device=dev)
             for width in (3 * c, 2 * c, c)]  # fmt: skip
    s_ww = torch.empty(h, n, dtype=torch.float64, device=dev)
    s_we, s_ee = torch.empty(2, len(us), h, n, dtype=torch.float64, device=dev)
    keys = torch.cat([y, b, dp], -1)  # (Hkv, N, 3c)
    with one_blas_thread():
        for t0 in range(0, n, span * block):
            t1 = min(n, t0 + span * block)
            z = row_blocks(keys, t0, t1, block)  # (Hkv, nb, B, 3c)
            inner = [_mm(z[..., k * c : (k + 1) * c].mT, z[..., k * c :]) for k in range(3)]
            before = []  # the columns before each block: G^{y.}, G^{b.}, G^{dd}
            for k, part in enumerate(inner):
                before.append(torch.cumsum(part, 1).sub_(part).add_(carry[k]))
                carry[k] = before[k][:, -1:] + part[:, -1:]
            g_y, g_b, g_d = before
            ab = row_blocks(a, t0, t1, block)  # (H, nb, B, c)
            ub = [row_blocks(u, t0, t1, block) for u in us]
            for g, hs in enumerate(groups):  # the query heads reading KV head g share its sums
                if hs.numel() == 0:
                    continue
                x = ab[hs]  # (Hg, nb, B, c)
                xy = _mm(x, g_y[g])  # (Hg, nb, B, 3c): a G_yy, a G_yb, a G_yd
                xb = _mm(x, g_b[g])  # (Hg, nb, B, 2c): a G_bb, a G_bd
                ab_ab = torch.linalg.vecdot(xb[..., :c], x)  # a G_bb a
                ay_ab = torch.linalg.vecdot(xy[..., c : 2 * c], x)  # a G_yb a
                s_ww[hs, t0:t1] = torch.linalg.vecdot(xy[..., :c], x).flatten(1)[:, : t1 - t0]
                for r, u in enumerate(ub):
                    v = u[hs]
                    vd = _mm(v, g_d[g]).sub_(xb[..., c:], alpha=2)
                    s_ee[r, hs, t0:t1] = (torch.linalg.vecdot(vd, v) + ab_ab
                                          ).flatten(1)[:, : t1 - t0]  # fmt: skip
                    s_we[r, hs, t0:t1] = (ay_ab - torch.linalg.vecdot(xy[..., 2 * c :], v)
                                          ).flatten(1)[:, : t1 - t0]  # fmt: skip
    return s_ww, s_we, s_ee


def _mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x @ y`` (batched, broadcast): on the CPU through numpy's BLAS (OpenBLAS multiplies
    these small batched float64 blocks faster than torch's MKL build, which takes a generic
    path on AMD CPUs: ``benchmarks/bench_numerics.py``), elsewhere through torch."""
    if x.device.type != "cpu":
        return x @ y
    return torch.from_numpy(np.matmul(x.numpy(), y.numpy()))


def row_blocks(x: torch.Tensor, t0: int, t1: int, block: int) -> torch.Tensor:
    """Rows ``t0:t1`` of ``x (X, N, c)`` as ``(X, nb, block, c)``, the last block 0-padded."""
    nb = -(-(t1 - t0) // block)
    part = x[:, t0:t1]
    if nb * block > t1 - t0:
        part = torch.nn.functional.pad(part, (0, 0, 0, nb * block - (t1 - t0)))
    return part.reshape(x.shape[0], nb, block, x.shape[-1])
