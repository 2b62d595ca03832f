r"""The additive split of one head's logits, as dense matrices (docs/theory.md sections 2-3).

.. math::
    W_{ij} &= s\,\langle R(p_i)q_i, R(p'_j)k_j\rangle
            = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde k_{jl}}e^{i\theta_l\Delta_{ij}} \\
    f_{ij} &= s\,\langle q_i, R(-\Delta_{ij})\bar k\rangle,\qquad
    g_{ij}  = s\,\langle q_i, \delta_j\rangle,\qquad
    E_{ij}  = s\,\langle q_i, (R(-\Delta_{ij}) - I)\delta_j\rangle

with :math:`\delta_j = k_j - \bar k` and :math:`\Delta_{ij} = p_i - p'_j`
(query positions ``p``, key positions ``p'``), or an arbitrary distance map
``distances`` :math:`\Delta_{ij}`, under which :math:`W_{ij} = s\,\mathrm{Re}\sum_l
\tilde q_{il}\overline{\tilde k_{jl}} e^{i\theta_l\Delta_{ij}}` and ``f``, ``E`` and the
bounds take the same :math:`\Delta_{ij}`; ``cap`` :math:`L` is the map
:math:`\min(p_i - p'_j, L)` of LM-Infinite, as matrix products (the pairs beyond
the cap rotate by :math:`L`: :math:`W_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}
e^{i\theta_l L}\overline{\tilde k_{jl}}`, :math:`f_{ij}` is row ``i``'s value at :math:`L`).
Under a reference rotation :math:`m_l` (``Measure.reference``, docs/theory.md section 6,
:mod:`.reference`) ``g`` and ``E`` become
:math:`g_m = s\,\mathrm{Re}\sum_l \tilde q_l\overline{\tilde\delta_l}m_l` and
:math:`E_m = W - f - g_m`; ``zero`` (:math:`m_l = 1`) is the split above.
``W``, ``f`` and ``g`` are matrix products of rotated pairs; ``E`` and the
bounds are evaluated term by term (:mod:`.bound`) so that rounding can never
read as a violation, or, with ``Measure(bounds=False)`` (a split measured, not
checked), ``E = W - f - g`` by subtraction and no bounds.  Dense
``(N, N)`` float64 results, for small ``N`` (figures, experiments); the
statistics of long sequences come from :mod:`.stats` without them.

Shapes::

    q, k      (N, d)   pre-RoPE queries and keys of one head
    qc, kc    (N, P)   complex pairs (``rope.to_pairs``)
    W f g E   (N, N)   all pairs computed; only ``mask`` (j <= i) is meaningful
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import _inputs
from ropesplit.numerics.bound import remainder_and_bound
from ropesplit.numerics.measure import EXACT, Measure
from ropesplit.numerics.reference import Reference, resolve_reference
from ropesplit.numerics.rope import to_pairs
from ropesplit.numerics.spec import RopeSpec, as_spec
from ropesplit.numerics.types import Distances, HeadFeatures, KeyMean, Positions

__all__ = ["HeadSplit", "split_head"]

_CHUNK_BYTES = 2**28  # working memory of one row chunk of the term-by-term remainder


@dataclass(frozen=True)
class HeadSplit:
    """One head's split: ``W = f + g + E`` with the bound on ``|E|``, all ``(N, N)`` float64."""

    W: np.ndarray  # s <R(p_i) q_i, R(p'_j) k_j>
    f: np.ndarray  # positional relevance s <q_i, R(-Delta) kbar>
    g: np.ndarray  # semantic importance s Re sum_l q~_l conj(delta~_l) m_l (s <q_i, delta_j>)
    E: np.ndarray  # remainder s Re sum_l q~_l conj(delta~_l) (e^{i theta_l Delta} - m_l)
    bound: np.ndarray | None  # s sum_l |q~_l| |delta~_l| |e^{i theta_l Delta} - m_l| (or None)
    bound_loose: np.ndarray | None  # s sum |q~||delta~| min(1 + |m|, theta |Delta| + |1 - m|)
    mask: np.ndarray  # bool: j <= i (and i - j < window)
    kbar: np.ndarray  # (d,) the reference key
    delta: np.ndarray  # (N, N) distances p_i - p'_j (or the given distance map)
    reference: str  # the reference spec: "zero", "distance:C" or "mean"
    m: np.ndarray  # (P,) complex: the reference rotation m_l


def _kbar(kbar: KeyMean | None, k: np.ndarray) -> np.ndarray:
    """The reference key: the mean key unless given, ``(d,)``."""
    if kbar is None:
        return k.mean(axis=0)
    kb = _inputs.as_float64("kbar", kbar, 1)
    if kb.shape != k.shape[1:]:
        raise RopesplitError(f"kbar must have shape {k.shape[1:]}, got {kb.shape}")
    return kb


