"""Bring your own model: an in-memory transformers causal LM and its tokenizer.

A tiny Llama is saved with ``save_pretrained`` (no download), then read both
ways: by path, and as objects held in memory (loaded with the SDPA attention
a notebook would have). Both give the same token ids and the same per-head
statistics; the random-init control comes from the object's config; objects
ropesplit cannot read fail with one line.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import transformers as T
from conftest import TEXT, TINY, llama_config, save_model

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical import analyze, load_model, run_experiments, tokenize
from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE, STATISTICS
from ropesplit.empirical.experiments import ExperimentSettings
from ropesplit.empirical.model.loading import Placement, from_model, random_init_twin


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_model(tmp_path_factory.mktemp("byo") / "llama", llama_config(**TINY))


def objects(folder, **kwargs):
    model = T.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa", **kwargs)
    return model, T.AutoTokenizer.from_pretrained(folder)


def test_object_and_path_give_the_same_per_head_numbers(folder):
    by_path = load_model(folder)
    model, tok = objects(folder)
    assert model.config._attn_implementation == "sdpa"
    by_object = load_model(model, tokenizer=tok)
    assert model.config._attn_implementation == "eager"  # switched in place for the capture
    ids_path, ids_object = tokenize(by_path, TEXT, 40), tokenize(by_object, TEXT, 40)
    assert ids_path.tolist() == ids_object.tolist()
    measure = replace(DEFAULT_MEASURE, seed=3)
    a = analyze(by_path, ids_path, measure=measure)
    b = analyze(by_object, ids_object, measure=measure)
    assert len(a.heads) == len(b.heads) == TINY["num_hidden_layers"] * TINY["num_attention_heads"]
    for row_a, row_b in zip(a.heads, b.heads, strict=True):
        assert (row_a["layer"], row_a["head"]) == (row_b["layer"], row_b["head"])
        for name in STATISTICS:
            assert row_a[name] == pytest.approx(row_b[name], rel=1e-9, abs=1e-12, nan_ok=True)
    # a different model is not "equal": the comparison can fail
    other = analyze(random_init_twin(by_path, seed=5), ids_path, measure=measure)
    pairs = zip(a.heads, other.heads, strict=True)
    assert any(abs(x["r_split"] - y["r_split"]) > 1e-6 for x, y in pairs)


def test_object_keeps_its_dtype_unless_told_and_runs_the_experiments(folder):
    model, tok = objects(folder, dtype=torch.float64)
    loaded = load_model(model, tokenizer=tok, name="my-fine-tune")
    assert loaded.name == "my-fine-tune" and loaded.model.dtype == torch.float64
    moved = load_model(model, tokenizer=tok, name="my-fine-tune",
                       placement=Placement(dtype="float32"))
    assert moved.model.dtype == torch.float32
    ids = tokenize(moved, TEXT, 48)
    record = run_experiments(moved, ids, experiments=["distance"],
                             settings=ExperimentSettings(draws=1, layers=(0, 1)))
    assert record["header"]["model"] == "my-fine-tune" and record["distance"]


def test_random_init_control_is_built_from_the_objects_config(folder):
    model, tok = objects(folder)
    control = load_model(model, tokenizer=tok, random_init=True, seed=7)
    assert control.random_init and control.tokenizer is tok
    assert control.model is not model
    assert type(control.model) is type(model)
    assert control.config.num_hidden_layers == model.config.num_hidden_layers
    same = load_model(model, tokenizer=tok, random_init=True, seed=7)
    params = list(control.model.parameters())
    assert any(not torch.equal(p, q) for p, q in zip(params, model.parameters(), strict=True))
    assert all(torch.equal(p, q) for p, q in zip(params, same.model.parameters(), strict=True))


def quantised(model):
    """Integer weights, as a quantised checkpoint holds them."""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, torch.nn.Parameter(param.data.to(torch.int8), False))
    return model


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: torch.nn.Linear(2, 2), "model must be a transformers PreTrainedModel, got Linear"),
        (lambda: 42, "model must be a path, a Hugging Face id, a PretrainedConfig or a "
                     "transformers causal LM, got int"),  # fmt: skip
        (lambda: T.GPT2LMHeadModel(T.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64)),
         "model type gpt2 has no rotary position embedding"),  # fmt: skip
        (lambda: quantised(T.LlamaForCausalLM(llama_config(**TINY))),
         "model dtype must be one of float32, float64, bfloat16, float16, got int8"),  # fmt: skip
    ],
)
def test_unreadable_objects_fail_with_one_line(make, message):
    with pytest.raises(RopesplitError) as info:
        load_model(make())
    text = str(info.value)
    assert message in text and "\n" not in text


def test_a_model_without_a_head_loads_for_analysis():
    """The analysis reads attention only: a base model (an encoder's, or a decoder's body)
    loads as its causal LM does."""
    config = llama_config(**TINY)
    loaded = load_model(T.LlamaModel(config))
    assert loaded.attn.analysed == list(range(config.num_hidden_layers))


def test_tokenizer_checks(folder):
    model, _ = objects(folder)
    with pytest.raises(RopesplitError, match="tokenizer must be a transformers tokenizer, got int"):
        from_model(model, 3)
    with pytest.raises(RopesplitError, match="tokenizer= goes with a model object"):
        load_model(folder, tokenizer=object())


def test_report_loads_a_model_object(folder, tmp_path):
    from ropesplit.report import pipeline, stages

    model, tok = objects(folder)
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    settings = pipeline.RunSettings(model=model, tokenizer=tok, text=str(text), tokens=40)
    loaded, control, ids, _ = stages._load(settings)
    assert loaded.model is model and control is not None and control.random_init
    assert control.config.hidden_size == model.config.hidden_size
    assert ids.tolist() == tok(TEXT)["input_ids"][:40]


def test_a_model_is_named_by_the_name_it_gives_itself(tmp_path):
    """A folder whose config records a hub id is named by it; one that records none, by its
    path (the records and figure 20 label models so, not by a temporary folder)."""
    import json

    from conftest import TINY, llama_config, save_model

    from ropesplit.empirical.model.loading import resolve_source, self_name

    named = save_model(tmp_path / "named", llama_config(**TINY))
    config = json.loads((tmp_path / "named" / "config.json").read_text())
    (tmp_path / "named" / "config.json").write_text(
        json.dumps({**config, "_name_or_path": "org/tiny-llama"}))
    bare = save_model(tmp_path / "bare", llama_config(**TINY))
    assert load_model(named).name == "org/tiny-llama"
    assert load_model(bare).name == bare
    assert resolve_source("org/some-model", None)[2] == "org/some-model"  # a hub id as given
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"_name_or_path": "/tmp/x"}))
    assert self_name(tmp_path / "odd") is None  # a path is no name
