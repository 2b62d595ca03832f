r"""Edits of the split inside attention: the change each intervention makes to a head's logits.

docs/theory.md sections 2-4. For one layer's heads, pre-RoPE queries
:math:`q_i` and keys :math:`k_j` (each query head's own KV head), a
reference key :math:`\bar k` (estimated on other text: a mean over the
passage itself would let each query see the future), positions :math:`p`,
and :math:`\delta_j = k_j - \bar k`:

.. math::
    W_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde k_{jl}}e^{i\theta_l\Delta_{ij}},
    \quad f_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde{\bar k}_l}
    e^{i\theta_l\Delta_{ij}},\quad
    g^m_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde\delta_{jl}}\,m_l,\quad
    E^m = W - f - g^m

Each function returns the additive change :math:`\Delta W` ``(H, N, N)``
float64 that the edit makes to the logits (0 outside the causal mask), so
that the intervened model attends with :math:`W + \Delta W`:

- :func:`drop_remainder` :math:`-E^m` (attention from :math:`f + g^m`);
- :func:`drop_semantic` :math:`-g^m` (attention from :math:`f + E^m`);
- :func:`same_norm_noise` :math:`-\xi`, a seeded Gaussian term with each
  row's norm over the causal pairs equal to that of a given term (the null
  of a removal of that size);
- :func:`drop_pair_deviation` :math:`-s\,\mathrm{Re}\sum_{l}c_l\,\tilde q_{il}
  \overline{\tilde\delta_{jl}}e^{i\theta_l\Delta_{ij}}`: the keys' deviation
  in the pairs with weight :math:`c_l` replaced by :math:`\bar k`
  (``c = 1`` on the fast pairs, :func:`fast_pairs`; the control removes the
  same energy from the slow pairs, :func:`matched_slow_weights`);
- :func:`cap_positional` :math:`f(q_i, L) - f(q_i, \Delta_{ij})` for
  :math:`\Delta_{ij} > L`, :func:`cap_rest` :math:`(W - f)(L) - (W - f)(\Delta_{ij})`
  (LM-Infinite's cap, :math:`W(L) - W(\Delta)`, is their sum);
- :func:`shuffle_frequencies` :math:`W_\pi - W`, the logits with pair
  :math:`l` turning at :math:`\theta_{\pi(l)}` (:func:`band_order`: a
  permutation that keeps every pair in its half, the slow or the fast);
- :func:`structured_remainder` :math:`-\xi`, the remainder the same heads
  would have if their pairs turned at shuffled frequencies, each row rescaled
  to the norm of :math:`E^m`'s: a removal of :math:`E`'s size and kind
  (bilinear in the same queries and key deviations, rotating with distance)
  that is not :math:`E`.

Shapes (numpy or torch in; torch out, complex128 for float64 input and
complex64 for float32, so that the edits run at the model's precision inside
its forward pass; ``tests/numerics/test_numerics_intervention.py`` holds them to the
dense float64 split of :mod:`.split`)::

    qc, kc   (H, N, P)   complex pairs (:func:`pairs`) of q and of the key each head reads
    kbar     (H, P)      the reference key of each head, in pairs
    theta    (P,)        frequencies; positions (N,)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.rope import check_rotary_dim, pair_coordinates

__all__ = [
    "band_order",
    "cap_positional",
    "cap_rest",
    "drop_pair_deviation",
    "drop_remainder",
    "drop_semantic",
    "fast_pairs",
    "log_ratio",
    "matched_slow_weights",
    "pairs",
    "same_norm_noise",
    "shuffle_frequencies",
    "structured_remainder",
]

FAST_TURNS = 1.0  # a pair is fast when it turns at least once over the text's distances
Array = Any  # numpy array or torch tensor


def pairs(x: Array, layout: str = "half", rotary_dim: int | None = None) -> torch.Tensor:
    r"""``(..., d)`` real -> ``(..., d/2)`` complex pairs (``rope.to_pairs`` in torch)."""
    t = torch.as_tensor(x)
    re, im = pair_coordinates(t.shape[-1], check_rotary_dim(t.shape[-1], rotary_dim), layout)
    return torch.complex(t[..., torch.from_numpy(re)], t[..., torch.from_numpy(im)])


def _complex(x: Array, like: torch.Tensor | None = None) -> torch.Tensor:
    t = torch.as_tensor(x)
    if not t.is_complex():
        t = t.to(torch.float64 if like is None else like.real.dtype)
        t = torch.complex(t, torch.zeros_like(t))
    return t if like is None else t.to(like.dtype).to(like.device)


def _causal(n: int, device: Any = None) -> torch.Tensor:
    """``(N, N)`` bool ``j <= i``."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def _bilinear(x: torch.Tensor, y: torch.Tensor, s: float) -> torch.Tensor:
    r""":math:`s\,\mathrm{Re}\sum_l x_{il}\overline{y_{jl}}`, ``x (H, N, P)``, ``y (H, M, P)``."""
    return (x @ y.conj().transpose(-1, -2)).real * s