@dataclass(frozen=True)
class _DistanceMap:
    r"""The distances :math:`\Delta_{ij}` ``(N, N)`` the split rotates by, and where they come
    from: the query and key positions ``(p, p')`` and the cap :math:`L` (``positions`` None for
    a given distance map)."""

    Delta: np.ndarray  # (N, N) p_i - p'_j, min(p_i - p'_j, L) under a cap, or the given map
    positions: tuple[np.ndarray, np.ndarray] | None  # (p, p') each (N,)
    cap: float | None


def _distance_map(
    n: int, positions: Positions, distances: Distances | None, cap: float | None
) -> _DistanceMap:
    """The distance map from ``positions`` (capped at ``cap``) or the given ``distances``."""
    if cap is not None and (distances is not None or not cap >= 0):
        raise RopesplitError(f"cap must be a distance >= 0, without distances; got {cap}")
    if distances is not None:
        return _DistanceMap(_inputs.check_distances(distances, n, positions), None, None)
    pq, pk = _inputs.check_positions(positions, n)
    true = pq[:, None] - pk[None, :]  # (N, N)
    return _DistanceMap(true if cap is None else np.minimum(true, cap), (pq, pk), cap)


@dataclass(frozen=True)
class _Pairs:
    """One head's complex pairs: queries, keys, the reference key and the key deviations."""

    qc: np.ndarray  # (N, P) q~
    kc: np.ndarray  # (N, P) k~
    kbc: np.ndarray  # (P,) kbar~
    dc: np.ndarray  # (N, P) delta~ = k~ - kbar~

    @classmethod
    def of(cls, q: np.ndarray, k: np.ndarray, kbar: np.ndarray, spec: RopeSpec) -> _Pairs:
        """The pairs of ``q, k (N, d)`` and ``kbar (d,)`` in ``spec``'s layout."""
        layout, rotary_dim = spec.layout, spec.rotary_dim
        qc = to_pairs(q, layout, rotary_dim)  # (N, P)
        kc = to_pairs(k, layout, rotary_dim)  # (N, P)
        kbc = to_pairs(kbar, layout, rotary_dim)  # (P,)
        return cls(qc, kc, kbc, kc - kbc)


