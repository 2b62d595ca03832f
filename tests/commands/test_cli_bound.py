"""``ropesplit bound``: the table, the JSON, the exit codes."""

from __future__ import annotations

import json

import pytest
import torch

from ropesplit.cli import main
from ropesplit.numerics.bound import RTOL
from ropesplit.numerics.synthetic import REFERENCES

KEYS = {"pattern", "d", "base", "tokens", "seed", "r_split", "r_split_rowcentred", "r_3axis",
        "remainder_share", "tightness_max", "tightness_median", "lowfreq_share_k"}  # fmt: skip


def test_all_patterns_pass_and_order(tmp_path, capsys):
    out = tmp_path / "x.json"
    assert main(["bound", "--tokens", "128", "--d", "32", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["violations"] == 0
    cases = {case["pattern"]: case for case in data["cases"]}
    assert list(cases) == ["structured", "random", "adversarial"]
    for case in data["cases"]:
        assert KEYS <= set(case) and case["tokens"] == 128 and case["d"] == 32
        assert 0 <= case["tightness_max"] <= 1 and case["sampled_pairs"] is None
    r = [cases[p]["r_split"] for p in ("structured", "random", "adversarial")]
    assert r[0] > r[1] > r[2]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[0] == "pattern" and len(lines) == 17
    assert lines[4] == "0 bound violations on every causal pair"
    assert lines[5].startswith("r_rowcen: r_split on row-centred logits")  # the legend
    short = [r.replace("distance:", "C=") for r in REFERENCES]
    assert lines[8].split()[1:] == short and lines[13].split()[1:] == short
    assert max(len(line) for line in lines) <= 100  # the table was once 132 wide
    # docs/theory.md section 6 on synthetic heads: one row per (pattern, reference)
    rows = {(row["pattern"], row["reference"]): row for row in data["references"]}
    assert set(rows) == {(p, r) for p in cases for r in REFERENCES}
    for pattern in cases:
        assert rows[pattern, "zero"]["r_split"] == pytest.approx(cases[pattern]["r_split"])
        least = min(rows[pattern, r]["mean_square_remainder"] for r in REFERENCES)
        assert rows[pattern, "mean"]["mean_square_remainder"] == least


def test_one_pattern_and_sampling(tmp_path, capsys):
    out = tmp_path / "x.json"
    args = ["bound", "--pattern", "random", "--tokens", "100", "--d", "8", "--seed", "3",
            "--pair-budget", "400", "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    assert "0 bound violations on 400 sampled causal pairs of 5050" in capsys.readouterr().out
    (case,) = json.loads(out.read_text())["cases"]
    assert case["pattern"] == "random" and case["seed"] == 3 and case["sampled_pairs"] == 400
    assert case["n_pairs"] == 5050  # --pair-budget counts causal pairs (of 100 * 101 / 2)


def _halved_pairs(real):
    """A pair kernel (``remainder_and_bound``) whose bound is half the true one where E != 0."""

    def halved(*args, **kwargs):
        e, bound = real(*args, **kwargs)
        return e, bound * torch.where(e.abs() > 0, 0.5, 1.0)

    return halved


def _halved_ratios(real):
    """The compiled check (``CausalPairs``) as if its bound were half the true one."""

    class Halved(real):
        def screen(self):
            ratio, top, unsure = super().screen()
            return 2.0 * ratio, 2.0 * top, unsure  # NaN (no verdict) stays NaN

        def exact(self, head, index):
            ratio, _ = super().exact(head, index)
            ratio = 2.0 * ratio  # -inf (no ratio) stays -inf
            return ratio, ratio > 1.0 + RTOL

    return Halved


@pytest.mark.parametrize("where, kernel, planted, budget",
                         [("stats", "CausalPairs", _halved_ratios, []),  # exact: every pair
                          ("bound", "remainder_and_bound", _halved_pairs,  # a sample of pairs
                           ["--pair-budget", "50"])])  # fmt: skip
def test_a_violation_exits_1(monkeypatch, capsys, where, kernel, planted, budget):
    # a kernel whose bound is half the true one must be caught, not reported as a pass
    import importlib

    module = importlib.import_module(f"ropesplit.numerics.{where}")
    monkeypatch.setattr(module, kernel, planted(getattr(module, kernel)))
    assert main(["bound", "--pattern", "random", "--tokens", "20", "--d", "4", *budget]) == 1
    assert "the bound FAILED" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--d", "63"], "head_dim must be even and positive, got 63"),
        (["--tokens", "0"], "must be at least 1, got 0"),
        (["--tokens", "1"], "--tokens must be at least 16, got 1"),  # 1 token gave all-NaN tables
        (["--base", "1"], "base must be a finite number above 1"),
        (["--json", "/nonexistent/x.json"], "cannot write /nonexistent/x.json"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    try:
        code = main(["bound", *args])
    except SystemExit as exit_:  # argparse's own type checks exit through the parser
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("ropesplit bound: error: ") and message in err and err.count("\n") == 1


def test_a_written_file_is_announced_on_stderr(tmp_path, capsys):
    """Regression: --json printed no 'wrote PATH'; stdout keeps the tables alone."""
    out = tmp_path / "b.json"
    assert main(["bound", "--pattern", "random", "--tokens", "32", "--d", "8", "--json",
                 str(out)]) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert captured.err.strip().endswith(f"wrote {out}") and "wrote" not in captured.out
