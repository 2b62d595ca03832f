r"""The experiments' measures on arrays: dummy distances and moved positions (docs/theory.md 3-4).

Everything works on one layer's complex pairs ``qc, kc (H, N, P)`` (query
head ``h`` beside the key head it reads), frequencies ``theta (P,)`` and the
scale ``s``; ``kbar`` is each head's mean key unless given ``(H, P)``, and
``delta~_j = k~_j - kbar~``.

**Controlled distance** (the paper's claim 3). The same pairs at one dummy
distance ``D`` for every pair, and the split of docs/theory.md section 3:

.. math::
    W^D_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde k_{jl}}e^{i\theta_l D}
             = f(q_i, D) + g_{ij} + E^D_{ij}

``f(q_i, D)`` is query-only, so the two-axis fit ``u_i + v_j`` (:mod:`.fit`)
of ``W^D`` and of ``g`` differ in their key effects ``v`` by exactly the key
effect of ``E^D``. Per head and ``D`` (over the causal pairs, or a mask's:
docs/theory.md section 9):

- ``key_corr``: Pearson ``corr_j(v^D_j, v^g_j)``, the same fit on both
  sides; exactly 1 when ``E = 0`` (keys deviate only in non-rotating pairs),
  lower as ``E^D`` grows;
- ``query_share``: the share of ``X = W^D - W^0`` that a query-only term
  explains, ``1 - sum (X_ij - xbar_i)^2 / sum X_ij^2`` with ``xbar_i`` the
  row mean (``X = f(q_i, D) - f(q_i, 0) + E^D`` since ``E^0 = 0``): exactly 1
  when ``E = 0``. Flawed as a test: it divides by ``|X|``, which is
  small when ``kbar`` sits in slow pairs (``f`` barely moves with ``D``), so a
  tiny ``E^D`` drags it far below 1; kept as a description only;
- ``visible_change``: ``||rc(W^D - W^0)|| / ||rc(W^0)||`` with ``rc`` each
  row's centring over its causal pairs (what softmax can see); ``rc`` removes
  ``f``, so this is ``||rc(E^D)|| / ||rc(W^0)||``: exactly 0 when ``E = 0``
  whatever ``kbar``, growing with ``E^D``;
- ``logit_change``: ``RMS(W^D - W^0) / std(W^0)``, how far the logits moved;
- ``remainder_share``: ``||E^D|| / ||W^D - mean(W^D)||``.

:func:`controlled_distance` also returns ``key_var``, the variance over keys
of ``v_j[g]``: :func:`weighted_key_corr` averages ``key_corr`` over heads with
it as the weight, so a head whose key effect is nearly constant (any
``key_corr`` is then arbitrary) counts for little.

**Moved positions** (docs/theory.md section 4, position perturbation). Positions
``p -> p'`` change pair ``(i, j)``'s distance by
``tau_ij = (p'_i - p'_j) - (p_i - p_j)`` (jitter by up to ``2t``); with the
same ``q``, ``k``:

.. math::
    \Delta X_{ij} = s\,\mathrm{Re}\sum_l h^X_{ijl}e^{i\theta_l\Delta_{ij}}
                    (e^{i\theta_l\tau_{ij}} - 1),\qquad
    |\Delta X_{ij}| \le s\sum_l |h^X_{ijl}|\,2|\sin(\theta_l\tau_{ij}/2)|

for ``h^W = q~_i conj(k~_j)``, ``h^f = q~_i conj(kbar~)``,
``h^E = q~_i conj(delta~_j)`` (``g`` does not move). :func:`pair_logits`
gives ``W`` and ``g`` at chosen pairs, to compare two captures;
:func:`remainder_change_share` is ``||Delta E|| / ||Delta W||`` over the pairs
(0 exactly when keys deviate only in non-rotating pairs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import _inputs
from ropesplit.numerics.fit import additive_fits
from ropesplit.numerics.mask import Mask

__all__ = [
    "DISTANCE_MEASURES",
    "causal_pairs",
    "controlled_distance",
    "mask_pairs",
    "pair_logits",
    "query_only_share",
    "remainder_change_share",
    "run_changes",
    "shift_change",
    "weighted_key_corr",
]

DISTANCE_MEASURES = ("key_corr", "query_share", "visible_change", "logit_change", "remainder_share")


def _pairs_of(qc: Any, kc: Any, theta: Any, kbar: Any) -> tuple[np.ndarray, ...]:
    """Checked ``qc, kc (H, N, P)``, ``theta (P,)``, ``kbar (H, P)`` and ``delta (H, N, P)``."""
    q = np.asarray(qc, dtype=np.complex128)
    k = np.asarray(kc, dtype=np.complex128)
    if q.ndim != 3 or q.shape != k.shape:
        raise RopesplitError(f"qc and kc must both be (H, N, P), got {q.shape} and {k.shape}")
    th = _inputs.as_float64("theta", theta, 1)
    if th.shape != q.shape[2:]:
        raise RopesplitError(f"theta must have shape ({q.shape[2]},), got {th.shape}")
    kb = k.mean(axis=1) if kbar is None else np.asarray(kbar, dtype=np.complex128)
    if kb.shape != (q.shape[0], q.shape[2]):
        raise RopesplitError(f"kbar must have shape {(q.shape[0], q.shape[2])}, got {kb.shape}")
    return q, k, th, kb, k - kb[:, None, :]


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of two vectors; NaN when either is constant."""
    xc, yc = x - x.mean(), y - y.mean()
    norm = float(np.sqrt((xc @ xc) * (yc @ yc)))
    return float(xc @ yc) / norm if norm > 0 else float("nan")


