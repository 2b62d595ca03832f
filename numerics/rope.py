r"""RoPE frequencies, pair layouts and rotation (docs/theory.md section 1).

A head's ``d`` real coordinates form ``P = d/2`` complex pairs
:math:`\tilde x_l = x_{\mathrm{re}(l)} + i\,x_{\mathrm{im}(l)}`; position ``m``
rotates pair ``l`` by :math:`m\theta_l`, i.e. :math:`\tilde x_l \mapsto \tilde x_l
e^{i m\theta_l}`.  The layout says which coordinates form a pair:

    half         pair l = (l, l + r/2)        Hugging Face Llama, GPT-NeoX
    interleaved  pair l = (2l, 2l + 1)        RoFormer, GPT-J, Meta's Llama

With partial rotary (``rotary_dim = r < d``) the first ``r`` coordinates
rotate; the remaining ``d - r`` are paired among themselves in the same
layout and carry :math:`\theta = 0`.

>>> import numpy as np
>>> frequencies(8, 100.0).round(3).tolist()
[1.0, 0.316, 0.1, 0.032]
>>> to_pairs(np.arange(8.0), layout="interleaved").tolist()
[1j, (2+3j), (4+5j), (6+7j)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.errors import RopesplitError

__all__ = ["LAYOUTS", "frequencies", "from_pairs", "low_half", "rotate", "to_pairs"]

LAYOUTS = ("half", "interleaved")


def _rotary_dim(d: int, rotary_dim: int | None) -> int:
    """Validate ``d`` and ``rotary_dim``; return ``r`` (``d`` when None)."""
    if d <= 0 or d % 2:
        raise RopesplitError(f"head_dim must be even and positive, got {d}")
    r = d if rotary_dim is None else int(rotary_dim)
    if r <= 0 or r % 2 or r > d:
        raise RopesplitError(f"rotary_dim must be even and in (0, {d}], got {rotary_dim}")
    return r


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise RopesplitError(f"layout must be 'half' or 'interleaved', got {layout!r}")


def frequencies(
    d: int,
    base: float = 10000.0,
    *,
    rotary_dim: int | None = None,
    scaling: dict[str, Any] | None = None,
) -> np.ndarray:
    r"""Frequencies :math:`\theta_l = b^{-2l/r}` for the ``r/2`` rotating pairs, 0 for the rest.

    .. math:: \theta_l = b^{-2l/r},\ l < r/2;\qquad \theta_l = 0,\ r/2 \le l < d/2

    ``scaling`` (docs/theory.md section 1: scaled RoPE only changes ``theta``):
    ``{"type": "linear", "factor": a}`` divides every :math:`\theta_l` by ``a``;
    ``{"type": "ntk", "factor": a}`` uses the base :math:`b\,a^{r/(r-2)}`;
    ``{"type": "llama3", "factor": a, "low_freq_factor": 1, "high_freq_factor": 4,
    "original_max_position_embeddings": 8192}`` is Llama-3's piecewise rule.
    Returns float64 ``(d/2,)``.

    >>> frequencies(6, 10000.0, rotary_dim=4).tolist()
    [1.0, 0.01, 0.0]
    """
    r = _rotary_dim(d, rotary_dim)
    if not np.isfinite(base) or base <= 1.0:
        raise RopesplitError(f"base must be a finite number above 1, got {base}")
    kind = None if scaling is None else scaling.get("type")
    factor = 1.0 if scaling is None else float(scaling.get("factor", 1.0))
    if scaling is not None and not factor > 0:
        raise RopesplitError(f"scaling factor must be positive, got {factor}")
    if kind == "ntk" and r > 2:
        base = base * factor ** (r / (r - 2))
    theta = base ** (-np.arange(0, r, 2, dtype=np.float64) / r)  # (r/2,)
    if kind == "linear":
        theta = theta / factor
    elif kind == "llama3":
        theta = _llama3(theta, factor, scaling or {})
    elif kind not in (None, "ntk"):
        raise RopesplitError(f"scaling type must be 'linear', 'ntk' or 'llama3', got {kind!r}")
    return np.concatenate([theta, np.zeros((d - r) // 2)])  # (d/2,)


def _llama3(theta: np.ndarray, factor: float, cfg: dict[str, Any]) -> np.ndarray:
    """Llama-3 scaling: slow pairs divided by ``factor``, fast kept, smooth in between."""
    low, high = float(cfg.get("low_freq_factor", 1.0)), float(cfg.get("high_freq_factor", 4.0))
    old = float(cfg.get("original_max_position_embeddings", 8192))
    wavelen = 2 * np.pi / theta  # (r/2,)
    smooth = np.clip((old / wavelen - low) / (high - low), 0.0, 1.0)  # 0: slow, 1: fast
    return (1 - smooth) * theta / factor + smooth * theta


def low_half(theta: Any) -> np.ndarray:
    r"""``(P,)`` weights of the low-frequency half of the pairs: 1 on the ``floor(P/2)``
    smallest :math:`\theta_l` (non-rotating pairs lowest, ties in pair order), 1/2 on the
    middle one when ``P`` is odd, 0 elsewhere.

    >>> low_half([1.0, 0.1, 0.0]).tolist()
    [0.0, 0.5, 1.0]
    """
    th = np.asarray(theta, dtype=np.float64).ravel()
    weight = np.zeros(th.size)
    order = np.argsort(th, kind="stable")
    weight[order[: th.size // 2]] = 1.0
    if th.size % 2:
        weight[order[th.size // 2]] = 0.5
    return weight


def _index(d: int, r: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates of the real and imaginary part of each pair: two ``(d/2,)`` int arrays."""
    _check_layout(layout)
    re, im = [], []
    for start, width in ((0, r), (r, d - r)):
        half = width // 2
        idx = np.arange(half)
        if layout == "half":
            re.append(start + idx)
            im.append(start + half + idx)
        else:
            re.append(start + 2 * idx)
            im.append(start + 2 * idx + 1)
    return np.concatenate(re), np.concatenate(im)


