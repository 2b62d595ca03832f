"""The claims registry: pre-registered tests, their evaluation, the grid, the run.

The registry is pinned field by field: changing a threshold, its origin, a
unit or a grid axis after seeing data is a visible change to this file. The
evaluation is checked against a plain recomputation from the per-passage rows,
the verdict vocabulary on a table of cases, the robustness statement on
hand-made grids, and the run end to end on a tiny model.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import TINY_VOCAB, tiny_llama
from hypothesis import given, settings
from hypothesis import strategies as st

from ropesplit.claims.registry import (
    CLAIMS,
    CONTROL_SEEDS,
    GRID,
    MIN_PASSAGES,
    MIN_SEEDS,
    ORIGINS,
    VERDICTS,
    axis,
    primary,
)
from ropesplit.claims.verdicts import (
    evaluate,
    evaluate_all,
    evaluate_grid,
    graded_verdict,
    grid_cells,
    robustness,
    unit_values,
)
from ropesplit.core.errors import RopesplitError
from ropesplit.core.paper import QUOTES

# claim -> (source, axes, [(measure, compare, direction, threshold, null, origin, unit)])
PINNED = {
    1: ("order", ("tokens", "corpus"),
        [("relative_5", "level", "below", 0.1, None, "toolkit", "passages"),
         ("damage_10", "level", "above", 0.0, None, "paper", "passages")]),
    2: ("passages", ("tokens", "split", "heads", "layers", "corpus"),
        [("r_split", "level", "above", 0.90, None, "toolkit", "passages"),
         ("r_split", "paired", "above", 0.0, "r_split_control", "paper", "seeds")]),
    3: ("passages", ("tokens", "heads", "layers", "corpus"),
        [("key_corr", "level", "above", 0.90, None, "toolkit", "passages"),
         ("key_corr", "paired", "above", 0.0, "key_corr_control", "toolkit", "seeds")]),
    4: ("passages", ("tokens", "heads", "layers", "corpus"),
        [("lowfreq_share_k", "level", "above", 0.5, None, "toolkit", "passages"),
         ("lowfreq_share_k", "paired", "above", 0.0, "lowfreq_share_k_control", "paper",
          "seeds")]),
    5: ("passages", ("tokens", "split", "heads", "layers", "corpus"),
        [("g_share", "level", "below", 0.5, None, "toolkit", "passages"),
         ("g_share", "paired", "below", 0.0, "g_share_shuffled", "toolkit", "seeds")]),
}  # fmt: skip
GRID_PINNED = {"tokens": ((256, 512, 1024), 512), "split": (("zero", "distance:1000"), "zero"),
               "heads": (("mean", "pooled"), "mean"), "layers": (("all", "from1"), "all"),
               "corpus": (("pydoc", "prose"), "pydoc")}  # fmt: skip


def test_the_registry_is_pinned_field_by_field():
    assert [t.claim for t in CLAIMS] == [1, 2, 3, 4, 5]
    for test in CLAIMS:
        source, axes, conditions = PINNED[test.claim]
        assert (test.source, test.axes, test.min_n) == (source, axes, MIN_PASSAGES)
        got = [(c.measure, c.compare, c.direction, c.threshold, c.null, c.origin, c.unit)
               for c in test.conditions]  # fmt: skip
        assert got == conditions
    assert primary(1).gate is not None and primary(1).gate.measure == "damage_50"
    assert all(t.gate is None for t in CLAIMS if t.claim != 1)
    # the paper's own number for a primary statistic: only claim 2's r_split has one
    assert {t.claim: t.paper_value for t in CLAIMS} == {1: None, 2: 0.959, 3: None, 4: None,
                                                         5: None}  # fmt: skip
    assert {a.name: (a.values, a.default) for a in GRID} == GRID_PINNED
    assert len(CONTROL_SEEDS) >= 5 and MIN_SEEDS == len(CONTROL_SEEDS)


def test_every_threshold_names_its_origin_and_a_paper_one_its_words():
    """A number the paper does not give is the toolkit's, and says so."""
    for test in CLAIMS:
        for c in test.conditions:
            assert c.origin in ("paper", "toolkit") and c.why
            if c.origin == "paper":
                assert c.quote in QUOTES and c.why.startswith("the paper")
            else:
                assert "toolkit" in c.why
            assert (c.null is not None) == (c.compare == "paired")
            assert c.unit == ("seeds" if c.null and c.null.endswith(("_control", "_shuffled"))
                              else "passages")  # fmt: skip
        assert test.quotes and all(key in QUOTES for key in test.quotes)
        assert test.nulls or test.gate is not None
    with pytest.raises(KeyError):
        primary(6)
    with pytest.raises(KeyError):
        axis("nothing")


