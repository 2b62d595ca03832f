"""One record builder per layer: the CLI and the report write the same records.

``ropesplit derive --check --json`` and the report's ``derive`` stage both return
``theory.derive_record``; ``ropesplit bound --json`` and the report's ``bound`` stage both
return ``numerics.synthetic.bound_record``; ``ropesplit analyze --json`` and the report's
``load`` and ``analyze`` stages both go through ``empirical.analysis.analyze.load_subject`` and
``analyze_pair``. Compared field by field, through the JSON
each writes (timings excepted: only their presence and type are compared).
"""

from __future__ import annotations

import json

import pytest

from ropesplit.cli import main
from ropesplit.core.io import write_json
from ropesplit.report.context import RunContext, RunSettings
from ropesplit.report.stages import _bound, _derive


def _written(tmp_path, name, record):
    return json.loads(write_json(tmp_path / name, record).read_text())


@pytest.mark.slow  # end to end, seconds: make test runs it, test-fast does not
def test_derive_cli_and_report_record_are_one(tmp_path, capsys, monkeypatch, step_results):
    from conftest import shared_checks

    shared_checks(monkeypatch, step_results)  # each step's check, run once per test run
    assert main(["derive", "--check", "--json", str(tmp_path / "cli.json")]) == 0
    capsys.readouterr()
    cli = json.loads((tmp_path / "cli.json").read_text())
    report = _written(tmp_path, "report.json", _derive(RunContext(RunSettings())))
    assert list(cli) == list(report) == ["steps", "all_checked", "seconds"]
    assert cli["all_checked"] is report["all_checked"] is True
    assert isinstance(cli["seconds"], float) and isinstance(report["seconds"], float)
    assert [list(s) for s in cli["steps"]] == [list(s) for s in report["steps"]]
    for a, b in zip(cli["steps"], report["steps"], strict=True):
        assert isinstance(a.pop("seconds"), float) and isinstance(b.pop("seconds"), float)
        assert a == b
    assert all(s["statement_latex"] for s in report["steps"])  # the report's copy lacked it


def test_bound_cli_and_report_record_are_one(tmp_path, capsys):
    code = main(["bound", "--tokens", "64", "--seed", "3", "--json", str(tmp_path / "cli.json")])
    assert code == 0
    capsys.readouterr()
    cli = json.loads((tmp_path / "cli.json").read_text())
    ctx = RunContext(RunSettings(bound_tokens=64, seed=3))
    assert cli == _written(tmp_path, "report.json", _bound(ctx))
    assert [c["pattern"] for c in cli["cases"]] == ["structured", "random", "adversarial"]
    assert cli["violations"] == 0 and cli["references"]


def test_analyze_cli_and_report_record_are_one(tmp_path, capsys):
    """A tiny Llama folder (byte tokenizer), 40 tokens, with its random-init control."""
    from conftest import TEXT, TINY, llama_config, save_model

    from ropesplit.report.stages import _analyze_stage, _load_stage

    folder = save_model(tmp_path / "llama", llama_config(**TINY))
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    argv = ["analyze", "--model", folder, "--text", str(text), "--tokens", "40", "--seed", "2"]
    assert main([*argv, "--json", str(tmp_path / "cli.json")]) == 0
    capsys.readouterr()
    cli = json.loads((tmp_path / "cli.json").read_text())
    ctx = RunContext(RunSettings(model=folder, text=str(text), tokens=40, seed=2))
    _load_stage(ctx)
    report = _written(tmp_path, "report.json", _analyze_stage(ctx))
    assert list(cli) == list(report)
    assert cli == report
