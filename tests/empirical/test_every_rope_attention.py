"""Every RoPE attention transformers ships, on its known truth: tiny models of the shapes
that need more than one RoPE head per layer (tests/families.py builds them all, slowly).

- layer by layer: a hybrid's linear layers and a NoPE stack's NoPE layers are recorded,
  with their kind, and not analysed; the layers are keyed by their own index;
- the table as applied: a RoPE function that re-interleaves its table (GLM) or works on
  complex ``freqs_cis`` with a weightless norm after it (Llama 4);
- sinks in the softmax's normaliser (gpt-oss), a window kept only in the mask
  (Phi-3.5-MoE), a per-key bias in the mask (Doge);
- multi-head latent attention, planted: a constant shared ``k_pe`` makes the RoPE
  sub-head's split exact (E = 0), a varying one breaks it.
"""

from __future__ import annotations

import families
import numpy as np
import pytest
import torch
import transformers as T

from ropesplit.core.errors import ValidationError
from ropesplit.empirical import capture
from ropesplit.empirical.analysis.analyze import analyze, analyze_capture
from ropesplit.empirical.model.loading import from_model
from ropesplit.empirical.model.validate import mask_window

pytestmark = pytest.mark.slow  # a dozen tiny models built and captured (make test runs them)


def tiny(model_type: str, seed: int = 0, **fields):
    with families._quiet():
        config = families.tiny_config(model_type, **fields)
        torch.manual_seed(seed)
        return from_model(T.AutoModelForCausalLM.from_config(config))


def ids(n: int = 24) -> torch.Tensor:
    return torch.randint(3, 250, (n,), generator=torch.Generator().manual_seed(0))


def test_a_hybrid_is_analysed_on_its_softmax_layers_only():
    """Qwen3.5: three gated-delta-net layers, then one softmax layer with RoPE."""
    loaded = tiny("qwen3_5_text")
    assert loaded.layers == [3]
    assert loaded.attn.not_analysed == {0: "linear_attention", 1: "linear_attention",
                                        2: "linear_attention"}  # fmt: skip
    assert loaded.attn.describe() == ("1 of 4 layers analysed (not: linear_attention at layers "
                                      "0, 1, 2)")  # fmt: skip
    result = analyze(loaded, ids())
    record = result.to_dict()
    assert record["layers_analysed"] == [3] and {r["layer"] for r in result.heads} == {3}
    assert [x["layer"] for x in record["layers_not_analysed"]] == [0, 1, 2]


def test_nope_layers_are_recorded_and_the_rest_keyed_by_their_own_index():
    """SmolLM3's real pattern: NoPE every fourth layer."""
    loaded = tiny("smollm3", no_rope_layers=[1, 1, 1, 0], num_hidden_layers=4)
    assert loaded.layers == [0, 1, 2] and loaded.attn.not_analysed == {3: "NoPE"}
    cache = capture(loaded, ids())
    assert [layer.layer for layer in cache.layers] == [0, 1, 2]
    assert cache["q", 2].shape == cache.layer(2).q.shape
    with pytest.raises(KeyError, match="layer 3 is not analysed"):
        cache["q", 3]


def test_a_re_interleaved_table_is_read_as_the_function_applies_it():
    """GLM-4 hands its RoPE function a half-split table and the function re-interleaves it:
    the capture reads the rotation the function applies (pairs (2l, 2l+1), partial)."""
    loaded = tiny("glm4")
    cache = capture(loaded, ids())
    for layer in cache.layers:
        assert layer.layout == "interleaved" and layer.rotary_dim < layer.head_dim
    assert cache.rope_max_rel_diff < 1e-6 and cache.logit_max_rel_diff < 1e-6


def test_a_weightless_norm_after_rope_is_exact_on_the_normalised_vectors():
    """Llama 4: complex freqs_cis, then an RMS norm without weights on q and k: the capture
    folds each vector's norm into its pre-RoPE q/k, and the logits are rebuilt."""
    loaded = tiny("llama4_text", use_qk_norm=True)
    assert any(hasattr(m, "qk_norm") for m in loaded.attn.modules)
    cache = capture(loaded, ids())
    layer = cache.layers[0]
    # RMS-normalised: mean square ms / (ms + eps) of the raw one, just under 1
    squares = layer.q.double().pow(2).mean(-1)
    assert bool((squares < 1.0).all()) and bool((squares > 0.99).all())
    assert cache.rope_max_rel_diff < 1e-5 and cache.logit_max_rel_diff < 1e-5


def test_sinks_enter_the_normaliser_and_are_recorded_per_head():
    loaded = tiny("gpt_oss")
    with torch.no_grad():
        for module in loaded.attn.modules:
            module.sinks.copy_(torch.linspace(-2.0, 3.0, module.sinks.numel()))
    cache = capture(loaded, ids())
    for layer, module in zip(cache.layers, loaded.attn.modules, strict=True):
        torch.testing.assert_close(layer.sinks, module.sinks.detach().float())
    assert cache.reconstruction_max_abs_diff < 1e-5  # with the sink in the normaliser
    rows = analyze_capture(cache)
    assert all("sink" in row for row in rows)


