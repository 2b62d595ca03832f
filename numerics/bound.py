r"""The remainder of the split and its bound, pair by pair (THEORY.md section 3).

For a query pair :math:`\tilde q_l`, a key-deviation pair :math:`\tilde\delta_l`
(the key minus the reference key) and the distance :math:`\Delta`:

.. math::
    E &= s\,\mathrm{Re}\sum_l \tilde q_l\,\overline{\tilde\delta_l}\,(e^{i\theta_l\Delta} - 1) \\
    |E| &\le s\sum_l |\tilde q_l|\,|\tilde\delta_l|\,2|\sin(\theta_l\Delta/2)|
       \le s\sum_l |\tilde q_l|\,|\tilde\delta_l|\,\min(2, \theta_l|\Delta|)

``E`` is evaluated here term by term, with :math:`\cos x - 1 = -2\sin^2(x/2)`,
so every term carries its own small relative rounding error: the computed
``|E|`` exceeds the computed bound by at most about ``(P + 10) eps`` times the
bound, never by an absolute amount.  :data:`RTOL` (1e-12, safe for ``P`` up to
about 4000) and :data:`ATOL` (1e-300, the underflow floor) are the tolerance
of :func:`violations`; at ``Delta = 0`` both sides are exactly 0.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ATOL", "RTOL", "remainder_and_bound", "violations"]

RTOL = 1e-12  # relative rounding allowance of |E| over the bound (float64)
ATOL = 1e-300  # absolute allowance: below this everything is underflow


def remainder_and_bound(
    q: Any,
    dev: Any,
    theta: Any,
    delta: Any,
    scale: float,
    *,
    loose: bool = False,
) -> tuple[torch.Tensor, ...]:
    r"""``(E, bound)`` (and ``bound_loose`` when ``loose``) for broadcast pairs of vectors.

    ``q`` and ``dev`` are complex pairs ``(..., P)`` (numpy or torch; they
    broadcast against each other), ``theta`` is ``(P,)`` and ``delta`` the
    distances ``(...)``; the results are float64 tensors of the broadcast
    shape ``(...)``.

    .. math::
        E = s\sum_l \big[(a\,\delta_c + b\,\delta_e)(-2\sin^2\tfrac{x_l}{2})
            + (a\,\delta_e - b\,\delta_c)\sin x_l\big],\quad x_l = \theta_l\Delta

    with :math:`\tilde q_l = a + ib`, :math:`\tilde\delta_l = \delta_c + i\delta_e`.
    """
    q, dev = torch.as_tensor(q).to(torch.complex128), torch.as_tensor(dev).to(torch.complex128)
    th = torch.as_tensor(theta, dtype=torch.float64)
    x = torch.as_tensor(delta, dtype=torch.float64).unsqueeze(-1) * th  # (..., P)
    half_sin, half_cos = torch.sin(0.5 * x), torch.cos(0.5 * x)  # (..., P)
    a, b, dc, de = q.real, q.imag, dev.real, dev.imag
    along = a * dc + b * de  # Re q conj(delta)
    across = a * de - b * dc  # -Im q conj(delta)
    e = (along * (-2.0 * half_sin * half_sin) + across * (2.0 * half_sin * half_cos)).sum(-1)
    mag = q.abs() * dev.abs()  # (..., P) after broadcasting
    out = [scale * e, scale * (mag * (2.0 * half_sin.abs())).sum(-1)]
    if loose:
        out.append(scale * (mag * torch.clamp(x.abs(), max=2.0)).sum(-1))
    return tuple(out)


def violations(e: torch.Tensor, bound: torch.Tensor) -> int:
    r"""Number of pairs with :math:`|E| > \mathrm{bound}(1 + \mathrm{RTOL}) + \mathrm{ATOL}`."""
    return int((e.abs() > bound * (1.0 + RTOL) + ATOL).sum())
