r"""RoPE geometry read off the tables a model applies: the frequencies
``cos[n, l] = a cos(p_n theta_l)``, ``sin[n, l] = a sin(p_n theta_l)`` of docs/theory.md
section 1 derived from the captured ``cos``/``sin`` (with their layout and amplitude
``a``). The frequencies the model's config states, to check them against, are read in
:mod:`ropesplit.empirical.adapter.configs` (``config_theta``).
"""

from __future__ import annotations

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError, ValidationError

__all__ = ["cached_geometry", "derive_theta", "detect_layout", "full_theta", "table_geometry",
           "with_rest"]


def _wrap(angle: np.ndarray) -> np.ndarray:
    """Angles reduced to ``(-pi, pi]``."""
    return np.pi - np.mod(np.pi - angle, 2 * np.pi)


def derive_theta(
    cos: np.ndarray, sin: np.ndarray, positions: np.ndarray, *, layout: str = "half"
) -> tuple[np.ndarray, float, float]:
    r"""Frequencies and amplitude behind an applied ``cos``/``sin`` table.

    .. math:: \cos_{n,l} = a \cos(p_n \theta_l), \quad \sin_{n,l} = a \sin(p_n \theta_l)

    ``cos``/``sin`` are ``(N, r)`` in the given pair layout; returns
    ``(theta (r/2,), a, fit_max_abs_diff)``. The phase step between two
    consecutive positions seeds ``theta`` (so ``theta_l < pi``, true of every
    RoPE); least squares over positions up to twice as far, repeatedly,
    refines it without ambiguity modulo ``2 pi``.
    """
    c, s = _pair_columns(cos, layout), _pair_columns(sin, layout)  # (N, r/2) each
    p = positions.astype(np.float64)  # (N,)
    amplitude = float(np.median(np.hypot(c, s)))
    phase = np.arctan2(s, c)  # (N, r/2), p_n theta_l mod 2 pi
    order = np.argsort(p, kind="stable")
    steps = np.flatnonzero(np.diff(p[order]) == 1)
    if steps.size == 0:
        raise RopesplitError(
            "cannot derive RoPE frequencies: no two tokens at consecutive positions"
        )
    a, b = order[steps[0]], order[steps[0] + 1]
    theta = _wrap(phase[b] - phase[a])  # (r/2,)
    reach = 2.0 * max(abs(p[a]), abs(p[b]), 1.0)
    while True:
        near = np.abs(p) <= reach
        resid = _wrap(phase[near] - p[near, None] * theta)  # (n_near, r/2)
        theta = theta + (p[near] @ resid) / max(float(p[near] @ p[near]), 1.0)
        if near.all():
            break
        reach *= 2.0
    fit = np.maximum(
        np.abs(amplitude * np.cos(p[:, None] * theta) - c),
        np.abs(amplitude * np.sin(p[:, None] * theta) - s),
    )
    return theta, amplitude, float(fit.max())


def table_geometry(
    cos: torch.Tensor, sin: torch.Tensor, positions: np.ndarray, what: str = "cos/sin table"
) -> tuple[str, np.ndarray, float]:
    r"""Layout, ``theta (r/2,)`` and amplitude behind an applied table ``(N, r)``, checked.

    The one place that reads RoPE's geometry off a model's own tables (the
    capture and LM-Infinite's attention both call it): :func:`derive_theta`
    in the detected layout; an amplitude within rounding of 1 is 1; the fit
    must be within the table's rounding, ``a eps (8 + 2 max|p theta|)`` with
    ``eps`` that of float32 or the table's dtype, whichever is coarser
    (transformers computes the angles in float32 whatever the model's
    dtype), else ``ValidationError`` naming ``what``.
    """
    cos_np, sin_np = cos.double().cpu().numpy(), sin.double().cpu().numpy()
    layout = detect_layout(cos_np, sin_np)
    theta, amplitude, fit = derive_theta(cos_np, sin_np, positions, layout=layout)
    eps = max(float(torch.finfo(cos.dtype).eps), float(torch.finfo(torch.float32).eps))
    if abs(amplitude - 1.0) <= 4 * eps:  # no attention factor: 1 up to the table's rounding
        amplitude = 1.0
    max_angle = float(np.abs(positions).max() * theta.max())
    if fit > amplitude * eps * (8.0 + 2.0 * max_angle):
        raise ValidationError(f"{what} fits no single frequency per pair ({fit:.2e})")
    return layout, theta, amplitude


def cached_geometry(
    tables: dict[tuple[int, int], tuple[str, np.ndarray, float]], cos: torch.Tensor,
    sin: torch.Tensor, positions: np.ndarray, what: str = "cos/sin table",
) -> tuple[str, np.ndarray, float]:  # fmt: skip
    """:func:`table_geometry`, derived once per table: ``tables`` keyed by the tensors' data
    pointers (a model computes one table per forward pass and hands it to every layer)."""
    key = (cos.data_ptr(), sin.data_ptr())
    if key not in tables:
        tables[key] = table_geometry(cos, sin, positions, what)
    return tables[key]


def with_rest(pre: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """Pre-RoPE ``(..., r)`` completed to ``(..., d)`` by the non-rotating rest of ``attended``
    (only the rotary slice goes through RoPE, as in Phi; the rest is attended as is)."""
    r, d = pre.shape[-1], attended.shape[-1]
    return pre if r == d else torch.cat((pre, attended[..., r:].to(pre.dtype)), dim=-1)


def full_theta(theta_r: np.ndarray, d: int) -> np.ndarray:
    """``(d/2,)`` frequencies: the rotary pairs' ``theta_r`` then 0 for the non-rotating ones."""
    return np.concatenate([theta_r, np.zeros(d // 2 - len(theta_r))])


def _pair_columns(table: np.ndarray, layout: str) -> np.ndarray:
    """``(N, r)`` cos/sin table -> ``(N, r/2)``, one column per pair."""
    (_, r) = table.shape
    return table[:, : r // 2] if layout == "half" else table[:, 0::2]


def detect_layout(cos: np.ndarray, sin: np.ndarray) -> str:
    """``"half"`` when pair ``l`` repeats at column ``l + r/2``, ``"interleaved"`` at ``2l+1``."""
    (_, r) = cos.shape
    if np.array_equal(cos[:, : r // 2], cos[:, r // 2 :]) and np.array_equal(
        sin[:, : r // 2], sin[:, r // 2 :]
    ):
        return "half"
    if np.array_equal(cos[:, 0::2], cos[:, 1::2]) and np.array_equal(sin[:, 0::2], sin[:, 1::2]):
        return "interleaved"
    raise RopesplitError("cos/sin table is neither half-split nor interleaved RoPE")

