"""``ropesplit analyze`` end to end on tiny local models, and its bad input.

The models are tiny Llama/Gemma 2 folders written by ``save_pretrained`` with a
byte-level tokenizer (no download). Every bad input is a one-line error with
exit code 2 (1 for a failed validation) and no traceback.
"""

from __future__ import annotations

import csv
import importlib
import json
from dataclasses import replace

import pytest
import transformers as T
from conftest import TEXT, TINY, llama_config, save_model

from ropesplit.cli import main


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    text = root / "text.txt"
    text.write_text(TEXT)
    short = root / "short.txt"
    short.write_text("too short")
    gemma = T.Gemma2Config(head_dim=16, sliding_window=8, query_pre_attn_scalar=16, **TINY)
    return {
        "llama": save_model(root / "llama", llama_config(**TINY)),
        "gemma2": save_model(root / "gemma2", gemma),
        # YaRN over an original 16 positions: 40 tokens read its scaled table
        "yarn": save_model(root / "yarn", llama_config(**TINY, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 16})),  # fmt: skip
        "nan": save_model(root / "nan", llama_config(**TINY), nan=True),
        "gpt2": save_model(
            root / "gpt2", T.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=256)
        ),
        "text": str(text),
        "short": str(short),
        "root": root,
    }


def run_cli(capsys, *argv):
    code = main(["analyze", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("arch", ["llama", "gemma2", "yarn"])
def test_analyze_writes_json_and_csv(folders, capsys, tmp_path, arch):
    js, cs = tmp_path / "x.json", tmp_path / "x.csv"
    argv = ["--model", folders[arch], "--text", folders["text"], "--tokens", "40"]
    code, out, err = run_cli(capsys, *argv, "--json", str(js), "--csv", str(cs))
    assert code == 0, err
    record = json.loads(js.read_text())
    assert record["tokens"] == 40 and len(record["token_ids"]) == 40
    assert record["token_ids"] == list(TEXT.encode()[:40])  # the byte tokenizer
    assert record["reconstruction_max_abs_diff"] <= 1e-4
    assert [(h["layer"], h["head"], h["kv_head"]) for h in record["heads"]] == [
        (0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0),
    ]  # fmt: skip
    for heads in (record["heads"], record["control"]["heads"]):
        assert all(h["tightness_max"] <= 1.0 for h in heads)
        assert all(-1.0 <= h["r_split"] <= 1.0 for h in heads)
    summary = record["summary"]
    mean = sum(h["lowfreq_share_k"] for h in record["heads"]) / 4
    assert summary["lowfreq_share_k"] == pytest.approx(mean, rel=1e-12)
    assert summary["lowfreq_share_k_control"] == record["control"]["summary"]["lowfreq_share_k"]
    assert summary["r_split_paper"] == 0.959
    rows = list(csv.DictReader(cs.open()))
    assert [r["run"] for r in rows] == ["trained"] * 4 + ["control"] * 4
    assert float(rows[5]["r_split"]) == pytest.approx(record["control"]["heads"][1]["r_split"])
    assert "(paper 0.959, the same split)" in out and out.count("\n") >= 5


def test_analyze_is_deterministic_and_no_control_drops_it(folders, capsys, tmp_path):
    base = ["--model", folders["llama"], "--text", folders["text"], "--tokens", "32"]
    paths = [tmp_path / f"{i}.json" for i in range(3)]
    for path in paths[:2]:
        assert run_cli(capsys, *base, "--seed", "3", "--json", str(path))[0] == 0
    assert paths[0].read_text() == paths[1].read_text()
    assert run_cli(capsys, *base, "--no-control", "--json", str(paths[2]))[0] == 0
    assert "control" not in json.loads(paths[2].read_text())


def _junk_gguf(folders):
    path = folders["root"] / "junk.gguf"
    path.write_bytes(b"this is not a GGUF model" * 10)
    return ["--model", str(folders["root"]), "--gguf-file", "junk.gguf"]


def _odd_head_dim(folders):
    folder = folders["root"] / "odd"
    folder.mkdir(exist_ok=True)
    config = llama_config(**TINY).to_dict()
    (folder / "config.json").write_text(json.dumps({**config, "head_dim": 63}))
    return ["--model", str(folder)]


BAD_INPUT = [
    # (name, argv builder, exit code, start of the message)
    ("no-rope", lambda f: ["--model", f["gpt2"]], 2, "model type gpt2 has no rotary"),
    ("missing-path", lambda f: ["--model", "/nonexistent/model"], 2, "model path /nonexistent/"),
    ("missing-gguf", lambda f: ["--model", f["llama"], "--gguf-file", "x.gguf"], 2, "GGUF file x"),
    ("junk-gguf", _junk_gguf, 2, "cannot load GGUF file junk.gguf: "),
    ("odd-head-dim", _odd_head_dim, 2, "head_dim must be even, got 63"),
    ("nan", lambda f: ["--model", f["nan"], "--text", f["text"]], 2, "non-finite activations"),
    ("context", lambda f: ["--model", f["llama"], "--tokens", "65"], 2, "--tokens 65 exceeds"),
    ("short-text", lambda f: ["--model", f["llama"], "--text", f["short"]], 2, "text has only 9"),
    ("missing-text", lambda f: ["--text", "/nonexistent.txt"], 2, "text file /nonexistent.txt"),
    ("tokens", lambda f: ["--tokens", "1"], 2, "--tokens must be at least 16, got 1"),
    # 3 tokens once printed r_3axis = 1.000 beside the paper's number
    ("few-tokens", lambda f: ["--tokens", "3"], 2, "--tokens must be at least 16, got 3"),
    ("negative-distance", lambda f: ["--reference", "distance:-5"], 2,
     "--reference distance:C needs C >= 0 (a causal distance), got distance:-5"),
    ("out-folder", lambda f: ["--json", "/nonexistent/x.json"], 2, "cannot write /nonexistent"),
]


@pytest.mark.parametrize(
    ("name", "argv", "code", "message"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT]
)
def test_bad_input_is_a_one_line_error(folders, capsys, name, argv, code, message):
    args = argv(folders)
    if "--tokens" not in args:
        args += ["--tokens", "32"]
    got, out, err = run_cli(capsys, *args)
    assert got == code
    assert err.startswith(f"ropesplit analyze: error: {message}"), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_beyond_memory_is_a_one_line_error(folders, capsys, monkeypatch):
    analyze_module = importlib.import_module("ropesplit.empirical.analysis.analyze")
    monkeypatch.setattr(analyze_module, "_available_bytes", lambda device: 1000)
    code, _, err = run_cli(capsys, "--model", folders["llama"], "--tokens", "32")
    assert code == 2
    assert err.startswith("ropesplit analyze: error: 32 tokens need about "), err


def test_failed_validation_exits_1(folders, capsys, monkeypatch):
    validate = importlib.import_module("ropesplit.empirical.model.validate")
    original = validate.rebuild_logits

    def wrong_scale(attention, **kw):
        return original(replace(attention, scale=1.5 * attention.scale), **kw)

    monkeypatch.setattr(validate, "rebuild_logits", wrong_scale)
    argv = ["--model", folders["llama"], "--text", folders["text"], "--tokens", "32"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 1
    assert err.startswith("ropesplit analyze: error: reconstruction_max_abs_diff ")
    assert out == ""  # no statistics reported


@pytest.mark.parametrize("budget, sampled", [("80", True), ("1000000000", False)])
def test_the_output_says_when_tightness_is_sampled(folders, capsys, tmp_path, budget, sampled):
    """Beyond the pair budget the bound check samples pairs, and says so."""
    js = tmp_path / "x.json"
    argv = ["--model", folders["llama"], "--text", folders["text"], "--tokens", "24"]
    code, out, err = run_cli(capsys, *argv, "--no-control", "--pair-budget", budget,
                             "--json", str(js))  # fmt: skip
    assert code == 0, err
    rows = json.loads(js.read_text())["heads"]
    assert all(row["n_pairs"] == 24 * 25 // 2 for row in rows)
    if sampled:
        assert all(0 < row["sampled_pairs"] < row["n_pairs"] for row in rows)
        assert "sampled causal pairs per head" in out
    else:
        assert all(row["sampled_pairs"] is None for row in rows)
        assert "tightness exact over every causal pair" in out


def test_every_reference_in_json_csv_and_table(folders, capsys, tmp_path):
    js, cs = tmp_path / "x.json", tmp_path / "x.csv"
    argv = ["--model", folders["llama"], "--text", folders["text"], "--tokens", "24"]
    code, out, err = run_cli(capsys, *argv, "--reference", "distance:1e3", "--json", str(js),
                             "--csv", str(cs))  # fmt: skip
    assert code == 0, err
    record = json.loads(js.read_text())
    specs = ["distance:1000", "zero", "distance:256", "mean"]
    for head in record["heads"]:
        assert head["reference"] == "distance:1000" and list(head["by_reference"]) == specs
        assert head["r_split"] == head["by_reference"]["distance:1000"]["r_split"]
    for spec in specs:
        ci = record["by_reference"][spec]["r_split"]
        assert ci["low"] <= ci["mean"] <= ci["high"] and ci["level"] == 0.95
        diff = record["control"]["trained_minus_control"][spec]
        assert diff["low"] <= diff["mean"] <= diff["high"]
    rows = list(csv.DictReader(cs.open()))
    assert float(rows[0]["r_split[mean]"]) == pytest.approx(
        record["heads"][0]["by_reference"]["mean"]["r_split"])
    assert "split under reference distance:1000" in out
    assert "trained - control" in out and out.count("distance:256") == 1


def test_bad_reference_is_one_line(folders, capsys):
    code, _, err = run_cli(capsys, "--model", folders["llama"], "--reference", "far")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("ropesplit analyze: error: reference must be zero, distance:C")


def test_protocol_table_and_controls(folders, capsys, tmp_path):
    js = tmp_path / "x.json"
    argv = ["--model", folders["llama"], "--text", folders["text"], "--tokens", "20"]
    code, out, err = run_cli(capsys, *argv, "--no-control", "--protocol", "--json", str(js))
    assert code == 0, err
    proto = json.loads(js.read_text())["protocol"]
    assert proto["settings"]["tokens"] == [10, 20, 40] and proto["settings"]["baseline"] == 20
    keys = {(r["tokens"], r["kbar"], r["layers"], r["reference"]) for r in proto["rows"]}
    assert len(keys) == len(proto["rows"]) == 3 * 2 * 2 * 4
    for row in proto["rows"]:
        for stat in ("per_head", "pooled"):
            assert row[stat]["low"] <= row[stat]["mean"] <= row[stat]["high"]
    assert set(proto["controls"]) == {"random-init", "shuffled-theta", "code-text"}
    assert proto["controls"]["random-init"]["runs"] == 3
    assert len(proto["verdicts"]) == 1 + 3 * 4
    words = {v.split(":")[0] for v in proto["verdicts"]}
    assert words <= {"agrees", "disagrees", "inconclusive"}
    assert "protocol table" in out and "shuffled-theta" in out
    # the report section reads every number from this record
    from ropesplit.report.sections.base import ReportInputs
    from ropesplit.report.sections.protocol import build

    (section,) = build(ReportInputs({"protocol": proto}))
    table, controls = section.tables
    assert len(table.rows) == 3 * 2 * 2 * 2 and table.columns[4:] == proto["settings"]["references"]
    first = proto["rows"][0]["per_head"]
    assert table.rows[0][4].startswith(f"{first['mean']:.3f}"[:4])
    assert [row[0] for row in controls.rows] == ["random-init", "shuffled-theta", "code-text"]
    assert proto["verdicts"][0] in section.paragraphs[1]


@pytest.mark.parametrize("name", ["esm", "modernbert"])
def test_an_encoder_is_analysed_both_ways_with_the_protein_paper_s_fit_beside(
        folders, tmp_path, capsys, name):  # fmt: skip
    """A tiny ESM (every layer both ways) and ModernBERT (a global layer and two local ones):
    every pair its mask lets through is measured, and the three-term fit a[i-j] + b[j] + c[i]
    (arXiv 2602.20449) is printed beside the split. On the logits that fit is r_3axis on the
    same pairs: two algorithms (a dense fit per head, the statistics' sums), one number."""
    import families

    model_type, fields = families.ENCODERS[name]
    folder = save_model(tmp_path / name, families.tiny_config(model_type, **fields))
    record = tmp_path / "record.json"
    code = main(["analyze", "--model", folder, "--text", folders["text"], "--tokens", "24",
                 "--no-control", "--json", str(record)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tightness exact over every pair its mask lets through (both ways" in out
    assert "both ways: the fit a[i-j] + b[j] + c[i] of arXiv 2602.20449" in out
    data = json.loads(record.read_text())
    assert {"three_term_cv_logits", "three_term_r_probs"} <= set(data["summary_three_term"])
    for head in data["heads"]:
        assert head["three_term_r_logits"] == pytest.approx(head["r_3axis"], rel=1e-7)
        assert 0.0 < head["three_term_r_probs"] <= 1.0


def test_a_protein_model_reads_fasta_one_sequence_a_passage(tmp_path, capsys):
    """``--text`` takes FASTA: a tiny ESM-2 with ESM's own tokenizer analyses the first
    sequence of the bundled Swiss-Prot set long enough, one token per residue after <cls>;
    a length no sequence reaches is one line naming the longest."""
    from conftest import esm_tokenizer

    from ropesplit.empirical.model.corpus import SWISSPROT, read_fasta

    tokenizer = esm_tokenizer(tmp_path / "vocab")
    config = T.EsmConfig(vocab_size=33, hidden_size=32, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, pad_token_id=1,
                         mask_token_id=32, position_embedding_type="rotary",
                         token_dropout=False, max_position_embeddings=2048)  # fmt: skip
    folder = save_model(tmp_path / "esm", config, tokenizer=tokenizer)
    record = tmp_path / "esm.json"
    assert main(["analyze", "--model", folder, "--text", str(SWISSPROT), "--tokens", "48",
                 "--no-control", "--json", str(record)]) == 0  # fmt: skip
    ids = json.loads(record.read_text())["token_ids"]
    first = next(p.text for p in read_fasta(SWISSPROT.read_text()) if len(p.text) >= 47)
    assert ids == [0, *tokenizer.convert_tokens_to_ids(list(first[:47]))]
    capsys.readouterr()
    assert main(["analyze", "--model", folder, "--text", str(SWISSPROT), "--tokens", "1600",
                 "--no-control"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert err.endswith("no sequence of the FASTA file has 1600 tokens (--tokens); the longest "
                        "has 1522") and "\n" not in err  # fmt: skip
