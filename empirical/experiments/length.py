r"""Experiment 4, length: real text beyond the training length, with LM-Infinite's attention.

docs/theory.md section 4 (length extrapolation): beyond the training length ``L``
only ``f(q, Delta) = s <q, R(-Delta) kbar>`` (and ``E``) meet unseen angles,
``g(q, k) = s <q, delta>`` is position-free; LM-Infinite's cap
``Delta -> min(Delta, L)`` with its Lambda-shaped mask keeps ``f`` in its
trained range (:mod:`ropesplit.numerics.lambda_attention`).

The first ``8 L`` tokens of the text (fewer if the text is shorter), at unit
spacing, are run four times (plus the in-length yardstick below), each setting its own forward pass
(:func:`ropesplit.empirical.experiments.lminfinite.run_setting`): vanilla, cap only,
mask only, LM-Infinite. Attention is causal, so the losses of positions
``< m L`` of that one pass are those of a sequence ``m L`` long: one pass
serves the lengths ``1x, 2x, 4x, 8x L``, read as the position buckets
``[0, L), [L, 2L), [2L, 4L), [4L, 8L)``.

Per setting and bucket (queries in the bucket, pairs the setting attends):

- ``loss``: mean next-token loss; ``in_length``: the same tokens' loss read
  by the unmodified model inside windows of ``L`` tokens at positions
  ``0..L-1`` (:func:`~ropesplit.empirical.experiments.lminfinite.windowed_nll`, one
  batched forward pass: the loss the model has where it was trained, on the
  same content); ``ratio`` = loss / in_length (1 for vanilla in ``[0, L)``,
  where the two are the same computation); ``vs_vanilla`` = loss / vanilla's;
- from the setting's own pre-RoPE ``q``/``k`` (the fitted layers, every
  head, mean over heads): ``f``, ``g``, ``E`` at the distances the setting
  uses (:func:`~ropesplit.numerics.split.split_head` with ``cap``), with the
  reference key ``kbar`` and the **trained range** of each component taken
  from the vanilla pass restricted to its first ``L`` tokens (the distances
  and positions the model saw in training; identical in every setting, by
  causality): ``X_outside`` is the share of pairs outside ``[min, max]`` of
  that range, ``X_lo``/``X_hi`` the 1%/99% quantiles in trained-range units
  (the trained range is ``[-1, 1]``); ``X_outside_null`` is the same share
  on the vanilla pass's pairs at distances ``<= L`` of the same bucket, what
  the statistic reaches with no unseen distance (for one pooled range about
  ``2/(n+1)`` of a fresh sample lies outside whatever the distribution);
- ``f_outside_query``: the share of attended pairs whose ``f(q_i, Delta)``
  leaves query ``i``'s own range over the distances ``0..L``
  (``numerics.length.positional_range``): 0 at every trained
  distance, so any share is an unseen angle;
- ``g_shift``: RMS change of ``g`` against the vanilla pass on the same
  pairs, relative to vanilla's (0 in layer 0, where q/k do not depend on
  the attention; the vanilla rows are the reference, 0 by definition).

The prediction and its thresholds (:data:`RISE`, :data:`NEAR`,
:data:`CORRELATION`, :data:`G_TOL`) are fixed before the run; the verdict is
computed from the rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.adapter.configs import trained_length
from ropesplit.empirical.experiments.base import Context, Experiment, Outcome, Row, combine
from ropesplit.empirical.experiments.lminfinite import (
    LAMBDA_SETTINGS,
    SettingRun,
    run_setting,
    settings,
    windowed_nll,
)
from ropesplit.empirical.model.capture import LayerCapture
from ropesplit.empirical.model.loaded import LoadedModel, stated_length
from ropesplit.numerics.lambda_attention import N_GLOBAL, lambda_mask
from ropesplit.numerics.length import (
    bucket_edges,
    bucket_means,
    component_range,
    outside_query_range,
    positional_range,
    rank_correlation,
    relative_change,
)
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head

__all__ = ["EXPERIMENT", "MULTIPLES", "judge", "length_rows", "training_length", "verdict"]

MULTIPLES = (1, 2, 4, 8)  # sequence lengths in units of L (the position buckets' upper edges)
RISE = 0.10  # vanilla "rises": farthest bucket's loss > (1 + RISE) x its tokens' in-length loss
NEAR = 0.10  # LM-Infinite "stays near": every bucket beyond L <= (1 + NEAR) x in-length loss
CORRELATION = 0.5  # "goes with": Spearman(ratio, f_outside) over the rows beyond L >= this
G_TOL = 0.01  # g "stays within its range": share of pairs outside it <= this, every row beyond L
CURVE_BINS_PER_L = 8  # points per training length in the loss-against-position curve
COMPONENTS = ("f", "g", "E")
SPLIT_ONLY = Measure(bounds=False)  # the components by subtraction: nothing here reads the bound

PREDICTION = (
    f"vanilla's loss rises beyond L (farthest bucket > {1 + RISE:.2f} x the in-length loss of "
    f"the same tokens); LM-Infinite's stays near (every bucket beyond L <= {1 + NEAR:.2f} x "
    "in-length); the rise goes with f leaving each query's own trained range (Spearman of "
    f"ratio vs f_outside_query over the rows beyond L >= {CORRELATION}); g stays within its "
    f"trained range (g_outside above its in-length null by <= {G_TOL:.0%} in every setting and "
    "bucket beyond L)"
)


def training_length(loaded: LoadedModel) -> int | None:
    """``L``: the config's ``ropesplit_train_length`` (a model trained here), else its context."""
    return trained_length(loaded.config) or stated_length(loaded)


