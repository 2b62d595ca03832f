"""The bridge into the numerics layer, on tiny models and on the real default model.

The strongest check of the bridge: the logits the numerics layer builds from
the captured q/k with the derived ``theta``, scale, layout and rotary
dimension are the model's own logits (recovered from its probabilities up to
a per-row constant, the softmax's blind spot: docs/theory.md section 4).
"""

from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pytest
import torch
import transformers as T
from conftest import llama_config

from ropesplit.core.errors import RopesplitError, ValidationError
from ropesplit.empirical import capture, default_text, load_model, tokenize
from ropesplit.empirical.analysis.analyze import (
    DEFAULT_MEASURE,
    STATISTICS,
    analysis_record,
    analyze,
    analyze_batch,
    analyze_capture,
    check_memory,
    memory_estimate,
    paired_difference,
)
from ropesplit.empirical.model.loading import random_init_twin
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.reference import COMPARED
from ropesplit.numerics.spec import RopeSpec

COMMON = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=2,
    intermediate_size=64,
    vocab_size=128,
    max_position_embeddings=128,
)
CONFIGS = {
    "llama": llama_config(**COMMON),
    "gemma3": T.Gemma3TextConfig(
        head_dim=16, sliding_window=6, query_pre_attn_scalar=20, sliding_window_pattern=2, **COMMON
    ),
    "phi": T.PhiConfig(partial_rotary_factor=0.5, **COMMON),
    "gpt_neox": T.GPTNeoXConfig(rotary_pct=0.25, **{**COMMON, "num_key_value_heads": 4}),
}
IDS = torch.randint(0, 128, (30,), generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_numerics_logits_are_the_models_logits(arch):
    from ropesplit.numerics.split import split_head

    loaded = load_model(CONFIGS[arch], seed=2)
    positions = torch.arange(30) + 3  # a shift changes every angle, not the logits' pattern
    cache = capture(loaded, IDS, positions)
    for layer in range(2):
        for head in (0, 3):
            kv = int(cache["kv_map", layer][head])
            spec = RopeSpec.from_arrays(cache["theta", layer], cache["scale", layer],
                                        cache["layout", layer], cache["rotary_dim", layer],
                                        cache["window", layer])  # fmt: skip
            split = split_head(
                cache["q", layer][head].double().numpy(),
                cache["k", layer][kv].double().numpy(),
                spec,
                positions=positions.numpy(),
            )
            mask = np.asarray(split.mask, dtype=bool)  # (N, N) causal (and windowed)
            with np.errstate(divide="ignore"):  # masked pairs: p = 0 -> log p = -inf, checked
                logp = np.log(cache["probs", layer][head].double().numpy())  # (N, N)
            assert np.array_equal(mask, np.isfinite(logp) & (logp > -1e30)), (arch, layer)
            gap = np.where(mask, np.asarray(split.W) - logp, np.nan)  # W - log p = logsumexp_i
            spread = np.nanmax(gap, axis=1) - np.nanmin(gap, axis=1)  # (N,) per-row constant?
            assert spread.max() < 2e-5, (arch, layer, head, spread.max())
            total = np.asarray(split.f) + np.asarray(split.g) + np.asarray(split.E)
            np.testing.assert_allclose(total[mask], np.asarray(split.W)[mask], atol=1e-10)


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_analyze_gives_finite_statistics_per_head(arch):
    loaded = load_model(CONFIGS[arch], seed=0)
    result = analyze(loaded, IDS, measure=replace(DEFAULT_MEASURE, seed=0))
    heads = 4 * 2
    assert len(result.heads) == heads
    assert [(r["layer"], r["head"]) for r in result.heads] == [
        (l, h) for l in (0, 1) for h in range(4)
    ]
    for row in result.heads:
        assert all(np.isfinite(row[name]) for name in STATISTICS), row
        assert 0.0 <= row["tightness_median"] <= row["tightness_max"] <= 1.0
        assert 0.0 <= row["lowfreq_share_k"] <= 1.0
    for name in STATISTICS:
        assert result.summary[name] == pytest.approx(np.mean([r[name] for r in result.heads]))
    again = analyze(loaded, IDS, measure=replace(DEFAULT_MEASURE, seed=0))
    assert again.heads == result.heads  # deterministic for a seed


def test_every_head_under_every_reference():
    loaded = load_model(CONFIGS["llama"], seed=1)
    # the default: the paper's split, fixed before the data
    zero = analyze(loaded, IDS, measure=replace(DEFAULT_MEASURE, seed=0))
    mean = analyze(loaded, IDS, measure=replace(DEFAULT_MEASURE, seed=0, reference="mean"))
    for a, b in zip(zero.heads, mean.heads, strict=True):
        assert list(a["by_reference"]) == list(COMPARED) and a["reference"] == "zero"
        assert list(b["by_reference"]) == ["mean", *[c for c in COMPARED if c != "mean"]]
        assert a["r_split"] == a["by_reference"]["zero"]["r_split"]
        assert b["r_split"] == b["by_reference"]["mean"]["r_split"]
        for spec in COMPARED:  # the same numbers whichever split the columns use
            for name, value in a["by_reference"][spec].items():
                assert b["by_reference"][spec][name] == pytest.approx(value, abs=1e-12)
    record = analysis_record(zero, analyze(random_init_twin(loaded, 3), IDS), seed=0)
    for spec in COMPARED:
        ci = record["by_reference"][spec]["r_split"]
        assert ci["low"] <= ci["mean"] <= ci["high"] and ci["n"] == 8
        assert ci["mean"] == pytest.approx(np.mean([r["by_reference"][spec]["r_split"]
                                                    for r in zero.heads]))  # fmt: skip
        diff = record["control"]["trained_minus_control"][spec]
        assert diff["low"] <= diff["mean"] <= diff["high"]
    # known truth: a model minus itself is 0 with a zero-width interval
    same = paired_difference(zero.heads, [zero.heads, zero.heads], "mean")
    assert same["mean"] == same["low"] == same["high"] == 0.0


def test_controls_are_the_numerics_with_permuted_frequencies_and_other_kbar():
    from ropesplit.numerics.stats import layer_statistics

    loaded = load_model(CONFIGS["llama"], seed=4)
    cache = capture(loaded, IDS)
    mean = replace(DEFAULT_MEASURE, reference="mean", references=())
    shuffled = analyze_capture(cache, replace(mean, references=("mean",)), shuffle_frequencies=7,
                               layers=[1])  # fmt: skip
    skip = analyze_capture(cache, replace(mean, kbar_rule="mean-skip-first"), layers=[1])
    plain = analyze_capture(cache, mean, layers=[1])
    layer = cache.layers[1]
    q, k = layer.q.double().numpy(), layer.k.double().numpy()
    order = np.random.default_rng([7, 1]).permutation(len(layer.theta))
    positions = cache.positions.numpy()
    permuted = RopeSpec.from_arrays(np.asarray(layer.theta)[order], layer.scale, layer.layout,
                                    kv_map=layer.kv_map)  # fmt: skip
    want = layer_statistics(q, k, permuted, Measure(reference="mean", references=("mean",)),
                            positions=positions)  # fmt: skip
    spec = RopeSpec.from_arrays(layer.theta, layer.scale, layer.layout, kv_map=layer.kv_map)
    want_skip = layer_statistics(q, k, spec, Measure(reference="mean"), positions=positions,
                                 kbar=k[:, 1:].mean(1))  # fmt: skip
    for row, w, rs, ws, rp in zip(shuffled, want, skip, want_skip, plain, strict=True):
        assert row["layer"] == 1 and row["by_reference"] == w.by_reference
        assert rs["r_split"] == ws.r_split != rp["r_split"]
        assert row["r_split"] != rp["r_split"]  # the frequency order matters to the split
    with pytest.raises(RopesplitError,
                       match="^kbar_rule must be one of mean, mean-skip-first, got 'median'$"):
        analyze_capture(cache, replace(DEFAULT_MEASURE, kbar_rule="median"))


def test_second_default_text_is_python_source():
    code = default_text("code")
    assert code.startswith('"""Text wrapping and filling.') and "def heappush" in code
    assert code == default_text("code") and default_text() == default_text("docs")
    with pytest.raises(RopesplitError, match="text kind must be one of docs, code, got 'poem'"):
        default_text("poem")


def test_a_batch_is_its_sequences_one_by_one(tiny_model):
    """Many passages in one streamed forward pass give each passage's own run."""
    from ropesplit.empirical.model.capture import capture_batch

    ids = torch.randint(0, 128, (3, 40), generator=torch.Generator().manual_seed(1))
    every = replace(DEFAULT_MEASURE, pair_budget=None)  # every pair's bound checked
    batch = analyze_batch(tiny_model, ids, measure=every)
    assert len(batch) == 3 and batch[0].seconds == batch[2].seconds
    for b in range(3):
        one = analyze(tiny_model, ids[b], measure=every)
        assert batch[b].token_ids == ids[b].tolist()
        for x, y in zip(batch[b].heads, one.heads, strict=True):
            assert (x["layer"], x["head"]) == (y["layer"], y["head"])
            for name in STATISTICS:
                assert x[name] == pytest.approx(y[name], rel=1e-6, abs=1e-9), name
    assert batch[0].heads != batch[1].heads  # the sequences differ: so do their statistics
    seen = []
    caches = capture_batch(tiny_model, ids, on_layer=lambda layers: seen.append(
        [(one.layer, tuple(one.q.shape)) for one in layers]))  # fmt: skip
    assert seen == [[(layer, (4, 40, 16))] * 3 for layer in range(2)]
    assert all(lc.q.numel() == 0 and lc.probs is None for c in caches for lc in c.layers)
    assert caches[1].validation()["attention"] == batch[1].validation["attention"]
    numbers = {k: v for k, v in caches[1].validation().items() if isinstance(v, int | float)}
    assert numbers == pytest.approx({k: v for k, v in batch[1].validation.items()
                                     if isinstance(v, int | float)}, nan_ok=True)  # fmt: skip


def test_memory_check_names_both_numbers(monkeypatch):
    loaded = load_model(CONFIGS["llama"], seed=0)
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    fixed = memory_estimate(loaded, 512, sequences=0)  # weights and state
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # two sequences measured side by side, each with its work
    try:
        one, two, three = (memory_estimate(loaded, 512, sequences=b) for b in (1, 2, 3))
        work = min(2**29, 4 * 4 * 512**2)  # the bound's ratios of one sequence (4 heads)
        assert two - one == one - fixed > 0 and fixed > weights  # both sequences at work
        assert three - two == two - one - work  # the third waits: linear in the batch
        torch.set_num_threads(1)
        assert memory_estimate(loaded, 512, sequences=2) == two - work  # one at a time
    finally:
        torch.set_num_threads(threads)
    assert memory_estimate(loaded, 1024) - fixed > 3 * (one - fixed)  # the N^2 term
    analyze_module = importlib.import_module("ropesplit.empirical.analysis.analyze")
    monkeypatch.setattr(analyze_module, "_available_bytes", lambda device: 2**30)
    check_memory(loaded, 512)
    with pytest.raises(RopesplitError,
                       match=r"^100000 tokens need about \d+\.\d GiB of memory beside the loaded"):
        check_memory(loaded, 100_000)
    with pytest.raises(RopesplitError, match=r"^64 x 4096 tokens need about .* smaller batches$"):
        check_memory(loaded, 4096, sequences=64)
    # the weights are resident already: what is available must hold what the run adds
    adds = memory_estimate(loaded, 512) - weights
    monkeypatch.setattr(analyze_module, "_available_bytes", lambda device: adds)
    check_memory(loaded, 512)
    monkeypatch.setattr(analyze_module, "_available_bytes", lambda device: adds - 1)
    with pytest.raises(RopesplitError, match=r"^512 tokens need about"):
        check_memory(loaded, 512)


_PEAK = """
import json, sys
sys.path.insert(0, {tests!r})
import torch
from conftest import tiny_llama
from ropesplit.empirical.analysis.analyze import analyze_batch, memory_estimate
from ropesplit.empirical.model.memory import peak_resident, resident
loaded = tiny_llama(context=4096)
ids = torch.randint(0, 128, ({batch}, {tokens}), generator=torch.Generator().manual_seed(0))
analyze_batch(loaded, ids[:1, :64])  # compiles the kernels first: their peak is not the run's
rss = resident()
before = peak_resident(reset=True)  # the peak from here: the run's own
analyze_batch(loaded, ids)
peak = peak_resident()
weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
print(json.dumps({{"extra": peak - rss, "grew": peak > before,
                  "predicted": memory_estimate(loaded, {tokens}, {batch}) - weights}}))
"""


@pytest.mark.slow  # a measured peak
def test_the_memory_estimate_follows_a_measured_peak():
    """check_memory is built on what the streamed capture and analysis allocate;
    a measured peak (a fresh process, 2 x 2048 tokens, the (N, N) terms dominating) stays
    below the estimate and above a third of it (the estimate neither misses nor refuses
    runs that fit by a wide margin)."""
    import json
    import pathlib
    import subprocess
    import sys

    code = _PEAK.format(tests=str(pathlib.Path(__file__).parents[1]), batch=2, tokens=2048)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=600).stdout  # fmt: skip
    got = json.loads(out.strip().splitlines()[-1])
    assert got["grew"]  # the run's own peak, not the warm-up's
    assert got["predicted"] / 3 < got["extra"] < got["predicted"], got


