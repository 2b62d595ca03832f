"""Checking and converting one head's inputs (shared by ``split`` and ``stats``).

Every user error becomes a one-line :class:`~ropesplit.core.errors.RopesplitError`.
Arrays come in as numpy arrays or CPU torch tensors and leave as float64 numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError


def as_float64(name: str, x: Any, ndim: int) -> np.ndarray:
    """``x`` as a finite float64 numpy array with ``ndim`` dimensions, or raise."""
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != ndim:
        raise RopesplitError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise RopesplitError(f"{name} must be finite, got {np.size(arr) - np.isfinite(arr).sum()} "
                             "non-finite values")  # fmt: skip
    return arr


def as_float64_on(name: str, x: Any, ndim: int, device: Any) -> Any:
    """``x`` as a finite float64 torch tensor with ``ndim`` dimensions on ``device``, or raise;
    a tensor already there is not copied to the host (its finiteness is counted there)."""
    import torch

    t = torch.as_tensor(x).detach().to(device=device, dtype=torch.float64)
    if t.ndim != ndim:
        raise RopesplitError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    bad = int((~torch.isfinite(t)).sum())
    if bad:
        raise RopesplitError(f"{name} must be finite, got {bad} non-finite values")
    return t


def check_kv_map(kv_map: Any, n_heads: int, n_kv: int) -> np.ndarray:
    """``(H,)`` int64: the KV head each of ``n_heads`` query heads reads, each in ``[0, n_kv)``."""
    kv = np.asarray(kv_map, dtype=np.int64)
    if kv.shape != (n_heads,) or (kv < 0).any() or (kv >= n_kv).any():
        raise RopesplitError(f"kv_map must be {n_heads} indices into {n_kv} KV heads, "
                             f"got {kv.tolist()}")  # fmt: skip
    return kv


def check_scale(scale: Any) -> float:
    """The logit scale ``s``: a finite positive number."""
    s = float(scale)
    if not (np.isfinite(s) and s > 0):
        raise RopesplitError(f"scale must be a finite positive number, got {scale}")
    return s


def check_positions(positions: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(positions_q, positions_k)``, each ``(n,)`` float64; ``None`` means ``0 .. n-1``."""
    if positions is None:
        p = np.arange(n, dtype=np.float64)
        return p, p
    if isinstance(positions, tuple | list) and len(positions) == 2:
        pq, pk = (as_float64(name, p, 1) for name, p in zip(("positions_q", "positions_k"),
                                                             positions, strict=True))  # fmt: skip
        names = ("positions_q", "positions_k")
    else:
        pq = pk = as_float64("positions", positions, 1)
        names = ("positions", "positions")
    for name, p in zip(names, (pq, pk), strict=True):
        if p.shape != (n,):
            raise RopesplitError(f"{name} must have shape ({n},), got {p.shape}")
    return pq, pk


def check_distances(distances: Any, n: int, positions: Any) -> np.ndarray:
    """An arbitrary ``(n, n)`` distance map ``Delta_ij`` (float64); not with ``positions``."""
    if positions is not None:
        raise RopesplitError("give positions or distances, not both")
    dist = as_float64("distances", distances, 2)
    if dist.shape != (n, n):
        raise RopesplitError(f"distances must have shape ({n}, {n}), got {dist.shape}")
    return dist


def check_window(window: Any) -> int | None:
    """Sliding window (``i - j < window``): a positive int or None."""
    if window is None:
        return None
    w = int(window)
    if w < 1 or w != window:
        raise RopesplitError(f"window must be a positive integer or None, got {window}")
    return w


def causal_mask(n: int, window: int | None) -> np.ndarray:
    """``(n, n)`` bool: ``j <= i`` and ``i - j < window`` (by index)."""
    i, j = np.indices((n, n))
    mask = j <= i
    if window is not None:
        mask &= i - j < window
    return mask