def _check(context: Context) -> None:
    if training_length(context.loaded) is None:
        raise RopesplitError(
            f"{context.loaded.name} states no training length for --experiment length"
        )


def _reference(run: SettingRun, layer: int, head: int, length: int) -> dict[str, Any]:
    """kbar and the trained range of f, g, E: the vanilla pass's distances ``0..L``.

    The queries of the first ``L + 1`` tokens (positions ``0..L``, the last
    one the cap's distance ``L``), the mean key of the same tokens.
    """
    lc = run.layers[layer]
    q, k = _head(lc, head)
    seen = min(length + 1, q.shape[0])
    kbar = k[:seen].mean(axis=0)  # (d,)
    parts = _split(q[:seen], k[:seen], lc.spec, kbar, None)  # (L + 1, L + 1) each
    causal = lambda_mask(seen)
    ranges = {x: (float(parts[x][causal].min()), float(parts[x][causal].max())) for x in COMPONENTS}
    return {"kbar": kbar, "range": ranges}


def _head(lc: LayerCapture, head: int) -> tuple[np.ndarray, np.ndarray]:
    """Query head ``head``'s pre-RoPE ``q`` and the keys it reads, float64 ``(N, d)`` each."""
    q, k = lc.q[head], lc.k[int(lc.kv_map[head])]
    return q.double().cpu().numpy(), k.double().cpu().numpy()


def _split(
    q: np.ndarray, k: np.ndarray, spec: RopeSpec, kbar: np.ndarray, cap: int | None
) -> dict[str, np.ndarray]:
    """``W, f, g, E`` of one head at the setting's distances (the cap's, or the true ones)."""
    sp = split_head(q, k, spec, SPLIT_ONLY, cap=cap, kbar=kbar)
    return {"W": sp.W, "f": sp.f, "g": sp.g, "E": sp.E}


def _head_stats(
    runs: dict[str, SettingRun],
    masks: dict[str, np.ndarray],
    layer: int,
    head: int,
    length: int,
    edges: list[tuple[int, int]],
) -> dict[str, list[dict[str, float]]]:
    """Per setting, per bucket: the component ranges and g's shift for one head."""
    ref = _reference(runs["vanilla"], layer, head, length)
    n_tokens = len(runs["vanilla"].positions)
    out: dict[str, list[dict[str, float]]] = {}
    vanilla: dict[str, np.ndarray] = {}
    i, j = np.indices((n_tokens, n_tokens))
    trained_distance = (i - j) <= length  # (N, N): distances the model met in training
    for name, run in runs.items():  # vanilla first (LAMBDA_SETTINGS order)
        lc = run.layers[layer]
        q, k = _head(lc, head)
        parts = _split(q, k, lc.spec, ref["kbar"], run.spec.cap)
        vanilla = vanilla or parts
        lo_f, hi_f = positional_range(q, ref["kbar"], lc.spec, length)
        attended = masks[name]  # (N, N) the pairs this setting attends
        rows = []
        for lo, hi in edges:
            pairs = attended[lo:hi]  # (hi - lo, N)
            # the null: the same queries at distances <= L in the vanilla pass
            null = masks["vanilla"][lo:hi] & trained_distance[lo:hi]
            stats: dict[str, float] = {}
            for x in COMPONENTS:
                got = component_range(parts[x][lo:hi][pairs], *ref["range"][x])
                stats |= {f"{x}_{key}": value for key, value in got.items()}
                stats[f"{x}_outside_null"] = component_range(vanilla[x][lo:hi][null],
                                                             *ref["range"][x])["outside"]
            stats["f_outside_query"] = outside_query_range(parts["f"][lo:hi], lo_f[lo:hi],
                                                           hi_f[lo:hi], pairs)  # fmt: skip
            stats["g_shift"] = relative_change(parts["g"][lo:hi][pairs], vanilla["g"][lo:hi][pairs])
            rows.append(stats)
        out[name] = rows
    return out


