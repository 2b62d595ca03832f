r"""Validation of a capture: each layer rebuilt from the captured tensors alone.

What it checks, and no more: from the captured tensors alone, the capture
rebuilds, per layer, (1) the rotated queries and keys, compared
with the tensors the model's RoPE produced, relative to their largest entry
(:data:`ROPE_TOL`); (2) the pre-softmax logits ``W`` of docs/theory.md section 2
(then soft-cap), compared with the model's own on every attended pair,
relative to the largest logit (:data:`LOGIT_TOL`); (3) the probabilities
after mask and softmax, compared absolutely (:data:`RECONSTRUCTION_TOL`). Under a
kernel that forms neither logits nor probabilities (SDPA, flash attention: the model
as it runs), (2) and (3) give way to (4) the attention's output ``A V``, compared
with the kernel's relative to the largest value (the same tolerance as (3)).
Passing says the captured ``q``, ``k``, ``cos``/``sin``, scale, soft-cap and
mask reproduce this forward pass's logits to float32 rounding; it does not
say the model's other parts, or other inputs, behave alike. A failure is a
:class:`~ropesplit.core.errors.ValidationError`.

Shapes (one layer of one sequence)::

    q       (H, N, d)     pre-RoPE queries
    k       (Hkv, N, d)   pre-RoPE keys; head h reads kv_map[h]
    cos/sin (N, r)        as applied
    W, A    (H, N, N)     rebuilt logits and probabilities
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ropesplit.core.errors import RopesplitError, ValidationError
from ropesplit.numerics.mask import Mask
from ropesplit.numerics.workers import serial

if TYPE_CHECKING:
    from ropesplit.empirical.model.capture import Capture

__all__ = [
    "BLOCK_ELEMENTS",
    "LOGIT_TOL",
    "RECONSTRUCTION_TOL",
    "ROPE_TOL",
    "THETA_TOL",
    "ModelAttention",
    "RotatedAttention",
    "Tolerances",
    "allowed_pairs",
    "check_reconstruction",
    "max_abs",
    "max_rel",
    "rebuild_logits",
    "rebuild_probs",
    "reconstruct",
    "sampled_rows",
    "tolerances",
    "mask_bias",
    "mask_window",
    "read_mask",
    "unshifted",
]

RECONSTRUCTION_TOL = 1e-4  # max |probs - rebuilt probs| accepted on real data
LOGIT_TOL = 1e-5  # max |W - W_model| / max |W_model| over attended pairs (float32: ~1e-7)
ROPE_TOL = 1e-5  # max |R q - (R q)_model| / max |(R q)_model|, queries and keys
THETA_TOL = 1e-4  # max relative difference of the derived theta from the config's rope_theta
HALF_TOL_EPS = 4.0  # half precision: RoPE and logit checks within this many of the dtype's eps
HALF_PROBS_EPS = 16.0  # and the probabilities within this many (softmax amplifies the rounding)


@dataclass(frozen=True)
class Tolerances:
    """What the capture's checks accept, for one model dtype (recorded in every JSON record).

    float32 and float64 models: the constants above (float32 rounding is about
    1e-7). float16 and bfloat16 models round q, k, the cos/sin tables and the
    logits to 2^-11 and 2^-8: the RoPE and logit checks accept
    :data:`HALF_TOL_EPS` times the dtype's eps (bfloat16: 3.1e-2, float16:
    3.9e-3; SmolLM2-135M in bfloat16 at 512 tokens measured 7.1e-3 and
    6.9e-3), the probabilities :data:`HALF_PROBS_EPS` times (measured 2.5e-2:
    the softmax amplifies the logits' rounding), theta the larger of
    :data:`THETA_TOL` and one eps. The statistics never run in the
    model's dtype: captures are read in float64 (numerics), and where the
    config states the base of a default RoPE its exact frequencies replace
    the ones derived from a half-precision table.
    """

    rope: float = ROPE_TOL
    logit: float = LOGIT_TOL
    probs: float = RECONSTRUCTION_TOL
    theta: float = THETA_TOL

    @property
    def half(self) -> bool:
        """Whether these are a half-precision model's (looser than float32's)."""
        return self.theta > THETA_TOL

    def as_dict(self) -> dict[str, float]:
        """``tolerance_rope``, ``tolerance_logit``, ``tolerance_probs``, ``tolerance_theta``."""
        return {f"tolerance_{f.name}": float(getattr(self, f.name)) for f in fields(self)}


def tolerances(dtype: Any) -> Tolerances:
    """The :class:`Tolerances` of a model whose weights are ``dtype`` (a torch dtype or name).

    >>> tolerances("float32").rope, round(tolerances("bfloat16").rope, 4)
    (1e-05, 0.0312)
    """
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if dt not in (torch.float16, torch.bfloat16):
        return Tolerances()
    eps = float(torch.finfo(dt).eps)
    return Tolerances(rope=HALF_TOL_EPS * eps, logit=HALF_TOL_EPS * eps,
                      probs=HALF_PROBS_EPS * eps, theta=max(THETA_TOL, eps))  # fmt: skip
BLOCK_ELEMENTS = 2**19  # logits rebuilt at once during validation (2 MiB float32)
# all but the first sequence of a forward pass: query rows compared, in runs of VALIDATED_RUN
# (the first sequence's every row shows the capture follows the model; the others' sample
# shows each sequence's tensors are its own, at a sixteenth of the cost at 512 tokens)
VALIDATED_ROWS, VALIDATED_RUN = 32, 8


def sampled_rows(n_tokens: int, seed: Any) -> list[tuple[int, int]]:
    """Seeded runs ``(r0, r1)`` of :data:`VALIDATED_RUN` query rows, :data:`VALIDATED_ROWS`
    in all (every row when there are no more), in order; the last row always among them
    (it attends to the most keys)."""
    starts = range(0, n_tokens, VALIDATED_RUN)
    if len(starts) * VALIDATED_RUN <= VALIDATED_ROWS:
        return [(0, n_tokens)]
    rng = np.random.default_rng(seed)
    last = len(starts) - 1
    picked = rng.choice(last, VALIDATED_ROWS // VALIDATED_RUN - 1, replace=False)
    return [(starts[i], min(n_tokens, starts[i] + VALIDATED_RUN))
            for i in sorted([*picked.tolist(), last])]


# --------------------------------------------------------------------------- rebuild


def allowed_pairs(n_tokens: int, window: int | None = None, device: Any = None,
                  mask: Mask | None = None) -> torch.Tensor:  # fmt: skip
    """``(N, N)`` bool: ``j <= i`` (causal by index) and ``i - j < window`` when windowed;
    ``mask``'s pairs where one is given (attention both ways, blocks, padding)."""
    if mask is not None:
        return torch.from_numpy(mask.allowed(n_tokens)).to(device)
    i = torch.arange(n_tokens, device=device)
    allowed = i[None, :] <= i[:, None]  # (N, N)
    if window is not None:
        allowed &= (i[:, None] - i[None, :]) < window
    return allowed


