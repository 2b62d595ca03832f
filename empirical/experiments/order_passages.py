r"""Word order per passage (claim 1): nested adjacent swaps, losses next to the swaps.

The paper: shuffling up to about 5% of the tokens barely moves the loss, more
than about 10% hurts. This module measures one passage; the statistics over
passages (and any verdict) live elsewhere.

**Draws.** Draw ``d`` of a passage ``x = x_0..x_{N-1}`` takes
``rng = numpy.random.default_rng([seed, d])`` and one nested sequence of
disjoint adjacent swaps (:func:`~ropesplit.empirical.perturb.nested_adjacent_swaps`)
at the rates ``r_1 < r_2`` (5%, 10%) and the positive control ``r_+``
(50%): the 10% permutation makes every swap of the 5% one and more, the 50%
one extends the 10% one, so the rates are compared on the same draw
(paired). The first token (BOS) and special tokens never move. The whole
passage is perturbed and read at positions ``0..N-1``.

**Scored set.** A position is *moved* at rate ``r`` when its token id
changed, :math:`\pi_r(x)_m \ne x_m`. The scored targets are the positions
whose own token is unchanged and that lie within ``near`` tokens after a
moved one:

.. math:: S_{r,d} = \{\, t : \pi_{r,d}(x)_t = x_t,\ \exists m:\
          \pi_{r,d}(x)_m \ne x_m,\ 0 < t - m \le \mathrm{near} \,\}

Why: only targets near the perturbation can feel it, so scoring the whole
passage would dilute the effect by the untouched stretches (and by the
passage's length); and with the target token itself unchanged, the loss
measures what a displaced *context* does to the prediction of the same
token, not the (trivially larger) loss of predicting a token that now sits
in another place.

**Log ratio.** With :math:`\ell_t(y) = -\log p(y_t \mid y_{<t})` the
model's next-token loss (float64 log-softmax, all-ones attention mask):

.. math:: l_{r,d} = \log \frac{\frac{1}{|S_{r,d}|}\sum_{t \in S_{r,d}} \ell_t(\pi_{r,d}(x))}
                              {\frac{1}{|S_{r,d}|}\sum_{t \in S_{r,d}} \ell_t(x)},
          \qquad l_r = \frac{1}{D}\sum_{d=1}^{D} l_{r,d}

0 when the order does not matter, > 0 when the displaced context hurts.
The curvature compares the damage from ``r_1`` to ``r_2`` with the damage
from 0 to ``r_1`` (``l_0 = 0``), per draw and then averaged:

.. math:: \kappa = \frac{1}{D}\sum_d \Bigl(l_{r_2,d} - \frac{r_2}{r_1}\, l_{r_1,d}\Bigr)
          \;=\; l_{0.1} - 2\, l_{0.05}\ \text{at the default rates}

> 0 means the damage bends upward (10% hurts more than twice 5%), the
paper's threshold. ``positive`` is :math:`l_{r_+}`: half of the tokens
swapped must hurt, or the measurement cannot see anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from ropesplit.empirical.experiments.forward import _check_inputs, forward_batch, special_positions
from ropesplit.empirical.models import LoadedModel
from ropesplit.empirical.perturb import movable_positions, nested_adjacent_swaps

from ropesplit.errors import RopesplitError
from ropesplit.paper import PAPER_ORDER_HARMFUL, PAPER_ORDER_HARMLESS

__all__ = [
    "DRAWS",
    "NEAR",
    "NESTED_RATES",
    "POSITIVE_RATE",
    "order_passage",
    "rate_key",
    "scored_targets",
    "token_losses",
]

NESTED_RATES = (PAPER_ORDER_HARMLESS, PAPER_ORDER_HARMFUL)  # (0.05, 0.10): nested, paired
POSITIVE_RATE = 0.5  # the positive control: half of the tokens swapped, it must hurt
DRAWS = 2  # nested draws per passage
NEAR = 8  # a scored target lies within NEAR tokens after a moved position


def rate_key(rate: float) -> str:
    """A rate as a short JSON key: ``0.05 -> "0.05"``, ``0.10 -> "0.1"``, ``0.5 -> "0.5"``."""
    return format(float(rate), "g")


def token_losses(
    loaded: LoadedModel,
    ids: Any,
    *,
    batch_size: int = 8,
    on_forward: Callable[[int], Any] | None = None,
) -> np.ndarray:
    r"""Next-token losses (nats) of every row, ``(B, N - 1)`` float64.

    .. math:: L_{b,t} = -\log \mathrm{softmax}(z_{b,t})_{x_{b,t+1}},\qquad t = 0..N-2

    Column ``t`` is the loss of target ``t + 1``, predicted from row ``t``
    (float64 log-softmax, as :func:`.forward.logits_loss`). ``ids`` is
    ``(B, N)``, read at positions ``0..N-1`` with an all-ones attention mask
    (:func:`.forward.forward_batch`). Identical rows share one forward pass;
    ``on_forward(k)`` is called after each batch with the number of rows it ran.
    """
    ids_np = np.asarray(ids, dtype=np.int64)
    if ids_np.ndim != 2:
        raise RopesplitError(f"ids must be (B, N), got shape {ids_np.shape}")
    positions = np.broadcast_to(np.arange(ids_np.shape[1]), ids_np.shape)  # (B, N)
    _check_inputs(loaded, ids_np, positions, 1)
    if batch_size < 1:
        raise RopesplitError(f"batch_size must be at least 1, got {batch_size}")
    (_, n_tokens) = ids_np.shape
    _, first, inverse = np.unique(ids_np, axis=0, return_index=True, return_inverse=True)
    losses = np.empty((len(first), n_tokens - 1))  # (U, N - 1), one row per distinct input
    device = loaded.device
    for lo in range(0, len(first), batch_size):
        chosen = first[lo : lo + batch_size]
        batch_ids = torch.as_tensor(ids_np[chosen], device=device)  # (b, N)
        batch_pos = torch.as_tensor(np.ascontiguousarray(positions[chosen]), device=device)
        logits = forward_batch(loaded, batch_ids, batch_pos, 1)  # (b, N, vocab)
        for row in range(len(chosen)):  # one row at a time: float64 logits are large
            logp = torch.log_softmax(logits[row, :-1].double(), dim=-1)  # (N - 1, vocab)
            targets = batch_ids[row, 1:].reshape(-1, 1).to(logp.device)  # (N - 1, 1)
            losses[lo + row] = -logp.gather(1, targets).reshape(-1).cpu().numpy()
        if on_forward is not None:
            on_forward(len(chosen))
    if not np.all(np.isfinite(losses)):
        raise RopesplitError("token loss is not finite (NaN or inf logits)")
    return losses[inverse.ravel()]


def scored_targets(clean: Any, perturbed: Any, near: int = NEAR) -> np.ndarray:
    r"""``(N,)`` bool: the targets ``t`` scored for a perturbed passage (the module docstring).

    .. math:: t \in S \iff y_t = x_t\ \text{and}\ \exists m:\ y_m \ne x_m,\ 0 < t - m \le
              \mathrm{near}

    ``clean`` is ``x (N,)``, ``perturbed`` is ``y (N,)``. Position 0 is
    never a target (nothing predicts it).
    """
    x = np.asarray(clean).reshape(-1)
    y = np.asarray(perturbed).reshape(-1)
    if x.shape != y.shape:
        raise RopesplitError(f"clean and perturbed must have one shape, got {x.shape}, {y.shape}")
    if int(near) != near or near < 1:
        raise RopesplitError(f"near must be a positive integer, got {near}")
    moved = x != y  # (N,)
    after = np.zeros_like(moved)  # (N,): within near tokens after a moved position
    for step in range(1, min(int(near), moved.size - 1) + 1):
        after[step:] |= moved[:-step]
    return after & ~moved


def _check_rates(rates: Sequence[float], positive: float) -> tuple[float, float, float]:
    values = [float(r) for r in rates]
    if len(values) != 2 or not 0.0 < values[0] < values[1] < float(positive) <= 1.0:
        raise RopesplitError(
            f"rates must be two ascending shares 0 < r1 < r2 below the positive control "
            f"(at most 1), got {list(rates)} and {positive}"
        )
    if len({rate_key(r) for r in (*values, positive)}) < 3:
        raise RopesplitError(f"rates {list(rates)} and {positive} must differ as keys (rate_key)")
    return values[0], values[1], float(positive)


def order_passage(
    loaded: LoadedModel,
    ids: Any,
    *,
    seed: int,
    draws: int = DRAWS,
    rates: Sequence[float] = NESTED_RATES,
    positive: float = POSITIVE_RATE,
    near: int = NEAR,
    batch_size: int = 8,
    on_forward: Callable[[int], Any] | None = None,
) -> dict[str, Any]:
    r"""One passage ``ids (N,)``: the nested draws' log ratios (the module docstring), JSON-ready.

    Runs ``1 + 3 draws`` rows (the clean passage, then each draw's 5%, 10%
    and 50% inputs) through :func:`token_losses` in batches of ``batch_size``.
    Returns ``{"log_ratio": {rate: l_r}, "draws": [{"draw", "log_ratio",
    "scored", "moved", "curvature"}], "curvature": kappa, "positive": l_+,
    "baseline_loss": mean token loss of the clean passage}``, rates keyed by
    :func:`rate_key`; ``scored`` is ``|S_{r,d}|``, ``moved`` the share of the
    ``N`` positions whose token id changed. Draw ``d`` uses
    ``numpy.random.default_rng([seed, d])``: the same seed gives the same dict.
    Raises when a scored set is empty (a passage too short to measure).
    """
    low, high, control = _check_rates(rates, positive)
    if int(draws) != draws or draws < 1:
        raise RopesplitError(f"draws must be a positive integer, got {draws}")
    clean = np.asarray(torch.as_tensor(ids).reshape(-1).cpu(), dtype=np.int64)  # (N,)
    if clean.size < 3:
        raise RopesplitError(f"a passage needs at least 3 tokens, got {clean.size}")
    n = clean.size
    movable = movable_positions(n, special_positions(loaded, clean).tolist())  # (N,)
    levels = (low, high, control)
    keys = [rate_key(r) for r in levels]
    inputs = [clean]
    for d in range(int(draws)):
        perms = nested_adjacent_swaps(n, levels, np.random.default_rng([seed, d]), movable,
                                      ids=clean)  # fmt: skip
        inputs.extend(clean[perm] for perm in perms)  # (N,) each, in the order of levels
    losses = token_losses(loaded, np.stack(inputs), batch_size=batch_size,
                          on_forward=on_forward)  # fmt: skip  # (1 + 3 draws, N - 1)
    base = losses[0]  # (N - 1,): column t - 1 is target t
    per_draw: list[dict[str, Any]] = []
    for d in range(int(draws)):
        ratio: dict[str, float] = {}
        scored: dict[str, int] = {}
        moved: dict[str, float] = {}
        for j, key in enumerate(keys):
            row = 1 + len(levels) * d + j
            chosen = scored_targets(clean, inputs[row], near)[1:]  # (N - 1,) over targets 1..N-1
            if not chosen.any():
                raise RopesplitError(
                    f"no scored target at rate {key} (draw {d}): the passage of {n} tokens "
                    "is too short or has too few movable neighbours"
                )
            with np.errstate(divide="ignore", invalid="ignore"):
                value = float(np.log(losses[row][chosen].mean() / base[chosen].mean()))
            if not np.isfinite(value):
                raise RopesplitError(f"log ratio at rate {key} (draw {d}) is not finite: "
                                     "a zero loss on the scored targets")  # fmt: skip
            ratio[key] = value
            scored[key] = int(chosen.sum())
            moved[key] = float(np.mean(inputs[row] != clean))
        bend = ratio[keys[1]] - (high / low) * ratio[keys[0]]
        per_draw.append({"draw": d, "log_ratio": ratio, "scored": scored, "moved": moved,
                         "curvature": float(bend)})  # fmt: skip
    mean = {key: float(np.mean([e["log_ratio"][key] for e in per_draw])) for key in keys}
    return {
        "log_ratio": mean,
        "draws": per_draw,
        "curvature": float(np.mean([e["curvature"] for e in per_draw])),
        "positive": mean[keys[2]],
        "baseline_loss": float(base.mean()),
    }