def _heavy_after(imports: str) -> list[str]:
    """The heavy libraries a fresh interpreter holds after ``imports``."""
    code = (f"import sys, {imports}; heavy = {{'numpy', 'torch', 'sympy', 'transformers'}}; "
            "print(sorted(heavy & set(sys.modules)))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return eval(out.stdout.strip())  # a list of names


def test_the_registry_module_imports_nothing_heavy():
    assert _heavy_after("ropesplit.claims.registry, ropesplit.claims.text") == []


def test_the_claims_wing_needs_no_model():
    """Verdicts, records (merge, compare, judge) and text read numbers: numpy, no torch."""
    wing = "ropesplit.claims.verdicts, ropesplit.claims.records, ropesplit.claims.text"
    assert _heavy_after(wing) == ["numpy"]


# --------------------------------------------------------------------------- the vocabulary


def _c(outcome, origin):
    return {"outcome": outcome, "origin": origin, "reason": f"{origin} {outcome}"}


@pytest.mark.parametrize(
    ("conditions", "verdict"),
    [
        ([("agrees", "toolkit"), ("agrees", "paper")], "agrees"),
        ([("disagrees", "toolkit"), ("agrees", "paper")], "weaker than the paper"),
        ([("disagrees", "toolkit"), ("inconclusive", "paper")], "weaker than the paper"),
        ([("agrees", "toolkit"), ("disagrees", "paper")], "disagrees"),
        ([("disagrees", "toolkit"), ("disagrees", "paper")], "disagrees"),
        ([("inconclusive", "toolkit"), ("agrees", "paper")], "inconclusive"),
        ([("agrees", "toolkit"), ("inconclusive", "paper")], "inconclusive"),
    ],
)  # fmt: skip
def test_the_verdict_words_follow_the_origin_of_the_threshold(conditions, verdict):
    outcome, reason = graded_verdict([_c(*c) for c in conditions])
    assert outcome == verdict and outcome in VERDICTS
    if verdict == "weaker than the paper":
        assert "toolkit's threshold" in reason


def test_the_wrong_rule_agrees_on_one_condition_alone():
    """The rule the calibration tests must reject: any condition agrees."""
    from ropesplit.empirical.measurement.calibration import any_condition_verdict

    one = [_c("agrees", "toolkit"), _c("inconclusive", "paper")]
    assert any_condition_verdict(one)[0] == "agrees" and graded_verdict(one)[0] == "inconclusive"


# --------------------------------------------------------------------------- evaluation


def _rows(n, rng, *, trained=0.95, control=0.80, sd=0.01):
    """Rows of plain statistics (one cell), twin seeds rotating over the passages; every
    measure of the vocabulary present, undefined (NaN) but for claim 2's."""
    from ropesplit.claims.registry import MEASURES

    undefined = dict.fromkeys(MEASURES["passages"], float("nan"))
    return [undefined | {"r_split": trained + sd * rng.standard_normal(),
             "r_split_control": control + sd * rng.standard_normal(),
             "r_split_shuffled": control + sd * rng.standard_normal(),
             "r_split_mean": trained, "control_seed": CONTROL_SEEDS[p % len(CONTROL_SEEDS)]}
            for p in range(n)]  # fmt: skip


def _by_hand(values, t, inflate=1.0):
    """mean +- t sd / sqrt(n) (inflate: sqrt(n + 1) for one more unit), written out."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t * sd / math.sqrt(n) * inflate
    return mean, mean - half, mean + half


T_975_11 = 2.200985160082949  # Student t, 0.975 quantile, 11 degrees of freedom
T_975_4 = 2.7764451051977987  # 4 degrees of freedom


def test_evaluate_matches_a_hand_computation_over_passages_and_twin_seeds():
    rows = _rows(12, np.random.default_rng(0))
    out = evaluate(primary(2), rows)
    assert out["verdict"] == "agrees" and out["n"] == 12
    level, paired = out["conditions"]
    mean, low, high = _by_hand([r["r_split"] for r in rows], T_975_11)
    assert level["interval"]["mean"] == pytest.approx(mean, rel=1e-12)
    assert (level["interval"]["low"], level["interval"]["high"]) == pytest.approx((low, high))
    # twin-paired: one value per seed (the mean over its passages), one trained model against
    # the five twins: the interval for one more unit, sd * sqrt(1 + 1/5)
    per_seed = [np.mean([r["r_split"] - r["r_split_control"] for r in rows
                         if r["control_seed"] == s]) for s in CONTROL_SEEDS]  # fmt: skip
    mean, low, high = _by_hand(per_seed, T_975_4, math.sqrt(len(per_seed) + 1))
    assert paired["n"] == 5 and paired["interval"]["method"] == "t prediction"
    assert (paired["interval"]["low"], paired["interval"]["high"]) == pytest.approx((low, high))
    assert [n["measure"] for n in out["nulls"]] == ["r_split_control", "r_split_shuffled"]
    # each condition's margin: the distance from its threshold to the interval's nearest end
    for c in (level, paired):
        ends = (c["interval"]["low"], c["interval"]["high"])
        assert c["margin"] == pytest.approx(min(abs(e - c["threshold"]) for e in ends), rel=1e-12)
        assert c["margin"] > 0 and c["outcome"] == "agrees"


@pytest.mark.parametrize(
    "trained, control, n, outcome",
    [
        (0.95, 0.80, 12, "agrees"),
        (0.80, 0.70, 12, "weaker than the paper"),  # below the toolkit's 0.90 only
        (0.95, 0.99, 12, "disagrees"),  # not above the twin: the paper's own condition
        (0.95, 0.80, 5, "inconclusive"),  # too few passages
        (0.90, 0.80, 12, "inconclusive"),  # straddles 0.90
    ],
)  # fmt: skip
def test_evaluate_outcomes(trained, control, n, outcome):
    out = evaluate(primary(2), _rows(n, np.random.default_rng(1), trained=trained,
                                     control=control))  # fmt: skip
    assert out["verdict"] == outcome
    if n < MIN_PASSAGES:
        assert "too few replicates" in out["reason"]


def test_a_failed_positive_control_makes_claim_1_inconclusive():
    rng = np.random.default_rng(2)
    rows = [{"relative_5": 0.05 + 0.01 * rng.standard_normal(),
             "damage_10": 0.1 + 0.01 * rng.standard_normal(),
             "damage_50": 0.5 + 0.01 * rng.standard_normal(),
             "curvature": 0.02, "local_5": 0.1, "ppl_5": 0.01} for _ in range(8)]  # fmt: skip
    assert evaluate(primary(1), rows)["verdict"] == "agrees"
    for row in rows:
        row["damage_50"] = -abs(row["damage_50"])
    out = evaluate(primary(1), rows)
    assert out["verdict"] == "inconclusive" and "positive control" in out["reason"]


def test_undefined_units_are_left_out_and_a_missing_source_is_too_few_replicates():
    rows = _rows(10, np.random.default_rng(3))
    rows[0]["r_split"] = float("nan")
    rows[1]["r_split_control"] = None
    assert unit_values(rows, primary(2).conditions[0]).size == 9
    assert unit_values(rows, primary(2).conditions[1]).size == 5  # seeds 0, 1 keep a passage
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


# --------------------------------------------------------------------------- the grid


def _cell_rows(rng, values_by_tokens):
    """Rows whose cells differ only by tokens: r_split per length, the rest fixed (every
    other measure present and undefined)."""
    from ropesplit.claims.registry import MEASURES, cell_key

    rows = []
    for p in range(12):
        cells = {}
        for t, level in values_by_tokens.items():
            for split in ("zero", "distance:1000"):
                for heads in ("mean", "pooled"):
                    for layers in ("all", "from1"):
                        key = cell_key({"tokens": t, "split": split, "heads": heads,
                                        "layers": layers}, "passages")  # fmt: skip
                        cells[key] = dict.fromkeys(MEASURES["passages"], float("nan")) | {
                            "r_split": level + 0.005 * rng.standard_normal(),
                            "r_split_control": 0.8 + 0.005 * rng.standard_normal()}
        rows.append({"corpus": "pydoc", "passage": p, "control_seed": p % 5, "cells": cells})
    return rows


def test_the_grid_names_the_cells_whose_verdict_differs_whatever_the_headline():
    rows = _cell_rows(np.random.default_rng(5), {256: 0.95, 512: 0.85})
    values = {"tokens": [256, 512], "corpus": ["pydoc"]}
    grid = evaluate_grid(primary(2), rows, values)
    assert len(grid["cells"]) == 2 * 2 * 2 * 2 and len(grid_cells(primary(2), values)) == 16
    assert grid["robustness"] == "fragile"
    assert grid["statement"] == ("fragile: agrees in 8 of 16 (tokens=256); weaker than the "
                                 "paper in 8 of 16 (tokens=512)")
    # the same statement from the same cells, whichever is the headline
    for tokens in (256, 512):
        cell = {"tokens": tokens, "corpus": "pydoc"}
        assert evaluate(primary(2), rows, cell)["verdict"] == (
            "agrees" if tokens == 256 else "weaker than the paper")
    same = evaluate_grid(primary(2), _cell_rows(np.random.default_rng(6),
                                                {256: 0.95, 512: 0.96}), values)
    assert same["robustness"] == "robust" and same["statement"] == "robust: agrees in all 16 cells"


def test_robustness_counts_the_verdicts_by_axis_when_the_cells_are_no_product():
    cells = [{"cell": {"tokens": t, "heads": h}, "verdict": v}
             for (t, h), v in zip([(256, "mean"), (256, "pooled"), (512, "mean"),
                                   (512, "pooled")], ["agrees", "disagrees", "disagrees",
                                                      "agrees"], strict=True)]  # fmt: skip
    out = robustness(cells)
    assert out["statement"] == ("fragile: agrees in 2, disagrees in 2 of 4 cells; by tokens "
                                "256/512: agrees 1/1, disagrees 1/1 of 2 each; by heads "
                                "mean/pooled: agrees 1/1, disagrees 1/1 of 2 each")
    diagonal = {(256, "all"), (512, "from1")}  # per-head mean fails there; pooled never
    cells = [{"cell": {"tokens": t, "heads": h, "layers": layer},
              "verdict": "disagrees" if h == "mean" and (t, layer) in diagonal else "agrees"}
             for t in (256, 512) for h in ("mean", "pooled") for layer in ("all", "from1")]
    assert robustness(cells)["statement"].startswith(
        "fragile: agrees in 6, disagrees in 2 of 8 cells; agrees wherever heads=pooled; by "
        "tokens 256/512: agrees 3/3, disagrees 1/1 of 4 each")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(list(VERDICTS)), min_size=1, max_size=3).flatmap(
    lambda kinds: st.lists(st.sampled_from(kinds), min_size=1, max_size=24)))
def test_robust_line_is_what_the_statement_counts(verdicts):
    """The record's one line (``robust_line``) is the statement's most common verdict, the
    first of equals, and the report shows it over the statement's clauses; a robust
    statement is its own line."""
    from ropesplit.report.sections.summary import grid_line

    cells = [{"cell": {"tokens": 256 * (1 + i // 2), "heads": ("mean", "pooled")[i % 2]},
              "verdict": v} for i, v in enumerate(verdicts)]  # fmt: skip
    out = robustness(cells)
    top = max((v for v in VERDICTS if v in verdicts), key=verdicts.count)
    if out["robustness"] == "robust":
        assert out["line"] == out["statement"] == f"robust: {top} in all {len(cells)} cells"
        return
    assert out["line"] == f"fragile: {top} in {verdicts.count(top)} of {len(cells)} cells"
    shown = grid_line({"robust_statement": out["statement"], "robust_line": out["line"]})
    assert shown.summary == out["line"]
    assert shown.detail == tuple(out["statement"].partition(": ")[2].split("; "))


# --------------------------------------------------------------------------- the run


@pytest.fixture(scope="module")
def tiny_run():
    """A tiny model, its control twins and 8 given passages: ``run(shard=None)`` runs them."""
    from ropesplit.claims.records import ClaimsSettings
    from ropesplit.empirical.measurement.claims_run import run_claims
    from ropesplit.empirical.model.corpus import PassageIds

    loaded = tiny_llama(2, seed=1)
    controls = {s: tiny_llama(2, seed=100 + s) for s in CONTROL_SEEDS}
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, TINY_VOCAB, (8, 96), generator=gen)
    given = PassageIds(names=[f"p{k}" for k in range(8)], ids=ids, n_tokens=96, skipped=0,
                       sha256="test")  # fmt: skip

    def run(shard=None):
        settings = ClaimsSettings(tokens=96, grid_tokens=(48, 96), passages=8, order_passages=8,
                                  shard=shard)  # fmt: skip
        return run_claims(loaded, settings, controls=controls, passage_ids=given)

    run.loaded, run.ids = loaded, ids
    return run


@pytest.fixture(scope="module")
def tiny_claims(tiny_run):
    return tiny_run()


def _json(record):
    """The record as written (NaN as null), for exact comparisons."""
    import json

    from ropesplit.core.io import _jsonable

    return json.loads(json.dumps(_jsonable(record)))


@pytest.mark.slow  # a claims run
def test_shards_merge_into_exactly_the_single_run(tiny_run, tiny_claims):
    """Disjoint shards (a SLURM array, torchrun processes) merge into the run."""
    from ropesplit.claims.records import merge_records

    shards = [tiny_run((0, 3)), tiny_run((3, 5)), tiny_run((5, 7)), tiny_run((7, 8))]
    assert [r["header"]["shards"] for r in shards] == [[[0, 3]], [[3, 5]], [[5, 7]], [[7, 8]]]
    assert all(c["verdict"] == "inconclusive" for c in shards[0]["claims"])  # 3 < 8 passages
    merged = _json(merge_records(shards[::-1]))  # any order
    single = _json(tiny_claims)
    assert merged["header"]["shards"] == [[0, 3], [3, 5], [5, 7], [7, 8]]
    for key in ("passages", "order", "claims", "grid"):
        assert merged[key] == single[key], key
    with pytest.raises(RopesplitError, match="^shards 0:3 and 2:5 overlap"):
        merge_records([shards[0], tiny_run((2, 5))])
    other = _json(shards[1])
    other["header"]["seed"] = 7
    with pytest.raises(RopesplitError, match="^record 2 is not a shard of the same run"):
        merge_records([shards[0], other])


def test_the_run_judges_every_cell_and_recomputes_from_its_rows(tiny_claims):
    record = tiny_claims
    assert len(record["passages"]) == 8 and len(record["order"]) == 8
    assert [r["control_seed"] for r in record["passages"]] == [0, 1, 2, 3, 4, 0, 1, 2]
    assert record["header"]["grid"] == {"tokens": [48, 96], "corpus": ["given token ids"]}
    for claim, grid in zip(record["claims"], record["grid"], strict=True):
        assert claim["verdict"] in VERDICTS and claim["robustness"] in ("robust", "fragile")
        test = primary(claim["claim"])
        sizes = {"tokens": 2, "split": 2, "heads": 2, "layers": 2, "corpus": 1}
        assert len(grid["cells"]) == math.prod(sizes[a] for a in test.axes)
        rows = record[test.source]
        for c, cond in zip(claim["conditions"], test.conditions, strict=True):
            if cond.unit != "passages":
                continue
            assert c["interval"] is not None, (claim["claim"], cond.measure)  # never skipped
            key = ("tokens=96" if test.source == "order"
                   else "tokens=96,split=zero,heads=mean,layers=all")  # fmt: skip
            values = [r["cells"][key][cond.measure] for r in rows]
            values = [v for v in values if v is not None and math.isfinite(v)]
            assert c["interval"]["mean"] == pytest.approx(float(np.mean(values)), rel=1e-12)
    assert "passages" in record["header"]["power"]


def test_the_run_refuses_too_few_passages():
    from ropesplit.claims.records import ClaimsSettings
    from ropesplit.empirical.measurement.claims_run import run_claims

    with pytest.raises(RopesplitError, match="^passages must be at least 8, got 4"):
        run_claims(tiny_llama(1), ClaimsSettings(tokens=32, passages=4))


@pytest.mark.slow  # a claims run
def test_merge_command_writes_the_run_and_refuses_bad_shards(tiny_run, tiny_claims, tmp_path,
                                                            capsys):  # fmt: skip
    from ropesplit.cli import main
    from ropesplit.core.io import write_json

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
    # a failed array job: shards 0:4 and 6:8 leave 4:6 out; refused, then merged on purpose
    gap = [paths[0], tmp_path / "shard-gap.json"]
    write_json(gap[1], tiny_run((6, 8)))
    assert main(["merge", *map(str, gap), "--json", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not bad.exists()
    assert err.startswith("ropesplit merge: error: the shards leave passages 4:6 of 8 missing")
    assert main(["merge", *map(str, gap), "--partial", "--json", str(bad)]) == 0
    assert "partial: passages 4:6 of 8 missing" in capsys.readouterr().out
    merged = json.loads(bad.read_text())
    assert merged["header"]["partial"] == "passages 4:6 of 8 missing"
    assert len(merged["passages"]) == 6 and "partial" not in _json(tiny_claims)["header"]


def _loaded_by(*argv: str) -> tuple[set[str], str]:
    """The top-level modules ``python -X importtime -m ropesplit ARGV`` imports, and its
    exit line."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "ropesplit", *argv],
                         capture_output=True, text=True)  # fmt: skip
    names = {line.split("|")[-1].strip().split(".")[0]
             for line in run.stderr.splitlines() if line.startswith("import time:")}  # fmt: skip
    return names, f"rc {run.returncode}"


