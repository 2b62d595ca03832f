"""The claims registry (issue 18): pre-registered primary tests, their evaluation, the run.

The registry is pinned field by field: changing a threshold, a split or a
unit after seeing data is a visible change to this file. The evaluation is
checked against a plain recomputation from the per-passage rows, and the
run end to end on a tiny model.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import TINY_VOCAB, tiny_llama
from ropesplit.empirical.verdicts import evaluate, evaluate_all, unit_values

from ropesplit.claims import CLAIMS, CONTROL_SEEDS, MIN_PASSAGES, PAPER_SPLIT, primary
from ropesplit.errors import RopesplitError

# claim -> (source, split, unit, min_n, [(measure, compare, direction, threshold, null)])
PINNED = {
    1: ("order", "", "passages", 8, [("curvature", "level", "above", 0.0, None),
                                     ("log_ratio_10", "level", "above", 0.0, None)]),
    2: ("passages", "zero", "passages", 8, [("r_split", "level", "above", 0.90, None),
                                            ("r_split", "paired", "above", 0.0,
                                             "r_split_control")]),
    3: ("passages", "zero", "passages", 8, [("key_corr", "level", "above", 0.90, None),
                                            ("key_corr", "paired", "above", 0.0,
                                             "key_corr_control")]),
    4: ("passages", "zero", "passages", 8, [("lowfreq_share_k", "level", "above", 0.5, None),
                                            ("lowfreq_share_k", "paired", "above", 0.0,
                                             "lowfreq_share_k_control")]),
    5: ("passages", "zero", "passages", 8, [("g_share", "level", "below", 0.5, None),
                                            ("e_share", "paired", "below", 0.0,
                                             "e_share_control")]),
}  # fmt: skip


def test_the_registry_is_pinned_field_by_field():
    assert [t.claim for t in CLAIMS] == [1, 2, 3, 4, 5]
    for test in CLAIMS:
        source, split, unit, min_n, conditions = PINNED[test.claim]
        assert (test.source, test.split, test.unit, test.min_n) == (source, split, unit, min_n)
        got = [(c.measure, c.compare, c.direction, c.threshold, c.null) for c in test.conditions]
        assert got == conditions
    assert primary(1).gate is not None and primary(1).gate.measure == "positive"
    assert all(t.gate is None for t in CLAIMS if t.claim != 1)


def test_claim_2_is_judged_under_the_papers_split_with_nulls_beside_it():
    test = primary(2)
    assert test.split == PAPER_SPLIT == "zero"
    assert set(test.nulls) == {"r_split_control", "r_split_shuffled"}
    # the toolkit's mean rotation is only a secondary, labelled as not the paper's measure
    mean = [s for s in test.secondary if s.measure == "r_split_mean"]
    assert len(mean) == 1 and "not the paper's" in mean[0].what
    assert len(CONTROL_SEEDS) >= 3 and MIN_PASSAGES >= 8


def test_every_paired_condition_names_its_null_and_every_claim_a_null_or_gate():
    for test in CLAIMS:
        for c in test.conditions:
            assert (c.null is not None) == (c.compare == "paired")
            assert c.direction in ("above", "below") and c.why
        assert test.nulls or test.gate is not None
    with pytest.raises(KeyError):
        primary(6)


def test_the_registry_module_imports_nothing_heavy():
    code = ("import sys, ropesplit.claims; heavy = {'numpy', 'torch', 'sympy', 'transformers'}; "
            "print(sorted(heavy & set(sys.modules)))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _rows(n, rng, *, trained=0.95, control=0.80, sd=0.01):
    return [{"r_split": trained + sd * rng.standard_normal(),
             "r_split_control": control + sd * rng.standard_normal(),
             "r_split_shuffled": control + sd * rng.standard_normal(),
             "r_split_distance1000": trained, "r_split_mean": trained}
            for _ in range(n)]  # fmt: skip


def _by_hand(values, level_t):
    """mean +- t sd / sqrt(n), written out."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, mean - level_t * sd / math.sqrt(n), mean + level_t * sd / math.sqrt(n)


T_975_11 = 2.200985160082949  # Student t, 0.975 quantile, 11 degrees of freedom


def test_evaluate_agrees_when_every_condition_holds_and_matches_a_hand_computation():
    rows = _rows(12, np.random.default_rng(0))
    out = evaluate(primary(2), rows)
    assert out["verdict"] == "agrees" and out["n"] == 12
    level, paired = out["conditions"]
    mean, low, high = _by_hand([r["r_split"] for r in rows], T_975_11)
    assert level["interval"]["mean"] == pytest.approx(mean, rel=1e-12)
    assert (level["interval"]["low"], level["interval"]["high"]) == pytest.approx((low, high))
    diffs = [r["r_split"] - r["r_split_control"] for r in rows]
    mean, low, high = _by_hand(diffs, T_975_11)
    assert (paired["interval"]["low"], paired["interval"]["high"]) == pytest.approx((low, high))
    assert [n["measure"] for n in out["nulls"]] == ["r_split_control", "r_split_shuffled"]


