r"""Figures 11 and 12: the split's pattern forming during training (``ropesplit train``).

Figure 11 plots, against the training step (log axis; step 0, the random
initialisation, drawn at the left edge and labelled "init"), the validation
loss and the docs/theory.md section 5 statistics ``r_split``,
``remainder_share``, ``tightness_max``, ``lowfreq_share_k`` and
``lowfreq_share_q`` (model means over heads), one colour per RoPE base; the
line is the mean over seeds and the band their range (with one seed: the
bootstrap interval over heads). The random-init control of the same config
is a hollow marker at "init".

Figure 12 shows the share of key deviation energy
:math:`\sum_j|\tilde\delta_{j,l}|^2` per pair ``l`` (mean over layers of each
layer's shares, then over seeds) at the first, a middle and the last
checkpoint, one panel per base, with the slow pairs
(:math:`\theta_l L_\mathrm{train} < 1`) shaded; one legend for all panels, below
them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from ropesplit.core.errors import RopesplitError
from ropesplit.figures._checks import as_array, panel_label, whole_numbers
from ropesplit.figures.pairs import energy_shares
from ropesplit.figures.style import OKABE_ITO, check_width, new_figure, styled

__all__ = ["FIGURE_11", "FIGURE_12", "FIGURE_22", "PANELS", "bothways_data", "emergence_data",
           "emergence_figure", "emergence_pairs_figure"]  # fmt: skip

PANELS = (
    ("val_loss", "val loss (nats/byte)"),
    ("r_split", "r_split"),
    ("remainder_share", "remainder share"),
    ("tightness_max", "tightness max"),
    ("lowfreq_share_k", "lowfreq share, keys"),
    ("lowfreq_share_q", "lowfreq share, queries"),
)
_COLOURS = ("blue", "vermillion", "green", "orange", "purple", "sky")
_INIT_X = 0.5  # where step 0 sits on the log axis


def _x(steps: Sequence[int]) -> np.ndarray:
    """Steps on the log axis, step 0 moved to :data:`_INIT_X`."""
    s = np.asarray(steps, dtype=np.float64)
    return np.where(s > 0, s, _INIT_X)


def _colour(index: int) -> str:
    return OKABE_ITO[_COLOURS[index % len(_COLOURS)]]


def _check_runs(runs: Sequence[Mapping[str, Any]]) -> None:
    if len(runs) == 0:
        raise RopesplitError("runs must hold at least one run, got 0")
    for i, run in enumerate(runs):
        for key in ("label", "steps", "mean", "low", "high"):
            if key not in run:
                raise RopesplitError(f"run {i} has no {key!r}")
        n = len(run["steps"])
        if n == 0 or any(len(run[k][name]) != n for k in ("mean", "low", "high")
                         for name, _ in PANELS):  # fmt: skip
            raise RopesplitError(f"run {i} must hold one value per step for every statistic")


def emergence_figure(
    runs: Sequence[Mapping[str, Any]],
    controls: Mapping[str, Mapping[str, float]] | None = None,
    *,
    unigram_entropy: float | None = None,
    task: str = "lm",
    width: float | str = "double",
) -> Figure:
    """Each statistic against the training step, one line and band per run label.

    ``runs``: ``{"label", "steps" (S,), "mean", "low", "high"}`` where the last
    three map every :data:`PANELS` name to ``(S,)`` values (band ``low..high``).
    ``controls[label][name]``: the random-init control's value, drawn at "init".
    ``unigram_entropy`` is drawn as a dashed line on the loss panel; ``task`` (``"lm"``,
    ``"recall"``, ``"offset"``) names the loss's unit: per byte, or per answer.
    """
    _check_runs(runs)
    inches = check_width(width)
    single = inches < 5.0
    rows, cols = (3, 2) if single else (2, 3)
    top = max(max(r["steps"]) for r in runs)
    with styled():
        fig = new_figure(inches, 6.0 if single else 3.8)
        axes = fig.subplots(rows, cols, squeeze=False).ravel()
        for ax, letter, (name, title) in zip(axes, "abcdef", PANELS, strict=True):
            for index, run in enumerate(runs):
                x = _x(run["steps"])
                colour = _colour(index)
                ax.fill_between(x, run["low"][name], run["high"][name], color=colour, alpha=0.2,
                                linewidth=0)  # fmt: skip
                ax.plot(x, run["mean"][name], color=colour, marker="o", label=run["label"])
                if controls and run["label"] in controls:
                    ax.plot([_INIT_X], [controls[run["label"]][name]], linestyle="none",
                            marker="D", markerfacecolor="none", color=colour)  # fmt: skip
            if name == "val_loss" and unigram_entropy is not None:
                ax.axhline(unigram_entropy, color="#777777", linestyle="--", linewidth=0.8,
                           label="unigram entropy" if task in ("lm", "mlm")
                           else "answers' entropy")  # fmt: skip
            if name == "val_loss" and task not in ("lm", "mlm"):
                title = "val loss (nats/answer)"
            elif name == "val_loss" and task == "mlm":
                title = "val loss (nats/masked byte)"
            ax.set_xscale("log")
            ticks = [_INIT_X] + [t for t in (1, 10, 100, 1000, 10000) if t <= top]
            ax.set_xticks(ticks, ["init"] + [f"{t:g}" for t in ticks[1:]])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.axvline(0.75, color="#BBBBBB", linewidth=0.6, linestyle=":")
            ax.set_title(title)
            ax.set_xlabel("training step")
            panel_label(ax, letter)
        if controls:
            axes[0].plot([], [], linestyle="none", marker="D", markerfacecolor="none",
                         color="black", label="random-init control")  # fmt: skip
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
    return fig


def emergence_pairs_figure(
    panels: Sequence[Mapping[str, Any]],
    *,
    width: float | str = "double",
) -> Figure:
    """Key deviation energy share per pair at early, middle and final checkpoints, per base.

    ``panels``: ``{"label", "theta" (P,), "seq_len", "steps" (3,), "shares" (3, P)}``
    (shares of each checkpoint sum to 1 over pairs).
    """
    if len(panels) == 0:
        raise RopesplitError("panels must hold at least one panel, got 0")
    inches = check_width(width)
    single = inches < 5.0
    n = len(panels)
    greys = ("#BBBBBB", "#777777", "#000000")
    with styled():
        fig = new_figure(inches, 2.3 * n + 0.5 if single else 2.9)
        axes = fig.subplots(n if single else 1, 1 if single else n, squeeze=False).ravel()
        for ax, letter, panel in zip(axes, "abcdef", panels, strict=False):
            theta = as_array("theta", panel["theta"], 1)
            shares = as_array("shares", panel["shares"], 2)
            if shares.shape[1] != theta.size or shares.shape[0] != len(panel["steps"]):
                raise RopesplitError(
                    f"shares must have shape ({len(panel['steps'])}, {theta.size}), "
                    f"got {shares.shape}"
                )
            pairs = np.arange(theta.size)
            slow = theta * float(panel["seq_len"]) < 1.0
            if slow.any():
                ax.axvspan(pairs[slow].min() - 0.5, pairs[slow].max() + 0.5, color="#E8E8E8",
                           label=r"slow: $\theta_l L_\mathrm{train} < 1$")  # fmt: skip
            for step, share, grey in zip(panel["steps"], shares, greys, strict=False):
                ax.plot(pairs, share, color=grey, marker="o",
                        label="init" if step == 0 else f"step {step}")  # fmt: skip
            ax.axhline(1.0 / theta.size, color=OKABE_ITO["vermillion"], linewidth=0.6,
                       linestyle=":", label="uniform")  # fmt: skip
            ax.set_yscale("log")
            ax.set_title(panel["label"])
            ax.set_xlabel("RoPE pair l (0 = fastest)")
            ax.set_ylabel("share of key-deviation energy")
            ax.xaxis.set_major_locator(whole_numbers())
            panel_label(ax, letter)
        entries: dict[str, Any] = {}  # one legend for all panels, below them: label -> handle
        for ax in axes[:n]:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                entries.setdefault(label, handle)
        fig.legend(list(entries.values()), list(entries), loc="outside lower center",
                   ncols=min(len(entries), 3 if single else 6))  # fmt: skip
    return fig


def emergence_data(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Figures 11 and 12's keyword arguments (``emergence``, ``emergence_pairs``) from a
    ``ropesplit train --json`` record (figures 17 and 18 take the same of a recall record)."""
    by_base: dict[float, list[Mapping[str, Any]]] = {}
    for run in record["runs"]:
        by_base.setdefault(float(run["rope_base"]), []).append(run)
    runs, controls, panels = [], {}, []
    for base, group in by_base.items():
        label = f"base {base:g}"
        steps = [c["step"] for c in group[0]["checkpoints"]]
        if any([c["step"] for c in g["checkpoints"]] != steps for g in group):
            raise RopesplitError(f"runs of base {base:g} must share their checkpoint steps")
        mean, low, high = {}, {}, {}
        for name, _ in PANELS:
            values = np.array([[_value(c, name) for c in g["checkpoints"]] for g in group])
            mean[name] = values.mean(axis=0).tolist()  # (S,) over seeds
            if len(group) > 1:
                low[name], high[name] = values.min(0).tolist(), values.max(0).tolist()
            else:
                low[name] = [_value(c, name, "low") for c in group[0]["checkpoints"]]
                high[name] = [_value(c, name, "high") for c in group[0]["checkpoints"]]
        runs.append({"label": label, "steps": steps, "mean": mean, "low": low, "high": high})
        controls[label] = {name: float(np.mean([_value(g["control"], name) for g in group]))
                           for name, _ in PANELS}  # fmt: skip
        picks = sorted({0, len(steps) // 2, len(steps) - 1})
        shares = [np.mean([energy_shares("energy_k", g["checkpoints"][i]["energy_k"]).mean(axis=0)
                           for g in group], axis=0) for i in picks]  # fmt: skip
        panels.append({"label": label, "theta": group[0]["checkpoints"][0]["theta"],
                       "seq_len": record["config"]["seq_len"],
                       "steps": [steps[i] for i in picks], "shares": np.stack(shares)})  # fmt: skip
    task = record.get("config", {}).get("task", "lm")  # the loss is per byte, or per answer
    return {
        "emergence": {"runs": runs, "controls": controls,
                      "unigram_entropy": record["unigram_entropy"],
                      **({"task": task} if task != "lm" else {})},
        "emergence_pairs": {"panels": panels},
    }  # fmt: skip


def bothways_data(train: Mapping[str, Any], encoder: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 22's keyword arguments: the causal run of the ``train`` record at the encoders'
    base beside the ``encoder`` record's masked-LM runs (text, proteins), one label each."""
    base = float(encoder["text"]["runs"][0]["rope_base"])
    causal = {**train, "runs": [r for r in train["runs"] if float(r["rope_base"]) == base]}
    if not causal["runs"]:
        raise RopesplitError(f"the train record has no run at the encoders' base {base:g}")
    runs, controls = [], {}
    for label, record in (("causal, text", causal), ("encoder, text", encoder["text"]),
                          ("encoder, proteins", encoder["proteins"])):  # fmt: skip
        data = emergence_data(record)["emergence"]
        (run,) = data["runs"]  # one base: one line
        runs.append({**run, "label": label})
        controls[label] = data["controls"][run["label"]]
    return {"runs": runs, "controls": controls, "unigram_entropy": train["unigram_entropy"]}


def _value(checkpoint: Mapping[str, Any], name: str, field: str = "mean") -> float:
    """One checkpoint's ``val_loss`` or a statistic's mean (or interval end); NaN where the
    record holds null (every head undefined: JSON has no NaN)."""
    value = checkpoint["val_loss"] if name == "val_loss" else checkpoint["summary"][name].get(field)
    return np.nan if value is None else float(value)


# (name, title, caption, function) of each figure: the registry's line is FigureSpec(n, *...)
FIGURE_11 = ("emergence", "The split pattern during training",
             "A small Llama trained here (ropesplit train): validation loss and the model means "
             "over heads of r_split, remainder share, tightness and the low-frequency shares of "
             "key and query deviation energy against the training step (log axis; init = step 0, "
             "the random initialisation; hollow diamond: a random-init control of the same "
             "config). One colour per RoPE base; band: range over seeds (one seed: 95% bootstrap "
             "interval over heads); dashed: the corpus's unigram entropy.",
             emergence_figure)  # fmt: skip
FIGURE_12 = ("emergence_pairs", "Key deviation energy per pair during training",
             "Share of key deviation energy per RoPE pair (mean over layers) at the first, a "
             "middle and the last checkpoint, one panel per RoPE base; shaded: the slow pairs "
             "(theta_l L_train < 1) where the remainder bound charges little; dotted: uniform.",
             emergence_pairs_figure)  # fmt: skip
FIGURE_22 = ("bothways", "The split pattern in a causal model and in encoders trained here",
             "Figure 11 for three models of the same blocks, shape and RoPE base trained here: "
             "the causal Llama on next bytes of the text, and a EuroBERT encoder (attention both "
             "ways, docs/theory.md section 9) on masked bytes of the text and of the 24 bundled "
             "proteins; the statistics over every pair each model's attention lets through. "
             "Loss: next byte (causal) or masked byte (encoders), nats; band: 95% bootstrap "
             "interval over heads (one seed); hollow diamond: a random-init control; dashed: "
             "the text's unigram entropy.", emergence_figure)  # fmt: skip
# figures 17 and 18: the same two figures of the associative recall task
FIGURE_17 = ("recall_emergence", "The split pattern while associative recall is learned",
             "Figure 11 for the recall task (ropesplit train --task recall): a small Llama trained "
             "here to find each query's value by its key's content, 8 to L_train tokens back; the "
             "loss is the answers' and the statistics are the means over heads, one colour per "
             "RoPE base, band: range over training seeds; dashed: the answers' entropy (chance).",
             emergence_figure)  # fmt: skip
FIGURE_18 = ("recall_pairs", "Key deviation energy per pair while recall is learned",
             "Figure 12 for the recall task: share of key deviation energy per RoPE pair (mean "
             "over layers) at the first, a middle and the last checkpoint, one panel per base; "
             "shaded: the slow pairs (theta_l L_train < 1).", emergence_pairs_figure)  # fmt: skip