def test_merge_and_compare_help_import_no_torch():
    for command in ("merge", "compare"):
        loaded, rc = _loaded_by(command, "--help")
        assert rc == "rc 0" and "ropesplit" in loaded
        assert not {"torch", "transformers", "sympy"} & loaded, command


@pytest.mark.slow  # a claims run
def test_merge_and_compare_read_records_without_torch(tiny_run, tmp_path):
    """The model-free wing at work: merging two shards and comparing the result load no
    torch (``python -X importtime``: the modules a fresh process imports)."""
    from ropesplit.core.io import write_json

    shards = [tmp_path / f"shard-{k}.json" for k in range(2)]
    for path, shard in zip(shards, ((0, 4), (4, 8)), strict=True):
        write_json(path, tiny_run(shard))
    merged = tmp_path / "merged.json"
    for argv in (["merge", *map(str, shards), "--json", str(merged)],
                 ["compare", str(merged), "--json", str(tmp_path / "models.json")]):  # fmt: skip
        loaded, rc = _loaded_by(*argv)
        assert rc == "rc 0" and not {"torch", "transformers"} & loaded, argv[0]


@pytest.mark.slow  # a claims run
def test_two_tiny_architectures_make_one_models_by_claims_table(tiny_claims):
    """A Llama and a Qwen2 judged by the same tests, one record, one forest plot."""
    from ropesplit.claims.records import ClaimsSettings, compare_records
    from ropesplit.empirical.measurement.calibration import tiny_config
    from ropesplit.empirical.measurement.claims_run import run_claims
    from ropesplit.empirical.model.corpus import PassageIds
    from ropesplit.empirical.model.loading import load_model
    from ropesplit.figures import draw
    from ropesplit.report.figure_data import forest_data

    cfg = tiny_config("qwen2")
    qwen = load_model(cfg, seed=1)
    ids = torch.randint(0, 128, (8, 96), generator=torch.Generator().manual_seed(0))
    given = PassageIds([f"p{k}" for k in range(8)], ids, 96, 0, "test")
    record = run_claims(qwen, ClaimsSettings(tokens=96, grid_tokens=(96,), passages=8,
                                             order_passages=8),
                        controls={s: load_model(cfg, seed=200 + s) for s in CONTROL_SEEDS},
                        passage_ids=given)  # fmt: skip
    assert record["header"]["model"] != tiny_claims["header"]["model"]
    both = compare_records([tiny_claims, record])
    assert len(both["models"]) == 2 and len(both["rows"]) == 2 * len(CLAIMS)
    for row in both["rows"]:
        assert row["verdict"] in VERDICTS and row["robustness"] in ("robust", "fragile")
    same = compare_records([tiny_claims, tiny_claims])
    assert same["models"][0].endswith("[1]") and same["models"][1].endswith("[2]")
    fig = draw("forest", forest_data(both), "single")
    assert len(fig.axes) == sum(len(t.conditions) for t in CLAIMS)  # every primary condition
    assert all(len(row["conditions"]) == len(primary(row["claim"]).conditions)
               for row in both["rows"])  # fmt: skip


