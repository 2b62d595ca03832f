"""``ropesplit claims`` (issue 18): bad input is one line and exit 2, before any model loads."""

from __future__ import annotations

import pytest

from ropesplit.cli import main
from ropesplit.commands.claims import claim_line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--passages", "4"], "--passages must be at least 8, got 4"),
        (["--order-passages", "7"], "--order-passages must be at least 8, got 7"),
        (["--tokens", "8"], "--tokens must be at least 16, got 8"),
        (["--corpus", "/nonexistent/texts"], "corpus path /nonexistent/texts does not exist"),
        (["--json", "/nonexistent/claims.json"], "cannot write /nonexistent/claims.json: folder"),
        (["--shard", "3"], "--shard must be A:B (passage indices), got '3'"),
        (["--shard", "5:20"], "--shard must be A:B with 0 <= A < B <= 12, got 5:20"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(flags, message, capsys):
    assert main(["claims", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ropesplit claims: error: {message}")


def test_a_claim_line_names_each_condition_its_interval_and_the_verdict():
    claim = {"claim": 2, "verdict": "disagrees", "n": 12, "unit": "passages",
             "conditions": [
                 {"measure": "r_split", "compare": "level", "null": None, "direction": "above",
                  "threshold": 0.9, "interval": {"mean": 0.896, "low": 0.893, "high": 0.898}},
                 {"measure": "r_split", "compare": "paired", "null": "r_split_control",
                  "direction": "above", "threshold": 0.0,
                  "interval": {"mean": 0.073, "low": 0.061, "high": 0.086}}],
             "nulls": [{"measure": "r_split_control",
                        "interval": {"mean": 0.823, "low": 0.811, "high": 0.834}}]}  # fmt: skip
    line = claim_line(claim)
    assert line.startswith("claim 2: DISAGREES (n = 12 passages): ")
    assert "r_split 0.896 [0.893, 0.898] (predicted > 0.9)" in line
    assert "r_split - r_split_control 0.073 [0.061, 0.086] (predicted > 0)" in line
    assert "null: r_split_control 0.823 [0.811, 0.834]" in line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--passages", "5"], "--passages must be at least 8, got 5"),
        (["--corpus", "/nonexistent/texts"], "corpus path /nonexistent/texts does not exist"),
    ],
)
def test_report_takes_the_claims_flags_and_refuses_bad_ones_first(flags, message, tmp_path,
                                                                  capsys):  # fmt: skip
    out = tmp_path / "new"
    assert main(["report", *flags, "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"ropesplit report: error: {message}")
    assert not out.exists()


def test_report_and_figures_take_device_and_dtype():
    """Issue 22: 'report' and 'figures' loaded the model without --device/--dtype."""
    from ropesplit.cli import build_parser
    from ropesplit.commands.figures import settings_from

    for command in ("report", "figures"):
        args = build_parser().parse_args([command, "--dtype", "bfloat16", "--device", "cpu"])
        settings = settings_from(args)
        assert (settings.device, settings.dtype) == ("cpu", "bfloat16")
    assert main(["figures", "--dtype", "int8"]) == 2  # refused while parsing