def _curve(nll: np.ndarray, length: int) -> tuple[list[float], list[float]]:
    """Loss against position: bin centres and mean losses, ``CURVE_BINS_PER_L`` bins per L."""
    width = max(1, length // CURVE_BINS_PER_L)
    starts = range(0, len(nll), width)
    centres = [(s + min(s + width, len(nll)) - 1) / 2 for s in starts]  # bin [s, e): (s + e - 1)/2
    return centres, [float(nll[s : s + width].mean()) for s in starts]


def length_rows(
    loaded: LoadedModel,
    ids: Any,
    *,
    layers: list[int],
    length: int,
    n_global: int = N_GLOBAL,
    on_run: Any = None,
) -> list[Row]:
    r"""One row per setting and position bucket (module docstring); the curve on each row.

    ``ids`` ``(N,)``; the first ``min(N, 8L)`` tokens are used. ``on_run(name)``
    is called after each setting's forward pass.
    """
    ids = np.asarray(ids)[: MULTIPLES[-1] * length]  # (N,)
    n_tokens = len(ids)
    edges = bucket_edges(length, MULTIPLES, n_tokens - 1)  # on the N - 1 predicting positions
    in_length = windowed_nll(loaded, ids, length)  # (N - 1,) the yardstick
    if on_run is not None:
        on_run("in-length windows")
    runs: dict[str, SettingRun] = {}
    for name, spec in settings(length, n_global).items():
        runs[name] = run_setting(loaded, ids, spec, name=name, layers=layers)
        if on_run is not None:
            on_run(name)
    masks = {name: lambda_mask(n_tokens, run.spec.n_local, run.spec.n_global)
             for name, run in runs.items()}  # fmt: skip
    per_head = [
        _head_stats(runs, masks, layer, head, length, edges)
        for layer in layers
        for head in range(runs["vanilla"].layers[layer].q.shape[0])
    ]
    vanilla = bucket_means(runs["vanilla"].nll, edges)
    yardstick = bucket_means(in_length, edges)
    in_curve = _curve(in_length, length)[1]
    rows: list[Row] = []
    for name in LAMBDA_SETTINGS:
        run = runs[name]
        losses = bucket_means(run.nll, edges)
        centres, curve = _curve(run.nll, length)
        rope = max(lc.rope_max_rel_diff for lc in run.layers.values())
        for b, (lo, hi) in enumerate(edges):
            stats = {key: float(np.mean([h[name][b][key] for h in per_head]))
                     for key in per_head[0][name][b]}  # fmt: skip
            inside = [k for k, c in enumerate(centres) if lo <= c < hi]  # this bucket's bins
            rows.append({
                "setting": name, "bucket": f"{MULTIPLES[b]}x", "start": lo, "stop": hi,
                "L": length, "n_local": run.spec.n_local, "n_global": run.spec.n_global,
                "cap": run.spec.cap, "loss": losses[b], "in_length": yardstick[b],
                "ratio": losses[b] / yardstick[b],
                "vs_vanilla": losses[b] / vanilla[b],
                **stats, "rope_max_rel_diff": rope,
                "curve_position": [centres[k] for k in inside],
                "curve_loss": [curve[k] for k in inside],
                "curve_in_length": [in_curve[k] for k in inside],
            })  # fmt: skip
    return rows


def _run(context: Context) -> list[Row]:
    length = training_length(context.loaded)
    assert length is not None  # _check

    def ran(name: str) -> None:
        context.forwarded(1)
        if name in LAMBDA_SETTINGS:  # a setting's own forward pass, captured
            context.captured.append(f"length: {name}")

    return length_rows(context.loaded, context.ids.numpy(), layers=context.layers, length=length,
                       on_run=ran)  # fmt: skip


def _beyond(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r["start"] >= r["L"]]


def _g_excess(row: Row) -> float:
    """g's outside share beyond what the same queries reach at trained distances."""
    return float(row["g_outside"]) - float(row["g_outside_null"])


def judge(row: Row) -> Outcome:
    """One row's verdict: the prediction for its setting, from its own numbers."""
    if row["start"] < row["L"]:
        return Outcome("inconclusive", "in-length bucket: the reference the others are judged by")
    excess = _g_excess(row)
    g_ok = excess <= G_TOL
    g_text = (f"g_outside {row['g_outside']:.2%} (null {row['g_outside_null']:.2%}): excess "
              f"{'<=' if g_ok else '>'} {G_TOL:.0%}")  # fmt: skip
    if row["setting"] == "vanilla":
        rose = row["ratio"] > 1 + RISE
        return Outcome("agrees" if rose and g_ok else "disagrees",
                       f"vanilla at {row['bucket']}: loss x{row['ratio']:.3f} "
                       f"({'>' if rose else '<='} {1 + RISE:.2f}); {g_text}")  # fmt: skip
    if row["setting"] == "LM-Infinite":
        near = row["ratio"] <= 1 + NEAR
        return Outcome("agrees" if near and g_ok else "disagrees",
                       f"LM-Infinite at {row['bucket']}: loss x{row['ratio']:.3f} "
                       f"({'<=' if near else '>'} {1 + NEAR:.2f}); {g_text}")  # fmt: skip
    return Outcome("agrees" if g_ok else "disagrees", f"{row['setting']} at {row['bucket']}: "
                   f"{g_text} (no loss prediction for this setting)")  # fmt: skip


def checks(rows: list[Row]) -> dict[str, Outcome]:
    """The four checks of the prediction, each judged from the rows."""
    beyond = _beyond(rows)
    if not beyond:
        none = Outcome("inconclusive", "the text does not reach beyond the training length")
        return {c: none for c in ("vanilla rises", "LM-Infinite near", "f goes with the rise",
                                  "g in range")}  # fmt: skip
    by = {name: [r for r in beyond if r["setting"] == name] for name in LAMBDA_SETTINGS}
    far = by["vanilla"][-1]
    rose = far["ratio"] > 1 + RISE
    rise = Outcome("agrees" if rose else "disagrees",
                   f"vanilla's loss at {far['bucket']} is x{far['ratio']:.3f} the in-length loss "
                   f"({'>' if rose else '<='} {1 + RISE:.2f})")  # fmt: skip
    worst = max(by["LM-Infinite"], key=lambda r: r["ratio"])
    near = worst["ratio"] <= 1 + NEAR
    stays = Outcome("agrees" if near else "disagrees",
                    f"LM-Infinite's largest ratio beyond L is x{worst['ratio']:.3f} at "
                    f"{worst['bucket']} ({'<=' if near else '>'} {1 + NEAR:.2f})")  # fmt: skip
    rho = rank_correlation([r["ratio"] for r in beyond], [r["f_outside_query"] for r in beyond])
    lminf = by["LM-Infinite"][-1]
    shares = (f"f_outside_query vanilla {far['f_outside_query']:.2%}, LM-Infinite "
              f"{lminf['f_outside_query']:.2%}")  # fmt: skip
    if rho is None:
        outcome = "disagrees" if rose else "inconclusive"
        goes = Outcome(
            outcome,
            f"f_outside_query does not vary across the rows beyond L ({shares})"
            + ("; the loss rose all the same" if rose else "; no rise to explain"),
        )
    else:
        outcome = "agrees" if rho >= CORRELATION else ("disagrees" if rho <= 0 else "inconclusive")
        goes = Outcome(outcome, f"Spearman(ratio, f_outside_query) = {rho:.2f} over "
                       f"{len(beyond)} rows "
                       f"beyond L (agree >= {CORRELATION}, disagree <= 0); {shares}")  # fmt: skip
    worst_g = max(beyond, key=_g_excess)
    g_ok = _g_excess(worst_g) <= G_TOL
    g_claim = Outcome("agrees" if g_ok else "disagrees",
                      f"largest g_outside beyond L is {worst_g['g_outside']:.2%} against its "
                      f"in-length null {worst_g['g_outside_null']:.2%} ({worst_g['setting']} "
                      f"at {worst_g['bucket']}; excess {'<=' if g_ok else '>'} "
                      f"{G_TOL:.0%})")  # fmt: skip
    return {"vanilla rises": rise, "LM-Infinite near": stays, "f goes with the rise": goes,
            "g in range": g_claim}  # fmt: skip


def verdict(rows: list[Row]) -> Outcome:
    """The experiment's verdict: the four checks combined, each check's reason quoted."""
    judged = checks(rows)
    overall = combine(list(judged.values()), "checks")
    reason = "; ".join(f"[{name}: {v.outcome}] {v.reason}" for name, v in judged.items())
    return Outcome(overall.outcome, reason)


EXPERIMENT = Experiment(
    name="length",
    title="Length extrapolation with LM-Infinite",
    prediction=PREDICTION,
    needs="four forward passes of the first 8 L tokens (vanilla, cap only, mask only, "
    "LM-Infinite), each captured from its own pass, and one batched pass of L-token windows "
    "(the in-length loss of the same tokens)",
    run=_run,
    judge=judge,
    verdict=verdict,
    forward_count=lambda settings: len(LAMBDA_SETTINGS) + 1,
    check=_check,
)
