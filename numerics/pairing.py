r"""What the section 5 statistics share between their numpy/numba kernels (:mod:`.stats`)
and their dense torch blocks (:mod:`.stats_torch`): the real features of the logits and
the remainder, the row moments they give, and the plan of a tightness check's causal
pairs. Neither kernel module imports the other's private names.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ropesplit.numerics.fit import band_gram
from ropesplit.numerics.workers import one_blas_thread

__all__ = ["BLOCK_ROWS", "DISTANCE_TABLE", "WORK_BYTES", "BoundCheck", "Factors", "Moments",
           "complex_pairs", "pair_indices", "pair_plan", "prefix_moments", "real_pairs",
           "row_blocks", "times", "whole_steps"]

DISTANCE_TABLE = 64  # whole-number positions: distance-table rows per token, at most
WORK_BYTES = 2**29  # working memory of one chunk: bound ratios, or a span's prefix sums
BLOCK_ROWS = 64  # rows per block sharing one prefix of the keys' outer products


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
    r"""The real features of :math:`W = a\cdot y` and :math:`E_m = a\cdot b - u^m\cdot\delta`,
    :math:`u^m = q\,m`: each pair of ``q`` times the reference's :math:`m_l` (:func:`times`)."""

    a: torch.Tensor  # (H, N, c) R(p_i) q_i
    y: torch.Tensor  # (Hkv, N, c) R(p'_j) k_j
    b: torch.Tensor  # (Hkv, N, c) R(p'_j) delta_j
    dp: torch.Tensor  # (Hkv, N, c) delta_j
    q: torch.Tensor  # (H, N, c) q_i
    m: torch.Tensor  # (M, c/2) complex m_l, one row per reference
    kv: np.ndarray  # (H,) the KV head each query head reads

    @functools.cached_property
    def us(self) -> torch.Tensor:
        r"""``(M, H, N, c)``: :math:`u^m_i = q_i\,m`, one per reference (:func:`times`
        of each, in one product)."""
        return real_pairs(complex_pairs(self.q.contiguous()) * self.m[:, None, None, :])

    def to(self, device: torch.device) -> Factors:
        """The same features as float64 tensors on ``device``."""
        a, y, b, dp, q = (x.to(device, torch.float64)
                          for x in (self.a, self.y, self.b, self.dp, self.q))  # fmt: skip
        return Factors(a, y, b, dp, q, self.m.to(device), self.kv)


@dataclass(frozen=True)
class Moments:
    r"""Raw moments of the pairs :math:`\sum W^2`, :math:`\sum W E^m`, :math:`\sum (E^m)^2`:
    per row those of the row's own block of :data:`BLOCK_ROWS` rows (or, with a window,
    its whole band), and per head those of the columns before each row's block, summed
    over the rows (:func:`prefix_moments`; zero with a window). Every statistic reads
    sums over rows, so the second need not be spread back over them."""

    ww: torch.Tensor  # (H, N)
    we: torch.Tensor  # (M, H, N)
    ee: torch.Tensor  # (M, H, N)
    ww_before: torch.Tensor  # (H,)
    we_before: torch.Tensor  # (M, H)
    ee_before: torch.Tensor  # (M, H)

    @classmethod
    def zeros(cls, h: int, n: int, refs: int, device: torch.device) -> Moments:
        """No pair counted yet: ``h`` heads, ``n`` rows, ``refs`` references."""
        z = functools.partial(torch.zeros, dtype=torch.float64, device=device)
        return cls(z(h, n), z(refs, h, n), z(refs, h, n), z(h), z(refs, h), z(refs, h))

    def fields(self) -> tuple[torch.Tensor, ...]:
        """The six tensors, in the order above."""
        return (self.ww, self.we, self.ee, self.ww_before, self.we_before, self.ee_before)


def real_pairs(z: torch.Tensor) -> torch.Tensor:
    """Complex pairs ``(..., P)`` -> real features ``(..., 2P)``, each pair's real and imaginary
    part side by side (a view where ``z`` is contiguous: every feature is read only through
    dot products, which any common order of the coordinates leaves unchanged)."""
    return torch.view_as_real(z.resolve_conj()).flatten(-2)


def complex_pairs(x: torch.Tensor) -> torch.Tensor:
    """Real features ``(..., 2P)`` -> complex pairs ``(..., P)``, :func:`real_pairs` undone
    (a view: ``x``'s last axis must be contiguous)."""
    return torch.view_as_complex(x.unflatten(-1, (-1, 2)))


