"""The array types of the numerics' signatures, each with its shape (jaxtyping-style strings).

An input array is anything :func:`numpy.asarray` reads (a numpy array, a CPU
torch tensor, nested lists); the numerics read it as float64 and check its
shape.  The string after the type names the axes, as docs/theory.md does::

    H     query heads of a layer          Hkv   key/value heads (grouped-query attention)
    N     tokens (query or key positions) d     head dimension, P = d/2 pairs
    B     sequences of a batch            S     sampled causal pairs

>>> from typing import get_args
>>> get_args(LayerQueries)[1]
'H N d'
"""

from __future__ import annotations

from typing import Annotated, TypeAlias

import numpy as np
import numpy.typing as npt
import torch

__all__ = [
    "ArrayIn", "Distances", "Frequencies", "HeadFeatures", "KeyMean", "LayerKeyMeans",
    "LayerKeys", "LayerQueries", "Pairs", "Positions",
]  # fmt: skip

ArrayIn: TypeAlias = npt.ArrayLike | torch.Tensor  # read as float64, shape checked

HeadFeatures: TypeAlias = Annotated[ArrayIn, "N d"]  # one head's pre-RoPE queries or keys
LayerQueries: TypeAlias = Annotated[ArrayIn, "H N d"]  # a layer's pre-RoPE queries
LayerKeys: TypeAlias = Annotated[ArrayIn, "Hkv N d"]  # a layer's pre-RoPE keys
KeyMean: TypeAlias = Annotated[ArrayIn, "d"]  # one head's reference key kbar
LayerKeyMeans: TypeAlias = Annotated[ArrayIn, "Hkv d"]  # each KV head's reference key kbar
Frequencies: TypeAlias = Annotated[ArrayIn, "P"]  # theta_l, 0 for non-rotating pairs
# positions p (query and key alike) or the pair (p, p') of query and key positions
Positions: TypeAlias = Annotated[ArrayIn | tuple[ArrayIn, ArrayIn] | None, "N"]
Distances: TypeAlias = Annotated[ArrayIn, "N N"]  # a distance map Delta_ij
Pairs: TypeAlias = Annotated[np.ndarray, "... N P"]  # complex pairs (rope.to_pairs)
