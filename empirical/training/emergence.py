r"""The emergence experiment: train at chosen RoPE bases and seeds, measure, compare with theory.

docs/theory.md section 3 bounds the remainder by
:math:`|E_{ij}| \le s\sum_l |\tilde q_{i,l}|\,|\tilde\delta_{j,l}|\,2|\sin(\theta_l\Delta/2)|`:
key deviation is cheap only in pairs that turn little over the distances that
matter, here :math:`\Delta < L_\mathrm{train}`. So before any training the
theory says which runs can produce the split. With ``P = d/2`` pairs and
:math:`\theta_l = b^{-2l/d}`, a base leaving many slow pairs
(:math:`\theta_l L_\mathrm{train} < 1`) should end with

1. a larger rise of ``r_split`` (and fall of ``remainder_share``) from
   its random-init value than a base leaving few;
2. a larger rise of ``lowfreq_share_k`` from its random-init value.

The changes, not the final levels, are judged: at random initialisation the
base already sets ``r_split`` (deviation energy is spread over all pairs,
so more of it sits in slow pairs when there are more), and a comparison of
levels would be true by construction.

:func:`prediction` states this from ``numerics.emergence`` (slow pairs, mean
bound weight per pair) before training; :func:`run_emergence` trains and
measures every (base, seed) run and its random-init control;
:func:`verdict` compares the final numbers: intervals are percentile
bootstraps over the pooled heads of all seeds (``numerics.bootstrap``), and a
prediction is *confirmed* when the two bases' intervals are disjoint in the
predicted order, *contradicted* when disjoint the other way, else
*inconclusive*.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.training.train import TrainConfig, train
from ropesplit.empirical.training.train import remeasure as remeasure_run
from ropesplit.empirical.training.train_measure import control_record, corpus_entropy
from ropesplit.numerics.bootstrap import bootstrap_ci
from ropesplit.numerics.emergence import causal_bound_weight, slow_pairs
from ropesplit.numerics.rope import frequencies
from ropesplit.numerics.statistics import names
from ropesplit.numerics.tasks import OFFSET, TEXT_TASKS

__all__ = ["CONTROL_SEED_OFFSET", "MIN_SEEDS", "prediction", "run_emergence", "step0_vs_control",
           "task_prediction", "task_verdict", "verdict"]

CONTROL_SEED_OFFSET = 1000  # the control of seed s is drawn with seed s + 1000


def prediction(cfg: TrainConfig, bases: list[float]) -> dict[str, Any]:
    """The theory's prediction for ``bases`` at ``cfg.seq_len``, computed before any training."""
    per_base = []
    for base in bases:
        theta = frequencies(cfg.head_dim, base)  # (P,)
        weight = causal_bound_weight(theta, cfg.seq_len)  # (P,)
        low = np.argsort(theta, kind="stable")[: theta.size // 2]  # the low-frequency half
        per_base.append({
            "rope_base": float(base), "pairs": int(theta.size),
            "slow_pairs": int(slow_pairs(theta, cfg.seq_len).sum()),
            "mean_bound_weight": float(weight.mean()),
            "low_half_bound_weight": float(weight[low].mean()),
        })  # fmt: skip
    record: dict[str, Any] = {"seq_len": cfg.seq_len, "bases": per_base}
    if len(bases) < 2:
        return record
    ranked = sorted(per_base, key=lambda b: (b["slow_pairs"], -b["low_half_bound_weight"]))
    few, many = ranked[0], ranked[-1]
    if few["slow_pairs"] == many["slow_pairs"]:
        raise RopesplitError(
            f"bases must differ in slow pairs (theta_l L_train < 1) to test the theory, "
            f"all leave {few['slow_pairs']} at L_train = {cfg.seq_len}"
        )
    record |= {"many": many["rope_base"], "few": few["rope_base"], "statement": (
        f"theory (docs/theory.md 3): at L_train = {cfg.seq_len}, base {many['rope_base']:g} "
        f"leaves {many['slow_pairs']} of {many['pairs']} pairs slow (theta_l L_train < 1; "
        f"low-half mean bound weight {many['low_half_bound_weight']:.3f}), base "
        f"{few['rope_base']:g} leaves {few['slow_pairs']} (weight "
        f"{few['low_half_bound_weight']:.3f}). Predicted from random init to the end of "
        f"training, per head: (1) r_split rises more and remainder_share falls more at base "
        f"{many['rope_base']:g}; (2) lowfreq_share_k rises more at base {many['rope_base']:g}."
    )}  # fmt: skip
    return record


def step0_vs_control(step0: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Per figure statistic: step 0's and the control's means and intervals, and whether they overlap."""  # noqa: E501
    out = {}
    for name in names("training"):
        a, b = step0["summary"][name], control["summary"][name]
        bounded = "low" in a and "low" in b  # no interval where every head is undefined
        overlap = bool(a["low"] <= b["high"] and b["low"] <= a["high"]) if bounded else False
        out[name] = {"step0": a, "control": b, "overlap": overlap}
    return out


def _number(value: Any) -> float:
    """A statistic read from a record: null (JSON's undefined) is NaN."""
    return math.nan if value is None else float(value)


def _pooled(runs: list[dict[str, Any]], base: float, stat: str, *, change: bool) -> np.ndarray:
    """Final per-head values of ``stat`` (or final minus step 0) over all seeds of ``base``."""
    values = []
    for run in (r for r in runs if r["rope_base"] == base):
        first, last = run["checkpoints"][0]["heads"], run["checkpoints"][-1]["heads"]
        for h0, h1 in zip(first, last, strict=True):
            values.append(_number(h1[stat]) - _number(h0[stat]) if change else _number(h1[stat]))
    arr = np.asarray(values, dtype=np.float64)
    return arr[np.isfinite(arr)]


def verdict(runs: list[dict[str, Any]], pred: dict[str, Any], *, n_boot: int, seed: int
            ) -> dict[str, Any]:  # fmt: skip
    """Each prediction of :func:`prediction` judged on the changes from random init, with the
    training seed as the unit (heads of one run are not replicates): per seed, the mean over
    heads of final minus step 0 at each base, paired by seed across the bases, a t interval
    over seeds (at least :data:`MIN_SEEDS`). Also records the final levels (``final_many``,
    ``final_few``), unjudged, as bootstrap intervals over the pooled heads (``n_boot``,
    ``seed``)."""
    many, few = pred["many"], pred["few"]
    tests = (("r_split", +1), ("remainder_share", -1), ("lowfreq_share_k", +1))
    out = {}
    for stat, sign in tests:
        def change(run: dict[str, Any], stat: str = stat) -> float:
            first, last = run["checkpoints"][0]["heads"], run["checkpoints"][-1]["heads"]
            values = np.array([_number(h1[stat]) - _number(h0[stat])
                               for h0, h1 in zip(first, last, strict=True)])
            return float(np.nanmean(values))

        a, b = _seed_values(runs, many, change), _seed_values(runs, few, change)
        if a.size != b.size:
            raise RopesplitError(f"every base needs the same seeds, got {a.size} and {b.size}")
        judged = _judged(sign * a, sign * b, many, f"{'rise' if sign > 0 else 'fall'} of "
                         f"{stat}, base {many:g} minus base {few:g}")  # fmt: skip
        final = {x: bootstrap_ci(_pooled(runs, x, stat, change=False), n_boot=n_boot, seed=seed)
                 for x in (many, few)}  # fmt: skip
        out[f"{stat}_change"] = {
            "predicted": f"{'rises' if sign > 0 else 'falls'} more at base {many:g}",
            **judged, "final_many": final[many].as_dict(), "final_few": final[few].as_dict(),
        }  # fmt: skip
    return out


MIN_SEEDS = 3  # training seeds a verdict needs (the unit of replication)


def _head(checkpoint: dict[str, Any], layer: int, head: int) -> dict[str, Any]:
    return next(h for h in checkpoint["heads"] if (h["layer"], h["head"]) == (layer, head))


def _seed_values(runs: list[dict[str, Any]], base: float, value: Any) -> np.ndarray:
    """``value(run)`` for every seed of ``base``, in seed order."""
    mine = sorted((r for r in runs if r["rope_base"] == base), key=lambda r: r["seed"])
    return np.array([_number(value(r)) for r in mine])


def task_prediction(cfg: TrainConfig, bases: list[float]) -> dict[str, Any]:
    """The recall task's predictions, from the bound, stated before training."""
    record = prediction(cfg, bases)
    if "statement" not in record:
        return record
    many, few = record["many"], record["few"]
    slow = next(b["slow_pairs"] for b in record["bases"] if b["rope_base"] == few)
    if cfg.task == "offset":
        record["statement"] = (
            f"control task (the answer is the token {OFFSET} places before it): position, not "
            "content, decides, so "
            "the bound asks nothing of the keys; the pattern need not form. Reported, not judged.")
        return record
    record["statement"] = (
        f"theory (docs/theory.md 3-4): matching content at any distance up to L_train = "
        f"{cfg.seq_len} is cheap only in pairs that barely turn over L_train. Predicted, per "
        f"seed (the unit, >= {MIN_SEEDS} seeds), paired init vs final on the retrieval head "
        f"(the head attending most from each query to its answer's source): (1) at base "
        f"{many:g} its weighted slow share (the bound's weight |q~||delta~| in the slow pairs, "
        f"theta_l L_train < 1) "
        f"rises; (2) at base {many:g} its r_split rises; (3) at base {few:g} ({slow} slow "
        "pairs) recall accuracy falls with distance: nearest distance bucket minus farthest "
        "> 0 at the end.")
    return record


def task_verdict(runs: list[dict[str, Any]], pred: dict[str, Any]) -> dict[str, Any]:
    """Each of :func:`task_prediction`'s tests as a paired t interval over seeds."""
    many, few = pred["many"], pred["few"]

    def at_retrieval(stat: str, step: int) -> Any:
        def value(run: dict[str, Any]) -> float:
            best = run["checkpoints"][-1]["retrieval_head"]
            return _head(run["checkpoints"][step], best["layer"], best["head"])[stat]
        return value

    tests = {
        "weighted_slow_share_rises": (many, "weighted_slow_share"),
        "r_split_rises": (many, "r_split"),
    }
    out: dict[str, Any] = {}
    for name, (base, stat) in tests.items():
        final = _seed_values(runs, base, at_retrieval(stat, -1))
        init = _seed_values(runs, base, at_retrieval(stat, 0))
        out[name] = _judged(final, init, base, f"{stat} of the retrieval head, final - init")
    near = _seed_values(runs, few, lambda r: r["checkpoints"][-1]["accuracy_by_distance"][0])
    far = _seed_values(runs, few, lambda r: r["checkpoints"][-1]["accuracy_by_distance"][-1])
    out["accuracy_falls_with_distance"] = _judged(near, far, few,
                                                  "accuracy, nearest minus farthest bucket")
    return out


def _judged(a: np.ndarray, b: np.ndarray, base: float, what: str) -> dict[str, Any]:
    from ropesplit.numerics.intervals import decide, paired_interval

    keep = np.isfinite(a) & np.isfinite(b)
    row: dict[str, Any] = {"base": base, "what": what, "seeds": int(keep.sum()),
                           "a": a.tolist(), "b": b.tolist()}  # fmt: skip
    if keep.sum() < 2:
        return row | {"verdict": "inconclusive", "reason": f"{int(keep.sum())} seed(s): no "
                      f"interval (minimum {MIN_SEEDS})"}
    ci = paired_interval(a[keep], b[keep], unit="seeds")
    decision = decide(ci, 0.0, "above", min_n=MIN_SEEDS, what=what)
    return row | {"mean": ci.mean, "low": ci.low, "high": ci.high,
                  "verdict": decision.outcome, "reason": decision.reason}


def run_emergence(
    cfg: TrainConfig,
    bases: list[float],
    seeds: list[int],
    *,
    progress: bool = True,
    say: Any = print,
    remeasure: bool = False,
) -> dict[str, Any]:
    """Train every (base, seed) under ``cfg.out`` and measure it; the ``--json`` record.

    ``say`` receives the lines meant for the terminal (prediction first).
    ``remeasure`` measures every finished checkpoint again with the current
    code (:func:`ropesplit.empirical.training.train.remeasure`) before reporting.
    One run folder per run: ``OUT/base-B-seed-S`` (the run itself when one
    base and one seed: ``OUT``).
    """
    if not bases or not seeds:
        raise RopesplitError("need at least one base and one seed")
    if len(set(bases)) != len(bases) or len(set(seeds)) != len(seeds):
        raise RopesplitError(f"bases and seeds must not repeat, got {bases} and {seeds}")
    for base in bases:
        dataclasses.replace(cfg, rope_base=float(base)).check()
    text = cfg.task in TEXT_TASKS  # next or masked bytes: the pattern's own prediction
    pred = prediction(cfg, bases) if text else task_prediction(cfg, bases)
    if "statement" in pred:
        say("PREDICTION " + pred["statement"])
    entropy = corpus_entropy(cfg)
    single = len(bases) == 1 and len(seeds) == 1
    if not single:
        Path(cfg.out).mkdir(exist_ok=True)
    runs = []
    for base in bases:
        for seed in seeds:
            folder = cfg.out if single else str(Path(cfg.out) / f"base-{base:g}-seed-{seed}")
            run_cfg = dataclasses.replace(cfg, rope_base=float(base), seed=seed, out=folder)
            start = time.perf_counter()
            records = train(run_cfg, progress=progress)
            if remeasure:
                records = remeasure_run(run_cfg)
            control = control_record(run_cfg, seed + CONTROL_SEED_OFFSET)
            runs.append({
                "rope_base": float(base), "seed": seed, "out": folder,
                "checkpoints": records, "control": control,
                "step0_vs_control": step0_vs_control(records[0], control),
                "wall_seconds": time.perf_counter() - start,
            })  # fmt: skip
    record: dict[str, Any] = {
        "config": cfg.to_dict(), "bases": [float(b) for b in bases], "seeds": seeds,
        "unigram_entropy": entropy, "prediction": pred, "runs": runs,
    }  # fmt: skip
    if "statement" in pred and text:
        record["verdict"] = verdict(runs, pred, n_boot=cfg.n_boot, seed=cfg.seed)
    elif "statement" in pred and cfg.task == "recall":
        record["verdict"] = task_verdict(runs, pred)
    return record
