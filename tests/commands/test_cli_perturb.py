"""``ropesplit perturb`` end to end on a tiny randomly initialised Llama.

The loader is swapped for one that builds a tiny model from a config with a
character-level tokenizer, so the command runs its real path (tokenize,
capture, forward passes, tables, JSON) in seconds and without a download.
"""

from __future__ import annotations

import json

import pytest
from conftest import llama_config

from ropesplit.cli import main
from ropesplit.empirical import load_model

VOCAB = 128


class CharTokenizer:
    """Token id = code point mod the vocabulary: enough for tokenize()."""

    def __call__(self, text):
        return {"input_ids": [ord(c) % VOCAB for c in text]}


@pytest.fixture
def tiny_loader(monkeypatch):
    calls = []

    def fake_load_model(model=None, gguf_file=None, **kwargs):
        calls.append((model, gguf_file, kwargs))
        config = llama_config(
            hidden_size=32, num_attention_heads=2, num_key_value_heads=1, num_hidden_layers=2,
            intermediate_size=32, vocab_size=VOCAB, max_position_embeddings=64,
        )  # fmt: skip
        loaded = load_model(config, seed=0)
        loaded.tokenizer = CharTokenizer()
        return loaded

    monkeypatch.setattr("ropesplit.empirical.model.loading.load_model", fake_load_model)
    return calls


@pytest.mark.slow  # every experiment
def test_all_experiments_write_their_tables_and_json(tiny_loader, tmp_path, capsys):
    from ropesplit.empirical.experiments import EXPERIMENTS

    out = tmp_path / "x.json"
    code = main(["perturb", "--tokens", "40", "--draws", "2", "--json", str(out)])
    assert code == 0
    record = json.loads(out.read_text())
    assert list(record) == ["header", "experiments", *EXPERIMENTS]
    assert record["header"]["tokens"] == 40 and record["header"]["draws"] == 2
    outcomes = ("agrees", "disagrees", "inconclusive")
    text = capsys.readouterr().out
    for name, about in record["experiments"].items():
        assert about["prediction"] == EXPERIMENTS[name].prediction
        assert about["verdict"] in outcomes and about["reason"]
        assert all(row["verdict"] in outcomes and row["reason"] for row in record[name])
        flat = " ".join(text.split())  # prose wraps at 100 columns
        prediction = " ".join(f"prediction: {about['prediction']}".split())
        assert f"== {name}: " in text and prediction in flat
        assert f"verdict: {about['verdict'].upper()}: " in flat
    assert max(len(line) for line in text.splitlines()) <= 100  # the lines reached 376
    order = record["order"]
    assert all({"moved", "rate", "ratio", "ci_low", "ci_high", "scheme"} <= set(r) for r in order)
    assert all(r["tightness"] <= 1.0 for r in record["position"])
    captured = record["experiments"]["position"]["own_capture"]
    assert captured[0] == "text" and "jitter t=4 seed 0" in captured  # its own forward pass
    assert record["experiments"]["order"]["own_capture"] == []


def test_the_import_free_names_are_the_registry():
    from ropesplit.commands.perturb import NAMES
    from ropesplit.empirical.experiments import EXPERIMENTS

    assert NAMES == tuple(EXPERIMENTS)


def test_one_experiment_only(tiny_loader, tmp_path, capsys):
    out = tmp_path / "order.json"
    code = main(["perturb", "--experiment", "order", "--tokens", "24", "--draws", "1",
                 "--json", str(out)])  # fmt: skip
    assert code == 0
    assert list(json.loads(out.read_text())) == ["header", "experiments", "order"]
    assert "== distance" not in capsys.readouterr().out


def test_same_seed_same_json(tiny_loader, tmp_path):
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in paths:
        main(["perturb", "--experiment", "position", "--tokens", "24", "--draws", "2",
              "--seed", "3", "--json", str(path)])  # fmt: skip
    first, second = (json.loads(p.read_text()) for p in paths)
    first["header"].pop("seconds"), second["header"].pop("seconds")
    assert first == second


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tokens", "4"], "--tokens must be at least 16, got 4"),
        (["--draws", "0"], "argument --draws: must be at least 1, got 0"),
        (["--layers", "1,x"], "argument --layers: each value must be an integer, got 'x'"),
        (["--layers", "5", "--tokens", "24"], "layers must lie in [0, 2), got [5]"),
        (["--json", "/nonexistent/x.json"], "cannot write /nonexistent/x.json"),
        (["--text", "/nonexistent.txt"], "text file /nonexistent.txt does not exist"),
        (["--tokens", "70", "--experiment", "length"], "--tokens 70 exceeds the model's context"),
        # refused before the experiment's forward passes, not after 42 s of them
        (["--tokens", "32", "--experiment", "length"],
         "--experiment length needs text beyond the training length 64, got --tokens 32"),
    ],
)
def test_bad_input_is_one_line(tiny_loader, capsys, argv, message):
    try:
        code = main(["perturb", *argv])
    except SystemExit as exc:  # refused while parsing
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith(f"ropesplit perturb: error: {message}")
    assert "\n" not in err and "Traceback" not in err