@dataclass(frozen=True)
class RotatedAttention:
    r"""One layer's attention as the capture rebuilds it (docs/theory.md section 2).

    .. math:: W_{ij} = c \tanh\big(s\, (R_i q_i)^\top (R_j k_j) / c\big),
              \quad j \le i,\ i - j < w

    ``qr`` = ``R q (H, N, d)`` and ``kr`` = ``R k (H, N, d)`` (the keys repeated per query
    head, :func:`~ropesplit.numerics.applied.rotate_applied`), in the dtype the logits are
    rebuilt in; ``scale`` the module's own ``s``; ``softcap`` ``c`` (None: no ``tanh``);
    ``window`` ``w`` (None: every causal pair); ``mask`` any other set of pairs the call
    lets through (both ways, blocks, padding: docs/theory.md section 9), None for the
    causal band.
    """

    qr: torch.Tensor  # (H, N, d)
    kr: torch.Tensor  # (H, N, d)
    scale: float
    softcap: float | None = None
    window: int | None = None
    mask: Mask | None = None  # not a causal band (then window is None)


@dataclass(frozen=True)
class ModelAttention:
    """What the model's own attention produced for one layer of one sequence, the rebuild's
    yardstick: ``probs`` ``A (H, N, N)``; ``logits`` its pre-softmax ``W (H, N, N)``
    (None when not tapped); ``sinks (H,)`` a sink logit per head in the softmax's
    normaliser (gpt-oss), ``A_ij = e^{W_ij} / (sum_j e^{W_ij} + e^{s_h})``, else None;
    ``bias (1|H, N, N)`` what the mask adds on the attended pairs (:func:`mask_bias`, in
    the probabilities' softmax), else None. A kernel that forms no probabilities (SDPA,
    flash attention) is held to its output instead: ``probs`` None, ``output`` ``(H, N,
    dv)`` what it returned and ``value`` ``(H, N, dv)`` the values each query head read."""

    probs: torch.Tensor | None  # (H, N, N)
    logits: torch.Tensor | None = None  # (H, N, N)
    sinks: torch.Tensor | None = None  # (H,)
    bias: torch.Tensor | None = None  # (1|H, N, N)
    output: torch.Tensor | None = None  # (H, N, dv)
    value: torch.Tensor | None = None  # (H, N, dv)