def to_pairs(x: Any, layout: str = "half", rotary_dim: int | None = None) -> np.ndarray:
    r"""``(..., d)`` real -> ``(..., d/2)`` complex128 pairs, rotating pairs first.

    .. math:: \tilde x_l = x_l + i\,x_{l + r/2}\ (\text{half}),\qquad
              \tilde x_l = x_{2l} + i\,x_{2l+1}\ (\text{interleaved})

    >>> to_pairs(np.arange(6.0), rotary_dim=4).tolist()
    [2j, (1+3j), (4+5j)]
    """
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    re, im = _index(d, _rotary_dim(d, rotary_dim), layout)
    return x[..., re] + 1j * x[..., im]  # (..., P)


def from_pairs(z: Any, layout: str = "half", rotary_dim: int | None = None) -> np.ndarray:
    r"""Inverse of :func:`to_pairs`: ``(..., P)`` complex -> ``(..., 2P)`` real float64.

    >>> from_pairs(to_pairs(np.arange(6.0), "interleaved"), "interleaved").tolist()
    [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    """
    z = np.asarray(z, dtype=np.complex128)
    d = 2 * z.shape[-1]
    re, im = (_as_slice(idx) for idx in _index(d, _rotary_dim(d, rotary_dim), layout))
    x = np.empty(z.shape[:-1] + (d,))  # (..., d), C-ordered
    x[..., re] = z.real
    x[..., im] = z.imag
    return x


def _as_slice(idx: np.ndarray) -> slice | np.ndarray:
    """A run of consecutive coordinates as a slice (a plain copy, not a scatter), else as is."""
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return slice(int(idx[0]), int(idx[0]) + idx.size)
    return idx


def rotate(
    x: Any,
    positions: Any,
    theta: Any,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
) -> np.ndarray:
    r"""Apply :math:`R(m)` to each vector: ``x (..., N, d)``, ``positions (N,)`` -> ``(..., N, d)``.

    .. math:: \widetilde{(R(m)x)}_l = \tilde x_l\, e^{i m \theta_l}

    >>> rotate(np.array([[1.0, 0.0]]), [np.pi / 2], [1.0]).round(12).tolist()
    [[0.0, 1.0]]
    """
    z = to_pairs(x, layout, rotary_dim)  # (..., N, P)
    m = np.asarray(positions, dtype=np.float64)
    th = np.asarray(theta, dtype=np.float64)
    n, p = z.shape[-2:]
    if m.shape != (n,):
        raise RopesplitError(f"positions must have shape ({n},), got {m.shape}")
    if th.shape != (p,):
        raise RopesplitError(f"theta must have shape ({p},) for head_dim {2 * p}, got {th.shape}")
    return from_pairs(z * np.exp(1j * m[:, None] * th), layout, rotary_dim)
