r"""The claims' statistics per passage: trained, random-init control, shuffled frequencies.

The unit of replication is the passage (``empirical.corpus``). For passage
``p`` the trained model and one random-init twin (seed
``CONTROL_SEEDS[p mod 3]``, so the corpus spans three initialisations) are
captured once each; every statistic is a mean over heads (heads nested in
the passage, as the paper averages over heads), under the paper's split
(reference distance 0, the mean key) unless its name says otherwise:

- ``r_split``, ``r_split_control``, ``r_split_shuffled`` (the trained q/k
  with each layer's frequencies assigned to the pairs in a seeded random
  order), ``r_split_distance1000`` (sensitivity), ``r_split_mean`` (the
  toolkit's own mean-rotation split, never the paper's measure);
- ``lowfreq_share_k`` (and ``_control``, ``_shuffled``): key-deviation
  energy in the slower half of the pairs (``numerics.stats``);
- ``key_corr`` (and ``_control``): the controlled-distance key correlation at
  the dummy distance ``D = N/2`` (inside the text), pooled over the fitted
  layers' heads with weights = each head's key-effect variance
  (``numerics.perturbation.weighted_key_corr``); ``visible_change`` its
  row-centred logit change;
- ``e_share`` (and ``_control``): the remainder's share of the logit change
  when position ids jitter by up to ``JITTER`` with the same q, k
  (``numerics.perturbation.remainder_change_share``), on ``PAIR_BUDGET``
  seeded causal pairs per layer, mean over heads of every layer;
- ``g_share`` (and ``_control``): the model's own run at the jittered
  positions (one more capture), ``mean |g' - g| / mean |W' - W|`` over the
  sampled pairs of layers >= 1 (``experiments.position.run_view``): what
  the semantic term moves when earlier layers see other positions.

No formula lives here: it turns captures into arrays and calls numerics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from ropesplit.empirical.analyze import analyze_capture
from ropesplit.empirical.capture import Capture, capture
from ropesplit.empirical.experiments.base import default_layers
from ropesplit.empirical.experiments.forward import special_positions
from ropesplit.empirical.experiments.pairs import layer_pairs
from ropesplit.empirical.models import LoadedModel
from ropesplit.empirical.perturb import movable_positions, perturbed_positions

from ropesplit.claims import CONTROL_SEEDS, PAPER_SPLIT, SENSITIVITY_SPLIT, TOOLKIT_SPLIT

__all__ = [
    "JITTER",
    "MOMENTS",
    "PAIR_BUDGET",
    "control_seed",
    "measure_passage",
    "measure_passages",
    "pooled_over_passages",
]

JITTER = 4  # position ids move by up to this many places (claim 5)
PAIR_BUDGET = 2048  # causal pairs per layer for e_share
_TRAINED_REFS = (PAPER_SPLIT, SENSITIVITY_SPLIT, TOOLKIT_SPLIT)
MOMENTS = ("w_mean", "w_var", "fg_mean", "fg_var", "w_fg_cov")  # per head, after n_pairs
_REF_KEYS = {PAPER_SPLIT: "r_split", SENSITIVITY_SPLIT: "r_split_distance1000",
             TOOLKIT_SPLIT: "r_split_mean"}  # fmt: skip


def control_seed(passage: int) -> int:
    """The random-init twin passage ``passage`` is paired with: seeds rotate over the corpus."""
    return CONTROL_SEEDS[passage % len(CONTROL_SEEDS)]


def _mean(values: Any) -> float:
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


def _split_means(cache: Capture, refs: Sequence[str], **kwargs: Any) -> dict[str, Any]:
    """Per-head rows under ``refs`` (the paper's split first), then means over heads."""
    rows = analyze_capture(cache, reference=refs[0], references=tuple(refs), **kwargs)
    out: dict[str, Any] = {_REF_KEYS[spec]: _mean([r["by_reference"][spec]["r_split"]
                                                   for r in rows]) for spec in refs}  # fmt: skip
    out["lowfreq_share_k"] = _mean([r["lowfreq_share_k"] for r in rows])
    out["heads_r_split"] = [float(r["by_reference"][refs[0]]["r_split"]) for r in rows]
    # each head's additive pair moments under the paper's split: n and the five moments that
    # numerics.stats.pooled_correlation combines, so passages pool exactly (and shards merge)
    out["heads_moments"] = [[int(r["n_pairs"]), *(float(r["by_reference"][refs[0]][m])
                                                  for m in MOMENTS)] for r in rows]  # fmt: skip
    out["n_heads"] = len(rows)
    return out


def _distance(cache: Capture, layers: Sequence[int]) -> dict[str, float]:
    """Weighted key_corr and visible change at ``D = N/2`` over the heads of ``layers``."""
    from ropesplit.numerics.perturbation import controlled_distance, weighted_key_corr

    dummy = cache.n_tokens // 2
    corr, var, visible = [], [], []
    for index in layers:
        layer = cache.layers[index]
        qc, kc = layer_pairs(layer)  # (H, N, P) each
        out = controlled_distance(qc, kc, layer.theta, layer.scale, (dummy,),
                                  window=layer.window)  # fmt: skip  # name -> (H, 1)
        corr.append(out["key_corr"][:, 0])
        var.append(out["key_var"][:, 0])
        visible.append(out["visible_change"][:, 0])
    return {"key_corr": float(weighted_key_corr(np.concatenate(corr), np.concatenate(var))),
            "visible_change": _mean(np.concatenate(visible))}  # fmt: skip


def _jittered(loaded: LoadedModel, ids: np.ndarray, seed: int) -> np.ndarray:
    """Position ids ``(N,)`` jittered by up to :data:`JITTER` (BOS and special tokens kept)."""
    n = ids.size
    movable = movable_positions(n, special_positions(loaded, ids).tolist())
    rng = np.random.default_rng([seed, 18, JITTER])
    # + JITTER keeps every id >= 0 (a common offset is invisible to RoPE)
    return perturbed_positions("jitter", n, JITTER, rng, movable).astype(np.float64) + JITTER


def _e_share(cache: Capture, after: np.ndarray, seed: int) -> float:
    """Mean over every head of every layer of ``||dE|| / ||dW||`` under the jitter ``after``."""
    from ropesplit.numerics.perturbation import causal_pairs, remainder_change_share

    before = cache.positions.numpy().astype(np.float64)  # (N,)
    shares = []
    for layer in cache.layers:
        rng = np.random.default_rng([seed, layer.layer])
        pairs = causal_pairs(cache.n_tokens, PAIR_BUDGET, rng)
        qc, kc = layer_pairs(layer)  # (H, N, P) each
        shares.append(remainder_change_share(qc, kc, layer.theta, layer.scale, before, after,
                                             pairs))  # fmt: skip  # (H,)
    return _mean(np.concatenate(shares))


def _g_share(loaded: LoadedModel, text: Capture, ids: np.ndarray, after: np.ndarray,
             seed: int) -> float:  # fmt: skip
    """``g_share`` of the model's own run at positions ``after`` against the text's capture."""
    from ropesplit.empirical.experiments.position import run_view

    own = capture(loaded, ids, torch.as_tensor(after, dtype=torch.long), keep_probs=False)
    return float(run_view(text, own, budget=PAIR_BUDGET, seed=seed)["g_share"])


def measure_passage(
    loaded: LoadedModel,
    control: LoadedModel,
    ids: Any,
    *,
    seed: int = 0,
    layers: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Every per-passage statistic of the module docstring for token ids ``(N,)``."""
    ids_np = np.asarray(ids, dtype=np.int64).reshape(-1)  # (N,)
    fitted = list(layers) if layers is not None else default_layers(loaded.n_layers)
    after = _jittered(loaded, ids_np, seed)
    trained = capture(loaded, ids_np, keep_probs=False)
    row: dict[str, Any] = _split_means(trained, _TRAINED_REFS, seed=seed)
    shuffled = _split_means(trained, (PAPER_SPLIT,), seed=seed, shuffle_frequencies=seed)
    row["r_split_shuffled"] = shuffled["r_split"]
    row["lowfreq_share_k_shuffled"] = shuffled["lowfreq_share_k"]
    row |= _distance(trained, fitted)
    row["e_share"] = _e_share(trained, after, seed)
    row["g_share"] = _g_share(loaded, trained, ids_np, after, seed)
    del trained
    twin = capture(control, ids_np, keep_probs=False)
    base = _split_means(twin, (PAPER_SPLIT, TOOLKIT_SPLIT), seed=seed)
    row |= {"r_split_control": base["r_split"], "r_split_mean_control": base["r_split_mean"],
            "lowfreq_share_k_control": base["lowfreq_share_k"],
            "heads_r_split_control": base["heads_r_split"]}  # fmt: skip
    dist = _distance(twin, fitted)
    row |= {"key_corr_control": dist["key_corr"], "visible_change_control": dist["visible_change"]}
    row["e_share_control"] = _e_share(twin, after, seed)
    row["g_share_control"] = _g_share(control, twin, ids_np, after, seed)
    return row


def pooled_over_passages(rows: Sequence[dict[str, Any]]) -> list[float]:
    r"""Each head's ``r_split`` pooled over the passages' causal pairs, from their moments.

    .. math:: r_h = \mathrm{corr}\big(W, f + g\big) \text{ over } \textstyle\bigcup_p
              \text{pairs}_p \quad(\texttt{numerics.stats.pooled_correlation} \text{ of the
              per-passage moments of head } h)

    Exact: the moments are additive, so shards merge into the same numbers.
    """
    from ropesplit.numerics.stats import pooled_correlation

    if not rows:
        return []
    heads = len(rows[0]["heads_moments"])
    out = []
    for h in range(heads):
        parts = [row["heads_moments"][h] for row in rows]
        moments = [dict(zip(MOMENTS, part[1:], strict=True)) for part in parts]
        out.append(float(pooled_correlation(moments, [part[0] for part in parts])))
    return out


def measure_passages(
    loaded: LoadedModel,
    controls: dict[int, LoadedModel],
    ids: Any,
    names: Sequence[str],
    *,
    seed: int = 0,
    layers: Sequence[int] | None = None,
    first: int = 0,
    on_passage: Callable[[int], Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per passage of ``ids (P, N)``, paired with its control twin (:func:`control_seed`).

    Each row starts with ``passage`` (its index in the corpus run: ``first`` plus
    its place here, so a shard measures exactly what the whole run would),
    ``name`` and ``control_seed``; ``on_passage(1)`` follows the progress.
    """
    rows = []
    for local, name in enumerate(names):
        p = first + local
        cs = control_seed(p)
        row = {"passage": p, "name": name, "control_seed": cs}
        row |= measure_passage(loaded, controls[cs], ids[local], seed=seed + p, layers=layers)
        rows.append(row)
        if on_passage is not None:
            on_passage(1)
    return rows