def times(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    r"""Real pairs ``x (..., 2P)`` times complex ``m (P,)``, pair by pair: :math:`x\,T_m` for the
    block-diagonal :math:`T_m` of :math:`\begin{pmatrix}\Re m_l & \Im m_l\\ -\Im m_l & \Re
    m_l\end{pmatrix}` (each pair read as the complex number :math:`x_{2l} + i x_{2l+1}`)."""
    return real_pairs(complex_pairs(x.contiguous()) * m)


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


def prefix_moments(f: Factors, block: int, into: Moments) -> None:
    r"""Add the moments of the columns before each row's block of ``block`` rows, summed over
    the rows, into ``into``'s ``*_before`` (per head), on the features' device (CPU or GPU:
    the same code).

    Every row of block ``t`` sees all columns ``j < tB``; their moments are quadratic forms
    in prefix sums of the key features' outer products (per KV head),
    :math:`G^{yb}_t = \sum_{j < tB} y_j b_j^\top` and so on, and summed over the block's
    rows they are inner products :math:`\langle G, X\rangle = \sum_{kl} G_{kl} X_{kl}` with the
    block's own sums :math:`A_t = \sum_{i \in t} a_i a_i^\top`,
    :math:`C_t = \sum_{i \in t} a_i q_i^\top`, :math:`Q_t = \sum_{i \in t} q_i q_i^\top`:

    .. math:: \sum_{i \in t}\sum_{j < tB} W_{ij}^2 = \langle G^{yy}_t, A_t\rangle,\quad
              \sum_{i \in t}\sum_{j < tB} W_{ij}E^m_{ij} = \langle G^{yb}_t, A_t\rangle
              - \langle G^{y\delta}_t, C_t T_m\rangle,

    .. math:: \sum_{i \in t}\sum_{j < tB} (E^m_{ij})^2 = \langle G^{bb}_t, A_t\rangle
              - 2\langle G^{b\delta}_t, C_t T_m\rangle
              + \langle G^{\delta\delta}_t, T_m^\top Q_t T_m\rangle

    (:math:`u^m_i = q_i T_m`, :func:`times`), so the work per row is three outer products,
    whatever the number of references. Blocks go in spans of bounded memory, the prefix
    sums carried across. On the CPU the float64 products go through numpy's BLAS
    (:func:`_mm`), held to one thread (:func:`.workers.one_blas_thread`); on a GPU through
    torch.
    """
    a, y, b, dp, q = f.a, f.y, f.b, f.dp, f.q
    h, n, c = a.shape
    hkv, dev = y.shape[0], a.device
    groups = [torch.from_numpy(np.flatnonzero(f.kv == g)).to(dev) for g in range(hkv)]
    per_block = 8 * (2 * hkv * 6 * c * c + h * (2 * block + 3 * c) * c)  # bytes of work
    span = max(1, WORK_BYTES // per_block)
    # the upper blocks of sum z z^T, z = (y, b, delta): rows y (3c columns), b (2c), delta (c)
    carry = [torch.zeros(hkv, 1, c, width, dtype=torch.float64, device=dev)
             for width in (3 * c, 2 * c, c)]  # fmt: skip
    keys = torch.cat([y, b, dp], -1)  # (Hkv, N, 3c)
    with one_blas_thread():
        for t0 in range(block, n, span * block):  # block 0 has no columns before it
            t1 = min(n, t0 + span * block)
            k0 = t0 - block  # the key blocks one behind the query blocks t0:t1
            z = row_blocks(keys, k0, k0 + -(-(t1 - t0) // block) * block, block)  # (Hkv, nb, B, 3c)
            inner = [_mm(z[..., k * c : (k + 1) * c].mT, z[..., k * c :]) for k in range(3)]
            before = []  # the columns before each block t0/B + 1, ...: G^{y.}, G^{b.}, G^{dd}
            for k, part in enumerate(inner):
                before.append(torch.cumsum(part, 1).add_(carry[k]))
                carry[k] = before[k][:, -1:]
            g_y, g_b, g_d = before
            ab, qb = (row_blocks(x, t0, t1, block) for x in (a, q))  # (H, nb, B, c)
            sums = _mm(ab.mT, torch.cat([ab, qb], -1))  # (H, nb, c, 2c): A_t, C_t
            big_a, big_c, big_q = sums[..., :c], sums[..., c:], _mm(qb.mT, qb)
            for g, hs in enumerate(groups):  # the query heads reading KV head g share its sums
                if hs.numel() == 0:
                    continue
                gy, gb, gd = g_y[g], g_b[g], g_d[g]  # (nb, c, 3c), (nb, c, 2c), (nb, c, c)
                x_a, x_c, x_q = big_a[hs], big_c[hs], big_q[hs]  # (Hg, nb, c, c)
                into.ww_before[hs] += _inner(gy[..., :c], x_a)
                yb, bb = _inner(gy[..., c : 2 * c], x_a), _inner(gb[..., :c], x_a)
                h_yd, h_bd = (_paired(x, x_c) for x in (gy[..., 2 * c :], gb[..., c:]))
                h_p, h_s = _paired_blocks(gd, x_q)
                for r, m in enumerate(f.m):  # per reference only (Hg, P) and (Hg, P, P) sums
                    into.we_before[r, hs] += yb - (h_yd @ m).real
                    mm = m.conj()[:, None]  # (P, 1)
                    q_term = ((mm * h_p * m).sum((-1, -2)).real
                              + (mm * h_s * mm.mT).sum((-1, -2)).real)  # fmt: skip
                    into.ee_before[r, hs] += bb - 2 * (h_bd @ m).real + q_term


def _inner(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    r""":math:`\sum_t \langle G_t, X_t\rangle` of ``g (nb, c, c)`` and ``x (Hg, nb, c, c)``:
    ``(Hg,)``."""
    return (g * x).flatten(1).sum(-1)


def _paired(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    r"""``h (Hg, P)`` with :math:`\sum_t \langle G_t, X_t T_m\rangle = \Re \sum_l h_l m_l` for
    every :math:`m`: :math:`h_l = \sum_{t,k} \overline{g_{tkl}}\,x_{tkl}`, the columns of
    ``g (nb, c, c)`` and ``x (Hg, nb, c, c)`` read as complex pairs (:func:`times`)."""
    return (complex_pairs(g).conj() * complex_pairs(x.contiguous())).sum((1, 2))


def _paired_blocks(g: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(h_p, h_s)``, each ``(Hg, P, P)``, with
    :math:`\sum_t \langle G_t, T_m^\top X_t T_m\rangle = \Re\,\bar m^\top h_p m
    + \Re\,\bar m^\top h_s \bar m` for every :math:`m`.

    A 2 x 2 block :math:`B` of ``g (nb, c, c)`` acts on a pair read as a complex number
    :math:`w` as :math:`p w + s \bar w` (:math:`p = (B_{11} + B_{22} + i(B_{21} - B_{12}))/2`,
    :math:`s = (B_{11} - B_{22} + i(B_{21} + B_{12}))/2`), and ``x (Hg, nb, c, c)``, a sum of
    :math:`q q^\top`, gives :math:`R_{kl} = \sum \bar q_k q_l` and :math:`S_{kl} = \sum q_k q_l`
    from its blocks; then :math:`h_p = \sum_t p_t R_t` and :math:`h_s = \sum_t s_t \bar S_t`,
    elementwise."""
    gb = g.unflatten(-1, (-1, 2)).unflatten(-3, (-1, 2))  # (nb, P, 2, P, 2): [k, a, l, b]
    xb = x.unflatten(-1, (-1, 2)).unflatten(-3, (-1, 2))  # (Hg, nb, P, 2, P, 2)
    g11, g12, g21, g22 = (gb[..., i, :, j] for i, j in ((0, 0), (0, 1), (1, 0), (1, 1)))
    x11, x12, x21, x22 = (xb[..., i, :, j] for i, j in ((0, 0), (0, 1), (1, 0), (1, 1)))
    p = torch.complex(g11 + g22, g21 - g12) / 2  # (nb, P, P)
    s = torch.complex(g11 - g22, g21 + g12) / 2
    r = torch.complex(x11 + x22, x12 - x21)  # (Hg, nb, P, P)  sum conj(q_k) q_l
    s_conj = torch.complex(x11 - x22, -(x12 + x21))  # conj(sum q_k q_l)
    return (p * r).sum(1), (s * s_conj).sum(1)


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
