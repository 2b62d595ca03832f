r"""Synthetic queries and keys that satisfy, ignore or violate the pattern (docs/theory.md 3).

The bound :math:`|E_{ij}| \le s\sum_l |\tilde q_l||\tilde\delta_l|\,2|\sin(\theta_l\Delta/2)|`
is small when the key deviation :math:`\delta_j = k_j - \bar k` sits in slow
pairs.  Queries are i.i.d. standard normal throughout; the keys are:

    random       i.i.d. standard normal: variation spread evenly over the pairs
    structured   a constant key (i.i.d. normal, drawn once) plus deviations of the
                 same mean energy, a share ``high_share`` of it in the faster half
                 of the pairs and the rest in the low-frequency half (default 0)
    adversarial  deviations only in the fastest quarter of the pairs (at least
                 one), no constant: the variation RoPE scrambles most

Deviation energy per token is ``d`` (that of a standard normal key), spread
evenly over the pairs of each part; each pair's deviation is a circular complex
normal.  ``sweep`` runs ``structured`` over ``high_share`` from 0 to 1;
``reference_sweep`` measures each pattern under each reference rotation of
docs/theory.md section 6 (``zero``, reference distances ``C``, the ``mean``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.rope import frequencies, from_pairs
from ropesplit.numerics.spec import RopeSpec

__all__ = ["PATTERNS", "REFERENCES", "SyntheticQK", "bound_record", "make_qk", "reference_sweep",
           "sweep"]

PATTERNS = ("structured", "random", "adversarial")
REFERENCES = ("zero", "distance:16", "distance:64", "distance:256", "distance:1000", "mean")
SHARES = tuple(np.round(np.linspace(0.0, 1.0, 11), 2).tolist())  # the sweep's high_share values


@dataclass(frozen=True)
class SyntheticQK:
    """One synthetic head: pre-RoPE ``q, k (tokens, d)``, ``theta (d/2,)``, ``scale = d^-1/2``."""

    q: np.ndarray
    k: np.ndarray
    theta: np.ndarray
    scale: float
    pattern: str
    d: int
    base: float
    tokens: int
    seed: int
    high_share: float | None  # share of deviation energy in the faster half (structured)

    @property
    def spec(self) -> RopeSpec:
        """The head's geometry: ``theta``, ``scale``, the half layout."""
        return RopeSpec.from_arrays(self.theta, self.scale)


def _deviations(rng: np.random.Generator, tokens: int, weights: np.ndarray) -> np.ndarray:
    r"""``(tokens, P)`` circular complex normal pairs with :math:`E|\tilde\delta_l|^2 = w_l`."""
    p = weights.size
    z = rng.normal(size=(tokens, p)) + 1j * rng.normal(size=(tokens, p))  # E|z|^2 = 2
    return z * np.sqrt(weights / 2.0)


