r"""Activations you already have: pre-RoPE queries and keys in, the same :class:`Analysis` out.

:func:`analyze_qk` takes one sequence's queries and keys of one layer, in
the Hugging Face layout ``(batch, head, pos, d)`` (``order="hf"``) or
TransformerLens' ``hook_q``/``hook_k`` layout ``(batch, pos, head, d_head)``
(``order="tl"``), the batch of size 1 or left out, plus a
:class:`~ropesplit.numerics.spec.RopeSpec`, and returns the rows
:func:`~ropesplit.empirical.analysis.analyze.analyze` gives for a captured layer
(docs/theory.md sections 5-6, ``numerics.stats.layer_statistics``)::

    >>> spec = RopeSpec.from_base(64, 10000.0)                 # doctest: +SKIP
    >>> result = analyze_qk(cache["blocks.3.attn.hook_q"],     # doctest: +SKIP
    ...                     cache["blocks.3.attn.hook_k"], spec, order="tl",
    ...                     labels=RowLabels(layer=3))
    >>> result.tidy()                                          # doctest: +SKIP

The statistics need pre-RoPE features. Keys already rotated by RoPE are
refused (their constant part lines up only after un-rotating them:
``numerics.spec.looks_rotated``), unless ``rotated=True`` asks to un-rotate
queries and keys by ``R(-p)`` first; ``rotated=True`` on keys that look
pre-RoPE is refused too. Where the keys have no constant part in the fast
pairs neither reading is possible and the input is taken as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE, Analysis, layer_rows
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.rope import rotate
from ropesplit.numerics.spec import RopeSpec, looks_rotated

__all__ = ["ORDERS", "ROTATED_RATIO", "RowLabels", "analyze_qk"]

ORDERS = ("hf", "tl")  # (batch, head, pos, d) | (batch, pos, head, d_head)
ROTATED_RATIO = 2.0  # one reading's constant part this many times the other's decides
_MIN_RHO = 0.2  # ... and at least this large (below it no reading is possible)


def _heads_first(x: Any, name: str, order: str) -> np.ndarray:
    """``x`` as float64 ``(heads, N, d)`` from the layout ``order``, batch of 1 dropped."""
    import torch

    if isinstance(x, torch.Tensor):
        x = x.detach().float().cpu().numpy()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 4:
        if a.shape[0] != 1:
            raise RopesplitError(f"analyze_qk takes one sequence; {name} has batch {a.shape[0]}: "
                                 "call it once per sequence")  # fmt: skip
        a = a[0]
    if a.ndim != 3:
        want = "(batch, head, pos, d)" if order == "hf" else "(batch, pos, head, d_head)"
        raise RopesplitError(f"{name} must be {want} or without the batch, got shape {a.shape}")
    a = a if order == "hf" else a.transpose(1, 0, 2)  # (heads, N, d)
    if not np.all(np.isfinite(a)):
        raise RopesplitError(f"{name} holds {int((~np.isfinite(a)).sum())} NaN/inf values")
    return a


@dataclass(frozen=True)
class RowLabels:
    """What :func:`analyze_qk`'s rows are labelled with: the ``layer`` and the model's
    ``name``."""

    layer: int = 0
    name: str = "raw q/k"


def analyze_qk(
    q: Any,
    k: Any,
    spec: RopeSpec,
    measure: Measure = DEFAULT_MEASURE,
    *,
    order: str = "hf",
    rotated: bool = False,
    positions: Any = None,
    labels: RowLabels = RowLabels(),
) -> Analysis:
    r"""The per-head statistics of one layer's queries and keys (module docstring).

    ``positions (N,)`` default ``0..N-1``; ``labels`` (:class:`RowLabels`): ``layer``
    and ``name`` label the rows; ``measure`` as in
    :func:`~ropesplit.empirical.analysis.analyze.analyze_batch`.
    """
    layer, name = labels.layer, labels.name
    if order not in ORDERS:
        raise RopesplitError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    dtype = str(getattr(q, "dtype", "float64")).removeprefix("torch.")  # the input's
    qh, kh = _heads_first(q, "q", order), _heads_first(k, "k", order)  # (H, N, d), (Hkv, N, d)
    (n_heads, n, d), (n_kv, nk, dk) = qh.shape, kh.shape
    if (nk, dk) != (n, d):
        raise RopesplitError(f"k must hold {n} positions of dim {d} like q, got {nk} of {dk}")
    spec.check_head_dim(d)
    if n < 2:
        raise RopesplitError(f"need at least 2 positions, got {n}")
    pos = np.arange(n, dtype=np.float64) if positions is None else np.asarray(positions, float)
    if pos.shape != (n,):
        raise RopesplitError(f"positions must have shape ({n},), got {pos.shape}")
    kv = spec.kv_heads(n_heads, n_kv)
    given, unrot = looks_rotated(kh, spec, pos)
    if not rotated and unrot > max(ROTATED_RATIO * given, _MIN_RHO):
        raise RopesplitError(
            f"k looks post-RoPE (its constant part lines up after un-rotating: {unrot:.2f} "
            f"against {given:.2f} as given); pass rotated=True to un-rotate q and k, or read "
            "them before RoPE (TransformerLens: hook_q/hook_k, not hook_rot_q/hook_rot_k)"
        )
    if rotated:
        if given > max(ROTATED_RATIO * unrot, _MIN_RHO):
            raise RopesplitError(f"rotated=True but k looks pre-RoPE ({given:.2f} as given "
                                 f"against {unrot:.2f} un-rotated)")  # fmt: skip
        back = dict(layout=spec.layout, rotary_dim=spec.rotary_dim)
        qh = rotate(qh, -pos, spec.frequencies, **back)  # (H, N, d): R(-p) R(p) q = q
        kh = rotate(kh, -pos, spec.frequencies, **back)
    rows = layer_rows(layer, qh, kh, replace(spec, kv_map=tuple(int(h) for h in kv)), measure,
                      positions=pos, rope_base=None)  # fmt: skip
    return Analysis(model=name, random_init=False, token_ids=[], heads=rows,
                    reconstruction_max_abs_diff=math.nan, dtype=dtype, n_tokens=n,
                    validation={"rotated_input": float(rotated), "rho_as_given": given,
                                "rho_unrotated": unrot})  # fmt: skip