def test_a_window_kept_only_in_the_mask_is_read_off_the_mask():
    """Phi-3.5-MoE passes no sliding_window to its attention: the pairs are the mask's."""
    loaded = tiny("phimoe", sliding_window=8)
    cache = capture(loaded, ids())
    assert {layer.window for layer in cache.layers} == {8}


def test_mask_window_reads_causal_and_banded_masks_and_refuses_others():
    n = 10
    i = torch.arange(n)
    causal = torch.where(i[None] <= i[:, None], 0.0, -1e30)[None, None]
    assert mask_window(causal) is None
    banded = torch.where((i[None] <= i[:, None]) & (i[:, None] - i[None] < 4), 0.0, -1e30)
    assert mask_window(banded[None, None]) == 4
    gap = causal.clone()
    gap[0, 0, 7, 2] = -1e30  # a hole no window makes
    with pytest.raises(ValidationError, match="no causal window describes"):
        mask_window(gap)


def test_a_per_key_bias_in_the_mask_enters_the_probabilities_not_the_split():
    loaded = tiny("doge")
    cache = capture(loaded, ids())
    assert cache.reconstruction_max_abs_diff < 1e-5 and cache.logit_max_rel_diff < 1e-5


def deepseek_v3(planted: bool):
    """A tiny DeepSeek-V3 whose shared k_pe is constant over tokens (``planted``: the
    k_pe rows of kv_a_proj_with_mqa zero, their bias not) or as initialised."""
    loaded = tiny("deepseek_v3", attention_bias=True)
    if planted:
        with torch.no_grad():
            for module in loaded.attn.modules:
                proj, rope = module.kv_a_proj_with_mqa, module.qk_rope_head_dim
                proj.weight[-rope:] = 0.0
                proj.bias[-rope:] = torch.linspace(-1.0, 1.0, rope)
    return loaded


def test_planted_mla_makes_the_rope_subhead_split_exact_and_a_varying_k_pe_breaks_it():
    exact = analyze(deepseek_v3(planted=True), ids()).heads
    broken = analyze(deepseek_v3(planted=False), ids()).heads
    for row in exact:
        assert row["remainder_share_rope_subhead"] < 1e-12
        assert row["r_split_rope_subhead"] == pytest.approx(1.0, abs=1e-12)
        assert 0.0 < row["rotary_share"] < 1.0
    assert np.median([r["remainder_share_rope_subhead"] for r in broken]) > 0.05
    assert np.median([r["r_split_rope_subhead"] for r in broken]) < 0.999


@pytest.mark.parametrize("shifts", [(0, None, 9), (9, 0, 9)])
def test_each_sequence_of_a_batch_gets_the_table_of_its_own_positions(shifts):
    """claims measures each passage at positions 0..N-1 and at jittered ones in one batch:
    the table is read per sequence (a regression: the first sequence's served all), also
    where sequences share their positions and are probed once (None: reversed)."""
    from ropesplit.empirical.model.capture import capture_batch

    loaded = tiny("qwen3_5_text")  # a quarter of the head rotates: the probe reads it
    batch = torch.stack([ids(), ids(), ids()])
    positions = torch.stack([torch.arange(24).flip(0) if shift is None
                             else torch.arange(24) + shift for shift in shifts])  # fmt: skip
    caches = capture_batch(loaded, batch, positions, on_layer=lambda layers: None)
    assert max(cache.rope_max_rel_diff for cache in caches) < 1e-6


def hunyuan(gain_q, gain_k):
    loaded = tiny("hunyuan_v1_dense")
    with torch.no_grad():
        for module in loaded.attn.modules:
            module.query_layernorm.weight.copy_(gain_q)
            module.key_layernorm.weight.copy_(gain_k)
    return loaded


def test_learned_gains_after_rope_split_into_a_relative_logit_and_a_term_in_i_plus_j():
    """Hunyuan's query/key norms have learned per-channel weights after RoPE. Planted
    gains equal within each pair (coordinates l, l + d/2) add no absolute term; unequal
    ones add one, split off and reported per head, with the capture still exact."""
    d = 16
    half = torch.linspace(0.5, 1.5, d // 2)
    even = analyze(hunyuan(torch.cat([half, half]), torch.cat([half.flip(0), half.flip(0)])),
                   ids()).heads
    assert all(row["absolute_share"] < 1e-10 for row in even)  # the fitted gains: float32
    loaded = hunyuan(torch.linspace(0.3, 2.0, d), torch.linspace(2.0, 0.6, d))
    cache = capture(loaded, ids())
    assert cache.logit_max_rel_diff < 1e-5 and cache.rope_max_rel_diff < 1e-5
    shares = np.concatenate([layer.absolute_share for layer in cache.layers])
    assert np.all((shares > 0.0) & (shares < 1.0))
