"""``ropesplit claims``: bad input is one line and exit 2, before any model loads."""

from __future__ import annotations

import pytest

from ropesplit.claims.text import claim_line
from ropesplit.cli import main


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


def test_a_claim_line_names_each_condition_its_origin_the_nulls_and_the_grid():
    claim = {"claim": 2, "verdict": "weaker than the paper", "n": 12, "unit": "passages",
             "conditions": [
                 {"measure": "r_split", "compare": "level", "null": None, "direction": "above",
                  "threshold": 0.9, "origin": "toolkit", "unit": "passages",
                  "interval": {"mean": 0.896, "low": 0.893, "high": 0.898}},
                 {"measure": "r_split", "compare": "paired", "null": "r_split_control",
                  "direction": "above", "threshold": 0.0, "origin": "paper", "unit": "seeds",
                  "interval": {"mean": 0.073, "low": 0.061, "high": 0.086}}],
             "nulls": [{"measure": "r_split_control",
                        "interval": {"mean": 0.823, "low": 0.811, "high": 0.834}}],
             "robust_statement": "fragile: agrees in 8 of 48 (heads=pooled)"}  # fmt: skip
    line = claim_line(claim)
    assert line.startswith("claim 2: WEAKER THAN THE PAPER (n = 12 passages): ")
    assert ("r_split 0.896 [0.893, 0.898] over passages (predicted > 0.9, toolkit's "
            "threshold)") in line
    assert ("r_split - r_split_control 0.073 [0.061, 0.086] over seeds (predicted > 0, "
            "paper's threshold)") in line
    assert "null: r_split_control 0.823 [0.811, 0.834]" in line
    assert line.endswith("grid: fragile: agrees in 8 of 48 (heads=pooled)")


