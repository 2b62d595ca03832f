"""The report's training stage and section, on a tiny training config."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from ropesplit.empirical.training.train import TrainConfig, checkpoints

from ropesplit.report import training
from ropesplit.report.sections import emergence
from ropesplit.report.sections.base import ReportInputs

pytestmark = pytest.mark.slow  # training, then the report (make test-fast leaves it out)

TINY = TrainConfig(steps=2, seq_len=16, layers=1, d_model=16, heads=2, d_ff=16, batch=2,
                   warmup=1, checkpoints=2, val_windows=2, n_boot=50, threads=1)  # fmt: skip


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training, "REPORT_TRAIN", TINY)
        ctx = SimpleNamespace(folder=folder, settings=SimpleNamespace(seed=0))
        record = training.train_stage(ctx)
        again = training.train_stage(SimpleNamespace(folder=folder, settings=ctx.settings))
    return {"folder": folder, "ctx": ctx, "record": record, "again": again}


def test_stage_trains_both_bases_into_the_report_folder(stage) -> None:
    record = stage["record"]
    assert [r["rope_base"] for r in record["runs"]] == list(training.REPORT_BASES)
    for run in record["runs"]:
        assert run["out"].startswith(str(stage["folder"] / "train"))
    json.dumps(record)  # JSON-ready


def test_stage_writes_only_its_record_and_the_model_it_trained(stage) -> None:
    """No figure data: the gather step draws figures 11 and 12 from train.json. In memory:
    the first base's last checkpoint, with that run's config, for length and terms."""
    ctx, first = stage["ctx"], stage["record"]["runs"][0]
    assert set(vars(ctx)) == {"folder", "settings", "trained"}
    trained = ctx.trained
    assert trained.checkpoint == checkpoints(first["out"])[-1]
    assert (trained.cfg.rope_base, trained.cfg.seed, trained.cfg.out) == (
        first["rope_base"], first["seed"], first["out"])
    assert trained.cfg.seq_len == TINY.seq_len and "trained here" in trained.subject


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