def test_robustness_names_a_product_and_the_other_cells():
    """One verdict on a product of axis values, the other on what is left: both named short."""
    cells = [{"cell": {"tokens": 128, "split": s, "heads": h}, "verdict": v}
             for s in ("zero", "distance:1000") for h in ("mean", "pooled")
             for v in (("weaker than the paper" if (s, h) == ("distance:1000", "mean")
                        else "agrees"),)]  # fmt: skip
    assert robustness(cells)["statement"] == (
        "fragile: agrees in 3 of 4 (the other cells); weaker than the paper in 1 of 4 "
        "(split=distance:1000, heads=mean)")


def test_condition_word_never_lets_a_toolkit_threshold_disagree():
    """A condition on the wrong side of a toolkit's number reads "weaker than the paper"
    (the report's condition tables use these words); of the paper's own, "disagrees"."""
    from ropesplit.claims.text import condition_word

    for outcome in ("agrees", "inconclusive"):
        for origin in ORIGINS:
            assert condition_word({"outcome": outcome, "origin": origin}) == outcome
    assert condition_word({"outcome": "disagrees", "origin": "paper"}) == "disagrees"
    assert condition_word({"outcome": "disagrees", "origin": "toolkit"}) == "weaker than the paper"
    assert all(condition_word({"outcome": o, "origin": g}) in VERDICTS
               for o in ("agrees", "disagrees", "inconclusive") for g in ORIGINS)  # fmt: skip