# ------------------------------------------------------------- the real default model


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """The embedded model, read from test_converted's cache of it once that test has made it
    (the same weights: it checks them), else through the run's own cache."""
    from conftest import SMOLLM2_CACHE, shared_tmp

    from ropesplit.empirical.model.converted import CACHE_ENV

    cache = shared_tmp(tmp_path_factory) / SMOLLM2_CACHE
    with pytest.MonkeyPatch.context() as patch:
        if any(cache.glob("gguf/*/model.safetensors")):  # whole or absent: written, renamed
            patch.setenv(CACHE_ENV, str(cache))
        return load_model()


@pytest.mark.slow  # the real model
def test_default_model_capture_and_statistics(smollm2):
    ids = tokenize(smollm2, default_text(), 48)
    assert ids.tolist() == tokenize(smollm2, default_text(), 64)[:48].tolist()
    result = analyze(smollm2, ids, measure=replace(DEFAULT_MEASURE, seed=0))
    assert len(result.heads) == 270  # 30 layers x 9 query heads
    assert result.reconstruction_max_abs_diff <= 1e-4
    assert {r["kv_head"] for r in result.heads if r["layer"] == 7} == {0, 1, 2}
    assert {r["rope_base"] for r in result.heads} == {100000.0}
    assert all(r["tightness_max"] <= 1.0 for r in result.heads)
    assert all(np.isfinite(r[name]) for r in result.heads for name in STATISTICS)


