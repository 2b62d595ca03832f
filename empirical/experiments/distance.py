r"""Controlled distance (the paper's claim 3): the same query/key pairs at dummy distances.

Every causal pair ``j <= i`` of a head's captured pre-RoPE queries and keys
is re-evaluated at one dummy distance ``D`` (docs/theory.md section 3):

.. math:: W^D_{ij} = s\,\langle R(D) q_i, k_j\rangle = f(q_i, D) + g(q_i, k_j) + E^D_{ij}

and fitted, like ``g`` itself, by the two-axis least squares ``u_i + v_j``
(``numerics.fit.additive_fits``). Because ``f(q_i, D)`` is query-only, the
key effects of ``W^D`` and of ``g`` differ by the key effect of ``E^D``
alone. The measures (``numerics.perturbation.controlled_distance``), per
head and ``D``:

- ``key_corr``: ``corr_j(v_j[W^D], v_j[g])``, the same fit on both sides:
  exactly 1 when ``E = 0``, lower as ``E^D`` grows;
- ``visible_change``: ``||rc(W^D - W^0)|| / ||rc(W^0)||``, rc the row
  centring (the part softmax sees): exactly 0 when ``E = 0`` whatever ``kbar``;
- ``query_share``: the share of ``W^D - W^0`` a query-only term explains
  (exactly 1 when ``E = 0``), shown only: it divides by ``|W^D - W^0|``, small
  when ``kbar`` sits in slow pairs, so a head with a tiny remainder can score
  low;
- ``key_var``: the variance of ``g``'s key effect, the weight of the head in
  the layer and overall means of ``key_corr`` (a positional head with a nearly
  constant key effect has an arbitrary correlation and almost no weight);
- ``logit_change``: ``RMS(W^D - W^0) / std(W^0)``, how far the logits move;
- ``remainder_share``: ``||E^D|| / ||W^D - mean||``, the size of the remainder.

``D = 0`` is the reference, not a test: ``W^0 = f(q, 0) + g`` exactly.
Rows per head, then means per layer (``scope="layer"``) and over every
fitted head (``scope="all"``), ``key_corr`` weighted by ``key_var``. The
experiment runs the dummy distances that lie inside the text (``D < N``).
"""

from __future__ import annotations

import numpy as np

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.experiments.base import Context, Experiment, Outcome, Row, combine
from ropesplit.empirical.model.capture import Capture

__all__ = ["DISTANCES", "EXPERIMENT", "THRESHOLD", "distance_rows", "judge", "verdict"]

DISTANCES = (16, 64, 256, 1024)  # the dummy distances D
THRESHOLD = 0.9  # key_corr and query_share at or above it: the key component stays put
MEASURES = ("key_corr", "visible_change", "query_share", "logit_change", "remainder_share",
            "key_var")

PREDICTION = (
    f"At every dummy distance D ({', '.join(map(str, DISTANCES))}) the key effect v_j of the "
    f"two-axis fit u_i + v_j of W^D correlates with the key effect of the same fit of g at "
    f">= {THRESHOLD} (key_corr, heads weighted by their key-effect variance; exactly 1 when "
    f"E = 0), and the row-centred change W^D - W^0 stays within {1 - THRESHOLD:.0%} of the "
    "row-centred logits (visible_change; exactly 0 when E = 0): the distance moves the "
    "positional term, the key component stays put (claim 3; D inside the text)"
)


def distance_rows(
    cache: Capture, layers: list[int], distances: tuple[int, ...] = DISTANCES
) -> list[Row]:
    """Per-head rows, then per-layer and overall means, for a capture ``cache``."""
    from ropesplit.numerics.perturbation import controlled_distance

    if cache.n_tokens < 4:
        raise RopesplitError(f"the distance fits need at least 4 tokens, got {cache.n_tokens}")
    heads: list[Row] = []
    for index in layers:
        layer = cache.layer(index)  # the model's own index: a hybrid's layers are sparse
        view = layer.pairs()
        qc, kc = view.qc, view.kc  # (H, N, P) each
        out = controlled_distance(qc, kc, layer.theta, layer.scale, distances,
                                  window=layer.window)  # fmt: skip  # name -> (H, K)
        for head in range(qc.shape[0]):
            for k, d in enumerate(distances):
                heads.append({"scope": "head", "layer": index, "head": head, "distance": int(d),
                              **{m: float(out[m][head, k]) for m in MEASURES}})  # fmt: skip
    means = [_mean(heads, "layer", d, layer) for layer in layers for d in distances]
    return heads + means + [_mean(heads, "all", d, None) for d in distances]


def _mean(heads: list[Row], scope: str, distance: int, layer: int | None) -> Row:
    chosen = [r for r in heads if r["distance"] == distance and layer in (None, r["layer"])]
    from ropesplit.numerics.perturbation import weighted_key_corr

    values = {m: float(np.nanmean([r[m] for r in chosen])) for m in MEASURES}
    values["key_corr"] = float(weighted_key_corr(np.array([r["key_corr"] for r in chosen]),
                                                 np.array([r["key_var"] for r in chosen])))
    return {"scope": scope, "layer": layer, "head": None, "distance": int(distance), **values}


def judge(row: Row) -> Outcome:
    """Agrees when ``key_corr`` reaches :data:`THRESHOLD` and ``visible_change`` stays
    within ``1 - THRESHOLD``."""
    corr, change = row["key_corr"], row["visible_change"]
    edge = 1 - THRESHOLD
    numbers = f"key_corr {corr:.3f}, visible_change {change:.3f} at D = {row['distance']}"
    if not (np.isfinite(corr) and np.isfinite(change)):
        return Outcome("inconclusive", f"{numbers}: undefined (constant key effect or logits)")
    if corr >= THRESHOLD and change <= edge:
        return Outcome("agrees", f"{numbers} (key_corr >= {THRESHOLD}, change <= {edge:.1f})")
    return Outcome("disagrees",
                   f"{numbers} (predicted key_corr >= {THRESHOLD}, change <= {edge:.1f})")


def verdict(rows: list[Row]) -> Outcome:
    """The overall rows decide; the reason adds how many head rows agree."""
    overall = combine([judge(r) for r in rows if r["scope"] == "all"], "dummy distances")
    heads = [judge(r).outcome for r in rows if r["scope"] == "head"]
    share = f"; {heads.count('agrees')} of {len(heads)} (head, D) rows agree"
    return Outcome(overall.outcome, overall.reason + share)


def _run(context: Context) -> list[Row]:
    inside = tuple(d for d in DISTANCES if d < context.n_tokens)  # D inside the text
    if not inside:
        raise RopesplitError(f"the dummy distances need at least {min(DISTANCES) + 1} tokens, "
                             f"got {context.n_tokens}")  # fmt: skip
    return distance_rows(context.capture(), context.layers, inside)


EXPERIMENT = Experiment(
    name="distance",
    title="Controlled distance",
    prediction=PREDICTION,
    needs="the text's capture (the dummy distances are evaluated on its queries and keys; no "
    "forward pass of its own)",
    run=_run,
    judge=judge,
    verdict=verdict,
    forward_count=lambda settings: 0,
)
