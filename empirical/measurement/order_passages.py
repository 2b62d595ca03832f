r"""Word order per passage (claim 1): nested swaps at a grid of rates, damage over the suffix.

The paper: shuffling up to about 5% of the tokens barely moves perplexity,
more than about 10% hurts. This module measures one passage; the statistics
over passages (and any verdict) live elsewhere.

**Draws.** Draw ``d`` of a passage ``x = x_0..x_{N-1}`` takes
``rng = numpy.random.default_rng([seed, d])`` and one nested sequence of
disjoint adjacent swaps (:func:`~ropesplit.numerics.schemes.nested_adjacent_swaps`)
at every rate of :data:`~ropesplit.claims.registry.SWAP_RATES` (2.5, 5, 10, 20, 50%):
each rate makes every swap of the smaller ones and more, so the rates are compared on the same
draw (paired). The first token (BOS) and special tokens never move. The
swaps are drawn segment by segment between the ``lengths`` (``[0, 256)``,
``[256, 512)``, ...): the first ``L`` tokens of a
perturbed passage are then a perturbation of the passage's first ``L``
tokens at the same rates, so one forward pass of the longest length gives
every length (the model is causal: the loss of target ``t`` sees tokens
``< t`` only).

**Damage** (``numerics.tolerance``): on one fixed set of targets per draw
and length, every target after the first token moved at 50% (so after the
first moved token of every rate), the mean loss of the perturbed passage
minus that of the original, :math:`D(r)` (a log perplexity ratio), with the
dose :math:`\rho(r)` (the share of positions whose token changed). Per
passage, averaged over the draws:

- ``damage_R`` for each rate ``R`` in percent (``damage_5``, ...);
- ``relative_5`` :math:`= D(5\%)/D(50\%)`: under 0.1 when the damage stays
  flat before it rises (below the chord from 0 to 50%);
- ``curvature`` :math:`D(10\%) - \frac{\rho(10\%)}{\rho(5\%)} D(5\%)`: 0 in
  expectation for a damage linear in the dose;
- ``ppl_R``: the whole-text log perplexity ratio (every target);
- ``local_5``: the local window kept as a secondary, on one fixed set per
  draw: the targets whose token is unchanged at 2.5% and that lie within
  ``near`` tokens after a token moved at 2.5%, the log ratio of their mean
  loss at 5% to the original's.

An order-blind model gives every damage exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ropesplit.claims.registry import SWAP_RATES, cell_key, rate_label
from ropesplit.core.errors import RopesplitError
from ropesplit.core.paper import PAPER_ORDER_HARMFUL, PAPER_ORDER_HARMLESS
from ropesplit.empirical.model.inputs import special_positions
from ropesplit.empirical.model.loaded import LoadedModel
from ropesplit.empirical.model.passes import check_inputs, forward_batch, token_nll
from ropesplit.numerics.schemes import movable_positions, nested_adjacent_swaps

__all__ = [
    "DRAWS",
    "NEAR",
    "OrderDesign",
    "order_passage",
    "scored_targets",
    "token_losses",
]

DRAWS = 2  # nested draws per passage
NEAR = 8  # the local window: a target within NEAR tokens after a moved position


def token_losses(
    loaded: LoadedModel,
    ids: Any,
    *,
    batch_size: int = 8,
    on_forward: Callable[[int], Any] | None = None,
    fast: bool = True,
) -> np.ndarray:
    r"""Next-token losses (nats) of every row, ``(B, N - 1)`` float64.

    .. math:: L_{b,t} = -\log \mathrm{softmax}(z_{b,t})_{x_{b,t+1}},\qquad t = 0..N-2

    Column ``t`` is the loss of target ``t + 1``, predicted from row ``t``
    (float64 log-softmax, as :func:`.forward.logits_loss`). ``ids`` is
    ``(B, N)``, read at positions ``0..N-1`` with an all-ones attention mask
    (:func:`.forward.forward_batch`). Identical rows share one forward pass;
    ``on_forward(k)`` is called after each batch with the number of rows it ran; ``fast``:
    the model's fastest attention (SDPA, :func:`.forward.forward_batch`), else eager.
    """
    ids_np = np.asarray(ids, dtype=np.int64)
    if ids_np.ndim != 2:
        raise RopesplitError(f"ids must be (B, N), got shape {ids_np.shape}")
    positions = np.broadcast_to(np.arange(ids_np.shape[1]), ids_np.shape)  # (B, N)
    check_inputs(loaded, ids_np, positions, 1)
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
        logits = forward_batch(loaded, batch_ids, batch_pos, 1, fast=fast)  # (b, N, vocab)
        for row in range(len(chosen)):  # one row at a time: float64 logits are large
            losses[lo + row] = token_nll(logits[row, :-1], batch_ids[row, 1:]).cpu().numpy()
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


def _check_rates(rates: Sequence[float]) -> tuple[float, ...]:
    values = tuple(float(r) for r in rates)
    needed = {PAPER_ORDER_HARMLESS, PAPER_ORDER_HARMFUL, 0.5}
    if (list(values) != sorted(set(values)) or not all(0.0 < r <= 1.0 for r in values)
            or not needed <= set(values)):  # fmt: skip
        raise RopesplitError(f"rates must be ascending shares in (0, 1] holding 0.05, 0.1 and "
                             f"0.5, got {list(rates)}")  # fmt: skip
    return values


def _segment_swaps(n: int, bounds: Sequence[int], rates: Sequence[float],
                   rng: np.random.Generator, movable: np.ndarray, ids: np.ndarray
                   ) -> list[np.ndarray]:  # fmt: skip
    """One permutation ``(n,)`` per rate: nested adjacent swaps drawn in each segment
    ``[bounds[i], bounds[i+1])`` on its own (so every prefix ending at a bound is perturbed
    at the rates by itself), segments in order from one ``rng``."""
    perms = [np.arange(n) for _ in rates]
    edges = [0, *bounds]
    for lo, hi in zip(edges, edges[1:], strict=False):
        if hi - lo < 2:
            continue
        parts = nested_adjacent_swaps(hi - lo, rates, rng, movable[lo:hi], ids=ids[lo:hi])
        for perm, part in zip(perms, parts, strict=True):
            perm[lo:hi] = part + lo
    return perms


def _one_length(clean: np.ndarray, rows: list[np.ndarray], base: np.ndarray,
                losses: np.ndarray, rates: Sequence[float], n: int, near: int
                ) -> dict[str, float]:  # fmt: skip
    """One draw at length ``n``: damage, dose, whole-text and local ratios per rate."""
    from ropesplit.numerics.intervention import log_ratio
    from ropesplit.numerics.tolerance import dose, first_moved, suffix_damage

    x = clean[:n]
    ys = [y[:n] for y in rows]  # (n,) per rate
    start = first_moved(x, ys[-1])
    if start >= n - 1:
        raise RopesplitError(f"no target after a moved token at {n} tokens: the passage is too "
                             "short or has too few movable neighbours")  # fmt: skip
    still = [rate_label(r) for r, y in zip(rates, ys, strict=True) if not np.any(y != x)]
    if still:
        raise RopesplitError(f"no token moves at {still[0]}% of {n} tokens: the passage is too "
                             "short or has too few movable neighbours")  # fmt: skip
    got = losses[:, : n - 1]  # (R, n - 1)
    damage = suffix_damage(base[: n - 1], got, start)  # (R,)
    whole = suffix_damage(base[: n - 1], got, 0)
    out = {}
    for r, rate in enumerate(rates):
        label = rate_label(rate)
        out[f"damage_{label}"] = float(damage[r])
        out[f"dose_{label}"] = dose(x, ys[r])
        out[f"ppl_{label}"] = float(whole[r])
    local = scored_targets(x, ys[0], near)[1:]  # (n - 1,): one fixed set, from the lowest rate
    five = rates.index(PAPER_ORDER_HARMLESS)
    with np.errstate(divide="ignore", invalid="ignore"):  # numerics' log ratio of mean losses
        out["local_5"] = (float(log_ratio(got[five][local][None], base[: n - 1][local][None])[0])
                          if local.any() else float("nan"))  # fmt: skip
    out["scored"] = float(n - 1 - start)
    return out


@dataclass(frozen=True)
class OrderDesign:
    """What a passage is perturbed by: ``draws`` nested draws, each at every one of
    ``rates`` (ascending shares in (0, 1] holding 5%, 10% and 50%), and the ``near``
    tokens after a moved one that the local window scores. Checked when made (one line);
    :attr:`levels` reads the rates as floats."""

    rates: tuple[float, ...] = SWAP_RATES
    draws: int = DRAWS
    near: int = NEAR

    def __post_init__(self) -> None:
        _check_rates(self.rates)
        if int(self.draws) != self.draws or self.draws < 1:
            raise RopesplitError(f"draws must be a positive integer, got {self.draws}")
        if int(self.near) != self.near or self.near < 1:
            raise RopesplitError(f"near must be a positive integer, got {self.near}")

    @property
    def levels(self) -> tuple[float, ...]:
        """The rates as floats, ascending (checked when made)."""
        return tuple(float(r) for r in self.rates)


def order_passage(
    loaded: LoadedModel | None,
    ids: Any,
    *,
    seed: int,
    lengths: Sequence[int] | None = None,
    design: OrderDesign = OrderDesign(),
    batch_size: int = 8,
    losses: Callable[[np.ndarray], np.ndarray] | None = None,
    on_forward: Callable[[int], Any] | None = None,
) -> dict[str, Any]:
    r"""One passage ``ids (N,)`` at every one of ``lengths`` (default: ``N``; each at most
    ``N``): the module docstring's statistics, JSON-ready.

    ``design`` (:class:`OrderDesign`): the rates, draws and local window. Runs ``1 +
    len(rates) * draws`` rows of ``N`` tokens (the original passage, then each
    draw's perturbed ones) through :func:`token_losses` in batches of ``batch_size``, or
    through ``losses(ids (B, N)) -> (B, N - 1)`` when given (a model of known response; then
    ``loaded`` may be None: no special tokens). Returns ``{"cells": {"tokens=L": {...}},
    "draws": [{"draw", "tokens=L": {...}}], "baseline_loss"}``: each cell the draws' means,
    with ``relative_5`` and ``curvature`` formed from the mean damages and per draw. Draw
    ``d`` uses ``numpy.random.default_rng([seed, d])``: the same seed gives the same dict.
    """
    from ropesplit.numerics.tolerance import curvature, relative_damage

    levels, draws, near = design.levels, int(design.draws), int(design.near)
    clean = np.asarray(torch.as_tensor(ids).reshape(-1).cpu(), dtype=np.int64)  # (N,)
    n = clean.size
    lengths = sorted({int(t) for t in (lengths or (n,))})
    if n < 3 or lengths[0] < 3 or lengths[-1] > n:
        raise RopesplitError(f"lengths must lie in [3, {n}] tokens, got {lengths}")
    fixed = special_positions(loaded, clean).tolist() if loaded is not None else []
    movable = movable_positions(n, fixed)  # (N,)
    inputs = [clean]
    for d in range(draws):
        perms = _segment_swaps(n, lengths, levels, np.random.default_rng([seed, d]), movable,
                               clean)  # fmt: skip
        inputs.extend(clean[perm] for perm in perms)  # (N,) each, in the order of levels
    batch = np.stack(inputs)  # (1 + R D, N)
    if losses is None:
        assert loaded is not None
        table = token_losses(loaded, batch, batch_size=batch_size, on_forward=on_forward)
    else:
        table = np.asarray(losses(batch), dtype=np.float64)
    base = table[0]  # (N - 1,): column t - 1 is target t
    r = len(levels)
    five, ten, half = (levels.index(x) for x in (PAPER_ORDER_HARMLESS, PAPER_ORDER_HARMFUL, 0.5))
    per_draw = []
    for d in range(draws):
        rows = inputs[1 + r * d : 1 + r * (d + 1)]
        got = table[1 + r * d : 1 + r * (d + 1)]  # (R, N - 1)
        entry: dict[str, Any] = {"draw": d}
        for length in lengths:
            one = _one_length(clean, rows, base, got, levels, length, near)
            d5, d10, d50 = (one[f"damage_{rate_label(levels[i])}"] for i in (five, ten, half))
            one["curvature"] = float(curvature(d5, d10, one[f"dose_{rate_label(levels[five])}"],
                                               one[f"dose_{rate_label(levels[ten])}"]))
            one["relative_5"] = float(relative_damage(d5, d50))
            entry[cell_key({"tokens": length}, "order")] = one
        per_draw.append(entry)
    cells = {}
    for length in lengths:
        key = cell_key({"tokens": length}, "order")
        mean = {name: float(np.mean([e[key][name] for e in per_draw]))
                for name in per_draw[0][key]}  # fmt: skip
        d5, d50 = (mean[f"damage_{rate_label(levels[i])}"] for i in (five, half))
        mean["relative_5"] = float(relative_damage(d5, d50))  # of the draws' mean damages
        cells[key] = mean
    return {"cells": cells, "draws": per_draw, "baseline_loss": float(base.mean())}
