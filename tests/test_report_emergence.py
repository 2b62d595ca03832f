"""The report's training stage and section (issue 11), on a tiny training config."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from ropesplit.empirical.train import TrainConfig

from ropesplit.report.sections import emergence
from ropesplit.report.sections.base import ReportInputs

TINY = TrainConfig(steps=2, seq_len=16, layers=1, d_model=16, heads=2, d_ff=16, batch=2,
                   warmup=1, checkpoints=2, val_windows=2, n_boot=50, threads=1)  # fmt: skip


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(emergence, "REPORT_TRAIN", TINY)
        ctx = SimpleNamespace(folder=folder, settings=SimpleNamespace(seed=0), figure_data={})
        record = emergence.train_stage(ctx)
        again = emergence.train_stage(SimpleNamespace(folder=folder, settings=ctx.settings,
                                                      figure_data={}))  # fmt: skip
    return {"folder": folder, "ctx": ctx, "record": record, "again": again}


def test_stage_trains_both_bases_into_the_report_folder(stage) -> None:
    record = stage["record"]
    assert [r["rope_base"] for r in record["runs"]] == list(emergence.REPORT_BASES)
    for run in record["runs"]:
        assert run["out"].startswith(str(stage["folder"] / "train"))
    assert set(stage["ctx"].figure_data) == {"emergence", "emergence_pairs"}
    json.dumps(record)  # JSON-ready


def test_rerun_resumes_with_the_same_numbers(stage) -> None:
    def numbers(record):
        return [[{k: v for k, v in c.items() if not k.startswith("seconds")}
                 for c in r["checkpoints"]] for r in record["runs"]]  # fmt: skip

    assert numbers(stage["again"]) == numbers(stage["record"])
    assert stage["again"]["verdict"] == stage["record"]["verdict"]


def test_section_reads_every_number_from_the_record(stage) -> None:
    record = json.loads(json.dumps(stage["record"]))
    (section,) = emergence.build(ReportInputs({"train": record}))
    assert section.anchor == "training"
    assert any(p.startswith("Prediction, computed before training:") for p in section.paragraphs)
    table, verdicts = section.tables
    assert len(table.rows) == 3 * len(record["runs"])  # init, control, last step per run
    first = record["runs"][0]["checkpoints"][0]
    assert table.rows[0][2] == f"{first['val_loss']:.3f}"
    assert [row[-1] for row in verdicts.rows] == [v["verdict"] for v in record["verdict"].values()]
    assert f"for {record['config']['steps']} steps" in section.paragraphs[0]
