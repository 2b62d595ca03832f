"""Capture and validation on tiny randomly initialised models of every architecture.

No download: each model is built from a config. The capture must reproduce
the model's own attention probabilities (<= 1e-5 in float32) from the
pre-RoPE q/k, the applied cos/sin, the scale, soft-cap and mask it records.
"""

from __future__ import annotations

import importlib
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import transformers as T
from conftest import llama_config
from hypothesis import example, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.core.errors import RopesplitError, ValidationError
from ropesplit.empirical import Placement, capture, load_model
from ropesplit.empirical.model.geometry import derive_theta
from ropesplit.empirical.model.validate import (
    ModelAttention,
    RotatedAttention,
    allowed_pairs,
    rebuild_logits,
    reconstruct,
)
from ropesplit.numerics.applied import rotate_applied

COMMON = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_hidden_layers=2,
    intermediate_size=64,
    vocab_size=128,
    max_position_embeddings=96,
)

# name: (config, expected per layer: (window, softcap, rotary_dim, rope_base), Hkv)
ARCHS = {
    "llama": (llama_config(num_key_value_heads=2, **COMMON), [(None, None, 16, 1e4)] * 2, 2),
    "mistral": (
        T.MistralConfig(num_key_value_heads=2, sliding_window=8, **COMMON),
        [(8, None, 16, 1e4)] * 2,
        2,
    ),
    "qwen2": (
        T.Qwen2Config(
            num_key_value_heads=1,
            use_sliding_window=True,
            sliding_window=8,
            max_window_layers=1,
            rope_parameters={"rope_type": "default", "rope_theta": 5e5},
            **COMMON,
        ),
        [(None, None, 16, 5e5), (8, None, 16, 5e5)],
        1,
    ),  # fmt: skip
    "gemma2": (
        T.Gemma2Config(
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=8,
            query_pre_attn_scalar=24,
            attn_logit_softcapping=5.0,
            **COMMON,
        ),
        [(8, 5.0, 16, 1e4), (None, 5.0, 16, 1e4)],
        2,
    ),  # fmt: skip
    "gemma3": (
        T.Gemma3TextConfig(
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=8,
            query_pre_attn_scalar=24,
            sliding_window_pattern=2,
            **COMMON,
        ),
        [(8, None, 16, 1e4), (None, None, 16, 1e6)],
        2,
    ),  # fmt: skip
    "gpt_neox": (T.GPTNeoXConfig(rotary_pct=0.25, **COMMON), [(None, None, 4, 1e4)] * 2, 4),
    "phi": (
        T.PhiConfig(partial_rotary_factor=0.5, qk_layernorm=True, **COMMON),
        [(None, None, 8, 1e4)] * 2,
        4,
    ),
}
N_TOKENS = 24


def token_ids(n: int = N_TOKENS, seed: int = 0) -> torch.Tensor:
    return torch.randint(
        0, COMMON["vocab_size"], (n,), generator=torch.Generator().manual_seed(seed)
    )


@pytest.fixture(scope="module", params=sorted(ARCHS))
def arch(request):
    config, expected, n_kv = ARCHS[request.param]
    loaded = load_model(config, seed=0)
    return request.param, loaded, capture(loaded, token_ids()), expected, n_kv


