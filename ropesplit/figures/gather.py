r"""Collect each figure's data from the layers' APIs: captures, analyses, experiments, synthetic.

Nothing here re-implements the maths: the split of one head is
``numerics.split.split_head`` (docs/theory.md section 3), the synthetic heads are
``numerics.synthetic``, pairs are ``numerics.rope.to_pairs``. The one
quantity computed here is figure 3's per-pair deviation energy (docs/theory.md
section 5, the summand of ``lowfreq_share``):

.. math::

    e^{(k)}_l = \sum_{h}\sum_j |\tilde\delta_{h,j,l}|^2,\qquad
    \tilde\delta_{h,j} = \tilde k_{h,j} - \frac1N\sum_{j'} \tilde k_{h,j'}

per layer, summed over the layer's KV heads ``h`` (and the same for queries
with the mean query). Every function returns the keyword arguments of one
figure function, as plain arrays and JSON rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.core.paper import PAPER_ORDER_HARMFUL, PAPER_ORDER_HARMLESS, PAPER_R_SPLIT

__all__ = [
    "bound_data",
    "forest_data",
    "tolerance_data",
    "decomposition_data",
    "distance_data",
    "head_split",
    "length_data",
    "median_head",
    "pair_energy",
    "pair_energy_data",
    "parse_head",
    "perturbation_data",
    "r_split_data",
    "reference_data",
    "reference_pairs_data",
    "sweep_data",
]

SYNTHETIC_PATTERNS = ("random", "structured", "adversarial")
SWEEP_BASES = (1e4, 1e5, 1e6)  # Llama-2, SmolLM2, Gemma-3 global layers (docs/theory.md section 1)


def parse_head(text: str) -> tuple[int, int]:
    """``"LAYER.HEAD"`` as two integers.

    >>> parse_head("3.1")
    (3, 1)
    """
    layer, dot, head = text.partition(".")
    if not (dot and layer.isdigit() and head.isdigit()):
        raise RopesplitError(f"head must be LAYER.HEAD (e.g. 3.1), got {text!r}")
    return int(layer), int(head)


def median_head(heads: Sequence[Mapping[str, Any]], stat: str = "r_split") -> tuple[int, int]:
    """The (layer, head) whose ``stat`` is the median over heads (the lower one for even counts).

    Heads with an undefined (None/NaN) value are left out; ties go to the
    earlier (layer, head).
    """
    rows = [r for r in heads if r.get(stat) is not None and np.isfinite(float(r[stat]))]
    if not rows:
        raise RopesplitError(f"no head has a finite {stat}")
    ordered = sorted(rows, key=lambda r: (float(r[stat]), int(r["layer"]), int(r["head"])))
    chosen = ordered[(len(ordered) - 1) // 2]
    return int(chosen["layer"]), int(chosen["head"])


def _layer(cache: Any, layer: int) -> Any:
    n_layers = len(cache.layers)
    if not 0 <= layer < n_layers:
        raise RopesplitError(f"layer must lie in [0, {n_layers}), got {layer}")
    return cache.layers[layer]


def head_split(cache: Any, layer: int, head: int) -> Any:
    r"""``numerics.split.split_head`` of query head ``head`` of ``layer`` in a capture.

    The head reads KV head ``kv_map[head]``; frequencies, scale ``s``, layout,
    rotary dimension, positions and window are the capture's own.
    """
    from ropesplit.numerics.split import split_head

    lc = _layer(cache, layer)
    n_heads = lc.q.shape[0]
    if not 0 <= head < n_heads:
        raise RopesplitError(f"head must lie in [0, {n_heads}) for layer {layer}, got {head}")
    return split_head(
        lc.q[head].double().numpy(),  # (N, d)
        lc.k[int(lc.kv_map[head])].double().numpy(),  # (N, d)
        lc.spec, positions=cache.positions.numpy(),
    )  # fmt: skip


def decomposition_data(cache: Any, layer: int, head: int, model: str = "") -> dict[str, Any]:
    """Figure 1: ``W, f, g, E`` and the causal mask of one head."""
    split = head_split(cache, layer, head)
    title = f"{model}, layer {layer}, head {head}, {cache.n_tokens} tokens".lstrip(", ")
    return {"W": split.W, "f": split.f, "g": split.g, "E": split.E, "mask": split.mask,
            "title": title}  # fmt: skip


def r_split_data(analysis: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 2: the ``analyze`` record's heads and its control's heads, and the paper's value."""
    control = analysis.get("control")
    return {"heads": analysis["heads"], "control_heads": control["heads"] if control else None,
            "paper": PAPER_R_SPLIT}  # fmt: skip


