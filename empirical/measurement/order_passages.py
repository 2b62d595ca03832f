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

**Both ways** (an encoder, docs/theory.md section 9). An encoder predicts no next token:
its loss is the masked-token loss (:func:`masked_losses`) on one fixed set of masked
targets per passage (``numerics.tolerance.masked_targets``: a ``MASK_RATE`` of the
movable tokens, one at least in each segment), masked in the passage and in every
perturbed copy alike. Each length is its own forward pass of the first ``L`` tokens (an
encoder's loss at a target reads the later tokens too). Every target reads every moved
token, so ``damage_R`` is the mean over all of the length's masked targets, and
``ppl_R``, the whole-text ratio, is the same number; ``local_5`` scores the masked
targets unchanged at 2.5% within ``near`` tokens of a token moved at 2.5%, on either side;
``scored`` counts the masked targets.
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
from ropesplit.empirical.model.passes import (
    by_distinct_rows,
    check_inputs,
    forward_batch,
    token_nll,
)
from ropesplit.numerics.schemes import movable_positions, nested_adjacent_swaps

__all__ = [
    "DRAWS",
    "MASKED_STREAM",
    "NEAR",
    "MaskedLosses",
    "OrderDesign",
    "masked_losses",
    "order_passage",
    "scored_targets",
    "token_losses",
]

DRAWS = 2  # nested draws per passage
NEAR = 8  # the local window: a target within NEAR tokens after a moved position
MASKED_STREAM = 1789  # the stream of an encoder's masked targets: rng([seed, MASKED_STREAM])


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
    device = loaded.device

    def score(chosen: np.ndarray) -> np.ndarray:
        batch_ids = torch.as_tensor(ids_np[chosen], device=device)  # (b, N)
        batch_pos = torch.as_tensor(np.ascontiguousarray(positions[chosen]), device=device)
        logits = forward_batch(loaded, batch_ids, batch_pos, 1, fast=fast)  # (b, N, vocab)
        return np.stack([token_nll(logits[row, :-1], batch_ids[row, 1:]).cpu().numpy()
                         for row in range(len(chosen))])  # one row at a time: float64 is large

    losses = by_distinct_rows(ids_np, batch_size, score, (ids_np.shape[1] - 1,), on_forward)
    if not np.all(np.isfinite(losses)):
        raise RopesplitError("token loss is not finite (NaN or inf logits)")
    return losses


def masked_losses(
    loaded: LoadedModel,
    inputs: Any,
    labels: Any,
    *,
    batch_size: int = 8,
    on_forward: Callable[[int], Any] | None = None,
) -> np.ndarray:
    r"""Masked-token losses (nats) of every row, ``(B, N)`` float64, NaN where ``labels`` is
    ``-100``: attention both ways, an encoder's objective.

    .. math:: L_{b,t} = -\log \mathrm{softmax}(z_{b,t})_{y_{b,t}},\qquad y_{b,t} \ne -100

    ``inputs (B, N)`` hold ``<mask>`` at the targets, ``labels (B, N)`` the token there;
    read at positions ``0..N-1`` through the model's fastest attention. Identical rows share
    one forward pass; ``on_forward(k)`` as :func:`token_losses`.
    """
    from ropesplit.empirical.adapter import fast_attention
    from ropesplit.empirical.model.passes import model_pass

    x = np.asarray(inputs, dtype=np.int64)
    y = np.asarray(labels, dtype=np.int64)
    if x.ndim != 2 or y.shape != x.shape:
        raise RopesplitError(f"inputs and labels must both be (B, N), got {x.shape}, {y.shape}")
    positions = np.broadcast_to(np.arange(x.shape[1]), x.shape)  # (B, N)
    check_inputs(loaded, x, positions, 1)

    def score(chosen: np.ndarray) -> np.ndarray:
        ids = torch.as_tensor(x[chosen], device=loaded.device)  # (b, N)
        pos = torch.as_tensor(np.ascontiguousarray(positions[chosen]), device=loaded.device)
        with torch.no_grad(), fast_attention(loaded.model, loaded.attn):
            logits = model_pass(loaded.model, ids, pos).logits  # (b, N, vocab)
        out = np.full((len(chosen), x.shape[1]), np.nan)  # NaN off the targets
        for row, index in enumerate(chosen):
            at = np.flatnonzero(y[index] >= 0)
            target = torch.as_tensor(y[index, at], device=logits.device)
            out[row, at] = token_nll(logits[row, at], target).cpu().numpy()
        return out

    losses = by_distinct_rows(np.concatenate([x, y], 1), batch_size, score, (x.shape[1],),
                              on_forward)  # fmt: skip
    if not np.all(np.isfinite(losses[y >= 0])):
        raise RopesplitError("masked-token loss is not finite (NaN or inf logits)")
    return losses


def scored_targets(clean: Any, perturbed: Any, near: int = NEAR, *,
                   both_ways: bool = False) -> np.ndarray:  # fmt: skip
    r"""``(N,)`` bool: the targets ``t`` scored for a perturbed passage (the module docstring).

    .. math:: t \in S \iff y_t = x_t\ \text{and}\ \exists m:\ y_m \ne x_m,\ 0 < t - m \le
              \mathrm{near}

    ``clean`` is ``x (N,)``, ``perturbed`` is ``y (N,)``. Position 0 is
    never a target (nothing predicts it). ``both_ways`` (an encoder): within ``near``
    tokens of a moved position on either side, :math:`0 < |t - m| \le \mathrm{near}`.
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
        if both_ways:
            after[:-step] |= moved[step:]
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


def _check_moved(x: np.ndarray, ys: list[np.ndarray], rates: Sequence[float]) -> None:
    """Refuse, in one line, a length at which some rate moves no token of ``x (n,)``."""
    still = [rate_label(r) for r, y in zip(rates, ys, strict=True) if not np.any(y != x)]
    if still:
        raise RopesplitError(f"no token moves at {still[0]}% of {x.size} tokens: the passage is "
                             "too short or has too few movable neighbours")  # fmt: skip


def _rate_cells(x: np.ndarray, ys: list[np.ndarray], rates: Sequence[float], base: np.ndarray,
                got: np.ndarray, start: int, local: np.ndarray) -> dict[str, float]:  # fmt: skip
    """Per rate the damage over the targets from ``start`` on, the dose and the whole-text
    ratio, and ``local_5`` over the ``local (T,)`` targets: ``base (T,)`` and ``got (R, T)``
    the losses of the scored targets, in the passage ``x`` and in each rate's copy ``ys``."""
    from ropesplit.numerics.intervention import log_ratio
    from ropesplit.numerics.tolerance import dose, suffix_damage

    damage = suffix_damage(base, got, start)  # (R,)
    whole = suffix_damage(base, got, 0)
    out = {}
    for r, rate in enumerate(rates):
        label = rate_label(rate)
        out[f"damage_{label}"] = float(damage[r])
        out[f"dose_{label}"] = dose(x, ys[r])
        out[f"ppl_{label}"] = float(whole[r])
    five = rates.index(PAPER_ORDER_HARMLESS)
    with np.errstate(divide="ignore", invalid="ignore"):  # numerics' log ratio of mean losses
        out["local_5"] = (float(log_ratio(got[five][local][None], base[local][None])[0])
                          if local.any() else float("nan"))  # fmt: skip
    return out


def _one_length(clean: np.ndarray, rows: list[np.ndarray], base: np.ndarray,
                losses: np.ndarray, rates: Sequence[float], n: int, near: int
                ) -> dict[str, float]:  # fmt: skip
    """One draw at length ``n``: damage, dose, whole-text and local ratios per rate."""
    from ropesplit.numerics.tolerance import first_moved

    x = clean[:n]
    ys = [y[:n] for y in rows]  # (n,) per rate
    start = first_moved(x, ys[-1])
    if start >= n - 1:
        raise RopesplitError(f"no target after a moved token at {n} tokens: the passage is too "
                             "short or has too few movable neighbours")  # fmt: skip
    _check_moved(x, ys, rates)
    local = scored_targets(x, ys[0], near)[1:]  # (n - 1,): one fixed set, from the lowest rate
    out = _rate_cells(x, ys, rates, base[: n - 1], losses[:, : n - 1], start, local)
    out["scored"] = float(n - 1 - start)
    return out


def _masked_length(clean: np.ndarray, rows: list[np.ndarray], base: np.ndarray,
                   losses: np.ndarray, rates: Sequence[float], near: int
                   ) -> dict[str, float]:  # fmt: skip
    """One draw at one length both ways (the module docstring): ``base (n,)`` and ``losses
    (R, n)`` the masked-token losses of the passage's first ``n`` tokens and of each rate's
    copy, NaN off the masked targets; every target scored, so ``ppl_R`` is ``damage_R``."""
    n = base.size
    x = clean[:n]
    ys = [y[:n] for y in rows]  # (n,) per rate
    _check_moved(x, ys, rates)
    targets = np.isfinite(base)  # (n,): the masked targets
    local = scored_targets(x, ys[0], near, both_ways=True)[targets]  # (T,)
    out = _rate_cells(x, ys, rates, base[targets], losses[:, targets], 0, local)
    out["scored"] = float(targets.sum())
    return out


def _masked_tables(loaded: LoadedModel | None, batch: np.ndarray, lengths: Sequence[int],
                   targets: np.ndarray, losses: Callable[..., np.ndarray] | None,
                   run: dict[str, Any]) -> dict[int, np.ndarray]:  # fmt: skip
    """Each length's masked-token losses ``(B, L)`` of ``batch (B, N)``'s first ``L`` tokens,
    ``targets[:L]`` masked (:func:`masked_losses`, or ``losses(rows, targets)`` when given)."""
    from ropesplit.empirical.model.inputs import mask_id
    from ropesplit.numerics.tasks import IGNORE

    tables = {}
    for length in lengths:
        rows, chosen = batch[:, :length], targets[:length]
        if losses is not None:
            tables[length] = np.asarray(losses(rows, chosen), dtype=np.float64)
            continue
        assert loaded is not None
        inputs = np.where(chosen, mask_id(loaded), rows)
        labels = np.where(chosen, rows, IGNORE)
        tables[length] = masked_losses(loaded, inputs, labels, **run)
    return tables


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


@dataclass(frozen=True)
class MaskedLosses:
    """A model of known response both ways, for :func:`order_passage` without a model:
    ``losses(rows (B, L), targets (L,) bool) -> (B, L)``, the masked-token losses of each
    row's first ``L`` tokens with ``targets`` masked, NaN off the targets."""

    losses: Callable[[np.ndarray, np.ndarray], np.ndarray]


def _loss_tables(loaded: LoadedModel | None, clean: np.ndarray, lengths: list[int],
                 design: OrderDesign, seed: int,
                 losses: Callable[[np.ndarray], np.ndarray] | MaskedLosses | None,
                 run: dict[str, Any]) -> tuple[list[np.ndarray], dict[int, np.ndarray], bool]:
    """``(rows, tables, masked)``: the passage then each draw's perturbed copies (``(N,)``
    each), each length's loss table (``(1 + R D, N - 1)`` next-token, one for every length;
    both ways ``(1 + R D, L)``, NaN off the masked targets) and whether it is both ways."""
    n = clean.size
    fixed = special_positions(loaded, clean).tolist() if loaded is not None else []
    movable = movable_positions(n, fixed)  # (N,)
    masked = isinstance(losses, MaskedLosses) or (
        losses is None and loaded is not None and loaded.attn.both_ways())
    if masked:  # the masked targets stay in place: only their context moves
        from ropesplit.numerics.tasks import MASK_RATE
        from ropesplit.numerics.tolerance import masked_targets

        targets = masked_targets(movable, lengths, MASK_RATE,
                                 np.random.default_rng([seed, MASKED_STREAM]))  # fmt: skip
        movable = movable & ~targets
    rows = [clean]
    for d in range(int(design.draws)):
        perms = _segment_swaps(n, lengths, design.levels, np.random.default_rng([seed, d]),
                               movable, clean)  # fmt: skip
        rows.extend(clean[perm] for perm in perms)  # (N,) each, in the order of levels
    batch = np.stack(rows)  # (1 + R D, N)
    if masked:
        hook = losses.losses if isinstance(losses, MaskedLosses) else None
        return rows, _masked_tables(loaded, batch, lengths, targets, hook, run), True
    assert not isinstance(losses, MaskedLosses)
    if losses is None:
        assert loaded is not None
        table = token_losses(loaded, batch, **run)
    else:
        table = np.asarray(losses(batch), dtype=np.float64)
    return rows, dict.fromkeys(lengths, table), False


def order_passage(
    loaded: LoadedModel | None,
    ids: Any,
    *,
    seed: int,
    lengths: Sequence[int] | None = None,
    design: OrderDesign = OrderDesign(),
    batch_size: int = 8,
    losses: Callable[[np.ndarray], np.ndarray] | MaskedLosses | None = None,
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

    A model whose attention looks both ways (or ``losses`` a :class:`MaskedLosses`) is
    scored by the masked-token loss (the module docstring), one pass per length, on targets
    drawn with ``numpy.random.default_rng([seed, MASKED_STREAM])``.
    """
    from ropesplit.numerics.tolerance import curvature, relative_damage

    levels, near = design.levels, int(design.near)
    clean = np.asarray(torch.as_tensor(ids).reshape(-1).cpu(), dtype=np.int64)  # (N,)
    n = clean.size
    lengths = sorted({int(t) for t in (lengths or (n,))})
    if n < 3 or lengths[0] < 3 or lengths[-1] > n:
        raise RopesplitError(f"lengths must lie in [3, {n}] tokens, got {lengths}")
    run = {"batch_size": batch_size, "on_forward": on_forward}
    inputs, tables, masked = _loss_tables(loaded, clean, lengths, design, seed, losses, run)
    r = len(levels)
    five, ten, half = (levels.index(x) for x in (PAPER_ORDER_HARMLESS, PAPER_ORDER_HARMFUL, 0.5))
    per_draw = []
    for d in range(int(design.draws)):
        rows = inputs[1 + r * d : 1 + r * (d + 1)]
        entry: dict[str, Any] = {"draw": d}
        for length in lengths:
            table = tables[length]  # column t - 1 is target t (both ways: t, NaN off targets)
            got = table[1 + r * d : 1 + r * (d + 1)]  # (R, N - 1) or (R, L)
            one = (_masked_length(clean, rows, table[0], got, levels, near) if masked
                   else _one_length(clean, rows, table[0], got, levels, length, near))
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
    return {"cells": cells, "draws": per_draw,
            "baseline_loss": float(np.nanmean(tables[lengths[-1]][0]))}
