r"""A captured layer's queries and keys as complex RoPE pairs (THEORY.md section 1).

Pair ``l`` of a head vector is the complex number ``z_l = x + i y``; in the
``"half"`` layout ``(x, y) = (x_l, x_{l + r/2})``, in ``"interleaved"``
``(x_{2l}, x_{2l+1})``, over the ``r = rotary_dim`` rotating coordinates; the
``d - r`` others pair up the same way among themselves (``theta = 0``, as in
the capture's ``theta``). Then

.. math:: W_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\,\overline{\tilde k_{jl}}\,
          e^{i\theta_l (p_i - p_j)}

This is the conversion ``numerics.rope.to_pairs`` states in
docs/architecture.md, kept here because the experiments needed it before that
module existed; the tests check it against the model's own rotation.
"""

from __future__ import annotations

import numpy as np
from ropesplit.empirical.capture import LayerCapture

from ropesplit.errors import RopesplitError

__all__ = ["layer_pairs", "to_pairs"]


def _split(x: np.ndarray, layout: str) -> np.ndarray:
    """``(..., m)`` real, ``m`` even -> ``(..., m/2)`` complex in ``layout``."""
    (m,) = x.shape[-1:]
    if layout == "half":
        return x[..., : m // 2] + 1j * x[..., m // 2 :]
    if layout == "interleaved":
        return x[..., 0::2] + 1j * x[..., 1::2]
    raise RopesplitError(f"layout must be 'half' or 'interleaved', got {layout!r}")


def to_pairs(x: np.ndarray, layout: str = "half", rotary_dim: int | None = None) -> np.ndarray:
    r"""``(..., d)`` real -> ``(..., d/2)`` complex pairs, rotating pairs first.

    .. math:: \tilde x_l = x_l + i\, x_{l + r/2}\ (\text{half}),\qquad
              \tilde x_l = x_{2l} + i\, x_{2l+1}\ (\text{interleaved})
    """
    (d,) = x.shape[-1:]
    r = d if rotary_dim is None else rotary_dim
    if d % 2 or r % 2 or not 0 < r <= d:
        raise RopesplitError(f"head_dim and rotary_dim must be even, 0 < r <= d, got {d}, {r}")
    rest = x[..., r:]
    pairs = [_split(x[..., :r], layout)] + ([_split(rest, layout)] if rest.shape[-1] else [])
    return np.concatenate(pairs, axis=-1)


def layer_pairs(layer: LayerCapture) -> tuple[np.ndarray, np.ndarray]:
    """Float64 ``q~ (H, N, P)`` and ``k~ (H, N, P)`` (the KV head each query head reads)."""
    qc = to_pairs(layer.q.double().numpy(), layer.layout, layer.rotary_dim)  # (H, N, P)
    kc = to_pairs(layer.k.double().numpy(), layer.layout, layer.rotary_dim)  # (Hkv, N, P)
    return qc, kc[layer.kv_map]  # (H, N, P) each
