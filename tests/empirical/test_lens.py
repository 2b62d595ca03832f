"""TransformerLens as a source: a tiny random HookedTransformer, built from a
config (no hub), and the Hugging Face Llama with the same weights give the same statistics."""

from __future__ import annotations

import pytest
import torch
from conftest import llama_config
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions import convert_llama_weights

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical import load_model
from ropesplit.empirical.adapter.configs import rope_spec
from ropesplit.empirical.analysis.analyze import analyze
from ropesplit.empirical.analysis.lens import analyze_lens

STATS = ("r_split", "r_split_rowcentred", "r_3axis", "remainder_share", "tightness_max",
         "lowfreq_share_k", "lowfreq_share_q")  # fmt: skip


@pytest.fixture(scope="module")
def twins():
    """A random-init Llama and the HookedTransformer converted from its weights."""
    hf_cfg = llama_config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                           num_hidden_layers=2, intermediate_size=64, vocab_size=128,
                           max_position_embeddings=256, rms_norm_eps=1e-6)  # fmt: skip
    hf = load_model(hf_cfg, seed=0)
    cfg = HookedTransformerConfig(
        d_model=64, d_head=16, n_heads=4, n_key_value_heads=2, d_mlp=64, n_layers=2, n_ctx=256,
        d_vocab=128, act_fn="silu", normalization_type="RMS", eps=1e-6,
        positional_embedding_type="rotary", rotary_dim=16, rotary_base=10000.0,
        rotary_adjacent_pairs=False, final_rms=True, gated_mlp=True,
        original_architecture="LlamaForCausalLM",
    )  # fmt: skip
    lens = HookedTransformer(cfg)
    lens.load_and_process_state_dict(convert_llama_weights(hf.model, cfg), fold_ln=False,
                                     center_writing_weights=False, center_unembed=False,
                                     fold_value_biases=False,
                                     refactor_factored_attn_matrices=False)  # fmt: skip
    return hf, lens.eval()


def test_the_spec_is_read_from_the_lens_config(twins):
    _, lens = twins
    spec = rope_spec(lens.cfg)
    assert spec.layout == "half" and spec.rotary_dim is None and spec.kv_map == (0, 0, 1, 1)
    assert spec.scale == pytest.approx(0.25) and spec.theta[1] == pytest.approx(10000 ** -0.125)


def test_a_hooked_transformer_and_its_hf_twin_give_the_same_statistics(twins):
    hf, lens = twins
    ids = torch.randint(0, 128, (1, 48), generator=torch.Generator().manual_seed(1))
    want = analyze(hf, ids[0]).heads
    got = analyze_lens(lens, ids).heads
    _, cache = lens.run_with_cache(ids)  # the user's own cache works the same
    again = analyze_lens(lens, cache=cache).heads
    assert len(got) == len(want) == 8
    for a, b, c in zip(got, want, again, strict=True):
        assert (a["layer"], a["head"], a["kv_head"]) == (b["layer"], b["head"], b["kv_head"])
        for stat in STATS:
            assert a[stat] == pytest.approx(b[stat], rel=1e-6, abs=1e-9), stat
            assert c[stat] == a[stat]


def test_a_cache_without_the_pre_rope_hooks_is_refused(twins):
    _, lens = twins
    ids = torch.zeros(1, 8, dtype=torch.long)
    _, cache = lens.run_with_cache(ids, names_filter=lambda name: "hook_rot" in name)
    with pytest.raises(RopesplitError, match="^the cache has no blocks.0.attn.hook_q"):
        analyze_lens(lens, cache=cache)
