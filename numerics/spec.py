r"""A head's RoPE geometry as one object: frequencies, scale, layout, rotary dim, window, KV map.

docs/theory.md section 1: a head of dimension ``d`` has ``P = d/2`` pairs with
frequencies :math:`\theta_l` (0 for non-rotating pairs), a pair layout
(``"half"``: coordinate ``l`` with ``l + r/2``; ``"interleaved"``: ``2l``
with ``2l + 1``), ``r = rotary_dim`` rotating coordinates, a logit scale
``s`` and, for a layer, the query-head to KV-head map and any sliding window.
:class:`RopeSpec` holds them together, built once from a base (with any
scaling), from arrays or by hand. It reads no config: a Hugging Face or
TransformerLens config becomes a spec in
:func:`ropesplit.empirical.adapter.configs.rope_spec`, which calls these constructors.

:func:`looks_rotated` tells pre-RoPE keys from post-RoPE ones: a key's
near-constant part (``kbar``, which the fast pairs carry when the split
holds) survives averaging over positions before the rotation, and is turned
away by it after:

.. math::
    \rho_{\mathrm{as\ given}} = \frac{|\mathrm{mean}_j \tilde k_{jl}|}
                                     {\mathrm{rms}_j |\tilde k_{jl}|},\qquad
    \rho_{\mathrm{unrotated}} = \frac{|\mathrm{mean}_j \tilde k_{jl} e^{-i\theta_l p_j}|}
                                     {\mathrm{rms}_j |\tilde k_{jl}|}

over the fast pairs (at least ``4`` turns over the positions), energy-weighted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import _inputs
from ropesplit.numerics.rope import (
    LAYOUTS,
    check_layout,
    frequencies,
    to_pairs,
)

__all__ = ["LAYOUTS", "RopeSpec", "as_spec", "looks_rotated", "repeat_kv_map",
           "spec_scale"]

_FAST_TURNS = 4.0  # a pair is "fast" when it turns at least this many times over the positions


def spec_scale(attn_scale: float, amplitude: float = 1.0) -> float:
    r"""The scale ``s`` of the logits, :math:`s = \mathrm{attn\_scale}\; a^2`.

    A RoPE table that carries an attention factor ``a`` (``cos = a cos(p theta)``, as
    YaRN's does) scales both ``q`` and ``k``, so ``W = s Re sum_l ...`` (docs/theory.md
    section 2) with the module's own ``attn_scale`` times ``a^2``.

    >>> spec_scale(0.125, 2.0)
    0.5
    """
    return float(attn_scale) * float(amplitude) ** 2


def repeat_kv_map(n_heads: int, n_kv: int) -> np.ndarray:
    r"""The KV head each of ``n_heads`` query heads reads under grouped-query attention,
    ``(H,)`` int: query head :math:`h` reads KV head :math:`\lfloor h / (H / H_{kv})\rfloor`,
    the grouping of transformers' ``repeat_kv`` (each KV head repeated ``H / H_kv`` times).

    >>> repeat_kv_map(4, 2).tolist()
    [0, 0, 1, 1]
    """
    if n_kv < 1 or n_heads % n_kv:
        raise RopesplitError(f"{n_heads} query heads cannot share {n_kv} KV heads evenly; "
                             "give kv_map")  # fmt: skip
    return np.arange(n_heads) // (n_heads // n_kv)


@dataclass(frozen=True)
class RopeSpec:
    """The RoPE geometry of one layer's heads (see the module docstring)."""

    theta: tuple[float, ...]  # (P,) one frequency per pair, 0 for non-rotating pairs
    scale: float  # the logit scale s (usually 1/sqrt(d))
    layout: str = "half"  # "half" (Hugging Face, GPT-NeoX) or "interleaved" (GPT-J, Meta)
    rotary_dim: int | None = None  # rotating coordinates r (None: all d)
    window: int | None = None  # sliding window (None: full causal attention)
    kv_map: tuple[int, ...] | None = None  # query head -> KV head (None: h // (H / Hkv))

    def __post_init__(self) -> None:
        check_layout(self.layout)
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise RopesplitError(f"scale must be a finite number > 0, got {self.scale}")
        th = np.asarray(self.theta, dtype=np.float64)
        if th.ndim != 1 or th.size == 0 or not np.all(np.isfinite(th)) or (th < 0).any():
            raise RopesplitError(f"theta must be P >= 1 finite frequencies >= 0, got {th.shape}")
        if self.rotary_dim is not None and (self.rotary_dim % 2 or not
                                            0 < self.rotary_dim <= self.head_dim):  # fmt: skip
            raise RopesplitError(
                f"rotary_dim must be even and in (0, {self.head_dim}], got {self.rotary_dim}"
            )
        if self.window is not None and self.window < 1:
            raise RopesplitError(f"window must be at least 1, got {self.window}")

    @property
    def head_dim(self) -> int:
        """``d = 2 P``."""
        return 2 * len(self.theta)

    @property
    def frequencies(self) -> np.ndarray:
        """``theta`` as a float64 array ``(P,)``."""
        return np.asarray(self.theta, dtype=np.float64)

    def check_head_dim(self, d: int) -> RopeSpec:
        """This spec, when the tensors' head dim is its own ``2 P``; else a one-line error."""
        if self.head_dim != d:
            raise RopesplitError(f"the RopeSpec has head dim {self.head_dim}, the tensors {d}")
        return self

    def kv_heads(self, n_heads: int, n_kv: int) -> np.ndarray:
        """The KV head each of ``n_heads`` query heads reads, ``(H,)``, checked."""
        if self.kv_map is not None:
            return _inputs.check_kv_map(self.kv_map, n_heads, n_kv)
        return repeat_kv_map(n_heads, n_kv)

    @classmethod
    def from_arrays(
        cls,
        theta: Any,
        scale: float,
        layout: str = "half",
        rotary_dim: int | None = None,
        window: int | None = None,
        kv_map: Any = None,
    ) -> RopeSpec:
        """From arrays as a capture holds them (``rotary_dim == d`` is stored as None)."""
        th = tuple(float(t) for t in np.asarray(theta, dtype=np.float64))
        rotary = None if rotary_dim is None or int(rotary_dim) == 2 * len(th) else int(rotary_dim)
        return cls(th, float(scale), layout, rotary, window,
                   None if kv_map is None else tuple(int(h) for h in kv_map))  # fmt: skip

    @classmethod
    def from_base(
        cls,
        head_dim: int,
        base: float,
        *,
        scale: float | None = None,
        layout: str = "half",
        rotary_dim: int | None = None,
        scaling: dict[str, Any] | None = None,
        window: int | None = None,
        kv_map: Any = None,
    ) -> RopeSpec:
        r"""``theta_l = b^{-2l/r}`` (``numerics.rope.frequencies``, any scaling), ``s = d^{-1/2}``.

        >>> RopeSpec.from_base(4, 100.0).theta
        (1.0, 0.1)
        """
        if head_dim < 2 or head_dim % 2:
            raise RopesplitError(f"head_dim must be even, got {head_dim}")
        theta = frequencies(head_dim, base, rotary_dim=rotary_dim, scaling=scaling)
        return cls.from_arrays(theta, head_dim**-0.5 if scale is None else scale, layout,
                               rotary_dim, window, kv_map)  # fmt: skip