def test_reprs_are_one_line_and_kv_map_none_is_grouped_query_attention():
    """Regression: repr(LoadedModel) printed the module tree twice, repr(Analysis) every head;
    layer_statistics(kv_map=None) raised a raw TypeError. A RopeSpec without a kv_map groups
    the query heads as grouped-query attention does, h // (H / Hkv), and refuses an uneven
    grouping in one line."""
    from ropesplit.numerics.stats import layer_statistics

    loaded = load_model(CONFIGS["llama"], seed=1)
    text = repr(loaded)
    assert "\n" not in text and text.startswith("LoadedModel(") and "layers=" in text
    result = analyze(loaded, IDS, measure=replace(DEFAULT_MEASURE, seed=0))
    text = repr(result)
    assert "\n" not in text and f"heads={len(result.heads)}" in text and "r_split" in text
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(4, 12, 8)), rng.normal(size=(2, 12, 8))
    theta = 10.0 ** -np.arange(4)
    grouped = RopeSpec.from_arrays(theta, 0.3)  # no kv_map: h // (H / Hkv)
    assert grouped.kv_map is None and grouped.kv_heads(4, 2).tolist() == [0, 0, 1, 1]
    implicit = layer_statistics(q, k, grouped)
    explicit = layer_statistics(q, k, RopeSpec.from_arrays(theta, 0.3, kv_map=[0, 0, 1, 1]))
    assert [s.r_split for s in implicit] == [s.r_split for s in explicit]
    with pytest.raises(RopesplitError, match="^4 query heads cannot share 3 KV heads evenly"):
        layer_statistics(q, rng.normal(size=(3, 12, 8)), RopeSpec.from_arrays(theta, 0.3))


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_shuffled_frequencies_permute_every_table_and_restore(arch):
    """Every RoPE table (Gemma 3: one per layer type, with their ``original_`` twins) is
    permuted within the block, a permutation of itself, and given back exactly on exit; the
    capture inside checks theta rank-matched, so it succeeds and sees other frequencies."""
    from ropesplit.empirical.measurement.shuffled import shuffled_frequencies

    loaded = load_model(CONFIGS[arch], seed=2)
    tables = {f"{m}.{n}": b.clone() for m, mod in loaded.model.named_modules()
              for n, b in mod.named_buffers(recurse=False) if n.endswith("inv_freq")}  # fmt: skip
    assert len(tables) == (4 if arch == "gemma3" else 2)  # inv_freq and original_inv_freq
    theta = capture(loaded, IDS)["theta", 0]
    with shuffled_frequencies(loaded, seed=1) as null:
        assert not [k for k in vars(loaded.model) if "shuffled" in k]  # nothing planted
        inside = dict(loaded.model.named_buffers())
        for name, before in tables.items():
            after = inside[name]
            assert not torch.equal(after, before)
            assert torch.equal(after.sort().values, before.sort().values)
        with pytest.raises(ValidationError, match="theta of layer 0 does not match"):
            capture(loaded, IDS)  # without the null, the shuffled theta is a failed check
        shuffled = capture(loaded, IDS, null=null)["theta", 0]
    assert np.allclose(np.sort(shuffled), np.sort(theta)) and not np.allclose(shuffled, theta)
    after = dict(loaded.model.named_buffers())
    assert all(torch.equal(after[n], b) for n, b in tables.items())
