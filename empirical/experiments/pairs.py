r"""A captured layer's queries and keys as complex RoPE pairs (docs/theory.md section 1).

Pair ``l`` of a head vector is the complex number ``z_l = x + i y``; in the
``"half"`` layout ``(x, y) = (x_l, x_{l + r/2})``, in ``"interleaved"``
``(x_{2l}, x_{2l+1})``, over the ``r = rotary_dim`` rotating coordinates; the
``d - r`` others pair up the same way among themselves (``theta = 0``, as in
the capture's ``theta``). Then

.. math:: W_{ij} = s\,\mathrm{Re}\sum_l \tilde q_{il}\,\overline{\tilde k_{jl}}\,
          e^{i\theta_l (p_i - p_j)}

The conversion is ``numerics.rope.to_pairs``; this module only applies it to
a captured layer and maps each query head to its KV head.
"""

from __future__ import annotations

import numpy as np

from ropesplit.empirical.capture import LayerCapture

__all__ = ["layer_pairs"]


def layer_pairs(layer: LayerCapture) -> tuple[np.ndarray, np.ndarray]:
    """Float64 ``q~ (H, N, P)`` and ``k~ (H, N, P)`` (the KV head each query head reads)."""
    from ropesplit.numerics.rope import to_pairs

    qc = to_pairs(layer.q.double().numpy(), layer.layout, layer.rotary_dim)  # (H, N, P)
    kc = to_pairs(layer.k.double().numpy(), layer.layout, layer.rotary_dim)  # (Hkv, N, P)
    return qc, kc[layer.kv_map]  # (H, N, P) each