def rebuild_logits(attention: RotatedAttention, *, rows: slice | None = None,
                   cols: slice | None = None) -> torch.Tensor:  # fmt: skip
    r"""The pre-softmax logits ``W`` of :class:`RotatedAttention`, every pair of the query
    rows and key columns selected (default all): ``(H, len(rows), len(cols))`` in the
    features' dtype. The mask is not applied: see :func:`allowed_pairs`.
    """
    rows, cols = rows or slice(None), cols or slice(None)
    qr, kr = attention.qr[:, rows], attention.kr[:, cols]  # (H, n, d), (H, c, d)
    logits = torch.matmul(qr, kr.transpose(1, 2)).mul_(attention.scale)  # (H, n, c)
    softcap = attention.softcap
    if softcap is not None:
        logits = logits.div_(softcap).tanh_().mul_(softcap)
    return logits


def mask_window(mask: torch.Tensor | None) -> int | None:
    r"""The sliding window an additive mask ``(., ., N, N)`` lets through, read off the mask.

    Some models keep their window only in the mask they hand the attention (Phi-3.5-MoE):
    the attended pairs are the mask's finite entries above its fill value. Causal pairs
    alone give None; causal pairs with ``i - j < w`` give ``w``; any other pattern (a
    pair after its query, a gap) is refused (:class:`ValidationError`), since the split's
    statistics would be measured on pairs the model does not attend.
    """
    if mask is None or mask.ndim != 4 or mask.shape[-1] != mask.shape[-2]:
        return None
    n = mask.shape[-1]
    through = _let_through(mask[0, 0])
    if bool(through.all()):  # nothing masked: no causal mask to read (the model masks itself)
        return None
    width = int((through & allowed_pairs(n, None, mask.device)).sum(-1).max())  # keys a row reads
    window = None if width == n else width
    if not bool((through == allowed_pairs(n, window, mask.device)).all()):
        raise ValidationError("the attention mask lets through pairs that no causal window "
                              "describes")  # fmt: skip
    return window


def _let_through(m: torch.Tensor) -> torch.Tensor:
    """``(N, N)`` bool: the pairs one sequence's mask ``m`` lets through, additive (its
    entries above its fill value) or boolean alike; every pair where it masks none."""
    m = m.float()
    return m > m.min() if bool((m != m.max()).any()) else torch.ones_like(m, dtype=torch.bool)


