"""Tidy tables of analysis and experiment results, and their JSON round trip."""

from __future__ import annotations

import json
import math

import hypothesis.strategies as st
import pandas as pd
import pytest
from conftest import TEXT, TINY, llama_config, save_model
from hypothesis import given, settings

from ropesplit.core.errors import RopesplitError
from ropesplit.core.io import write_json
from ropesplit.empirical import analyze, load_model, run_experiments, tokenize
from ropesplit.empirical.analysis import tidy as tidy_module
from ropesplit.empirical.analysis.analyze import STATISTICS, analysis_record
from ropesplit.empirical.analysis.tidy import Records, from_json, tidy, to_json, untidy
from ropesplit.empirical.experiments import ExperimentSettings
from ropesplit.empirical.model.loading import random_init_twin


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    folder = save_model(tmp_path_factory.mktemp("tidy") / "llama", llama_config(**TINY))
    loaded = load_model(folder)
    ids = tokenize(loaded, TEXT, 48)
    trained, control = analyze(loaded, ids), analyze(random_init_twin(loaded, 1), ids)
    experiments = run_experiments(loaded, ids, experiments=["distance", "order"],
                                  settings=ExperimentSettings(draws=2, layers=(0, 1)))
    return {"analysis": analysis_record(trained, control, 1), "trained": trained,
            "experiments": experiments}  # fmt: skip


def test_analysis_table_has_one_row_per_run_layer_head(records, tmp_path):
    record = records["analysis"]
    table = tidy(record)
    n_heads = TINY["num_hidden_layers"] * TINY["num_attention_heads"]
    assert isinstance(table, pd.DataFrame) and len(table) == 2 * n_heads
    assert table.groupby("run").size().to_dict() == {"control": n_heads, "trained": n_heads}
    trained = table[table["run"] == "trained"]
    for name in STATISTICS:  # the numbers are the record's, row for row
        assert trained[name].tolist() == [row[name] for row in record["heads"]]
    means = trained[list(STATISTICS)].mean()
    for name in STATISTICS:
        assert math.isclose(means[name], record["summary"][name], rel_tol=1e-12)
    assert table.attrs["model"] == record["model"] and table.attrs["result"] == "analysis"
    assert table.attrs["control"]["seed"] == 1 and "heads" not in table.attrs["control"]
    assert records["trained"].tidy().equals(tidy(records["trained"]))
    # an Analysis object and the --json file give the same table
    assert tidy(records["trained"]).equals(trained.drop(columns="run").assign(
        run="trained")[trained.columns].reset_index(drop=True))  # fmt: skip
    write_json(tmp_path / "analyze.json", record)
    again = from_json(tmp_path / "analyze.json")
    pd.testing.assert_frame_equal(again, table)
    assert again.attrs == json.loads(json.dumps(table.attrs))


def test_experiment_tables_carry_header_and_verdict(records, tmp_path):
    record = records["experiments"]
    for name in ("distance", "order"):
        table = tidy(record, name)
        assert len(table) == len(record[name])
        assert table.attrs["experiment"] == name
        assert table.attrs["header"]["seed"] == record["header"]["seed"]
        assert table.attrs["about"] == record["experiments"][name]
        assert "verdict" in table.attrs["about"] and "prediction" in table.attrs["about"]
        back = from_json(to_json(table, tmp_path / f"{name}.json"))
        pd.testing.assert_frame_equal(back, table)
    with pytest.raises(RopesplitError, match="experiment must be one of distance, order, got None"):
        tidy(record)
    with pytest.raises(RopesplitError, match="experiment must be one of distance, order, got 'x'"):
        tidy(record, "x")


def test_without_pandas_the_table_is_flat_records(records, monkeypatch):
    monkeypatch.setattr(tidy_module, "_pandas", lambda: None)
    table = tidy(records["analysis"])
    assert isinstance(table, Records) and isinstance(table[0], dict)
    assert table.columns[:3] == ["run", "layer", "head"]
    assert untidy(table) == records["analysis"]
    with pytest.raises(RopesplitError, match=r"pip install 'ropesplit\[tidy\]'"):
        tidy(records["analysis"], frame=True)


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (3, "result must be an analysis or experiment record, got int"),
        ({"x": 1}, "record is neither an analysis (heads) nor an experiment record (header)"),
        ("/nonexistent/analyze.json", "result file /nonexistent/analyze.json does not exist"),
    ],
)
def test_bad_results_fail_with_one_line(result, message):
    with pytest.raises(RopesplitError) as info:
        tidy(result)
    assert message in str(info.value) and "\n" not in str(info.value)


values = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False), st.integers(-9, 9))
row = st.fixed_dictionaries({"layer": st.integers(0, 3), "head": st.integers(0, 3),
                             "r_split": values, "tightness_max": values})  # fmt: skip
meta = st.dictionaries(st.sampled_from(["model", "tokens", "note"]), st.text(max_size=5))


@settings(max_examples=60, deadline=None)
@given(heads=st.lists(row, min_size=1, max_size=6), control=st.lists(row, max_size=6),
       extra=meta)  # fmt: skip
def test_analysis_records_round_trip(heads, control, extra):
    record = {**extra, "heads": heads, "summary": {"r_split": 0.5}}
    if control:
        record["control"] = {"kind": "random-init", "seed": 0, "heads": control}
    table = tidy(record, frame=False)
    assert len(table) == len(heads) + len(control)
    assert untidy(table) == record
    frame = tidy(record, frame=True)  # table -> record -> table is the same table
    pd.testing.assert_frame_equal(tidy(untidy(frame), frame=True), frame)
    assert untidy(frame)["summary"] == record["summary"]
    assert json.loads(json.dumps(untidy(frame))) == untidy(frame)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(row, min_size=1, max_size=6), seed=st.integers(0, 9))
def test_experiment_records_round_trip(rows, seed):
    record = {"header": {"seed": seed}, "experiments": {"order": {"verdict": "holds"}},
              "order": rows}  # fmt: skip
    table = tidy(record, frame=False)
    assert table.attrs["about"] == {"verdict": "holds"} and list(table) == rows
    assert untidy(table) == record


def test_by_reference_is_flat_columns_and_the_long_table_has_one_row_per_statistic(records):
    """Regression: tidy() kept by_reference as a column of nested dicts while the CSV flattened
    it; the long table is one row per (run, layer, head, reference, statistic)."""
    from ropesplit.empirical.analysis.tidy import long

    record = records["analysis"]
    table = tidy(record)
    assert "by_reference" not in table.columns
    first = record["heads"][0]
    for spec, stats in first["by_reference"].items():
        assert table.loc[0, f"r_split[{spec}]"] == stats["r_split"]
    assert untidy(table)["heads"][0]["by_reference"] == first["by_reference"]  # round trip
    rows = long(record)
    key = ["run", "layer", "head", "reference", "statistic"]
    assert not rows.duplicated(key).any()  # each value once
    specs = list(first["by_reference"])
    mine = rows[(rows["run"] == "trained") & (rows["layer"] == first["layer"])
                & (rows["head"] == first["head"])]  # fmt: skip
    r = mine[mine["statistic"] == "r_split"].set_index("reference")["value"]
    assert sorted(r.index) == sorted(specs)
    assert all(r[spec] == first["by_reference"][spec]["r_split"] for spec in specs)
    low = mine[mine["statistic"] == "lowfreq_share_k"]
    assert len(low) == 1 and low["reference"].isna().all()
    assert low["value"].item() == first["lowfreq_share_k"]
    assert set(rows["run"]) == {"trained", "control"}
    with pytest.raises(RopesplitError, match="^long takes an analysis record"):
        long(records["experiments"])