def _rotated(z: torch.Tensor, theta: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    r""":math:`\tilde z_{jl} e^{i\theta_l p_j}` ``(H, N, P)`` of ``z (H, N, P)`` or ``(H, P)``."""
    turn = torch.polar(torch.ones_like(theta), positions[:, None] * theta)  # (N, P)
    return (z[:, None, :] if z.ndim == 2 else z) * turn


def _check(qc: Array, kc: Array, theta: Array, positions: Array) -> tuple[torch.Tensor, ...]:
    q = _complex(qc)
    k = _complex(kc, q)
    real = q.real.dtype
    th = torch.as_tensor(theta).to(real).to(q.device)
    p = torch.as_tensor(positions).to(real).to(q.device)
    if q.ndim != 3 or q.shape != k.shape:
        raise RopesplitError(f"qc and kc must be one shape (H, N, P), got {tuple(q.shape)} and "
                             f"{tuple(k.shape)}")  # fmt: skip
    if th.shape != q.shape[2:] or p.shape != q.shape[1:2]:
        raise RopesplitError(f"theta must be ({q.shape[2]},) and positions ({q.shape[1]},), "
                             f"got {tuple(th.shape)} and {tuple(p.shape)}")  # fmt: skip
    return q, k, th, p


def _zero_outside(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def drop_remainder(qc: Array, kc: Array, kbar: Array, theta: Array, positions: Array, s: float,
                   m: Array = None) -> torch.Tensor:  # fmt: skip
    r""":math:`-E^m = f + g^m - W`: attention from the split's two terms alone (``m`` default 1)."""
    q, k, th, p = _check(qc, kc, theta, positions)
    kb = _complex(kbar, q)  # (H, P)
    qr = _rotated(q, th, p)
    w = _bilinear(qr, _rotated(k, th, p), s)
    f = _bilinear(qr, _rotated(kb, th, p), s)
    g = -drop_semantic(q, k, kb, s, m)
    return _zero_outside(_causal(len(p), q.device), f + g - w)


def drop_semantic(qc: Array, kc: Array, kbar: Array, s: float, m: Array = None) -> torch.Tensor:
    r""":math:`-g^m_{ij} = -s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde\delta_{jl}}\,m_l`."""
    q = _complex(qc)
    delta = _complex(kc, q) - _complex(kbar, q)[:, None, :]  # (H, N, P)
    qm = q if m is None else q * _complex(m, q)
    return _zero_outside(_causal(q.shape[1], q.device), -_bilinear(qm, delta, s))


def same_norm_noise(term: Array, seed: int) -> torch.Tensor:
    r""":math:`-\xi`: Gaussian, each row's norm over ``j <= i`` that of ``term (H, N, N)``'s row.

    .. math:: \xi_{ij} = z_{ij}\,\frac{\|t_{i\cdot}\|}{\|z_{i\cdot}\|},\quad z \sim N(0, 1)

    ``z`` is drawn in float64 from ``numpy.random.default_rng(seed)`` (the
    same draw whatever the device and dtype of ``term``).
    """
    t = torch.as_tensor(term)
    mask = _causal(t.shape[-1], t.device)
    z = torch.from_numpy(np.random.default_rng(seed).standard_normal(tuple(t.shape)))
    z = _zero_outside(mask, z.to(t.dtype).to(t.device))
    target = _zero_outside(mask, t).square().sum(-1, keepdim=True).sqrt()  # (H, N, 1)
    have = z.square().sum(-1, keepdim=True).sqrt()
    return -z * torch.where(have > 0, target / torch.where(have > 0, have, 1.0), 0.0)


def _row_rescaled(term: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``term (H, N, N)`` with each row's norm over ``j <= i`` that of ``target``'s row."""
    mask = _causal(term.shape[-1], term.device)
    want = _zero_outside(mask, target).square().sum(-1, keepdim=True).sqrt()  # (H, N, 1)
    have = _zero_outside(mask, term).square().sum(-1, keepdim=True).sqrt()
    return _zero_outside(mask, term) * torch.where(have > 0, want / torch.where(have > 0, have,
                                                                                1.0), 0.0)


def structured_remainder(qc: Array, kc: Array, kbar: Array, theta: Array, positions: Array,
                         s: float, order: Array, m: Array = None) -> torch.Tensor:  # fmt: skip
    r""":math:`-\xi`: the remainder under the frequencies ``order`` reassigns, rows at
    :math:`E^m`'s norms (the structured null of removing :math:`E`).

    .. math:: \xi_{ij} = E^{m}_{\pi,ij}\,\frac{\|E^m_{i\cdot}\|}{\|E^m_{\pi,i\cdot}\|},\qquad
              E^m_\pi = W_\pi - f_\pi - g^m

    with :math:`W_\pi, f_\pi` the logits with pair :math:`l` turning at
    :math:`\theta_{\pi(l)}` (the same queries, keys and reference key).
    """
    q, k, th, p = _check(qc, kc, theta, positions)
    perm = np.asarray(order, dtype=np.int64)
    if sorted(perm.tolist()) != list(range(th.numel())):
        raise RopesplitError(f"order must be a permutation of the {th.numel()} pairs")
    shuffled = th[torch.from_numpy(perm).to(th.device)]
    e = -drop_remainder(q, k, kbar, th, p, s, m)  # (H, N, N)
    e_pi = -drop_remainder(q, k, kbar, shuffled, p, s, m)
    return -_row_rescaled(e_pi, e)


def band_order(theta: Array, rng: np.random.Generator) -> np.ndarray:
    r"""A permutation ``(P,)`` of the pairs that keeps each in its half: the low-frequency half
    (``rope.low_half``, the :math:`\lfloor P/2 \rfloor` smallest :math:`\theta_l`) among
    itself, the rest among itself (a middle pair of odd ``P`` stays).

    >>> order = band_order(np.array([1.0, 0.5, 0.1, 0.01]), np.random.default_rng(0))
    >>> sorted(order[:2].tolist()), sorted(order[2:].tolist())
    ([0, 1], [2, 3])
    """
    from ropesplit.numerics.rope import low_half

    weight = low_half(np.asarray(theta, dtype=np.float64))
    order = np.arange(weight.size)
    for band in (np.flatnonzero(weight == 1.0), np.flatnonzero(weight == 0.0)):
        order[band] = band[rng.permutation(band.size)]
    return order


def fast_pairs(theta: Array, n_tokens: int, turns: float = FAST_TURNS) -> np.ndarray:
    r"""``(P,)`` bool, :math:`\theta_l (N - 1) \ge 2\pi\,` ``turns``: pairs turning in the text."""
    th = np.asarray(theta, dtype=np.float64)
    return th * max(n_tokens - 1, 0) >= 2 * np.pi * turns


def matched_slow_weights(kc: Array, kbar: Array, fast: Array) -> torch.Tensor:
    r"""Weights ``(H, P)`` on the slow pairs removing the fast pairs' deviation energy.

    .. math:: c_l = \min\Big(1, \frac{\sum_{l \in F} e_l}{\sum_{l \notin F} e_l}\Big)^{1/2}
              \ (l \notin F),\qquad e_l = \sum_j |\tilde\delta_{jl}|^2

    so that :math:`\sum_l c_l^2 e_l` over the slow pairs equals the fast
    pairs' energy (all of the slow energy when it is smaller), per head.
    """
    k = _complex(kc)
    e = (k - _complex(kbar, k)[:, None]).abs().square().sum(1)  # (H, P)
    is_fast = torch.as_tensor(np.asarray(fast, dtype=bool), device=k.device)
    e_fast, e_slow = (e * is_fast).sum(-1), (e * ~is_fast).sum(-1)  # (H,)
    share = torch.where(e_slow > 0, (e_fast / torch.where(e_slow > 0, e_slow, 1.0)).clamp(max=1),
                        0.0)  # fmt: skip
    return torch.where(is_fast, 0.0, share.sqrt()[:, None])  # (H, P)


def drop_pair_deviation(qc: Array, kc: Array, kbar: Array, theta: Array, positions: Array,
                        s: float, weights: Array) -> torch.Tensor:  # fmt: skip
    r"""The change when the keys' deviation in pair :math:`l` shrinks by ``weights`` :math:`c_l`.

    .. math:: k'_j = k_j - c \odot \delta_j,\qquad
              \Delta W_{ij} = -s\,\mathrm{Re}\sum_l c_l\,\tilde q_{il}
              \overline{\tilde\delta_{jl}}e^{i\theta_l\Delta_{ij}}

    ``weights`` ``(P,)`` or ``(H, P)`` (1 on the fast pairs: the split becomes
    nearly exact; :func:`matched_slow_weights` for the control).
    """
    q, k, th, p = _check(qc, kc, theta, positions)
    c = torch.as_tensor(weights).to(th.dtype).to(q.device)
    delta = (k - _complex(kbar, q)[:, None]) * c[..., None, :]  # (H, N, P)
    change = -_bilinear(_rotated(q, th, p), _rotated(delta, th, p), s)
    return _zero_outside(_causal(len(p), q.device), change)


def _far(positions: torch.Tensor, length: float) -> torch.Tensor:
    """``(N, N)`` bool: the causal pairs whose distance exceeds ``length``."""
    return _causal(len(positions), positions.device) & (positions[:, None] - positions > length)


def cap_positional(qc: Array, kc: Array, kbar: Array, theta: Array, positions: Array, s: float,
                   length: float) -> torch.Tensor:  # fmt: skip
    r""":math:`f(q_i, L) - f(q_i, \Delta_{ij})` where :math:`\Delta_{ij} > L`: ``f`` capped alone.

    .. math:: f(q_i, D) = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde{\bar k}_l}
              e^{i\theta_l D}
    """
    q, _, th, p = _check(qc, kc, theta, positions)
    kb = _complex(kbar, q)  # (H, P)
    turn = torch.polar(torch.ones_like(th), length * th)  # (P,)
    f_cap = (q * kb.conj()[:, None] * turn).real.sum(-1) * s  # (H, N)
    f = _bilinear(_rotated(q, th, p), _rotated(kb, th, p), s)
    return _zero_outside(_far(p, length), f_cap[..., None] - f)


def cap_rest(qc: Array, kc: Array, kbar: Array, theta: Array, positions: Array, s: float,
             length: float) -> torch.Tensor:  # fmt: skip
    r""":math:`(W - f)(L) - (W - f)(\Delta_{ij})` for :math:`\Delta_{ij} > L`: ``g + E`` capped.

    .. math:: (W - f)(D)_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\overline{\tilde\delta_{jl}}
              e^{i\theta_l D}
    """
    q, k, th, p = _check(qc, kc, theta, positions)
    delta = k - _complex(kbar, q)[:, None]  # (H, N, P)
    rest_cap = _bilinear(q * torch.polar(torch.ones_like(th), length * th), delta, s)
    rest = _bilinear(_rotated(q, th, p), _rotated(delta, th, p), s)
    return _zero_outside(_far(p, length), rest_cap - rest)


def shuffle_frequencies(qc: Array, kc: Array, theta: Array, positions: Array, s: float,
                        order: Array) -> torch.Tensor:  # fmt: skip
    r""":math:`W_\pi - W`, pair :math:`l` turning at :math:`\theta_{\pi(l)}` (``order`` is π)."""
    q, k, th, p = _check(qc, kc, theta, positions)
    perm = np.asarray(order, dtype=np.int64)
    if sorted(perm.tolist()) != list(range(th.numel())):
        raise RopesplitError(f"order must be a permutation of the {th.numel()} pairs")
    shuffled = th[torch.from_numpy(perm).to(th.device)]
    w = _bilinear(_rotated(q, th, p), _rotated(k, th, p), s)
    w_pi = _bilinear(_rotated(q, shuffled, p), _rotated(k, shuffled, p), s)
    return _zero_outside(_causal(len(p), q.device), w_pi - w)


def log_ratio(edited: Array, clean: Array) -> np.ndarray:
    r"""Per row, the log ratio of the mean losses of two ``(P, T)`` arrays.

    .. math:: \log\big(\overline{\ell^{\mathrm{edit}}} / \overline{\ell^{\mathrm{clean}}}\big)

    0 when the edit changes nothing, > 0 when it hurts.
    """
    a, b = np.asarray(edited, dtype=np.float64), np.asarray(clean, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise RopesplitError(f"losses must be two (P, T) arrays, got {a.shape} and {b.shape}")
    return np.log(a.mean(-1) / b.mean(-1))