def test_a_claim_line_shows_the_gate_and_the_secondaries_as_the_report_does():
    gate = {"measure": "damage_50", "compare": "level", "null": None, "direction": "above",
            "threshold": 0.0, "origin": "toolkit", "unit": "passages", "outcome": "agrees",
            "interval": {"mean": 1.2, "low": 1.0, "high": 1.4}}
    secondary = {"measure": "curvature", "compare": "level", "null": None, "unit": "passages",
                 "direction": "above", "threshold": 0.0, "p": 0.01, "p_holm": 0.03,
                 "interval": {"mean": 0.2, "low": 0.1, "high": 0.3}}
    claim = {"claim": 1, "verdict": "agrees", "n": 8, "unit": "passages", "conditions": [],
             "nulls": [], "gate": gate, "secondary": [secondary]}  # fmt: skip
    line = claim_line(claim)
    assert "gate: damage_50 1.200 [1.000, 1.400] over passages (predicted > 0, toolkit's " \
           "threshold): agrees" in line
    assert "secondary: curvature 0.200 [0.100, 0.300] over passages (predicted > 0), " \
           "Holm p 0.03" in line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--grid-tokens", "256,x"], "argument --grid-tokens: each value must be an integer"),
        (["--grid-tokens", "256,256"], "argument --grid-tokens: repeats 256"),
        (["--grid-tokens", "8,256"], "--grid-tokens must be at least 16, got 8"),
        (["--second-corpus", "/nonexistent/more"], "corpus path /nonexistent/more does not"),
        (["--model", "a", "--model", "a"], "--model repeats a model"),
        (["--model", "a", "--model", "b", "--gguf-file", "x.gguf"],
         "--gguf-file must be given once per --model (2), got 1"),
    ],
)  # fmt: skip
def test_grid_and_model_flags_fail_in_one_line_before_any_model_loads(flags, message, capsys):
    assert main(["claims", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ropesplit claims: error: {message}")


def test_compare_builds_one_models_by_claims_record(tmp_path, capsys):
    """Several claims records, one table and one record (forest-plot rows)."""
    import json

    from ropesplit.claims.registry import CLAIMS

    def record(name, mean):
        claims = [{"claim": t.claim, "statement": t.statement, "verdict": "agrees",
                   "robustness": "robust", "robust_statement": "robust: agrees in all 2 cells",
                   "cell": {"tokens": 64}, "nulls": [],
                   "conditions": [{"measure": t.conditions[0].measure, "direction": "above",
                                   "threshold": t.conditions[0].threshold, "n": 8,
                                   "origin": t.conditions[0].origin,
                                   "interval": {"mean": mean, "low": mean - 0.1,
                                                "high": mean + 0.1}}]}
                  for t in CLAIMS]  # fmt: skip
        return {"header": {"model": name, "corpus": "pydoc", "tokens": 64}, "claims": claims}

    paths = []
    for name, mean in (("llama", 0.5), ("qwen2", 0.7)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(record(name, mean)))
    out = tmp_path / "compare.json"
    assert main(["compare", *map(str, paths), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "qwen2 | 2 | agrees | r_split 0.700 [0.600, 0.800] | robust" in printed
    got = json.loads(out.read_text())
    assert got["models"] == ["llama", "qwen2"] and len(got["rows"]) == 2 * len(CLAIMS)
    assert [r["paper"] for r in got["rows"] if r["claim"] == 2] == [0.959, 0.959]
    again = tmp_path / "again.json"  # a compare record is taken again as its models
    assert main(["compare", str(out), "--json", str(again)]) == 0
    assert json.loads(again.read_text())["rows"] == got["rows"]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["compare", str(bad)]) == 2
    assert "is not a 'ropesplit claims' record" in capsys.readouterr().err


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


def test_report_and_figures_take_device_dtype_and_attention():
    """Regression: 'report' and 'figures' loaded the model without --device/--dtype; the
    kernel travels the same way, and a misspelt one is refused while parsing."""
    from ropesplit.cli import build_parser
    from ropesplit.commands.figures import settings_from

    for command in ("report", "figures"):
        args = build_parser().parse_args([command, "--dtype", "bfloat16", "--device", "cpu",
                                          "--attention", "sdpa"])  # fmt: skip
        settings = settings_from(args)
        assert (settings.device, settings.dtype, settings.attention) == ("cpu", "bfloat16", "sdpa")
    assert main(["figures", "--dtype", "int8"]) == 2  # refused while parsing
    assert main(["figures", "--attention", "sdpx"]) == 2


def _tiny_esm(folder, **fields):
    import families
    from conftest import save_model

    model_type, pattern = families.ENCODERS["esm"]
    return save_model(folder, families.tiny_config(model_type, **{**pattern, **fields}))


@pytest.mark.slow  # a whole claims run on a tiny encoder: 8 passages, every claim
def test_an_encoder_s_claims_are_judged_with_its_masked_token_loss(tmp_path, capsys):
    """Both ways: every claim measured over the two-way pairs, each length its own
    capture, claim 1 on the masked-token loss; the header says the run attends both ways."""
    import json

    folder = _tiny_esm(tmp_path / "esm")
    out = tmp_path / "claims.json"
    assert main(["claims", "--model", folder, "--corpus", "swissprot", "--second-corpus",
                 "none", "--tokens", "48", "--grid-tokens", "48", "--passages", "8",
                 "--order-passages", "8", "--json", str(out)]) == 0  # fmt: skip
    record = json.loads(out.read_text())
    assert record["header"]["attends"] == "both ways"
    assert [c["claim"] for c in record["claims"]] == [1, 2, 3, 4, 5]
    assert all(c["verdict"] for c in record["claims"])
    cells = [row["cells"]["tokens=48"] for row in record["order"]]
    for cell in cells:  # the masked targets: about 15% of the 47 movable tokens, at least 1
        assert 1 <= cell["scored"] <= 47 and cell["ppl_50"] == cell["damage_50"]
    assert "claim 5:" in capsys.readouterr().out


def test_an_encoder_without_a_mask_token_is_refused_in_one_line(tmp_path, capsys):
    """Claim 1 on an encoder scores the masked-token loss: no <mask>, no claims run, said
    before the first forward pass."""
    folder = _tiny_esm(tmp_path / "esm", mask_token_id=None)
    capsys.readouterr()
    assert main(["claims", "--model", folder, "--corpus", "swissprot", "--tokens", "48",
                 "--grid-tokens", "48"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no <mask> token" in err
