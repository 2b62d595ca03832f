r"""The rotation a RoPE function applies, read off its response to unit vectors.

A RoPE function turns each of ``P`` coordinate pairs of a ``d``-vector by the
angle ``p_n theta_l`` of its token (docs/theory.md section 1), and passes the
other ``d - 2P`` coordinates through. Modeling code writes the same rotation in
many ways: pairs split in halves ``(l, l + r/2)`` or interleaved ``(2l, 2l+1)``,
a half table re-interleaved inside the function, a complex ``freqs_cis``, the
sine negated, pairs read interleaved and written split (DeepSeek-V3). Rather
than a list of conventions, :func:`read_rotation` reads the linear map itself:
``M[n] (d_out, d_in)``, column ``c`` the function's output for the unit vector
``e_c`` at token ``n``. For each pair it finds the input coordinates
``(a_l, b_l)`` and the output coordinates ``(c_l, d_l)`` with

.. math:: y_{c_l} = \cos_{n,l}\, x_{a_l} - \sin_{n,l}\, x_{b_l}, \qquad
          y_{d_l} = \sin_{n,l}\, x_{a_l} + \cos_{n,l}\, x_{b_l},

the turn counted positive (a pair that turns by ``-p theta`` is the same pair
read ``(b_l, a_l)``: still a relative rotation). Reordering the input by
``in_order`` and the output by ``out_order`` gives the standard half-split
rotation of the returned table, so ``y[out_order] = rotate_half(x[in_order])``:
logits ``q . k`` are unchanged when the query and the key are reordered alike.
Where the function already is the half-split or interleaved rotation, the
orders are the identity and the layout is the function's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError

__all__ = ["AppliedRotation", "read_rotation", "rotate_applied"]

# a coordinate a RoPE function does not touch gets exact zeros (0 * x is 0 in floating point):
# any nonzero entry is support, however small (a base of 1e9 turns its slowest pair by 1e-8)
_ZERO = 0.0
_MATCH = 1e-4  # the rotation's cos (sin) entries agree to this fraction of max |M|
STRUCTURE_TOKENS = 64  # the tokens of the first sequence whose response reads the pairs


@dataclass(frozen=True)
class AppliedRotation:
    """What :func:`read_rotation` read: the coordinate orders, the layout and the table.

    ``in_order (d_in,)`` and ``out_order (d_out,)`` reorder the function's input and
    output into ``layout`` with the rotating pairs first; ``cos``, ``sin`` ``(B, N, r)``
    are the table as applied in that layout (``r = 2P``); ``identity`` when both orders
    are the identity (nothing is reordered).
    """

    in_order: np.ndarray
    out_order: np.ndarray
    layout: str
    cos: np.ndarray
    sin: np.ndarray

    @property
    def identity(self) -> bool:
        d_in, d_out = len(self.in_order), len(self.out_order)
        return (d_in == d_out and bool(np.array_equal(self.in_order, np.arange(d_in)))
                and bool(np.array_equal(self.out_order, np.arange(d_out))))  # fmt: skip

    @property
    def rotary_dim(self) -> int:
        return int(self.cos.shape[-1])


def rotate_applied(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   layout: str) -> torch.Tensor:  # fmt: skip
    """Apply RoPE as the model does: ``x (..., N, d)`` turned by the table ``cos``/``sin``
    ``(..., N, r)`` as applied (broadcast against ``x``), in ``layout``; the ``d - r``
    coordinates after the rotating ones pass through."""
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    if layout == "half":
        turned = torch.cat((-rot[..., r // 2 :], rot[..., : r // 2]), dim=-1)  # rotate_half
    else:
        turned = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).flatten(-2)  # (..., N, r)
    return torch.cat((rot * cos + turned * sin, rest), dim=-1)


def _host(M: Any, out: np.ndarray | None = None, into: np.ndarray | None = None) -> np.ndarray:
    """``M`` (or its entries ``M[..., out, into]``) as a float64 numpy array, from numpy or
    a torch tensor on any device (the gather made where ``M`` is)."""
    if isinstance(M, np.ndarray):
        return (M if out is None else M[..., out, into]).astype(np.float64)
    if out is not None:
        M = M[..., torch.as_tensor(out, device=M.device), torch.as_tensor(into, device=M.device)]
    return np.asarray(M.detach().double().cpu().numpy())


def _wrap(angle: np.ndarray) -> np.ndarray:
    return np.pi - np.mod(np.pi - angle, 2 * np.pi)


def read_rotation(M: Any, positions: np.ndarray | None = None) -> AppliedRotation:
    r"""The pairs, turn direction and table of a RoPE map ``M (B, N, d_out, d_in)``.

    ``M[b, n]`` is the function's output for each unit input at token ``n`` of
    sequence ``b`` (column ``c`` for ``e_c``); ``positions (B, N)`` the tokens'
    positions (default ``0..N-1``), read only for the direction of each turn
    (the phase step from one position to the next is positive, read where two tokens
    are one position apart: a longer step can wrap). The pairing is
    read from the first :data:`STRUCTURE_TOKENS` tokens of the first sequence, the
    table from every sequence and token; a map that is not a rotation of coordinate
    pairs plus pass-through coordinates is refused in one line. ``M`` is a numpy array
    or a torch tensor on any device: of a tensor only those tokens and the table's
    entries come to the host.
    """
    if M.ndim != 4:
        raise RopesplitError(f"a RoPE map must be (B, N, d_out, d_in), got shape "
                             f"{tuple(M.shape)}")  # fmt: skip
    batch, n_tokens, d_out, d_in = M.shape
    p = (np.broadcast_to(np.arange(n_tokens, dtype=np.float64), (batch, n_tokens))
         if positions is None else np.asarray(positions, dtype=np.float64))  # fmt: skip
    rows = min(n_tokens, STRUCTURE_TOKENS)
    first = _host(M[0, :rows])  # (rows, d_out, d_in): the structure
    scale = float(np.abs(first).max()) or 1.0
    support = np.abs(first).max(axis=0) > _ZERO * scale  # (d_out, d_in)
    pairs: dict[tuple[int, ...], list[int]] = {}
    rest: list[tuple[int, int]] = []  # (input, output) passed through
    for c in range(d_in):
        outs = tuple(int(o) for o in np.flatnonzero(support[:, c]))
        if len(outs) == 1 and np.allclose(first[:, outs[0], c], first[0, outs[0], c]):
            rest.append((c, outs[0]))
        elif len(outs) in (1, 2):
            pairs.setdefault(outs, []).append(c)
        else:
            raise RopesplitError(f"the RoPE function mixes input coordinate {c} into "
                                 f"{len(outs)} outputs: not a rotation of pairs")  # fmt: skip
    quads = []  # (a, b, c, d): inputs and outputs of one pair, the turn positive
    for outs, ins in pairs.items():
        if len(outs) != 2 or len(ins) != 2:
            raise RopesplitError(f"the RoPE function maps inputs {ins} to outputs "
                                 f"{list(outs)}: not a rotation of pairs")  # fmt: skip
        (a, b), (c, d) = ins, outs
        straight = (np.abs(first[:, c, a] - first[:, d, b]).max()
                    + np.abs(first[:, d, a] + first[:, c, b]).max())  # fmt: skip
        crossed = (np.abs(first[:, d, a] - first[:, c, b]).max()
                   + np.abs(first[:, c, a] + first[:, d, b]).max())  # fmt: skip
        if crossed < straight:  # a -> d, b -> c
            c, d = d, c
        if min(straight, crossed) > _MATCH * scale:
            raise RopesplitError(f"the RoPE function's pair {ins} -> {list(outs)} is not a "
                                 "rotation")  # fmt: skip
        phase = np.arctan2(first[:, d, a], first[:, c, a])  # (N,)
        dp = np.diff(p[0, :rows])
        unit = np.abs(dp) == 1  # a step of one position turns by +-theta < pi: no aliasing
        step = _wrap(np.diff(phase))[unit] * dp[unit]
        if step.size and np.median(step) < 0:  # turns by -p theta: the pair read (b, a)
            a, b, c, d = b, a, d, c
        quads.append((a, b, c, d))
    quads.sort(key=lambda quad: min(quad[0], quad[1]))
    n_pairs = len(quads)
    a_, b_, c_, d_ = (np.array([quad[i] for quad in quads], dtype=np.int64) for i in range(4))
    rest_in = np.array([i for i, _ in rest], dtype=np.int64)
    rest_out = np.array([o for _, o in rest], dtype=np.int64)
    cos = _host(M, c_, a_)  # (B, N, P)
    sin = _host(M, d_, a_)
    in_half = np.concatenate([a_, b_, rest_in])
    out_half = np.concatenate([c_, d_, rest_out])
    inter = np.stack([a_, b_], axis=1).ravel()
    if not n_pairs or (np.array_equal(in_half, np.arange(d_in))
                       and np.array_equal(out_half, np.arange(d_out))):  # fmt: skip
        return AppliedRotation(in_half, out_half, "half", np.concatenate([cos, cos], -1),
                               np.concatenate([sin, sin], -1))  # fmt: skip
    if (np.array_equal(inter, np.arange(2 * n_pairs))
            and np.array_equal(np.stack([c_, d_], axis=1).ravel(), inter)
            and np.array_equal(rest_in, rest_out)
            and np.array_equal(rest_in, np.arange(2 * n_pairs, d_in))):  # fmt: skip
        return AppliedRotation(np.arange(d_in), np.arange(d_out), "interleaved",
                               np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1))
    return AppliedRotation(in_half, out_half, "half", np.concatenate([cos, cos], -1),
                           np.concatenate([sin, sin], -1))  # fmt: skip