def pair_energy(cache: Any, which: str = "k") -> np.ndarray:
    r"""Per-layer, per-pair deviation energy ``(L, P)``: :math:`\sum_h\sum_j|\tilde x_{h,j,l} - \bar{\tilde x}_{h,l}|^2`.

    ``which`` is ``"k"`` (keys, deviation from the mean key of each KV head)
    or ``"q"`` (queries, from the mean query of each head).
    """  # noqa: E501
    from ropesplit.numerics.rope import to_pairs

    if which not in ("k", "q"):
        raise RopesplitError(f"which must be 'k' or 'q', got {which!r}")
    rows = []
    for lc in cache.layers:
        x = getattr(lc, which).double().numpy()  # (heads, N, d)
        z = to_pairs(x, layout=lc.layout, rotary_dim=lc.rotary_dim)  # (heads, N, P) complex
        dev = z - z.mean(axis=1, keepdims=True)  # (heads, N, P)
        rows.append((np.abs(dev) ** 2).sum(axis=(0, 1)))  # (P,)
    return np.stack(rows)  # (L, P)


def reference_data(analysis: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 9: mean ``r_split`` with its CI per reference: trained, control, protocol controls."""
    series = {"trained": {s: v["r_split"] for s, v in analysis["by_reference"].items()}}
    control = analysis.get("control")
    if control is not None:
        series["random init"] = {s: v["r_split"] for s, v in control["by_reference"].items()}
    for name, entry in (analysis.get("protocol") or {}).get("controls", {}).items():
        series[f"{name} ({entry['runs']} run(s))"] = {
            s: v["control"] for s, v in entry["by_reference"].items()}  # fmt: skip
    return {"series": series, "paper": PAPER_R_SPLIT}


def reference_pairs_data(cache: Any, control_cache: Any | None = None) -> dict[str, Any]:
    """Figure 10: layer 0's ``theta``, ``|m_l|`` over its causal pairs, key deviation energies."""
    from ropesplit.numerics.reference import mean_rotation

    first = cache.layers[0]
    m = mean_rotation(first.theta, cache.n_tokens, first.window).m  # (P,)
    return {"theta": first.theta, "m_abs": np.abs(m), "energy_k": pair_energy(cache, "k"),
            "energy_k_control": pair_energy(control_cache, "k") if control_cache else None}


def pair_energy_data(cache: Any, control_cache: Any | None = None) -> dict[str, Any]:
    """Figure 3: key and query energies (trained, control), layer 0's ``theta``, distances.

    The distances whose weight is drawn: 1 token, 16 tokens and the median
    causal distance of the analysed context (about ``0.29 N``).
    """
    n_tokens = cache.n_tokens
    i, j = np.tril_indices(n_tokens)
    typical = float(np.median(i - j))
    return {
        "theta": cache.layers[0].theta,
        "energy_k": pair_energy(cache, "k"),
        "energy_k_control": pair_energy(control_cache, "k") if control_cache else None,
        "energy_q": pair_energy(cache, "q"),
        "energy_q_control": pair_energy(control_cache, "q") if control_cache else None,
        "distances": tuple(sorted({1.0, min(16.0, typical), round(typical)})),
    }


def _sample(split: Any, rng: np.random.Generator, points: int) -> tuple[np.ndarray, np.ndarray]:
    """``(bound, |E|)`` at up to ``points`` seeded random causal pairs of a HeadSplit."""
    bound, abs_e = split.bound[split.mask], np.abs(split.E[split.mask])  # (n_pairs,) each
    if bound.size > points:
        keep = np.sort(rng.choice(bound.size, size=points, replace=False))
        bound, abs_e = bound[keep], abs_e[keep]
    return bound, abs_e


def bound_data(
    cache: Any,
    heads: Sequence[tuple[int, int]],
    *,
    seed: int = 0,
    points: int = 600,
) -> dict[str, Any]:
    """Figure 4: ``(bound, |E|)`` samples from real ``heads`` and the three synthetic patterns.

    The synthetic heads (``numerics.synthetic.make_qk``) share the capture's
    head dimension, RoPE base and token count.
    """
    from ropesplit.numerics.split import split_head
    from ropesplit.numerics.synthetic import make_qk

    rng = np.random.default_rng(seed)
    samples: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for layer, head in heads:
        samples[f"layer {layer} head {head}"] = _sample(head_split(cache, layer, head), rng, points)
    first = cache.layers[0]
    d = int(first.q.shape[-1])
    base = float(first.rope_base or 10000.0)
    for pattern in SYNTHETIC_PATTERNS:
        synthetic = make_qk(pattern, d=d, base=base, tokens=cache.n_tokens, seed=seed)
        split = split_head(synthetic.q, synthetic.k, synthetic.theta, synthetic.scale)
        samples[f"synthetic: {pattern}"] = _sample(split, rng, points)
    return {"samples": samples}


def sweep_data(*, d: int = 64, tokens: int = 256, seed: int = 0,
               bases: Sequence[float] = SWEEP_BASES) -> dict[str, Any]:  # fmt: skip
    """Figure 5: ``numerics.synthetic.sweep`` rows for each RoPE base."""
    from ropesplit.numerics.synthetic import sweep

    rows: list[dict[str, Any]] = []
    for base in bases:
        rows += [dict(r) | {"base": base} for r in sweep(d=d, base=base, tokens=tokens, seed=seed)]
    return {"rows": rows}


def _experiment(perturb: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    if name not in perturb:
        raise RopesplitError(f"perturb JSON has no {name!r} experiment; run it with --experiment")
    return list(perturb[name])


def intervention_data(record: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Figures 13-16: the rows of intervention experiment ``name``."""
    return {"rows": _experiment(record, name)}


def perturbation_data(perturb: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 6: the ``order`` and ``position`` rows and the paper's thresholds."""
    return {"order": _experiment(perturb, "order"),
            "position": _experiment(perturb, "position") if "position" in perturb else None,
            "paper_thresholds": (PAPER_ORDER_HARMLESS, PAPER_ORDER_HARMFUL)}  # fmt: skip


def distance_data(perturb: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 7: the ``distance`` experiment's rows."""
    return {"rows": _experiment(perturb, "distance")}


def length_data(perturb: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 8: the ``length`` experiment's rows."""
    return {"rows": _experiment(perturb, "length")}


def tolerance_data(claims: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 19: claim 1's damage per rate with its 95% t interval over passages, one curve
    per corpus at the headline length (``claims.json``'s ``order`` rows)."""
    from ropesplit.empirical.experiments.order_passages import RATES, rate_label
    from ropesplit.numerics.intervals import t_interval

    head = claims["header"]
    key = f"tokens={head['tokens']}"
    curves = []
    for corpus in head.get("corpora", [head["corpus"]]):
        rows = [r for r in claims["order"] if r.get("corpus", corpus) == corpus]
        if len(rows) < 2:
            continue
        means, lows, highs = [], [], []
        for rate in RATES:
            values = [r["cells"][key][f"damage_{rate_label(rate)}"] for r in rows]
            ci = t_interval(np.asarray(values, dtype=float), unit="passages")
            means.append(ci.mean)
            lows.append(ci.low)
            highs.append(ci.high)
        curves.append({"label": f"{corpus}, {head['tokens']} tokens", "n": len(rows),
                       "rates": [100 * r for r in RATES], "mean": means, "low": lows,
                       "high": highs})  # fmt: skip
    if not curves:
        raise RopesplitError("the claims record has fewer than 2 word-order passages")
    return {"curves": curves, "paper": [PAPER_ORDER_HARMLESS, PAPER_ORDER_HARMFUL]}


def forest_data(compare: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 20: the models x claims rows of a compare record."""
    return {"rows": list(compare["rows"])}