def make_qk(
    pattern: str,
    *,
    d: int = 64,
    base: float = 10000.0,
    tokens: int = 512,
    seed: int = 0,
    high_share: float | None = None,
) -> SyntheticQK:
    r"""Queries and keys of one synthetic head with the given ``pattern`` (half layout).

    ``structured``: :math:`k_j = k_0 + \delta_j` with
    :math:`\sum_{l\in\text{fast}} E|\tilde\delta_{jl}|^2 = \text{high\_share}\cdot d`
    and the rest of the energy ``d`` in the low-frequency half.

    >>> qk = make_qk("structured", d=8, tokens=5, seed=1)
    >>> qk.q.shape, qk.k.shape, qk.theta.shape, qk.high_share
    ((5, 8), (5, 8), (4,), 0.0)
    """
    if pattern not in PATTERNS:
        raise RopesplitError(f"pattern must be one of {', '.join(PATTERNS)}, got {pattern!r}")
    if tokens < 1:
        raise RopesplitError(f"tokens must be at least 1, got {tokens}")
    theta = frequencies(d, base)  # checks d and base
    p = d // 2
    share = 0.0 if high_share is None else float(high_share)
    if pattern == "structured":
        if not 0.0 <= share <= 1.0:
            raise RopesplitError(f"high_share must lie in [0, 1], got {high_share}")
    elif high_share is not None:
        raise RopesplitError(f"high_share applies to the structured pattern only, not {pattern!r}")
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(tokens, d))
    if pattern == "random":
        k = rng.normal(size=(tokens, d))
    else:
        fast = np.argsort(-theta, kind="stable")  # fastest pair first
        weights = np.zeros(p)
        if pattern == "structured":
            n_fast = p // 2
            weights[fast[:n_fast]] = d * share / max(n_fast, 1)
            weights[fast[n_fast:]] = d * (1.0 - share if n_fast else 1.0) / (p - n_fast)
            constant = rng.normal(size=d)
        else:
            n_fast = max(1, p // 4)
            weights[fast[:n_fast]] = d / n_fast
            constant = np.zeros(d)
        k = constant + from_pairs(_deviations(rng, tokens, weights))  # (tokens, d)
    return SyntheticQK(q=q, k=k, theta=theta, scale=d**-0.5, pattern=pattern, d=d,
                       base=float(base), tokens=tokens, seed=seed,
                       high_share=share if pattern == "structured" else None)  # fmt: skip


def sweep(
    *,
    d: int = 64,
    base: float = 10000.0,
    tokens: int = 256,
    seed: int = 0,
    shares: Sequence[float] = SHARES,
    pair_budget: int | None = None,
) -> list[dict[str, Any]]:
    r"""The structured pattern over ``high_share``: one row per share with every statistic.

    Rows: ``high_share, d, base, tokens, seed`` and the fields of
    :class:`~ropesplit.numerics.stats.HeadStats`.  ``r_split`` falls as the
    share of deviation energy in the fast pairs grows.
    """
    from ropesplit.numerics.stats import head_statistics

    rows = []
    for share in shares:
        qk = make_qk("structured", d=d, base=base, tokens=tokens, seed=seed, high_share=share)
        stats = head_statistics(qk.q, qk.k, qk.spec, Measure(pair_budget=pair_budget, seed=seed))
        rows.append({"high_share": float(share), "d": d, "base": float(base), "tokens": tokens,
                     "seed": seed, **stats.as_dict()})  # fmt: skip
    return rows


def reference_sweep(
    *,
    patterns: Sequence[str] = PATTERNS,
    references: Sequence[str] = REFERENCES,
    d: int = 64,
    base: float = 10000.0,
    tokens: int = 512,
    seed: int = 0,
) -> list[dict[str, Any]]:
    r"""``r_split`` and the remainder under each reference, per pattern (docs/theory.md section 6).

    One row per (pattern, reference): ``pattern, reference, r_split,
    r_split_rowcentred, remainder_share`` and ``mean_square_remainder``
    :math:`\mathrm{mean}_{j \le i} E_m^2` over the causal pairs (the aggregate
    the mean reference is not guaranteed to minimise: the distance is tied to
    the pair), plus ``d, base, tokens, seed``.  The bound is not checked here
    (``ropesplit bound`` checks it under the zero reference).
    """
    from ropesplit.numerics.stats import head_statistics

    rows = []
    for pattern in patterns:
        qk = make_qk(pattern, d=d, base=base, tokens=tokens, seed=seed)
        stats = head_statistics(qk.q, qk.k, qk.spec,
                                Measure(pair_budget=1, seed=seed, references=tuple(references)))
        spread = _spread_of_w(qk)
        for spec, values in stats.by_reference.items():
            rows.append({"pattern": pattern, "reference": spec, **values,
                         "mean_square_remainder": values["remainder_share"] ** 2 * spread,
                         "d": d, "base": float(base), "tokens": tokens, "seed": seed})  # fmt: skip
    return rows


def _spread_of_w(qk: SyntheticQK) -> float:
    r""":math:`\|W - \overline W\|_F^2 / |\mathcal M|` over the causal pairs (``O(N^2 d)``)."""
    from ropesplit.numerics.rope import rotate

    pos = np.arange(qk.tokens, dtype=np.float64)
    w = qk.scale * rotate(qk.q, pos, qk.theta) @ rotate(qk.k, pos, qk.theta).T  # (N, N)
    vals = w[np.tril_indices(qk.tokens)]  # (M,) causal pairs
    return float(((vals - vals.mean()) ** 2).mean())


def bound_record(
    *,
    patterns: Sequence[str] = PATTERNS,
    d: int = 64,
    base: float = 10000.0,
    tokens: int = 512,
    seed: int = 0,
    pair_budget: int | None = None,
) -> dict[str, Any]:
    r"""``ropesplit bound --json``'s record, also the report's ``bound.json``: per pattern
    one synthetic head (:func:`make_qk`), its section 5 statistics with the bound
    :math:`|E_{ij}| \le s \sum_l |\tilde q_l||\tilde\delta_l|\,2|\sin(\theta_l\Delta/2)|`
    checked on every causal pair (a seeded sample of ``pair_budget``);
    ``{"cases": [{pattern, d, base, tokens, seed, **HeadStats.as_dict()}], "violations",
    "references"}`` with :func:`reference_sweep`'s rows."""
    from ropesplit.numerics.stats import head_statistics

    cases = []
    for pattern in patterns:
        qk = make_qk(pattern, d=d, base=base, tokens=tokens, seed=seed)
        stats = head_statistics(qk.q, qk.k, qk.spec, Measure(pair_budget=pair_budget, seed=seed))
        cases.append({"pattern": pattern, "d": d, "base": base, "tokens": tokens, "seed": seed,
                      **stats.as_dict()})  # fmt: skip
    references = reference_sweep(patterns=patterns, d=d, base=base, tokens=tokens, seed=seed)
    return {"cases": cases, "violations": sum(int(c["violations"]) for c in cases),
            "references": references}  # fmt: skip