def read_mask(mask: torch.Tensor | None, b: int, causal: bool, window: int | None) -> Mask:
    r"""The pairs an attention call lets through for sequence ``b``, as a :class:`Mask`.

    A causal module's (a decoder's) additive or boolean mask ``(B, 1|H, N, N)`` gives its
    window (:func:`mask_window`, or the call's ``window``); a module that looks both ways
    (an encoder's ``is_causal`` False) gives its band, blocks and padding read off the mask
    (:meth:`Mask.of`); no mask, or one that masks nothing, is every pair the module's own
    rule allows. A pattern no mask describes is a :class:`ValidationError`.
    """
    if causal:
        return Mask.causal(window if window is not None else mask_window(mask))
    if mask is None or mask.ndim != 4 or mask.shape[-1] != mask.shape[-2]:
        return Mask.both()
    try:
        return Mask.of(_let_through(mask[b, 0]).cpu().numpy())
    except RopesplitError as exc:
        raise ValidationError(str(exc)) from None


def mask_bias(mask: torch.Tensor | None, b: int, window: int | None,
              pairs: Mask | None = None) -> torch.Tensor | None:  # fmt: skip
    r"""The finite values an additive mask ``(B, 1|H, N, N)`` adds on the attended pairs of
    sequence ``b``, ``(1|H, N, N)`` (0 off them), or None where it adds none (a causal
    mask is 0 there).

    Doge's dynamic mask adds a per-(head, key) bias ``b_{hj}`` to the logits: the softmax
    sees ``W + b``. The split is of ``W`` (the bias, a key-only term, is semantic: part of
    ``g`` in docs/theory.md's terms, outside the RoPE logit the statistics measure); the
    validation compares the model's ``W`` (its softmax input less the bias) and rebuilds
    its probabilities as ``softmax(W + b)``.
    """
    if mask is None or mask.ndim != 4:
        return None
    if mask.dtype == torch.bool:  # a boolean mask adds nothing
        return None
    attended = allowed_pairs(mask.shape[-1], window, mask.device, pairs)
    bias = torch.where(attended, mask[b].float(), 0.0)
    return bias if bool(bias.any()) else None


def unshifted(model_logits: torch.Tensor, sinks: torch.Tensor | None, window: int | None,
              rebuilt: Callable[[], torch.Tensor]) -> torch.Tensor:  # fmt: skip
    r"""The model's logits ``W (H, N, N)`` from the input its eager attention hands softmax.

    Most models hand over ``W`` itself (returned as it is). Models with attention
    sinks (gpt-oss, MiMo) append a per-head sink logit ``s_h`` as column ``N`` and
    subtract each row's maximum: then ``W = L_{:, :N} + (s_h - L_{:, N})``, read off the
    model's own numbers. Models that subtract the row maximum without a sink (MiMo's
    full-attention layers) show it as every attended row's maximum being exactly 0;
    their ``W`` is known up to that per-row constant, which softmax ignores, and is
    compared as ``L + max_j W^{rebuilt}_{ij}`` (``rebuilt()``: the rebuilt logits
    ``(H, N, N)``), so a rebuild that is off anywhere but by a row constant still fails.
    """
    n = model_logits.shape[1]
    if sinks is not None and model_logits.shape[-1] == n + 1:
        shift = sinks.to(model_logits)[:, None, None] - model_logits[..., n:]
        return model_logits[..., :n] + shift
    if model_logits.shape[-1] != n or not n:
        return model_logits
    # a shifted input has maximum exactly 0 on every row: read on the first row (one attended
    # pair) and the last, the full check only then (an unshifted row's maximum is 0 by chance)
    first, last = model_logits[:, 0, 0], model_logits[:, -1, max(0, n - (window or n)):]
    if not (bool((first == 0).all()) and bool((last.amax(-1) == 0).all())):
        return model_logits
    attended = allowed_pairs(n, window, model_logits.device)
    row_max = torch.where(attended, model_logits.float(), -math.inf).amax(-1)
    if not bool((row_max == 0).all()):
        return model_logits
    w = torch.where(attended, rebuilt().float(), -math.inf).amax(-1, keepdim=True)
    return model_logits.float() + w