@pytest.mark.parametrize(
    "trained, control, n, outcome, start",
    [
        (0.95, 0.80, 12, "agrees", "every"),
        (0.80, 0.70, 12, "disagrees", ""),  # below 0.90: the level condition fails
        (0.95, 0.99, 12, "disagrees", ""),  # not above the control
        (0.95, 0.80, 5, "inconclusive", "too few replicates"),
        (0.90, 0.80, 12, "inconclusive", ""),  # straddles 0.90
    ],
)  # fmt: skip
def test_evaluate_outcomes(trained, control, n, outcome, start):
    out = evaluate(primary(2), _rows(n, np.random.default_rng(1), trained=trained,
                                     control=control))  # fmt: skip
    assert out["verdict"] == outcome
    if start == "too few replicates":
        assert "too few replicates" in out["reason"]


def test_a_failed_positive_control_makes_claim_1_inconclusive():
    rng = np.random.default_rng(2)
    rows = [{"curvature": 0.05 + 0.01 * rng.standard_normal(),
             "log_ratio_10": 0.1 + 0.01 * rng.standard_normal(),
             "log_ratio_5": 0.02 + 0.01 * rng.standard_normal(),
             "positive": 0.5 + 0.01 * rng.standard_normal()} for _ in range(8)]  # fmt: skip
    assert evaluate(primary(1), rows)["verdict"] == "agrees"
    for row in rows:
        row["positive"] = -abs(row["positive"])
    out = evaluate(primary(1), rows)
    assert out["verdict"] == "inconclusive" and "positive control" in out["reason"]


def test_undefined_units_are_left_out_and_a_missing_source_is_too_few_replicates():
    rows = _rows(10, np.random.default_rng(3))
    rows[0]["r_split"] = float("nan")
    rows[1]["r_split_control"] = None
    assert unit_values(rows, primary(2).conditions[1]).size == 8
    claims = evaluate_all({"passages": rows})
    assert claims[0]["verdict"] == "inconclusive" and claims[0]["n"] == 0  # no order rows


def test_secondaries_are_holm_corrected_and_never_decide():
    rows = _rows(12, np.random.default_rng(4))
    out = evaluate(primary(2), rows)
    ps = [s["p"] for s in out["secondary"] if math.isfinite(s["p"])]
    holm = [s["p_holm"] for s in out["secondary"] if math.isfinite(s["p"])]
    assert all(h >= p for p, h in zip(ps, holm, strict=True))
    for row in rows:
        row["r_split_mean"] = 0.1  # a secondary far off its threshold
    assert evaluate(primary(2), rows)["verdict"] == "agrees"


@pytest.fixture(scope="module")
def tiny_run():
    """A tiny model, its control twins and 8 given passages: ``run(shard=None)`` runs them."""
    from ropesplit.empirical.claims_run import run_claims
    from ropesplit.empirical.corpus import PassageIds

    loaded = tiny_llama(2, seed=1)
    controls = {s: tiny_llama(2, seed=100 + s) for s in CONTROL_SEEDS}
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, TINY_VOCAB, (8, 96), generator=gen)
    given = PassageIds(names=[f"p{k}" for k in range(8)], ids=ids, n_tokens=96, skipped=0,
                       sha256="test")  # fmt: skip

    def run(shard=None):
        return run_claims(loaded, tokens=96, passages=8, order_passages=8, controls=controls,
                          passage_ids=given, shard=shard)  # fmt: skip

    run.loaded, run.ids = loaded, ids
    return run


@pytest.fixture(scope="module")
def tiny_claims(tiny_run):
    return tiny_run()


def _json(record):
    """The record as written (NaN as null), for exact comparisons."""
    import json

    from ropesplit.io import _jsonable

    return json.loads(json.dumps(_jsonable(record)))