# --------------------------------------------------------------------------- the vocabulary


def test_a_misspelt_measure_fails_at_import_naming_it(monkeypatch):
    """CLAIMS is checked against the measure vocabulary when the module is imported: a
    planted misspelling raises, naming the name."""
    import importlib.util
    import pathlib

    import ropesplit.claims.registry as module

    source = pathlib.Path(module.__file__).read_text(encoding="utf-8")
    planted = source.replace('Condition("key_corr", "level"', 'Condition("key_cor", "level"', 1)
    assert planted != source
    spec = importlib.util.spec_from_loader("planted_claims", loader=None)
    fresh = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, "planted_claims", fresh)  # for dataclasses
    exec(compile(source, "planted_claims", "exec"), fresh.__dict__)  # the true source imports
    with pytest.raises(ValueError, match="claim 3 reads 'key_cor', which no passages row"):
        exec(compile(planted, "planted_claims", "exec"), fresh.__dict__)


def test_conditions_check_themselves_when_built():
    from dataclasses import replace

    from ropesplit.claims.registry import Condition, Secondary

    good = primary(2).conditions[1]
    for field, value, message in (("direction", "abve", "direction must be"),
                                  ("compare", "ratio", "compare must be"),
                                  ("unit", "heads", "unit must be"),
                                  ("null", None, "names its null"),
                                  ("threshold", float("nan"), "threshold must be finite"),
                                  ("origin", "blog", "origin must be"),
                                  ("quote", "nowhere", "needs a quote")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            replace(good, **{field: value})
    with pytest.raises(ValueError, match="names its null"):
        Secondary("r_split", "level", "above", 0.0, null="r_split_control")
    with pytest.raises(ValueError, match="'r_splt'"):
        replace(primary(2), nulls=("r_splt",))
    assert isinstance(replace(good), Condition)


def test_a_name_the_rows_lack_is_an_error_not_an_inconclusive_claim():
    from dataclasses import replace

    rows = _rows(10, np.random.default_rng(3))
    for row in rows:
        del row["r_split_control"]
    with pytest.raises(KeyError, match="'r_split_control' is not in the passages rows"):
        unit_values(rows, primary(2).conditions[1])
    with pytest.raises(KeyError, match="r_split_control"):
        evaluate(replace(primary(2)), rows)


def test_the_word_order_rows_carry_exactly_the_order_vocabulary():
    from ropesplit.claims.registry import MEASURES
    from ropesplit.empirical.measurement.order_passages import order_passage

    ids = np.random.default_rng(1).integers(1, TINY_VOCAB, size=64)
    got = order_passage(None, ids, seed=0, losses=lambda x: np.random.default_rng(
        0).random((len(x), x.shape[1] - 1)))  # fmt: skip
    assert sorted(got["cells"]["tokens=64"]) == sorted(MEASURES["order"])


def test_the_passages_compute_exactly_the_passages_vocabulary():
    from ropesplit.claims.registry import MEASURES
    from ropesplit.empirical.measurement.passages import measure_names

    assert measure_names() == list(MEASURES["passages"])


def test_the_paired_second_corpus_is_resolved_in_one_place():
    from ropesplit.claims.registry import PAIRED, resolve_second_corpus

    assert resolve_second_corpus("pydoc", PAIRED) == "prose"
    assert resolve_second_corpus("prose", PAIRED) == "pydoc"
    assert resolve_second_corpus("my/notes.txt", PAIRED) == "prose"  # a corpus of one's own
    assert resolve_second_corpus("pydoc", "my/notes.txt") == "my/notes.txt"
    assert resolve_second_corpus("prose", "prose") is None  # the run's own corpus: no axis
    assert resolve_second_corpus("pydoc", None) is None
