"""The one adapter between transformers and the capture (empirical/adapter/).

It reads the RoPE call by position whether the modeling module's function is
plain or the kernel hub's ``(*args, **kwargs)`` module, restores everything
it touched, and refuses a model it cannot follow in one line.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
import transformers as T
import wrapped_rope
from conftest import TINY_VOCAB, llama_config, tiny_llama

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical import capture, load_model
from ropesplit.empirical.adapter import (
    NAME,
    AdapterError,
    record_pre_rope,
    taps,
)

SHAPE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
             intermediate_size=64, vocab_size=TINY_VOCAB, max_position_embeddings=96)  # fmt: skip


def ids(n: int = 24, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, TINY_VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def wrapped(cls: type = wrapped_rope.WrappedAttention):
    torch.manual_seed(0)
    return load_model(wrapped_rope.wrap(T.LlamaForCausalLM(llama_config(**SHAPE)), cls))


def test_a_hub_wrapped_rope_captures_what_the_plain_function_does(monkeypatch):
    """The kernel hub's ``(*args, **kwargs)`` module is read through a forward hook and
    gives the plain function's capture bit for bit; the stock Llama's too."""
    plain = capture(wrapped(), ids())
    hub = wrapped_rope.HubRope()
    monkeypatch.setattr(wrapped_rope, "apply_rotary_pos_emb", hub)
    through_hook = capture(wrapped(), ids())
    assert wrapped_rope.apply_rotary_pos_emb is hub and not hub._forward_hooks  # restored
    torch.manual_seed(0)
    stock = capture(load_model(T.LlamaForCausalLM(llama_config(**SHAPE))), ids())
    for name in ("q", "k", "cos", "sin", "probs"):
        for layer in range(2):
            assert torch.equal(through_hook[name, layer], plain[name, layer]), (name, layer)
            assert torch.equal(stock[name, layer], plain[name, layer]), (name, layer)
    assert plain.reconstruction_max_abs_diff <= 1e-6 and plain.rope_max_rel_diff <= 1e-6


def _count(monkeypatch, module, name):
    """Calls of ``module.name`` from now on (it still runs)."""
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("hub", [False, True])
def test_layers_that_share_one_table_are_read_once_a_pass(monkeypatch, hub):
    """Llama hands every layer the same cos/sin: the rotation is read once a forward pass,
    whether the RoPE function is plain or the hub's module (whose bound ``forward`` is a
    new object at each access, so it cannot name the table by its ``id``); and read off the
    table handed to the call, which reproduces its output, with no probe."""
    import ropesplit.numerics.applied as applied
    from ropesplit.empirical.adapter import calls

    if hub:
        monkeypatch.setattr(wrapped_rope, "apply_rotary_pos_emb", wrapped_rope.HubRope())
    reads = _count(monkeypatch, calls, "_as_passed")
    probes = _count(monkeypatch, applied, "read_rotation")
    loaded = wrapped()
    assert len(loaded.layers) == 2
    capture(loaded, ids())
    assert (len(reads), len(probes)) == (1, 0)


def test_the_table_handed_over_is_the_one_the_probe_reads(monkeypatch):
    """Without the shortcut (the probe at every table) the capture is the same bit for bit,
    so the shortcut changes no record; a batch whose sequences share their positions is
    probed once, with one sequence, and reads the table of each."""
    import ropesplit.numerics.applied as applied
    from ropesplit.empirical.adapter import calls
    from ropesplit.empirical.model.capture import capture_batch

    batch = torch.stack([ids(seed=s) for s in range(3)])
    held: dict[str, list] = {"passed": [], "probed": []}

    def keep(kind):
        return lambda layers: held[kind].append([(one.cos, one.sin, one.q) for one in layers])

    capture_batch(wrapped(), batch, on_layer=keep("passed"))
    monkeypatch.setattr(calls, "_as_passed", lambda one, positions: None)
    probes = []
    real = applied.read_rotation
    monkeypatch.setattr(applied, "read_rotation",
                        lambda m, p: probes.append(m.shape[0]) or real(m, p))  # fmt: skip
    capture_batch(wrapped(), batch, on_layer=keep("probed"))
    assert probes == [1]  # three sequences at positions 0..23: one probe of one
    for ours, theirs in zip(held["passed"], held["probed"], strict=True):
        for a, b in zip(ours, theirs, strict=True):
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_a_block_not_told_the_positions_probes_each_sequence(monkeypatch):
    """The interventions hand the model their own position ids, and the adapter's block is
    not told them: each sequence's table is read from that sequence (a regression: one
    probe of the first sequence served a batch at other positions)."""
    from ropesplit.empirical.adapter import calls
    from ropesplit.empirical.experiments.intervene import Edit, intervened_nll

    monkeypatch.setattr(calls, "_as_passed", lambda one, positions: None)  # the probe's path
    batch = torch.stack([ids(20, seed=s) for s in range(3)])
    positions = torch.stack([torch.randperm(20, generator=torch.Generator().manual_seed(s))
                             for s in range(3)])  # fmt: skip
    nll = intervened_nll(tiny_llama(2), batch, Edit("shuffle", layers=(0, 1)), positions)
    assert nll.shape == (3, 19) and np.isfinite(nll).all()


def test_a_table_that_does_not_reproduce_the_call_is_probed(monkeypatch):
    """A RoPE function that turns the other way from the table it is handed (sin negated
    inside) is read by the probe, which finds its pairs reversed; the capture validates."""
    import ropesplit.numerics.applied as applied

    def backwards(q, k, cos, sin, unsqueeze_dim=1):
        return wrapped_rope.plain_rope(q, k, cos, -sin, unsqueeze_dim)

    monkeypatch.setattr(wrapped_rope, "apply_rotary_pos_emb", backwards)
    probes = _count(monkeypatch, applied, "read_rotation")
    cache = capture(wrapped(), ids())
    assert len(probes) == 1 and cache.rope_max_rel_diff <= 1e-6


def test_a_plain_rope_function_is_restored_after_the_block():
    loaded = wrapped()
    capture(loaded, ids())
    assert wrapped_rope.apply_rotary_pos_emb is wrapped_rope.plain_rope


def test_a_model_that_applies_no_rope_is_refused_in_one_line():
    """Every layer NoPE (softmax attention, no RoPE call): no layer to analyse, said so."""
    with pytest.raises(AdapterError) as info:
        wrapped(wrapped_rope.NoRopeAttention)
    message = str(info.value)
    assert "\n" not in message
    assert message == ("ropesplit does not analyse llama: none of its 2 layers is softmax "
                       "attention with RoPE (NoPE)")


def test_a_rotary_module_no_call_reads_is_refused_naming_that(monkeypatch):
    """A model whose config states no RoPE field but which holds a rotary module (ESM's in
    transformers 5.1 rotates q and k one at a time inside it): every layer attends with no
    RoPE call the capture follows, and the refusal says so, not that the model is NoPE."""
    import transformers

    from ropesplit.empirical.adapter import calls

    monkeypatch.setattr(calls, "carries_rope", lambda config: False)
    with pytest.raises(AdapterError) as info:
        wrapped(wrapped_rope.NoRopeAttention)
    message = str(info.value)
    assert "\n" not in message and "(NoPE)" not in message
    assert message.startswith("ropesplit does not analyse llama: it has a rotary module, yet "
                              "none of its 2 attention layers calls a RoPE function")
    assert f"transformers {transformers.__version__}'s llama rotates q and k" in message


def test_an_error_inside_the_block_is_one_line_naming_the_model(monkeypatch):
    def broken(*args, **kwargs):
        raise IndexError("tuple index out of range\nsecond line")

    loaded = wrapped()
    monkeypatch.setattr(wrapped_rope, "apply_rotary_pos_emb", broken)
    with pytest.raises(AdapterError, match=r"^cannot follow LlamaForCausalLM \(transformers "
                       r".*\): IndexError: tuple index out of range$"):  # fmt: skip
        capture(loaded, ids())


def test_everything_is_restored_even_when_the_block_fails():
    """Hooks, wrapped functions and the attention implementation go back in ``finally``;
    at each layer the rope record comes before the attention, which calls eager."""
    loaded = tiny_llama(2)
    home = importlib.import_module(type(loaded.attn.modules[0]).__module__)
    rope_before = home.apply_rotary_pos_emb
    seen = []

    def attention(call):
        seen.append(("eager", call.layer))
        return call.eager()

    with pytest.raises(RuntimeError, match="inside"):
        with taps(loaded.model, loaded.attn,
                  on_rope=lambda layer, record: seen.append(("rope", layer)),
                  on_attention=lambda call, result: seen.append(("attn", call.layer)),
                  attention=attention):  # fmt: skip
            assert loaded.model.config._attn_implementation == NAME
            with torch.no_grad():
                loaded.model(input_ids=ids()[None], use_cache=False)
            raise RuntimeError("inside")
    assert seen == [("rope", 0), ("eager", 0), ("attn", 0), ("rope", 1), ("eager", 1),
                    ("attn", 1)]  # fmt: skip
    assert loaded.model.config._attn_implementation == "eager"
    assert home.apply_rotary_pos_emb is rope_before
    assert not isinstance(rope_before, torch.nn.Module) or not rope_before._forward_hooks
    assert not any(m._forward_pre_hooks for m in loaded.attn.modules)


def test_blocks_do_not_nest():
    loaded = tiny_llama(1)
    with taps(loaded.model, loaded.attn):
        with pytest.raises(RopesplitError, match="do not nest"):
            with taps(loaded.model, loaded.attn):
                pass


def test_the_one_pre_rope_recorder():
    """``record_pre_rope``, which capture, LM-Infinite and the interventions share: the
    layers asked for only, q/k heads first and pre-RoPE (what the capture reports), the
    tables one per sequence, a float64 copy when asked."""
    loaded = tiny_llama(2)
    batch = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(0))
    raw: dict = {}
    with taps(loaded.model, loaded.attn, on_rope=record_pre_rope(raw, {1}, dtype=torch.float64)
              ), torch.no_grad():  # fmt: skip
        loaded.model(input_ids=batch)
    assert list(raw) == [1]
    entry = raw[1]
    assert entry["q"].shape == (2, 4, 12, 16) and entry["k"].shape == (2, 2, 12, 16)
    assert entry["q"].dtype == torch.float64 and entry["cos"].shape == (2, 12, 16)
    cache = capture(loaded, batch[1])
    torch.testing.assert_close(entry["q"][1].float(), cache["q", 1], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(entry["k"][1].float(), cache["k", 1], rtol=1e-6, atol=1e-6)


def deepseek_v3(**fields):
    config = T.DeepseekV3Config(**{**dict(
        hidden_size=64, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
        n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=16, v_head_dim=16, vocab_size=TINY_VOCAB, first_k_dense_replace=1),
        **fields})  # fmt: skip
    torch.manual_seed(0)
    return load_model(T.AutoModelForCausalLM.from_config(config))


@pytest.mark.parametrize("interleave", [True, False])
def test_multi_head_latent_attention_is_captured_rotary_first_with_one_shared_key(interleave):
    """DeepSeek-V3 attends with [q_nope; R q_pe] against [k_nope,h; R k_pe] (k_pe one head):
    the capture turns it into whole heads with the 8 rotating coordinates first, the key's
    rotating part the same for every head, and the model's logits rebuilt."""
    loaded = deepseek_v3(rope_interleave=interleave)
    cache = capture(loaded, ids(20))
    for layer in cache.layers:
        assert layer.shared_key and layer.rotary_dim == 8 and layer.head_dim == 24
        assert layer.q.shape == (4, 20, 24) and layer.k.shape == (4, 20, 24)
        torch.testing.assert_close(layer.k[:, :, :8], layer.k[:1, :, :8].expand(4, -1, -1))
        assert np.all(layer.theta[4:] == 0) and np.all(layer.theta[:4] > 0)
    assert cache.logit_max_rel_diff < 1e-5 and cache.rope_max_rel_diff < 1e-5