def test_shards_merge_into_exactly_the_single_run(tiny_run, tiny_claims):
    """Issue 19: disjoint shards (a SLURM array, torchrun processes) merge into the run."""
    from ropesplit.empirical.claims_run import merge_records

    shards = [tiny_run((0, 3)), tiny_run((3, 5)), tiny_run((5, 7)), tiny_run((7, 8))]
    assert [r["header"]["shards"] for r in shards] == [[[0, 3]], [[3, 5]], [[5, 7]], [[7, 8]]]
    assert all(c["verdict"] == "inconclusive" for c in shards[0]["claims"])  # 3 < 8 passages
    merged = _json(merge_records(shards[::-1]))  # any order
    single = _json(tiny_claims)
    assert merged["header"]["shards"] == [[0, 3], [3, 5], [5, 7], [7, 8]]
    for key in ("passages", "order", "claims", "pooled"):
        assert merged[key] == single[key], key
    # pooled over passages from the additive moments, against one concatenated correlation
    assert len(merged["pooled"]["r_split"]) == merged["passages"][0]["n_heads"]
    from ropesplit.empirical import capture
    from ropesplit.numerics.split import split_head

    w, fg = [], []
    for p in range(8):  # layer 0, head 0 of each passage, dense, under the paper's split
        layer = capture(tiny_run.loaded, tiny_run.ids[p]).layers[0]
        sp = split_head(layer.q[0].double().numpy(), layer.k[layer.kv_map[0]].double().numpy(),
                        layer.spec, bounds=False)  # fmt: skip
        w.append(sp.W[sp.mask])
        fg.append((sp.f + sp.g)[sp.mask])
    direct = np.corrcoef(np.concatenate(w), np.concatenate(fg))[0, 1]
    assert merged["pooled"]["r_split"][0] == pytest.approx(direct, rel=1e-9)
    with pytest.raises(RopesplitError, match="^shards 0:3 and 2:5 overlap"):
        merge_records([shards[0], tiny_run((2, 5))])
    other = _json(shards[1])
    other["header"]["seed"] = 7
    with pytest.raises(RopesplitError, match="^record 2 is not a shard of the same run"):
        merge_records([shards[0], other])


def test_pooled_r_split_is_the_correlation_over_all_passages_pairs():
    """Known truth for pooled_over_passages: two passages' moments pool into the correlation
    of their pairs concatenated (float64 twin)."""
    from ropesplit.empirical.passages import pooled_over_passages

    rng = np.random.default_rng(9)
    rows = []
    w_all, fg_all = [], []
    for n in (30, 50):
        w = rng.normal(size=n)
        fg = 0.8 * w + 0.3 * rng.normal(size=n) + rng.normal()
        w_all.append(w)
        fg_all.append(fg)
        moments = [n, w.mean(), w.var(), fg.mean(), fg.var(), np.mean((w - w.mean()) *
                                                                      (fg - fg.mean()))]
        rows.append({"heads_moments": [moments]})
    (pooled,) = pooled_over_passages(rows)
    want = np.corrcoef(np.concatenate(w_all), np.concatenate(fg_all))[0, 1]
    assert pooled == pytest.approx(want, rel=1e-12)


def test_the_run_writes_every_claim_with_its_units_and_recomputes_from_its_rows(tiny_claims):
    record = tiny_claims
    assert len(record["passages"]) == 8 and len(record["order"]) == 8
    assert [r["control_seed"] for r in record["passages"]] == [0, 1, 2, 0, 1, 2, 0, 1]
    for claim in record["claims"]:
        assert claim["n"] >= claim["min_n"] and claim["verdict"] in ("agrees", "disagrees",
                                                                       "inconclusive")
        rows = record[primary(claim["claim"]).source]
        for c, cond in zip(claim["conditions"], primary(claim["claim"]).conditions, strict=True):
            values = [r[cond.measure] - (r[cond.null] if cond.null else 0.0) for r in rows]
            mean = float(np.mean(values))
            assert c["interval"]["mean"] == pytest.approx(mean, rel=1e-12, abs=1e-15)
    assert "passages" in record["header"]["power"]


def test_the_run_refuses_too_few_passages():
    from ropesplit.empirical.claims_run import run_claims

    with pytest.raises(RopesplitError, match="^passages must be at least 8, got 4"):
        run_claims(tiny_llama(1), tokens=32, passages=4)


def test_merge_command_writes_the_run_and_refuses_bad_shards(tiny_run, tiny_claims, tmp_path,
                                                            capsys):  # fmt: skip
    from ropesplit.cli import main
    from ropesplit.io import write_json

    paths = []
    for k, shard in enumerate(((0, 4), (4, 8), (3, 6))):
        paths.append(tmp_path / f"shard-{k}.json")
        write_json(paths[-1], tiny_run(shard))
    out = tmp_path / "merged.json"
    assert main(["merge", str(paths[0]), str(paths[1]), "--json", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"wrote {out}" in printed.err and "passages measured here 0:4, 4:8" in printed.out
    import json

    assert json.loads(out.read_text())["claims"] == _json(tiny_claims)["claims"]
    bad = tmp_path / "bad.json"
    for argv, message in (([str(paths[0]), str(paths[2])], "shards 0:4 and 3:6 overlap"),
                          ([str(paths[0])], "merge needs at least 2 records, got 1"),
                          ([str(paths[0]), str(tmp_path / "none.json")], "record "),
                          ):  # fmt: skip
        assert main(["merge", *argv, "--json", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"ropesplit merge: error: {message}")
        assert not bad.exists()
