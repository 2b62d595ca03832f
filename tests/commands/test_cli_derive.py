"""``ropesplit derive``: the per-step lines, the JSON, the Markdown and its staleness test."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import sympy as sp

import ropesplit.theory as theory
from ropesplit.cli import main
from ropesplit.theory import STEPS, derivation_markdown, get_step

ROOT = Path(__file__).resolve().parents[2]


def test_committed_derivation_is_up_to_date():
    # regenerate with: ropesplit derive --out docs/derivation.md
    committed = (ROOT / "docs" / "derivation.md").read_text(encoding="utf-8")
    assert committed == derivation_markdown(), "docs/derivation.md is stale"


def test_derivation_markdown_has_every_step_its_math_and_lemmas():
    text = derivation_markdown()
    assert text == derivation_markdown()  # byte-stable
    for step in STEPS:
        assert f"`{step.id}` ({step.kind}; docs/theory.md " in text
        assert f"$$\n{step.statement_latex}\n$$" in text
        for lemma in step.lemmas:
            assert f"- {lemma}" in text
    assert "FAILED" not in text


@pytest.mark.slow  # end to end, seconds: make test runs it, test-fast does not
def test_check_writes_json_with_every_step_checked(tmp_path, capsys, monkeypatch, step_results):
    from conftest import shared_checks

    shared_checks(monkeypatch, step_results)  # each step's check, run once per test run
    out = tmp_path / "x.json"
    assert main(["derive", "--check", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["all_checked"] is True
    assert [s["id"] for s in data["steps"]] == [s.id for s in STEPS]
    assert data["seconds"] == sum(row["seconds"] for row in data["steps"])
    for row in data["steps"]:
        assert set(row) >= {"id", "kind", "statement_latex", "checked", "method", "seconds"}
        assert row["checked"] is True and row["seconds"] > 0
    lines = capsys.readouterr().out.splitlines()
    heads = [line for line in lines if not line.startswith("    ")]  # one per step, then total
    assert len(heads) == len(STEPS) + 1
    assert all(" checked " in line for line in heads[:-1])
    text = "\n".join(lines)
    for step in STEPS:  # each step's statement and where it stands
        assert " ".join(step.statement.split()[:6]) in " ".join(text.split()), step.id
    assert "docs/theory.md 3; the paper's claim 2: W = f + g + E" in " ".join(text.split())
    assert all(len(line) <= 100 for line in lines)
    assert lines[-1].startswith(f"{len(STEPS)}/{len(STEPS)} steps checked in ")
    assert lines[-1].endswith(" s") and "FAILED" not in lines[-1]


def test_without_check_nothing_is_claimed_checked(tmp_path, capsys):
    out = tmp_path / "x.json"
    assert main(["derive", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["all_checked"] is False and data["seconds"] is None
    assert all(row["checked"] is None for row in data["steps"])
    assert "checked" not in capsys.readouterr().out.replace("not run", "")


def test_a_failing_step_reports_failed_and_exits_1(tmp_path, capsys, monkeypatch):
    wrong = dataclasses.replace(
        get_step("attention_bound"), claim=lambda eps: (sp.exp(-eps), sp.exp(eps), sp.exp(eps) - 1)
    )
    monkeypatch.setattr(theory, "STEPS", (get_step("rope_relative"), wrong))
    md = tmp_path / "d.md"
    assert main(["derive", "--check", "--out", str(md), "--json", str(tmp_path / "x.json")]) == 1
    out = capsys.readouterr().out
    assert "attention_bound" in out and "FAILED" in out
    assert "1/2 steps checked in " in out and "; some FAILED" in out
    assert "**FAILED** in this run" in md.read_text()
    assert json.loads((tmp_path / "x.json").read_text())["all_checked"] is False


def test_missing_output_folder_is_one_line_and_exit_2(capsys):
    assert main(["derive", "--out", "/nonexistent/dir/x.md"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "ropesplit derive: error: cannot write /nonexistent/dir/x.md: "
        "folder /nonexistent/dir does not exist\n"
    )