def test_capture_reproduces_the_models_attention(arch):
    name, loaded, cache, expected, n_kv = arch
    assert len(cache) == 2
    assert cache.reconstruction_max_abs_diff <= 1e-5, name
    # logit level: the rebuilt R q, R k and pre-softmax W against the model's own tensors
    assert cache.rope_max_rel_diff <= 1e-6, name
    assert cache.logit_max_rel_diff <= 1e-6, name
    assert all(cache["logit_scale", layer] > 0 for layer in range(2))
    for layer, (window, softcap, rotary_dim, base) in enumerate(expected):
        assert cache["q", layer].shape == (4, N_TOKENS, 16)
        assert cache["k", layer].shape == (n_kv, N_TOKENS, 16)
        assert cache["window", layer] == window
        assert cache["softcap", layer] == softcap
        assert cache["rotary_dim", layer] == rotary_dim
        assert cache["rope_base", layer] == base
        assert cache["layout", layer] == "half"
        theta = cache["theta", layer]
        expected_theta = base ** (-np.arange(rotary_dim // 2) * 2.0 / rotary_dim)
        np.testing.assert_allclose(theta[: rotary_dim // 2], expected_theta, rtol=1e-5)
        assert not theta[rotary_dim // 2 :].any()  # the non-rotating pairs
        np.testing.assert_array_equal(cache["kv_map", layer], np.arange(4) // (4 // n_kv))
        assert torch.isfinite(cache["q", layer]).all()


def test_probs_are_the_models_output_attentions(arch):
    name, loaded, cache, _, _ = arch
    with torch.no_grad():
        out = loaded.model(input_ids=token_ids()[None], output_attentions=True, use_cache=False)
    for layer, attn in enumerate(out.attentions):
        torch.testing.assert_close(cache["probs", layer], attn[0], rtol=0, atol=0)
        with pytest.raises(KeyError, match=rf"ask cache\['probs', {layer}\]"):
            cache[f"blocks.{layer}.attn.hook_probs"]  # TransformerLens' name, not its shape


def test_taps_are_removed_after_capture(arch):
    _, loaded, _, _, _ = arch
    home = importlib.import_module(type(loaded.attn.modules[0]).__module__)
    rope = home.apply_rotary_pos_emb  # a function, or the kernel hub's module
    assert "_rope_wrapper" not in getattr(rope, "__qualname__", "")
    assert not isinstance(rope, torch.nn.Module) or not rope._forward_hooks
    assert home.eager_attention_forward.__module__ == home.__name__
    assert loaded.model.config._attn_implementation == "eager"
    assert not any(m._forward_pre_hooks for m in loaded.attn.modules)


def test_the_pass_stops_after_the_last_attention_unless_logits_are_kept(arch):
    # nothing after the last layer's attention is needed: its MLP and the output head never run
    name, loaded, _, _, _ = arch
    seen = []
    last_mlp = loaded.model.base_model.layers[-1].mlp if hasattr(loaded.model.base_model,
                                                                    "layers") else None
    modules = [m for m in (last_mlp, loaded.model.get_output_embeddings()) if m is not None]
    hooks = [m.register_forward_hook(lambda *a, m=m: seen.append(m)) for m in modules]
    try:
        cache = capture(loaded, token_ids())
        assert seen == [] and len(cache) == 2 and cache.logits is None, name
        kept = capture(loaded, token_ids(), keep_logits=True)
        assert set(map(id, seen)) == set(map(id, modules)), name
        assert kept.logits.shape == (N_TOKENS, COMMON["vocab_size"])
    finally:
        for hook in hooks:
            hook.remove()
    assert kept.reconstruction_max_abs_diff == cache.reconstruction_max_abs_diff


def test_a_wrong_mask_or_scale_fails_the_reconstruction():
    """The check can fail: dropping Mistral's window or doubling the scale shows up in the
    validation's own comparison of the probabilities."""
    loaded = load_model(ARCHS["mistral"][0], seed=0)
    layer = capture(loaded, token_ids()).layer(0)
    qr, kr = (rotate_applied(x, layer.cos, layer.sin, layer.layout)
              for x in (layer.q, layer.k[torch.as_tensor(layer.kv_map)]))  # fmt: skip
    good = RotatedAttention(qr, kr, layer.attn_scale, layer.softcap, window=8)
    model = ModelAttention(layer.probs)
    assert reconstruct(good, model)[2] < 1e-6
    assert reconstruct(replace(good, window=None), model)[2] > 1e-2
    assert reconstruct(replace(good, scale=2 * good.scale), model)[2] > 1e-3


@pytest.mark.parametrize("name", ["mistral", "gemma2", "phi"])
def test_validation_in_row_blocks_gives_the_same_numbers(name, monkeypatch):
    """Blocks of 3 query rows (against only the keys they may attend) = one block of all,
    up to float32 rounding (the matmul sums in another order)."""
    val = importlib.import_module("ropesplit.empirical.model.validate")
    loaded = load_model(ARCHS[name][0], seed=0)
    whole = capture(loaded, token_ids()).validation()
    monkeypatch.setattr(val, "BLOCK_ELEMENTS", 4 * N_TOKENS * 3)
    blocks = capture(loaded, token_ids()).validation()
    assert blocks.pop("attention") == whole.pop("attention") == "eager"
    assert blocks.pop("output_max_rel_diff") is whole.pop("output_max_rel_diff") is None
    assert blocks == pytest.approx(whole, rel=1e-5, abs=1e-6)  # float32 matmul order


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # compiled, torch
def test_attention_beyond_the_captured_mask_fails_the_probability_check(monkeypatch, dtype):
    """The blocks hold only the pairs the capture thinks attended; a model that
    puts mass beyond them (a window read too narrow) is caught by row mass, by the
    compiled comparisons (float32) and by their torch twin (half precision)."""
    cap = importlib.import_module("ropesplit.empirical.model.capture")
    original = cap.reconstruct
    monkeypatch.setattr(cap, "reconstruct", lambda attention, *args: original(
        replace(attention, window=(attention.window or N_TOKENS) - 3), *args))  # 3 too narrow
    where = Placement(dtype=str(dtype).removeprefix("torch."))
    loaded = load_model(ARCHS["mistral"][0], seed=0, placement=where)
    with pytest.raises(ValidationError, match=r"^reconstruction_max_abs_diff .* exceeds"):
        capture(loaded, token_ids())


def test_rebuild_matches_a_float64_loop_twin():
    """The validation's logits (soft-capped, windowed Gemma 2), rebuilt in float64 and put
    through a dense masked softmax, are a loop over the definition's probabilities."""
    loaded = load_model(ARCHS["gemma2"][0], seed=1)
    cache = capture(loaded, token_ids(12, seed=3))
    q, k, cos, sin = (cache[n, 0].double().numpy() for n in ("q", "k", "cos", "sin"))
    s, cap, window, head = cache["attn_scale", 0], cache["softcap", 0], cache["window", 0], 2
    kv = int(cache["kv_map", 0][head])
    n_tok, r = cos.shape

    def rot(x, n):
        out = x.copy()
        for j in range(r // 2):  # pair (j, j + r/2) turned by the applied cos/sin
            c, sn = cos[n, j], sin[n, j]
            out[j] = x[j] * c - x[j + r // 2] * sn
            out[j + r // 2] = x[j + r // 2] * c + x[j] * sn
        return out

    twin = np.zeros((n_tok, n_tok))
    for i in range(n_tok):
        row = {}
        for j in range(i + 1):
            if i - j < window:
                logit = s * float(rot(q[head, i], i) @ rot(k[kv, j], j))
                row[j] = cap * math.tanh(logit / cap)
        top = max(row.values())
        total = sum(math.exp(v - top) for v in row.values())
        for j, v in row.items():
            twin[i, j] = math.exp(v - top) / total
    qr, kr = (rotate_applied(torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin),
                             cache["layout", 0]) for x in (q[head : head + 1], k[kv : kv + 1]))
    logits = rebuild_logits(RotatedAttention(qr, kr, s, cap, window))[0]  # (N, N) float64
    allowed = allowed_pairs(n_tok, window)  # (N, N)
    fast = torch.softmax(logits.masked_fill(~allowed, -math.inf), dim=-1)
    np.testing.assert_allclose(fast.numpy(), twin, rtol=0, atol=1e-12)


def test_shifted_positions_keep_theta_and_validate():
    loaded = load_model(ARCHS["llama"][0], seed=0)
    base = capture(loaded, token_ids())
    shifted = capture(loaded, token_ids(), position_ids=torch.arange(N_TOKENS) + 40)
    assert shifted.reconstruction_max_abs_diff <= 1e-5
    np.testing.assert_allclose(shifted["theta", 1], base["theta", 1], rtol=1e-6)
    assert torch.equal(shifted.positions, torch.arange(N_TOKENS) + 40)


@settings(max_examples=60, deadline=None)
@given(
    base=st.floats(100.0, 1e6),
    half_r=st.integers(1, 32),
    n=st.integers(2, 300),
    offset=st.integers(0, 5000),
    amplitude=st.floats(0.5, 2.0),
    seed=st.integers(0, 2**16),
)
@example(base=1e5, half_r=32, n=2048, offset=0, amplitude=1.0, seed=0)
@example(base=1e4, half_r=1, n=2, offset=0, amplitude=1.0, seed=0)
def test_derive_theta_recovers_the_frequencies(base, half_r, n, offset, amplitude, seed):
    theta = base ** (-np.arange(half_r) / half_r)  # (r/2,)
    positions = np.random.default_rng(seed).permutation(np.arange(n) + offset)
    angles = positions[:, None] * theta  # (N, r/2)
    cos = amplitude * np.cos(np.concatenate([angles, angles], axis=1))  # (N, r) half layout
    sin = amplitude * np.sin(np.concatenate([angles, angles], axis=1))
    got, amp, fit = derive_theta(cos, sin, positions)
    note(f"max rel err {np.max(np.abs(got / theta - 1)):.2e}")
    np.testing.assert_allclose(got, theta, rtol=1e-9, atol=1e-13)
    assert amp == pytest.approx(amplitude, rel=1e-12)
    assert fit < 1e-9


def test_derive_theta_interleaved_layout():
    theta = 1e4 ** (-np.arange(4) / 4)
    angles = np.arange(10)[:, None] * theta
    cos, sin = np.repeat(np.cos(angles), 2, axis=1), np.repeat(np.sin(angles), 2, axis=1)
    got, _, _ = derive_theta(cos, sin, np.arange(10), layout="interleaved")
    np.testing.assert_allclose(got, theta, rtol=1e-12)


def test_derive_theta_needs_consecutive_positions():
    angles = np.array([0, 2, 4])[:, None] * np.array([1.0, 0.1])
    table = np.concatenate([angles, angles], axis=1)
    with pytest.raises(RopesplitError, match="^cannot derive RoPE frequencies"):
        derive_theta(np.cos(table), np.sin(table), np.array([0, 2, 4]))


def test_random_init_is_deterministic_for_a_seed():
    config = ARCHS["llama"][0]
    a, b, c = (load_model(config, seed=s) for s in (7, 7, 8))
    wa, wb, wc = (m.model.model.layers[0].self_attn.q_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb)
    assert not torch.equal(wa, wc)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            T.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64),
            "model type gpt2 has no rotary",
        ),
        (
            T.BertConfig(
                hidden_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=32,
                vocab_size=64,
                is_decoder=True,
            ),
            "model type bert has no rotary",
        ),  # fmt: skip
    ],
    ids=["gpt2", "bert"],
)
def test_unsupported_models_are_one_line_errors(config, message):
    with pytest.raises(RopesplitError, match=f"^{message}") as info:
        load_model(config)
    assert "\n" not in str(info.value)


def test_odd_head_dim_is_a_one_line_error(tmp_path):
    """transformers refuses the config itself; the error is still ours, in one line."""
    config = llama_config(**COMMON).to_dict()
    (tmp_path / "config.json").write_text(json.dumps({**config, "head_dim": 63}))
    with pytest.raises(RopesplitError, match="^head_dim must be even, got 63$"):
        load_model(str(tmp_path))


def test_nan_weights_are_a_one_line_error():
    loaded = load_model(ARCHS["llama"][0], seed=0)
    with torch.no_grad():
        loaded.model.model.layers[1].self_attn.k_proj.weight[0, 0] = math.nan
    with pytest.raises(RopesplitError, match="^non-finite activations .* layer 1"):
        capture(loaded, token_ids())


def test_positions_beyond_the_context_are_refused():
    loaded = load_model(ARCHS["llama"][0], seed=0)
    with pytest.raises(RopesplitError, match="^97 positions exceed the model's context of 96"):
        capture(loaded, token_ids(97))
    with pytest.raises(RopesplitError, match="^100 positions exceed"):
        capture(loaded, token_ids(), position_ids=torch.arange(N_TOKENS) + 76)


def test_a_failed_reconstruction_is_a_validation_error(monkeypatch):
    """A capture that misreads the scale must be refused at the real tolerance, 1e-4."""
    val = importlib.import_module("ropesplit.empirical.model.validate")  # rebuilds the capture
    original = val.rebuild_logits

    def wrong_scale(attention, **kw):
        return original(replace(attention, scale=1.5 * attention.scale), **kw)

    monkeypatch.setattr(val, "rebuild_logits", wrong_scale)
    loaded = load_model(ARCHS["llama"][0], seed=0)
    with pytest.raises(ValidationError, match=r"^reconstruction_max_abs_diff .* exceeds 0\.0001, "
                       r"logit_max_rel_diff .* exceeds 1e-05") as info:  # fmt: skip
        capture(loaded, token_ids())
    assert "\n" not in str(info.value)


def test_the_logit_check_catches_what_the_probability_check_lets_through(monkeypatch):
    """A logit error on pairs whose probability is tiny moves
    the probabilities by far less than 1e-4, yet every statistic is computed
    on logits. Rebuilt logits lowered by 30 wherever they already sit 20 below
    their row's largest (p < e^-20) pass the probability check and fail the
    logit check."""
    val = importlib.import_module("ropesplit.empirical.model.validate")  # rebuilds the capture
    original = val.rebuild_logits

    def low_pairs_wrong(*args, rows=None, cols=None, **kw):
        logits = original(*args, rows=rows, cols=cols, **kw)  # (h, n, c): rows x cols
        (n, c) = logits.shape[-2:]
        i = torch.arange(n)[:, None] + (rows.start if rows else 0)  # (n, 1) query index
        j = torch.arange(c)[None, :] + (cols.start if cols else 0)  # (1, c) key index
        causal = j <= i  # (n, c)
        top = logits.masked_fill(~causal, -math.inf).amax(-1, keepdim=True)  # (h, n, 1)
        return torch.where(causal & (logits < top - 20), logits - 30, logits)

    loaded = load_model(ARCHS["llama"][0], seed=0)
    with torch.no_grad():  # sharp attention: logits spread over tens of units
        for module in loaded.attn.modules:
            module.q_proj.weight.mul_(30.0)
            module.k_proj.weight.mul_(30.0)
    honest = capture(loaded, token_ids())
    assert honest.validation()["logit_scale"] > 40
    assert honest.logit_max_rel_diff <= 1e-6 and honest.reconstruction_max_abs_diff <= 1e-6
    monkeypatch.setattr(val, "rebuild_logits", low_pairs_wrong)
    wrong = capture(loaded, token_ids(), validate=False)
    note_ = (wrong.reconstruction_max_abs_diff, wrong.logit_max_rel_diff)
    assert wrong.reconstruction_max_abs_diff <= val.RECONSTRUCTION_TOL, note_  # let through
    assert wrong.logit_max_rel_diff > 100 * val.LOGIT_TOL, note_  # caught
    with pytest.raises(ValidationError, match=r"within 0\.0001, logit_max_rel_diff .* exceeds"):
        val.check_reconstruction(wrong)


def test_jumping_position_ids_keep_the_mask_causal_by_index():
    """Regression: without an explicit attention mask,
    transformers reads position ids that do not step by +1 as packed
    sequences and masks across each jump; capture and forward must keep the
    causal mask by index, as the rebuilt attention assumes."""
    from ropesplit.empirical.model.passes import forward

    loaded = load_model(ARCHS["llama"][0], seed=0)
    jumpy = torch.arange(N_TOKENS) * 3  # every step is +3
    jumpy[N_TOKENS // 2 :] -= 20  # and one step goes backwards
    jumpy -= jumpy.min()
    cache = capture(loaded, token_ids(), position_ids=jumpy)
    assert cache.reconstruction_max_abs_diff <= 1e-5
    # the last token attends to the whole prefix, across the backward jump
    assert float(cache["probs", 0][:, -1, : N_TOKENS // 2].sum()) > 0
    logits = forward(loaded, token_ids(), jumpy)
    ids = token_ids()[None]
    with torch.no_grad():
        masked = loaded.model(
            input_ids=ids, position_ids=jumpy[None], attention_mask=torch.ones_like(ids)
        ).logits[0]
    torch.testing.assert_close(logits, masked.float())


def test_tokenize_refuses_more_tokens_than_the_context():
    """One check, where the token count is asked for: analyze, perturb and report share it."""
    from ropesplit.empirical.model.text import tokenize

    loaded = load_model(ARCHS["llama"][0], seed=0)  # max_position_embeddings = 96
    with pytest.raises(RopesplitError, match="^--tokens 97 exceeds the model's context of 96"):
        tokenize(loaded, "any text", 97)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_models_capture_and_match_their_float32_twin(dtype):
    """A bf16/fp16 model passes the capture's checks at its dtype's tolerances
    (recorded in the JSON) and its statistics agree with its float32 twin within one eps of
    the dtype (measured: 5e-4 for bf16, 6e-5 for fp16, where eps is 7.8e-3 and 9.8e-4)."""
    import copy

    from ropesplit.empirical.analysis.analyze import analyze
    from ropesplit.empirical.model.validate import THETA_TOL, tolerances

    config = llama_config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                           num_hidden_layers=2, intermediate_size=64, vocab_size=128,
                           max_position_embeddings=256)  # fmt: skip
    full = load_model(config, seed=0)
    ids = torch.randint(0, 128, (96,), generator=torch.Generator().manual_seed(0))
    half = load_model(copy.deepcopy(full.model).to(dtype))
    a, b = analyze(full, ids), analyze(half, ids)
    tol = tolerances(dtype)
    eps = torch.finfo(dtype).eps
    assert tol.rope == tol.logit == pytest.approx(4 * eps) and tol.theta >= THETA_TOL
    assert tol.probs == pytest.approx(16 * eps)
    record = b.to_dict()
    assert record["dtype"] == str(dtype).removeprefix("torch.")
    assert record["tolerance_logit"] == tol.logit and record["logit_max_rel_diff"] <= tol.logit
    assert a.to_dict()["tolerance_logit"] == 1e-5  # float32 keeps its own
    for x, y in zip(a.heads, b.heads, strict=True):
        for stat in ("r_split", "r_split_rowcentred", "remainder_share", "lowfreq_share_k"):
            assert abs(x[stat] - y[stat]) <= eps, (stat, x[stat], y[stat])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rope", [
    {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
])  # fmt: skip
def test_scaled_rope_is_checked_against_the_config_and_exact_in_half_precision(rope, dtype):
    """The derived theta matches numerics.rope.frequencies for the config's scaling (checked
    in every dtype); a half-precision model gets those exact frequencies."""
    import copy

    from ropesplit.numerics.rope import frequencies

    config = llama_config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                           num_hidden_layers=1, intermediate_size=64, vocab_size=128,
                           max_position_embeddings=256, rope_parameters=rope)  # fmt: skip
    full = load_model(config, seed=0)
    loaded = full if dtype == torch.float32 else load_model(copy.deepcopy(full.model).to(dtype))
    cache = capture(loaded, torch.arange(48) % 128)
    scaling = {**rope, "type": rope["rope_type"]}
    want = frequencies(16, rope["rope_theta"], scaling=scaling)
    got = cache.layers[0].theta
    if dtype == torch.float32:
        np.testing.assert_allclose(got, want, rtol=1e-4)
    else:
        np.testing.assert_array_equal(got, want)


_BLOCK = st.integers(2, 7).flatmap(lambda n: st.tuples(
    st.just(n), st.integers(0, n - 1), st.integers(1, n),  # N, first row, window
    arrays(np.float32, (2, n, n), elements=st.floats(-4, 4, width=32)),  # model logits
    arrays(np.float32, (2, n, n), elements=st.floats(0, 1, width=32)),  # model probs
    arrays(np.float32, (2, n, n), elements=st.floats(-4, 4, width=32))))  # rebuilt


@given(_BLOCK, st.booleans())
@settings(max_examples=60, deadline=None)
def test_the_compiled_comparisons_are_the_maxima_over_the_attended_pairs(block, parallel):
    """One block of rows r0.. against columns c0..: the validation's compiled passes give
    max |model|, max |model - W|, max |A - probs| over the pairs i - w < j <= i and the
    largest |1 - row mass| there, as a reference computed with the mask (differences in
    float32, the model's precision; the mass in float64); W is -inf off the attended
    pairs afterwards; a NaN read anywhere attended gives NaN."""
    n, r0, width, model, probs, rebuilt = block
    c0 = max(0, r0 - width + 1)
    val = importlib.import_module("ropesplit.empirical.model.validate")
    logits, compare = val._compare_kernels(parallel)
    i, j = np.arange(r0, n)[:, None], np.arange(c0, n)[None, :]
    attended = (j <= i) & (i - j < width)  # (rows, cols)
    w = rebuilt[:, r0:, c0:].copy()
    scale, diff = logits(w, model, model.view(np.uint32), r0, c0, width)
    ref = model[:, r0:, c0:]
    assert scale == np.abs(ref[:, attended]).max()
    assert diff == np.abs(ref - rebuilt[:, r0:, c0:])[:, attended].max()
    assert np.isneginf(w[:, ~attended]).all()
    assert (w[:, attended] == rebuilt[:, r0:, c0:][:, attended]).all()
    a = rebuilt[:, r0:, c0:]  # any block of probabilities will do
    got = compare(np.ascontiguousarray(a), probs, probs.view(np.uint32), r0, c0, width)
    p = probs[:, r0:, c0:]
    assert got[0] == np.abs(a - p)[:, attended].max()
    mass = np.where(attended, p.astype(np.float64), 0.0).sum(-1)  # (2, rows)
    assert got[1] == pytest.approx(np.abs(1.0 - mass).max(), abs=1e-12)
    # the torch twin (a GPU's, half precision's): the same numbers from the same block
    torch_twin = val._compare_block(
        torch.from_numpy(rebuilt[:, r0:, c0:].copy()), torch.from_numpy(model[:, r0:, c0:]),
        torch.from_numpy(probs[:, r0:, c0:]), torch.from_numpy(attended))  # fmt: skip
    softmax = torch.softmax(torch.from_numpy(w), -1).numpy()  # of the masked logits
    compiled = compare(softmax, probs, probs.view(np.uint32), r0, c0, width)
    assert torch_twin[:3] == (scale, diff, compiled[0])
    assert torch_twin[3] == pytest.approx(compiled[1], abs=1e-12)  # the float64 mass
    probs[1, n - 1, max(c0, n - width)] = np.nan  # an attended pair of the last row
    assert all(math.isnan(x) for x in compare(np.ascontiguousarray(a), probs,
                                               probs.view(np.uint32), r0, c0, width))
    assert math.isnan(val._compare_block(
        torch.from_numpy(rebuilt[:, r0:, c0:].copy()), None,
        torch.from_numpy(probs[:, r0:, c0:]), torch.from_numpy(attended))[3])  # fmt: skip


@pytest.mark.parametrize("where", ["sampled", "unsampled"])
def test_later_sequences_of_a_pass_are_validated_on_their_seeded_rows(monkeypatch, where):
    """The first sequence of a forward pass is compared on every query row, the others on
    a seeded sample (``validate.sampled_rows``), and the record says how many: a
    probability corrupted on a sampled row of the second sequence fails the capture; one
    on a row outside the sample is not seen (what a sample promises, and no more)."""
    from ropesplit.empirical.model.capture import capture_batch
    from ropesplit.empirical.model.validate import VALIDATED_ROWS, sampled_rows

    cap = importlib.import_module("ropesplit.empirical.model.capture")
    n = 64
    loaded = load_model(ARCHS["llama"][0], seed=0)
    ids = torch.stack([token_ids(n, seed=0), token_ids(n, seed=1)])
    runs = sampled_rows(n, (1, 1))  # layer 1, sequence 1
    inside = {r for r0, r1 in runs for r in range(r0, r1)}
    assert len(inside) == VALIDATED_ROWS and n - 1 in inside
    row = min(inside) if where == "sampled" else min(set(range(n)) - inside)
    original = cap.reconstruct

    def corrupted(attention, model, blocks):
        if model.probs.data_ptr() == seen.get("second"):
            probs = model.probs.clone()
            probs[0, row, 0] += 0.5  # mass on the first key: sequence 1, layer 1, head 0
            model = replace(model, probs=probs)
        return original(attention, model, blocks)

    seen: dict[str, int] = {}
    keep = cap._finish_layer

    def finish(state, call, result, b):
        if call.layer == 1 and b == 1:
            seen["second"] = result[1].detach()[b].data_ptr()
        return keep(state, call, result, b)

    monkeypatch.setattr(cap, "_finish_layer", finish)
    monkeypatch.setattr(cap, "reconstruct", corrupted)
    if where == "sampled":
        with pytest.raises(ValidationError, match="reconstruction_max_abs_diff"):
            capture_batch(loaded, ids, on_layer=lambda layers: None)
        return
    first, second = capture_batch(loaded, ids, on_layer=lambda layers: None)
    assert first.validation()["validated_rows"] == n
    assert second.validation()["validated_rows"] == VALIDATED_ROWS