def _row_centred(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    r"""``x (..., N, N)`` less each row's mean over its ``mask`` pairs, 0 off the mask.

    .. math:: \mathrm{rc}(x)_{ij} = \big(x_{ij} - \bar x_i\big)\,[(i,j)\in\mathcal M],\qquad
              \bar x_i = \mathrm{mean}_{j:(i,j)\in\mathcal M}\, x_{ij}

    (the part of each row softmax can see: it ignores a row's constant).
    """
    counts = np.maximum(mask.sum(axis=1), 1)  # (N,)
    masked = np.where(mask, x, 0.0)  # (..., N, N)
    row_mean = masked.sum(axis=-1) / counts  # (..., N)
    return np.where(mask, x - row_mean[..., None], 0.0)  # (..., N, N)


def query_only_share(x: Any, mask: Any) -> np.ndarray:
    r"""Share of ``x (..., N, N)`` on ``mask`` explained by a query-only (row) term, ``(...)``.

    .. math:: 1 - \frac{\sum_{(i,j)\in\mathcal M}(x_{ij} - \bar x_i)^2}
              {\sum_{(i,j)\in\mathcal M} x_{ij}^2},\qquad
              \bar x_i = \mathrm{mean}_{j:(i,j)\in\mathcal M}\, x_{ij}

    (the row mean is the best query-only term in least squares). NaN where
    ``x`` is 0 on the mask. As a test of the split on ``x = W^D - W^0`` it is
    flawed: the denominator is ``|W^D - W^0|``, small when ``kbar``
    sits in slow pairs, so a tiny remainder can pull the share far below 1;
    :func:`controlled_distance`'s ``visible_change`` divides by ``rc(W^0)``
    instead.
    """
    values = np.asarray(x, dtype=np.float64)
    m = np.asarray(mask, dtype=bool)
    total = (np.where(m, values, 0.0) ** 2).sum(axis=(-2, -1))  # (...)
    left = (_row_centred(values, m) ** 2).sum(axis=(-2, -1))  # (...)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, 1.0 - left / np.where(total > 0, total, 1.0), np.nan)


def controlled_distance(
    qc: Any,
    kc: Any,
    theta: Any,
    scale: float,
    distances: Any,
    *,
    kbar: Any = None,
    window: int | Mask | None = None,
    measures: Sequence[str] = DISTANCE_MEASURES,
) -> dict[str, np.ndarray]:
    r"""The controlled-distance measures of the module docstring, each ``(H, K)``.

    .. math:: \mathrm{key\_corr}_{hD} = \mathrm{corr}_j\big(v_j[W^D_h], v_j[g_h]\big),\qquad
              \mathrm{query\_share}_{hD} = \mathrm{share}_{\text{query-only}}(W^D_h - W^0_h)

    .. math:: \mathrm{visible\_change}_{hD} =
              \frac{\|\mathrm{rc}(W^D_h - W^0_h)\|_F}{\|\mathrm{rc}(W^0_h)\|_F},\qquad
              \mathrm{rc}(x)_{ij} = x_{ij} - \mathrm{mean}_{j':(i,j')\in\mathcal M}\, x_{ij'}
              \ \text{on}\ \mathcal M

    .. math:: \mathrm{key\_var}_{hD} = \frac1N\sum_j \big(v_j[g_h] - \bar v[g_h]\big)^2

    ``distances (K,)`` are the dummy distances ``D`` (each must be > 0:
    ``W^0 = f(q, 0) + g`` exactly, so ``D = 0`` is the reference, not a test).
    Returns ``measures`` (default every one of :data:`DISTANCE_MEASURES`; a
    subset computes only those, each to the same bits) and ``key_var`` (the
    same for every ``D``: the weight of :func:`weighted_key_corr`).
    ``query_share`` is descriptive only (see :func:`query_only_share`);
    ``visible_change`` is NaN where ``rc(W^0)`` is 0. :math:`\mathcal M`: the causal pairs
    within ``window``, or ``window`` a :class:`.mask.Mask` (docs/theory.md section 9).
    """
    unknown = sorted(set(measures) - set(DISTANCE_MEASURES))
    if unknown:
        raise RopesplitError(f"unknown distance measures {unknown}; known: "
                             f"{', '.join(DISTANCE_MEASURES)}")  # fmt: skip
    q, k, th, kb, dev = _pairs_of(qc, kc, theta, kbar)
    s = _inputs.check_scale(scale)
    dist = _inputs.as_float64("distances", distances, 1)
    if dist.size == 0 or not np.all(dist > 0):
        raise RopesplitError(f"distances must be positive, got {dist.tolist()}")
    (n_heads, n, _) = q.shape
    mask = window if isinstance(window, Mask) else Mask.causal(_inputs.check_window(window))
    allowed = mask.allowed(n)  # (N, N)
    kt = np.conj(k).transpose(0, 2, 1)  # (H, P, N)
    w0 = s * np.real(q @ kt)  # (H, N, N): W at D = 0
    g = s * np.real(q @ np.conj(dev).transpose(0, 2, 1))  # (H, N, N)
    out = {name: np.empty((n_heads, dist.size)) for name in measures}
    if "logit_change" in measures:
        centred0 = w0 - _masked_mean(w0, allowed)[:, None, None]
        spread = np.sqrt(_masked_mean(centred0**2, allowed))
    if "visible_change" in measures:
        visible0 = np.linalg.norm(_row_centred(w0, allowed), axis=(1, 2))  # (H,): ||rc(W^0)||_F
    key_g = additive_fits(g, axes=2, window=mask).c  # (H, N)
    out["key_var"] = np.repeat(key_g.var(axis=1)[:, None], dist.size, axis=1)  # (H, K)
    for index, d in enumerate(dist):
        turn = np.exp(1j * th * d)  # (P,)
        wd = s * np.real((q * turn) @ kt)  # (H, N, N)
        if "key_corr" in measures:
            key_d = additive_fits(wd, axes=2, window=mask).c  # (H, N)
            out["key_corr"][:, index] = [_corr(key_d[h], key_g[h]) for h in range(n_heads)]
        if "query_share" in measures:
            out["query_share"][:, index] = query_only_share(wd - w0, allowed)
        with np.errstate(invalid="ignore", divide="ignore"):
            if "visible_change" in measures:
                visible = np.linalg.norm(_row_centred(wd - w0, allowed), axis=(1, 2))  # (H,)
                out["visible_change"][:, index] = np.where(visible0 > 0, visible / visible0,
                                                           np.nan)  # fmt: skip
            if "logit_change" in measures:
                change = np.sqrt(_masked_mean((wd - w0) ** 2, allowed))  # (H,)
                out["logit_change"][:, index] = np.where(spread > 0, change / spread, np.nan)
            if "remainder_share" in measures:
                f = s * np.real((q * turn) @ np.conj(kb)[:, :, None])  # (H, N, 1): f(q_i, D)
                centred = _masked_mean((wd - _masked_mean(wd, allowed)[:, None, None]) ** 2,
                                       allowed)  # fmt: skip
                remainder = _masked_mean((wd - f - g) ** 2, allowed)  # (H,): E^D = W^D - f - g
                out["remainder_share"][:, index] = np.where(
                    centred > 0, np.sqrt(remainder / centred), np.nan
                )
    return out


def weighted_key_corr(key_corr: Any, key_var: Any) -> Any:
    r"""``key_corr`` averaged over heads (axis 0), each weighted by its ``key_var``.

    .. math:: \overline{\mathrm{key\_corr}}_D =
              \frac{\sum_{h:\,c_{hD}\ne\mathrm{NaN}} w_{hD}\, c_{hD}}
                   {\sum_{h:\,c_{hD}\ne\mathrm{NaN}} w_{hD}},\qquad
              w_{hD} = \mathrm{key\_var}_{hD}

    ``key_corr`` is ``(H, K)`` or ``(H,)``; ``key_var`` has its shape, or is
    ``(H,)`` for an ``(H, K)`` ``key_corr`` (one weight per head); weights
    must be finite and non-negative. A head with a nearly constant key effect
    (any ``key_corr`` is then arbitrary) counts for little. Returns ``(K,)``
    or a float; NaN where no weight is left.
    """
    c = np.asarray(key_corr, dtype=np.float64)  # (H, K) or (H,)
    w = np.asarray(key_var, dtype=np.float64)
    if c.ndim not in (1, 2) or c.shape[0] == 0:
        raise RopesplitError(f"key_corr must be (H, K) or (H,), got shape {c.shape}")
    if c.ndim == 2 and w.shape == c.shape[:1]:
        w = w[:, None]  # (H, 1): one weight per head
    if w.shape not in (c.shape, c.shape[:1] + (1,) * (c.ndim - 1)):
        raise RopesplitError(f"key_var must have shape {c.shape} or ({c.shape[0]},), "
                             f"got {np.shape(key_var)}")  # fmt: skip
    if not (np.isfinite(w).all() and (w >= 0).all()):
        raise RopesplitError("key_var must be finite and non-negative")
    weight = np.where(np.isnan(c), 0.0, np.broadcast_to(w, c.shape))  # (H, K) or (H,)
    total = weight.sum(axis=0)  # (K,) or ()
    summed = (weight * np.where(np.isnan(c), 0.0, c)).sum(axis=0)  # (K,) or ()
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(total > 0, summed / np.where(total > 0, total, 1.0), np.nan)
    return float(mean) if c.ndim == 1 else mean


def _masked_mean(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of ``x (H, N, N)`` over the ``mask`` pairs, ``(H,)``."""
    return np.where(mask, x, 0.0).sum(axis=(1, 2)) / mask.sum()


def causal_pairs(
    n_tokens: int, budget: int | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    r"""Query/key indices ``(i, j)``, ``j <= i``: all of them, or ``budget`` drawn uniformly.

    Pair number ``m`` in row-major order is ``i = floor((sqrt(8m + 1) - 1)/2)``,
    ``j = m - i(i + 1)/2``; the draw is without replacement, sorted.
    """
    total = n_tokens * (n_tokens + 1) // 2
    if budget is None or budget >= total:
        i, j = np.tril_indices(n_tokens)
        return i, j
    if budget < 1:
        raise RopesplitError(f"pair budget must be at least 1, got {budget}")
    m = np.sort(rng.choice(total, size=budget, replace=False))
    i = ((np.sqrt(8.0 * m + 1.0) - 1.0) / 2.0).astype(np.int64)
    i -= (i * (i + 1) // 2 > m).astype(np.int64)  # float rounding guard, both directions
    i += ((i + 1) * (i + 2) // 2 <= m).astype(np.int64)
    return i, m - i * (i + 1) // 2


def mask_pairs(
    n_tokens: int, budget: int | None, rng: np.random.Generator, mask: Mask | None = None
) -> tuple[np.ndarray, np.ndarray]:
    r"""Query/key indices ``(i, j)`` of ``mask``'s pairs (:class:`.mask.Mask`; None: the
    causal pairs ``j <= i``, :func:`causal_pairs`): all of them, or ``budget`` drawn
    uniformly without replacement, in row-major order.

    .. math:: \{(i, j) \in \mathcal M\},\qquad |\text{draw}| = \min(\text{budget},
              |\mathcal M|)

    >>> i, j = mask_pairs(3, None, np.random.default_rng(0), Mask.both())
    >>> i.tolist(), j.tolist()
    ([0, 0, 0, 1, 1, 1, 2, 2, 2], [0, 1, 2, 0, 1, 2, 0, 1, 2])
    """
    if mask is None:
        return causal_pairs(n_tokens, budget, rng)
    i, j = np.nonzero(mask.allowed(n_tokens))
    if budget is None or budget >= i.size:
        return i, j
    if budget < 1:
        raise RopesplitError(f"pair budget must be at least 1, got {budget}")
    m = np.sort(rng.choice(i.size, size=budget, replace=False))
    return i[m], j[m]


def _check_pairs(pairs: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = (np.asarray(p, dtype=np.int64) for p in pairs)
    if i.shape != j.shape or i.ndim != 1 or (i.size and (j.min() < 0 or i.max() >= n)):
        raise RopesplitError(f"pairs must be two equal-length index arrays in [0, {n})")
    return i, j


def _positions(name: str, p: Any, n: int) -> np.ndarray:
    x = _inputs.as_float64(name, p, 1)
    if x.shape != (n,):
        raise RopesplitError(f"{name} must have shape ({n},), got {x.shape}")
    return x


@dataclass(frozen=True)
class _Shift:
    """What :func:`_signed_shift` computes at ``M`` pairs for ``H`` heads."""

    scale: float
    theta: np.ndarray  # (P,)
    tau: np.ndarray  # (M,) each pair's distance change
    terms: dict[str, np.ndarray]  # X -> h^X (H, M, P)
    change: dict[str, np.ndarray]  # X -> signed Delta X (H, M)


def _signed_shift(
    qc: Any, kc: Any, theta: Any, scale: float, before: Any, after: Any, pairs: Any, kbar: Any
) -> _Shift:
    r"""Signed change of ``X = W, f, E`` at ``pairs`` when positions move ``before -> after``.

    .. math:: \Delta X_{ij} = s\,\mathrm{Re}\sum_l h^X_{ijl}e^{i\theta_l\Delta_{ij}}
              (e^{i\theta_l\tau_{ij}} - 1),\qquad
              \Delta_{ij} = p_i - p_j,\quad \tau_{ij} = (p'_i - p'_j) - \Delta_{ij}

    with ``h^W = q~_i conj(k~_j)``, ``h^f = q~_i conj(kbar~)``,
    ``h^E = q~_i conj(delta~_j)`` (the one formula of :func:`shift_change` and
    :func:`remainder_change_share`).
    """
    q, k, th, kb, dev = _pairs_of(qc, kc, theta, kbar)
    s = _inputs.check_scale(scale)
    n = q.shape[1]
    i, j = _check_pairs(pairs, n)
    p0, p1 = _positions("before", before, n), _positions("after", after, n)
    gap = p0[i] - p0[j]  # (M,)
    tau = (p1[i] - p1[j]) - gap  # (M,)
    phase = np.exp(1j * gap[:, None] * th)  # (M, P)
    turn = np.exp(1j * tau[:, None] * th) - 1.0  # (M, P): exactly 0 where theta or tau is 0
    qi = q[:, i]  # (H, M, P)
    terms = {"W": qi * np.conj(k[:, j]), "f": qi * np.conj(kb)[:, None, :],
             "E": qi * np.conj(dev[:, j])}  # fmt: skip  # each (H, M, P)
    change = {name: s * np.real((h * phase * turn).sum(axis=-1))
              for name, h in terms.items()}  # fmt: skip  # each (H, M)
    return _Shift(scale=s, theta=th, tau=tau, terms=terms, change=change)


def shift_change(
    qc: Any,
    kc: Any,
    theta: Any,
    scale: float,
    before: Any,
    after: Any,
    pairs: Any,
    *,
    kbar: Any = None,
) -> dict[str, np.ndarray]:
    r"""Measured change and bound for ``X = W, f, E`` at ``pairs`` when positions move.

    .. math:: \Delta X_{ij} = s\,\mathrm{Re}\sum_l h^X_{ijl}e^{i\theta_l\Delta_{ij}}
              (e^{i\theta_l\tau_{ij}} - 1),\qquad
              B^X_{ij} = s\sum_l |h^X_{ijl}|\,2|\sin(\theta_l\tau_{ij}/2)|

    ``before``, ``after`` are the positions ``(N,)`` (``Delta`` from
    ``before``, ``tau`` the pair's actual distance change). Returns
    ``measured_X = |Delta X|`` and ``bound_X``, each ``(H, M)``, and ``tau (M,)``.
    """
    shift = _signed_shift(qc, kc, theta, scale, before, after, pairs, kbar)
    size = 2.0 * np.abs(np.sin(shift.tau[:, None] * shift.theta / 2.0))  # (M, P): |e^{i th tau}-1|
    out: dict[str, np.ndarray] = {"tau": shift.tau}
    for name, h in shift.terms.items():
        out[f"measured_{name}"] = np.abs(shift.change[name])
        out[f"bound_{name}"] = shift.scale * (np.abs(h) * size).sum(axis=-1)
    return out


def remainder_change_share(
    qc: Any,
    kc: Any,
    theta: Any,
    scale: float,
    before: Any,
    after: Any,
    pairs: Any,
    *,
    kbar: Any = None,
) -> np.ndarray:
    r"""The remainder's share of the logit change at ``pairs`` when positions move, ``(H,)``.

    .. math:: \rho_h = \frac{\|\Delta E_h\|_2}{\|\Delta W_h\|_2}
              = \frac{\big(\sum_{(i,j)} \Delta E_{hij}^2\big)^{1/2}}
                     {\big(\sum_{(i,j)} \Delta W_{hij}^2\big)^{1/2}},\qquad
              \Delta W = \Delta f + \Delta E

    from the signed changes of :func:`shift_change` (rotation only, the same
    ``q`` and ``k``; ``g`` cannot move). Exactly 0 when keys deviate only in
    non-rotating (``theta = 0``) pairs; near 1 once ``Delta E`` dominates
    (above 1 where ``Delta f`` and ``Delta E`` partly cancel); NaN for a head
    whose ``Delta W`` is 0 at every pair. Like ``query_share`` it divides by
    the logit change: where ``kbar`` sits in slow pairs ``Delta f`` is small
    and a small ``Delta E`` already gives a large share (0.4-0.6 at 0.1% of the
    deviation energy in fast pairs, in the tests), so it compares heads or
    models under the same shift rather than reading as an absolute size.
    """
    shift = _signed_shift(qc, kc, theta, scale, before, after, pairs, kbar)
    moved = np.linalg.norm(shift.change["W"], axis=-1)  # (H,)
    remainder = np.linalg.norm(shift.change["E"], axis=-1)  # (H,)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(moved > 0, remainder / np.where(moved > 0, moved, 1.0), np.nan)


def pair_logits(
    qc: Any, kc: Any, theta: Any, scale: float, positions: Any, pairs: Any, *, kbar: Any = None,
    m: Any = None,
) -> dict[str, np.ndarray]:
    r"""``W`` and ``g`` at ``pairs``, each ``(H, M)``, for tokens at ``positions (N,)``.

    .. math:: W_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde k_{jl}}
              e^{i\theta_l(p_i - p_j)},\qquad
              g^m_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde\delta_{jl}}\,m_l

    ``m (P,)`` is the reference rotation of docs/theory.md section 6
    (``Reference.m``; default 1: the split of section 3).
    """
    q, k, th, _, dev = _pairs_of(qc, kc, theta, kbar)
    s = _inputs.check_scale(scale)
    n = q.shape[1]
    i, j = _check_pairs(pairs, n)
    p = _positions("positions", positions, n)
    phase = np.exp(1j * (p[i] - p[j])[:, None] * th)  # (M, P)
    qi = q[:, i]  # (H, M, P)
    qm = qi if m is None else qi * np.asarray(m, dtype=np.complex128).reshape(-1)
    return {"W": s * np.real((qi * np.conj(k[:, j]) * phase).sum(axis=-1)),
            "g": s * np.real((qm * np.conj(dev[:, j])).sum(axis=-1))}  # fmt: skip


def run_changes(
    before: tuple[Any, Any, Any], after: tuple[Any, Any, Any], theta: Any, scale: float,
    pairs: Any, *, ms: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Mean ``|W' - W|`` ``(H,)`` and mean ``|g'_m - g_m|`` ``(K, H)`` over ``pairs``
    between two runs of one text, each ``(qc, kc, positions)`` with ``qc, kc (H, N, P)``
    (each run's own q, k and mean key):

    .. math:: \overline{|\Delta W|}_h = \frac1M\sum_{(i,j)}|W'_{hij} - W_{hij}|,\qquad
              \overline{|\Delta g_m|}_h = \frac1M\sum_{(i,j)}|g'^m_{hij} - g^m_{hij}|

    with :func:`pair_logits`' ``W`` and ``g^m``; ``ms (K, P)`` are the reference rotations
    (None: one, ``m = 1``). The numerator and denominator of ``g_share``: 0 and the logit
    change when only the positions move and ``q``, ``k`` stay.
    """
    q0, k0, p0 = before
    q1, k1, p1 = after
    th = _inputs.as_float64("theta", theta, 1)
    m = (np.ones((1, th.size), dtype=np.complex128) if ms is None
         else np.asarray(ms, dtype=np.complex128).reshape(-1, th.size))  # (K, P)  # fmt: skip
    s = _inputs.check_scale(scale)
    runs = []
    for qc, kc, positions in ((q0, k0, p0), (q1, k1, p1)):
        q, k, _, _, dev = _pairs_of(qc, kc, th, None)
        i, j = _check_pairs(pairs, q.shape[1])
        p = _positions("positions", positions, q.shape[1])
        qi = q[:, i]  # (H, M, P)
        w = s * np.real((qi * np.conj(k[:, j]) * np.exp(1j * (p[i] - p[j])[:, None] * th))
                        .sum(axis=-1))  # fmt: skip  # (H, M)
        g = s * np.real(np.einsum("hmp,kp,hmp->khm", qi, m, np.conj(dev[:, j])))  # (K, H, M)
        runs.append((w, g))
    (w0, g0), (w1, g1) = runs
    return np.abs(w1 - w0).mean(axis=-1), np.abs(g1 - g0).mean(axis=-1)
