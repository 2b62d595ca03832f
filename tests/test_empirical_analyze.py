"""The bridge into the numerics layer, on tiny models and on the real default model (issue 4).

The strongest check of the bridge: the logits the numerics layer builds from
the captured q/k with the derived ``theta``, scale, layout and rotary
dimension are the model's own logits (recovered from its probabilities up to
a per-row constant, the softmax's blind spot: docs/theory.md section 4).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
import transformers as T
from ropesplit.empirical import capture, default_text, load_model, tokenize
from ropesplit.empirical.analyze import (
    STATISTICS,
    analysis_record,
    analyze,
    analyze_capture,
    check_memory,
    memory_estimate,
    paired_difference,
)
from ropesplit.empirical.models import random_init_twin
from ropesplit.numerics.reference import COMPARED

from ropesplit.errors import RopesplitError

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
    "llama": T.LlamaConfig(**COMMON),
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
            split = split_head(
                cache["q", layer][head].double().numpy(),
                cache["k", layer][kv].double().numpy(),
                cache["theta", layer],
                cache["scale", layer],
                positions=positions.numpy(),
                layout=cache["layout", layer],
                rotary_dim=cache["rotary_dim", layer],
                window=cache["window", layer],
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
    result = analyze(loaded, IDS, seed=0)
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
    again = analyze(loaded, IDS, seed=0)
    assert again.heads == result.heads  # deterministic for a seed


def test_every_head_under_every_reference():
    loaded = load_model(CONFIGS["llama"], seed=1)
    zero = analyze(loaded, IDS, seed=0)  # the default: the paper's split (issue 18)
    mean = analyze(loaded, IDS, seed=0, reference="mean")
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
    shuffled = analyze_capture(cache, shuffle_frequencies=7, reference="mean",
                               references=("mean",), layers=[1])  # fmt: skip
    skip = analyze_capture(cache, kbar="mean-skip-first", reference="mean", references=(),
                           layers=[1])  # fmt: skip
    plain = analyze_capture(cache, reference="mean", references=(), layers=[1])
    layer = cache.layers[1]
    q, k = layer.q.double().numpy(), layer.k.double().numpy()
    order = np.random.default_rng([7, 1]).permutation(len(layer.theta))
    common = dict(positions=cache.positions.numpy(), layout=layer.layout, reference="mean")
    want = layer_statistics(q, k, layer.kv_map, np.asarray(layer.theta)[order], layer.scale,
                            references=("mean",), **common)  # fmt: skip
    want_skip = layer_statistics(q, k, layer.kv_map, layer.theta, layer.scale,
                                 kbar=k[:, 1:].mean(1), **common)  # fmt: skip
    for row, w, rs, ws, rp in zip(shuffled, want, skip, want_skip, plain, strict=True):
        assert row["layer"] == 1 and row["by_reference"] == w.by_reference
        assert rs["r_split"] == ws.r_split != rp["r_split"]
        assert row["r_split"] != rp["r_split"]  # the frequency order matters to the split
    with pytest.raises(RopesplitError, match="kbar must be one of mean, mean-skip-first"):
        analyze_capture(cache, kbar="median")


def test_second_default_text_is_python_source():
    code = default_text("code")
    assert code.startswith('"""Text wrapping and filling.') and "def heappush" in code
    assert code == default_text("code") and default_text() == default_text("docs")
    with pytest.raises(RopesplitError, match="text kind must be one of docs, code, got 'poem'"):
        default_text("poem")


def test_memory_check_names_both_numbers(monkeypatch):
    from ropesplit.numerics.stats import _WORK_BYTES

    loaded = load_model(CONFIGS["llama"], seed=0)
    cfg = loaded.config
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    h, hkv, layers = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_hidden_layers
    d = cfg.hidden_size // h
    for n in (512, 4096, 40_000):  # the docstring's formula, written out
        want = (weights + n * (4 * cfg.vocab_size + 12 * layers * (h + hkv) * d)
                + n * n * 12 * h + min(_WORK_BYTES, 4 * h * n * n) + 2**26)  # fmt: skip
        assert memory_estimate(loaded, n) == want
    analyze_module = importlib.import_module("ropesplit.empirical.analyze")
    monkeypatch.setattr(analyze_module, "_available_bytes", lambda device: 2**30)
    check_memory(loaded, 512)
    with pytest.raises(RopesplitError, match=r"^100000 tokens need about \d+\.\d GiB of memory, "):
        check_memory(loaded, 100_000)


# ------------------------------------------------------------- the real default model


@pytest.fixture(scope="module")
def smollm2():
    return load_model()


def test_the_memory_estimate_covers_measured_peaks_and_no_longer_counts_nn_arrays(smollm2):
    """Issue 19: check_memory counted (N, N) float64 arrays the statistics no longer build
    (272 bytes per pair on SmolLM2) and refused runs that fit. The estimate stays above the
    extra peak measured over the loaded model (248, 407, 742 MiB at 512, 1024, 2048 tokens,
    benchmarks/bench_empirical.py) and below the old one for long texts."""
    weights = sum(p.numel() * p.element_size() for p in smollm2.model.parameters())
    for n, measured in ((512, 248), (1024, 407), (2048, 742)):
        assert memory_estimate(smollm2, n) - weights > measured * 2**20
    old = weights + 16_384**2 * (9 * 4 * 4 + 8 * 16)
    assert memory_estimate(smollm2, 16_384) < 0.6 * old


def test_default_model_capture_and_statistics(smollm2):
    ids = tokenize(smollm2, default_text(), 48)
    assert ids.tolist() == tokenize(smollm2, default_text(), 64)[:48].tolist()
    result = analyze(smollm2, ids, seed=0)
    assert len(result.heads) == 270  # 30 layers x 9 query heads
    assert result.reconstruction_max_abs_diff <= 1e-4
    assert {r["kv_head"] for r in result.heads if r["layer"] == 7} == {0, 1, 2}
    assert {r["rope_base"] for r in result.heads} == {100000.0}
    assert all(r["tightness_max"] <= 1.0 for r in result.heads)
    assert all(np.isfinite(r[name]) for r in result.heads for name in STATISTICS)


def test_reprs_are_one_line_and_kv_map_none_is_grouped_query_attention():
    """Issue 19: repr(LoadedModel) printed the module tree twice, repr(Analysis) every head;
    layer_statistics(kv_map=None) raised a raw TypeError."""
    from ropesplit.numerics.stats import layer_statistics

    loaded = load_model(CONFIGS["llama"], seed=1)
    text = repr(loaded)
    assert "\n" not in text and text.startswith("LoadedModel(") and "layers=" in text
    result = analyze(loaded, IDS, seed=0)
    text = repr(result)
    assert "\n" not in text and f"heads={len(result.heads)}" in text and "r_split" in text
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(4, 12, 8)), rng.normal(size=(2, 12, 8))
    theta = 10.0 ** -np.arange(4)
    implicit = layer_statistics(q, k, None, theta, 0.3)
    explicit = layer_statistics(q, k, [0, 0, 1, 1], theta, 0.3)
    assert [s.r_split for s in implicit] == [s.r_split for s in explicit]
    with pytest.raises(RopesplitError, match="^kv_map=None needs H a multiple of Hkv, got 4 and 3"):
        layer_statistics(q, rng.normal(size=(3, 12, 8)), None, theta, 0.3)