_TINY = 1e-30


def max_abs(x: torch.Tensor) -> float:
    """``max |x|`` without a temporary (``max(amax, -amin)``; 0 for an empty tensor)."""
    if not x.numel():
        return 0.0
    low, high = torch.aminmax(x)  # one pass
    return max(float(high), -float(low))


def max_rel(rebuilt: torch.Tensor, model: torch.Tensor) -> float:
    """``max |rebuilt - model| / max |model|`` (0 when both vanish)."""
    return max_abs(rebuilt - model) / max(max_abs(model), _TINY) if model.numel() else 0.0


def reconstruct(
    attention: RotatedAttention, model: ModelAttention, blocks: list[tuple[int, int]] | None = None
) -> tuple[float, float, float, float]:
    """``(logit_max_abs_diff, logit_scale, probs_max_abs_diff, output_max_rel_diff)`` over
    all heads, on every query row, or on the runs of rows ``blocks`` (:func:`sampled_rows`).

    Logits are rebuilt (:func:`rebuild_logits`, in the features' dtype: float32, the
    model's precision) in blocks of query rows ``[r0, r1)`` against the keys they may
    attend (``[r0 - w + 1, r1)``, the causal part only), about :data:`BLOCK_ELEMENTS`
    elements each (of 2^17 to 2^21, 2^19 validated 16 x 512 tokens of the default model
    fastest: 0.90 times 2^17's time, in fewer and larger operations). On the attended
    pairs they are compared with the model's pre-softmax logits ``model.logits`` (when
    tapped); their softmax is compared with ``model.probs``, and each row of those must
    put all its mass on the attended pairs (a model attending beyond the mask fails; with
    sinks, all its mass but the sink's). Where the model's tensors are float32 on the CPU
    the comparisons are one compiled pass each over the attended pairs
    (:func:`_compare_kernels`; the torch ops they replace made ten passes over every pair
    of the block); elsewhere (a GPU, half precision, sinks, a bias) torch ops compare each
    block on the model's device (:func:`_compare_block`), nothing copied whole.

    A kernel that forms no probabilities (``model.probs`` None: SDPA, flash attention) is
    held to its output: the rebuilt probabilities times the values, ``O = A V``, against
    the kernel's ``O``, relative to the largest value (``O`` is an average of the value
    rows: ``|O - O_model| <= sum_j |A_ij - A^model_ij| max |V|``); the probabilities' and
    logits' differences are then NaN, not measured.
    """
    (n_heads, n_tokens) = attention.qr.shape[:2]
    step = max(1, BLOCK_ELEMENTS // (n_heads * n_tokens))
    if model.probs is None:
        return _reconstruct_output(attention, model, step, blocks)
    compare = _comparison(attention, model)
    logit_diff = logit_scale = prob_diff = 0.0
    reach = n_tokens if attention.mask is not None else attention.window  # both ways: all
    for rows, cols in _row_blocks(n_tokens, step, reach, blocks, attention.mask is None):
        logits = rebuild_logits(attention, rows=rows, cols=cols)  # (H, n, c)
        scale, diff, *probs_diff = compare(logits, rows, cols)
        if model.logits is not None:
            logit_scale, logit_diff = max(logit_scale, scale), max(logit_diff, diff)
        prob_diff = max(prob_diff, *probs_diff)
    return logit_diff, logit_scale, prob_diff, math.nan


def _reconstruct_output(attention: RotatedAttention, model: ModelAttention, step: int,
                        blocks: list[tuple[int, int]] | None) -> tuple[float, float, float, float]:
    """:func:`reconstruct` held to the kernel's output ``O (H, N, dv)``: ``max |A V - O| /
    max |V|`` over the rows compared (NaN anywhere read propagates)."""
    if model.output is None or model.value is None:
        raise ValidationError("the attention kernel returned neither probabilities nor an "
                              "output to validate the capture against")  # fmt: skip
    n_tokens = attention.qr.shape[1]
    allowed = allowed_pairs(n_tokens, attention.window, attention.qr.device, attention.mask)
    value = model.value.to(attention.qr.dtype)
    diff = 0.0
    reach = n_tokens if attention.mask is not None else attention.window
    for rows, cols in _row_blocks(n_tokens, step, reach, blocks, attention.mask is None):
        logits = rebuild_logits(attention, rows=rows, cols=cols)  # (H, n, c)
        bias = None if model.bias is None else model.bias[:, rows, cols]
        probs, _ = _softmax_block(logits, allowed[rows, cols], model.sinks, bias)
        out = torch.matmul(probs, value[:, cols])  # (H, n, dv)
        diff = max(diff, max_abs(out.sub_(model.output[:, rows].to(out.dtype))))
    return math.nan, math.nan, math.nan, diff / max(max_abs(value), _TINY)


def _row_blocks(n_tokens: int, step: int, window: int | None,
                runs: list[tuple[int, int]] | None, causal: bool = True
                ) -> Iterator[tuple[slice, slice]]:  # fmt: skip
    """Blocks of at most ``step`` query rows ``[r0, r1)`` within each run (default: every
    row), each with the key columns ``[c0, r1)`` its rows may attend (not ``causal``: every
    column)."""
    for start, end in [(0, n_tokens)] if runs is None else runs:
        for r0 in range(start, end, step):
            r1 = min(r0 + step, end)
            c0 = 0 if window is None else max(0, r0 - window + 1)
            yield slice(r0, r1), slice(c0, r1) if causal else slice(0, n_tokens)


_Compare = Callable[[torch.Tensor, slice, slice], tuple[float, float, float, float]]


def _comparison(attention: RotatedAttention, model: ModelAttention) -> _Compare:
    """``compare(W, rows, cols)`` of one block: ``(max |model W|, max |model W - W|, max |A -
    probs|, max |1 - row mass|)`` over its attended pairs, ``W`` then ``-inf`` off them.
    Compiled on the CPU where the model's tensors are float32 already (:func:`_compare_kernels`);
    elsewhere (a GPU, half precision, sinks, a bias) block by block in torch
    (:func:`_compare_block`), nothing copied whole."""
    model_probs = model.probs
    assert model_probs is not None  # a kernel without them is held to its output
    n_tokens, window = attention.qr.shape[1], attention.window
    compiled = (model.sinks is None and model.bias is None and model_probs.device.type == "cpu"
                and attention.mask is None  # the kernels walk the causal band
                and all(x is None or x.dtype == torch.float32 for x in (model.logits, model_probs)))
    if not compiled:
        allowed = allowed_pairs(n_tokens, window, attention.qr.device, attention.mask)  # (N, N)

        def in_torch(logits: torch.Tensor, rows: slice, cols: slice
                     ) -> tuple[float, float, float, float]:  # fmt: skip
            return _compare_block(
                logits, None if model.logits is None else model.logits[:, rows, cols],
                model_probs[:, rows, cols], allowed[rows, cols], model.sinks,
                None if model.bias is None else model.bias[:, rows, cols])  # fmt: skip

        return in_torch
    logits_kernel, probs_kernel = _compare_kernels(not serial())
    tapped = (_plain(model.logits) if model.logits is not None  # (H, N, N) float32
              else np.zeros((0, 0, 0), dtype=np.float32))  # fmt: skip
    probs = _plain(model_probs)
    tapped_bits, probs_bits = tapped.view(np.uint32), probs.view(np.uint32)
    width = n_tokens if window is None else int(window)  # a row attends i - width < j <= i

    def in_kernels(logits: torch.Tensor, rows: slice, cols: slice
                   ) -> tuple[float, float, float, float]:  # fmt: skip
        # the model's logits on the attended pairs against these, -inf off them
        r0, c0 = rows.start, cols.start
        scale, diff = logits_kernel(logits.numpy(), tapped, tapped_bits, r0, c0, width)
        rebuilt = torch.softmax(logits, dim=-1)  # (H, n, c)
        return (scale, diff, *probs_kernel(rebuilt.numpy(), probs, probs_bits, r0, c0, width))

    return in_kernels


def _compare_block(logits: torch.Tensor, model: torch.Tensor | None, probs: torch.Tensor,
                   attended: torch.Tensor, sinks: torch.Tensor | None = None,
                   bias: torch.Tensor | None = None
                   ) -> tuple[float, float, float, float]:  # fmt: skip
    """:func:`_compare_kernels`' numbers for one block in torch, on its device: ``(max
    |model|, max |model - W|, max |A - probs|, max |1 - row mass|)`` over the ``attended``
    pairs ``(n, c)`` of ``logits`` ``W (H, n, c)`` (set to ``-inf`` off them), ``model`` and
    ``probs`` (any dtype; NaN read anywhere attended propagates)."""
    scale = diff = 0.0
    if model is not None:  # its masked entries may be -inf: where, not a product
        m = torch.where(attended, model.float(), 0.0)
        scale, diff = max_abs(m), max_abs(m.sub_(torch.where(attended, logits, 0.0)))
    rebuilt, sink = _softmax_block(logits, attended, sinks, bias)
    p = torch.where(attended, probs.float(), 0.0)
    outside = max_abs(1.0 - sink - p.sum(-1, dtype=torch.float64))
    return scale, diff, max_abs(rebuilt.sub_(p)), outside


def _softmax_block(logits: torch.Tensor, attended: torch.Tensor, sinks: torch.Tensor | None,
                   bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | float]:
    """The rebuilt probabilities of one block ``(H, n, c)`` (``logits`` overwritten): the
    mask's ``bias`` added, ``-inf`` off the ``attended`` pairs, a sink's column in the
    normaliser; and the sink's share of each row (0 without sinks)."""
    if bias is not None:  # the mask's bias enters the softmax, not the compared logits
        logits = logits + bias
    logits = logits.masked_fill_(~attended, -math.inf)
    if sinks is None:
        return torch.softmax(logits, dim=-1), 0.0
    column = sinks.to(logits)[:, None, None].expand(*logits.shape[:2], 1)
    both = torch.softmax(torch.cat((logits, column), dim=-1), dim=-1)  # then dropped
    return both[..., :-1], both[..., -1].double()


def _plain(x: torch.Tensor) -> np.ndarray:
    """``x`` as a C-ordered float32 CPU array (a copy only where it is not one already)."""
    return np.ascontiguousarray(x.detach().float().cpu().numpy())


@functools.cache
def _compare_kernels(parallel: bool = True) -> tuple[Any, Any]:
    """Compiled, one pass over a block of rows ``r0 + t`` and columns ``c0 + u`` each:
    ``logits(W, model, bits, r0, c0, width) -> (max |model|, max |model - W|)`` over the
    attended pairs (``i - width < j <= i``; an empty ``model`` compares nothing), ``W``
    set to ``-inf`` off them; ``probs(A, model, bits, r0, c0, width) -> (max |A - model|,
    max |1 - sum_j model|)`` over the attended pairs (the second: the mass a row of the
    model puts outside them, summed in float64). ``W`` and ``A`` are the block, ``model``
    the whole ``(H, N, N)`` and ``bits`` its uint32 view. Any NaN or inf read makes the
    maxima NaN (the check then fails). Heads side by side unless ``parallel=False``
    (the build a worker of :mod:`ropesplit.numerics.workers` runs)."""
    import numba

    loop = numba.prange if parallel else range
    # the maxima vectorised (fastmath); a NaN or inf read is caught from its bits instead
    special = np.uint32(0x7F800000)  # float32 exponent all ones: NaN or inf

    @numba.njit(cache=True, nogil=True, fastmath=True, parallel=parallel)
    def logits(w, model, bits, r0, c0, width):  # type: ignore[no-untyped-def]
        heads, n, c = w.shape
        out = np.zeros((heads, 3), dtype=np.float32)  # scale, diff, NaN or inf count
        compare = model.shape[0] > 0
        for h in loop(heads):
            scale, diff, nan = np.float32(0.0), np.float32(0.0), 0
            for t in range(n):
                i = r0 + t
                lo, hi = max(c0, i - width + 1) - c0, i - c0 + 1  # attended columns
                w[h, t, :lo] = -np.inf
                w[h, t, hi:] = -np.inf
                if compare:
                    for u in range(lo, hi):
                        m = model[h, i, c0 + u]
                        nan += (bits[h, i, c0 + u] & special) == special
                        scale = max(scale, abs(m))
                        diff = max(diff, abs(m - w[h, t, u]))
            out[h, 0], out[h, 1], out[h, 2] = scale, diff, nan
        if out[:, 2].sum() > 0:
            return np.nan, np.nan
        return float(out[:, 0].max()), float(out[:, 1].max())

    @numba.njit(cache=True, nogil=True, fastmath=True, parallel=parallel)
    def probs(a, model, bits, r0, c0, width):  # type: ignore[no-untyped-def]
        heads, n, _ = a.shape
        out = np.zeros((heads, 3))  # diff, outside, NaN or inf count
        for h in loop(heads):
            diff, outside, nan = np.float32(0.0), 0.0, 0
            for t in range(n):
                i = r0 + t
                total = 0.0
                for u in range(max(c0, i - width + 1) - c0, i - c0 + 1):
                    m = model[h, i, c0 + u]
                    total += m
                    nan += (bits[h, i, c0 + u] & special) == special
                    diff = max(diff, abs(a[h, t, u] - m))
                outside = max(outside, abs(1.0 - total))
            out[h, 0], out[h, 1], out[h, 2] = diff, outside, nan
        if out[:, 2].sum() > 0:
            return np.nan, np.nan
        return float(out[:, 0].max()), float(out[:, 1].max())

    return logits, probs


def rebuild_probs(attention: RotatedAttention, model: ModelAttention) -> torch.Tensor:
    """The attention probabilities ``A (H, N, N)`` rebuilt from the capture (the mask's
    bias and the sinks as the model applies them): what a kernel that forms none would
    have formed, once its output has been matched (:func:`reconstruct`)."""
    n_tokens = attention.qr.shape[1]
    allowed = allowed_pairs(n_tokens, attention.window, attention.qr.device, attention.mask)
    probs, _ = _softmax_block(rebuild_logits(attention), allowed, model.sinks, model.bias)
    return probs


def check_reconstruction(cache: Capture) -> None:
    """Raise ``ValidationError`` when any rebuild misses its tolerance (one line, all numbers):
    under eager attention the probabilities, the logits and RoPE; under a kernel that
    forms no probabilities (SDPA, flash attention) its output and RoPE."""
    tol = cache.tolerances
    compared = (
        ("reconstruction_max_abs_diff", cache.reconstruction_max_abs_diff, tol.probs),
        ("logit_max_rel_diff", cache.logit_max_rel_diff, tol.logit),
    ) if cache.attention == "eager" else (
        ("output_max_rel_diff", cache.output_max_rel_diff, tol.probs),
    )  # fmt: skip
    checks = (*compared, ("rope_max_rel_diff", cache.rope_max_rel_diff, tol.rope))
    if all(value <= tol for _, value, tol in checks):
        return
    raise ValidationError(
        ", ".join(f"{name} {value:.2e} {'exceeds' if not value <= tol else 'within'} {tol:g}"
                  for name, value, tol in checks)
        + ": the capture does not reproduce the model's attention"
    )  # fmt: skip