def as_spec(spec: Any, d: int) -> RopeSpec:
    """``spec`` checked as the one geometry argument of the numerics for head dim ``d``.

    Loose frequencies are refused with the line that says how to build a
    spec (``RopeSpec.from_arrays(theta, scale)``, or ``from_base``).
    """
    if not isinstance(spec, RopeSpec):
        raise RopesplitError(f"the geometry is one RopeSpec, got {type(spec).__name__}: build "
                             "it with RopeSpec.from_arrays(theta, scale) or from_base")  # fmt: skip
    return spec.check_head_dim(d)


def layer_inputs(q: Any, k: Any, spec: Any, device: Any = None) -> tuple[Any, Any, RopeSpec,
                                                                        np.ndarray]:  # fmt: skip
    """A layer's ``q (H, N, d)`` and ``k (Hkv, N, d)`` as float64, checked against each
    other and against ``spec`` (:func:`as_spec`): ``(q, k, spec, kv)``, ``kv (H,)`` the KV
    head each query head reads. Every statistic over a layer starts here. With a torch
    ``device``, ``q`` and ``k`` are float64 tensors there (else numpy arrays)."""
    if device is None:
        q, k = _inputs.as_float64("q", q, 3), _inputs.as_float64("k", k, 3)
    else:
        q, k = (_inputs.as_float64_on(name, x, 3, device) for name, x in (("q", q), ("k", k)))
    (h, n, d), (hkv, nk, dk) = q.shape, k.shape
    if (nk, dk) != (n, d):
        raise RopesplitError(f"k must have shape (Hkv, {n}, {d}) like q, got {k.shape}")
    if n < 1:
        raise RopesplitError("need at least one token, got 0")
    spec = as_spec(spec, d)
    return q, k, spec, spec.kv_heads(h, hkv)


def looks_rotated(k: Any, spec: RopeSpec, positions: Any = None) -> tuple[float, float]:
    r"""``(rho_as_given, rho_unrotated)`` of the module docstring for keys ``k (..., N, d)``.

    Pre-RoPE keys give ``rho_as_given >= rho_unrotated``; keys already rotated
    by RoPE give the reverse. Both are near 0 (no verdict possible) when the
    keys have no constant part in the fast pairs. NaN when no pair is fast.
    """
    x = np.asarray(k, dtype=np.float64)
    n = x.shape[-2]
    p = np.arange(n, dtype=np.float64) if positions is None else np.asarray(positions, float)
    z = to_pairs(x, spec.layout, spec.rotary_dim).reshape(-1, n, len(spec.theta))  # (B, N, P)
    th = spec.frequencies
    fast = th * (p.max() - p.min() if n > 1 else 0.0) >= 2 * np.pi * _FAST_TURNS  # (P,)
    if not fast.any():
        return math.nan, math.nan
    z = z[..., fast]  # (B, N, F)
    rms = np.sqrt(np.mean(np.abs(z) ** 2, axis=1))  # (B, F)
    back = z * np.exp(-1j * p[:, None] * th[fast])  # (B, N, F): un-rotated
    weight = rms**2 / max(float((rms**2).sum()), 1e-300)  # energy weights
    with np.errstate(invalid="ignore", divide="ignore"):
        given = np.where(rms > 0, np.abs(z.mean(axis=1)) / rms, 0.0)
        unrot = np.where(rms > 0, np.abs(back.mean(axis=1)) / rms, 0.0)
    return float((weight * given).sum()), float((weight * unrot).sum())