def _chunk_rows(n: int, n_pairs: int) -> int:
    """Query rows per chunk of the term-by-term products (``_CHUNK_BYTES`` of working memory)."""
    return max(1, _CHUNK_BYTES // (16 * 8 * max(n * n_pairs, 1)))


def _semantic(pairs: _Pairs, ref: Reference, s: float) -> np.ndarray:
    r""":math:`g_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde\delta_{jl}}\,m_l`
    ``(N, N)`` (:math:`m_l = 1` for ``zero``)."""
    qc, dc = pairs.qc, pairs.dc
    if ref.is_zero:
        return s * (qc @ np.conj(dc).T).real  # (N, N)
    return s * ((qc * ref.m) @ np.conj(dc).T).real  # (N, N)  s Re sum q~ conj(delta~) m


def _logit_and_positional(
    pairs: _Pairs, th: np.ndarray, s: float, where: _DistanceMap
) -> tuple[np.ndarray, np.ndarray]:
    """``W`` and ``f`` ``(N, N)``: matrix products of pairs rotated to their positions (those
    beyond the cap rotated by ``L``), or term by term under a given distance map."""
    if where.positions is None:
        return _rotated_term_by_term(pairs, th, s, where.Delta)
    qc, kc, kbc = pairs.qc, pairs.kc, pairs.kbc
    pq, pk = where.positions
    q_rot = qc * np.exp(1j * pq[:, None] * th)  # (N, P)  R(p_i) q_i
    w = s * (q_rot @ np.conj(kc * np.exp(1j * pk[:, None] * th)).T).real  # (N, N)
    f = s * (q_rot @ np.conj(kbc * np.exp(1j * pk[:, None] * th)).T).real  # (N, N)
    cap = where.cap
    if cap is not None and (far := pq[:, None] - pk[None, :] > cap).any():  # beyond the cap
        q_cap = qc * np.exp(1j * cap * th)  # (N, P)  q~ e^{i theta L}: rotated by L
        w = np.where(far, s * (q_cap @ np.conj(kc).T).real, w)
        f = np.where(far, s * (q_cap @ np.conj(kbc)).real[:, None], f)
    return w, f


def _rotated_term_by_term(
    pairs: _Pairs, th: np.ndarray, s: float, Delta: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    r"""``W`` and ``f`` ``(N, N)`` at an arbitrary :math:`\Delta_{ij}`, row chunk by row chunk."""
    qc, kc, kbc = pairs.qc, pairs.kc, pairs.kbc
    n = Delta.shape[0]
    rows = _chunk_rows(n, th.size)
    w, f = np.empty((2, n, n))
    for i0 in range(0, n, rows):
        block = slice(i0, min(n, i0 + rows))
        rot = np.exp(1j * Delta[block, :, None] * th)  # (rows, N, P)
        q_block = qc[block, None, :] * rot  # (rows, N, P)  q~_il e^{i theta_l Delta_ij}
        w[block] = s * np.einsum("ijp,jp->ij", q_block, np.conj(kc)).real
        f[block] = s * (q_block @ np.conj(kbc)).real
    return w, f


def _remainder_and_bounds(
    pairs: _Pairs, th: np.ndarray, s: float, Delta: np.ndarray, ref: Reference
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``E`` and its tight and loose bounds ``(N, N)`` each, term by term (:mod:`.bound`)."""
    qc, dc = pairs.qc, pairs.dc
    gap = None if ref.is_zero else ref.one_minus
    n = Delta.shape[0]
    rows = _chunk_rows(n, th.size)
    e, bound, loose = np.empty((3, n, n))
    for i0 in range(0, n, rows):
        block = slice(i0, min(n, i0 + rows))
        parts = remainder_and_bound(qc[block, None, :], dc[None, :, :], th, Delta[block], s,
                                    loose=True, one_minus_m=gap)  # each (rows, N)  # fmt: skip
        e[block], bound[block], loose[block] = (p.numpy() for p in parts)
    return e, bound, loose


def split_head(
    q: HeadFeatures,
    k: HeadFeatures,
    spec: RopeSpec,
    measure: Measure = EXACT,
    *,
    positions: Positions = None,
    kbar: KeyMean | None = None,
    distances: Distances | None = None,
    cap: float | None = None,
) -> HeadSplit:
    r"""Split one head's logits: :math:`W_{ij} = f(q_i, \Delta_{ij}) + g(q_i, k_j) + E_{ij}`.

    ``q, k`` are ``(N, d)`` pre-RoPE (numpy or CPU torch); ``spec`` is the
    head's :class:`~.spec.RopeSpec` (frequencies, scale ``s``, layout, rotary
    dim, window); ``positions`` is ``(N,)`` or a pair ``(positions_q,
    positions_k)`` (default ``0..N-1``); ``kbar`` defaults to the mean key
    (``measure.kbar_rule``).  ``distances`` ``(N, N)`` replaces ``positions``
    by an arbitrary distance map :math:`\Delta_{ij}` (``W`` and ``f`` then
    rotate by :math:`\Delta_{ij}` term by term); ``cap`` :math:`L \ge 0`
    measures at the distances :math:`\min(p_i - p'_j, L)` (LM-Infinite's cap)
    with matrix products.  From ``measure`` (:class:`~.measure.Measure`):
    ``reference`` (``"zero"``, ``"distance:C"``, ``"mean"`` over the masked
    pairs, or a :class:`~.reference.Reference`) sets :math:`m_l` in ``g`` and
    ``E``; ``bounds=False`` leaves the bounds out (``None``) and takes
    ``E = W - f - g`` by subtraction.  The mask is by index.

    .. math::
        f_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\,\overline{\tilde{\bar k}_l}\,
                 e^{i\theta_l\Delta_{ij}},\qquad
        g_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\,\overline{\tilde\delta_{jl}}

    >>> import numpy as np
    >>> from ropesplit.numerics.spec import RopeSpec
    >>> q, k = np.random.default_rng(0).normal(size=(2, 5, 4))
    >>> sp = split_head(q, k, RopeSpec((1.0, 0.01), 0.5))
    >>> bool(np.allclose(sp.f + sp.g + sp.E, sp.W)), sp.W.shape
    (True, (5, 5))
    """
    q = _inputs.as_float64("q", q, 2)
    k = _inputs.as_float64("k", k, 2)
    if q.shape != k.shape:
        raise RopesplitError(f"q and k must have one shape (N, d), got {q.shape} and {k.shape}")
    n, d = q.shape
    spec = as_spec(spec, d)
    th, s = spec.frequencies, spec.scale
    where = _distance_map(n, positions, distances, cap)
    kb = _kbar(measure.rule_kbar(k) if kbar is None else kbar, k)
    pairs = _Pairs.of(q, k, kb, spec)
    mask = _inputs.causal_mask(n, spec.window)
    ref = resolve_reference(measure.reference, th, distances=where.Delta, mask=mask)
    if ref.m.shape != th.shape:
        raise RopesplitError(f"reference must have {th.size} pairs, got {ref.m.shape[0]}")
    g = _semantic(pairs, ref, s)
    w, f = _logit_and_positional(pairs, th, s, where)
    if not measure.bounds:
        return HeadSplit(W=w, f=f, g=g, E=w - f - g, bound=None, bound_loose=None, mask=mask,
                         kbar=kb, delta=where.Delta, reference=ref.name, m=ref.m)  # fmt: skip
    e, bound, loose = _remainder_and_bounds(pairs, th, s, where.Delta, ref)
    return HeadSplit(W=w, f=f, g=g, E=e, bound=bound, bound_loose=loose, mask=mask, kbar=kb,
                     delta=where.Delta, reference=ref.name, m=ref.m)  # fmt: skip
