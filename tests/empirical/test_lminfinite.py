"""LM-Infinite's attention: numerics against float64 loop twins, the model install.

- the blockwise Lambda attention against a dense masked float64 loop (mask, cap, one softmax);
- the cap's far query/key against numerics.rope.rotate, both layouts, partial rotary;
- the capped split against split_head(distances=min(Delta, L));
- inside a real (tiny) model: each layer's output against the float64 loop built from the
  tensors the model handed to the attention; identical to the unmodified model when N <= L;
- a model built so that its loss must rise without the cap (a positional head whose f
  comes back to its peak at distance 2L): vanilla rises, the cap and LM-Infinite do not.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
import transformers as T
from conftest import llama_config
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.experiments.lminfinite import (
    LAMBDA_SETTINGS,
    LambdaSpec,
    install,
    run_setting,
    window_starts,
    windowed_nll,
)
from ropesplit.empirical.experiments.lminfinite import settings as lm_settings
from ropesplit.empirical.model.loading import Placement, load_model
from ropesplit.numerics.lambda_attention import (
    far_query_key,
    lambda_attention,
    lambda_mask,
    logit_elements,
)
from ropesplit.numerics.length import (
    bucket_edges,
    bucket_means,
    component_range,
    outside_share,
    rank_correlation,
    relative_change,
)
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.rope import rotate
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head

FLOATS = st.floats(-3.0, 3.0, allow_nan=False, width=64)


# --------------------------------------------------------------------------- float64 loop twins


def loop_mask(n: int, n_local: int | None, n_global: int) -> np.ndarray:
    out = np.zeros((n, n), dtype=bool)
    for i in range(n):
        for j in range(i + 1):
            out[i, j] = n_local is None or i - j < n_local or j < n_global
    return out


def loop_attention(q, k, v, scale, n_local, n_global, cap, q_far, k_far, pos):
    """Dense masked float64 reference: one softmax over the attended keys of each query."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    (batch, heads, n, _), n_kv = q.shape, k.shape[1]
    group = heads // n_kv
    out = np.zeros((batch, heads, n, v.shape[-1]))
    mask = loop_mask(n, n_local, n_global)
    for b in range(batch):
        for h in range(heads):
            kv = h // group
            for i in range(n):
                keys = [j for j in range(n) if mask[i, j]]
                logits = []
                for j in keys:
                    if cap is not None and pos[b][i] - pos[b][j] > cap:
                        logits.append(scale * float(np.dot(q_far[b, h, i], k_far[b, kv, j])))
                    else:
                        logits.append(scale * float(np.dot(q[b, h, i], k[b, kv, j])))
                w = np.exp(np.array(logits) - max(logits))
                w /= w.sum()
                for weight, j in zip(w, keys, strict=True):
                    out[b, h, i] += weight * v[b, kv, j]
    return out


@st.composite
def attention_cases(draw):
    batch = draw(st.integers(1, 2))
    n_kv = draw(st.integers(1, 2))
    group = draw(st.integers(1, 2))
    n = draw(st.integers(1, 13))
    d = 2 * draw(st.integers(1, 3))
    n_local = draw(st.one_of(st.none(), st.integers(1, 14)))
    n_global = draw(st.integers(0, 4))
    cap = draw(st.one_of(st.none(), st.integers(0, 12)))
    gaps = draw(arrays(np.int64, (batch, n), elements=st.integers(1, 3)))
    pos = np.cumsum(gaps, axis=1) - gaps[:, :1]  # (B, N) increasing from 0
    shape = (batch, n_kv * group, n, d)
    q = draw(arrays(np.float64, shape, elements=FLOATS))
    k = draw(arrays(np.float64, (batch, n_kv, n, d), elements=FLOATS))
    v = draw(arrays(np.float64, (batch, n_kv, n, 3), elements=FLOATS))
    q_far = draw(arrays(np.float64, shape, elements=FLOATS))
    k_far = draw(arrays(np.float64, (batch, n_kv, n, d), elements=FLOATS))
    return q, k, v, n_local, n_global, cap, q_far, k_far, pos


@settings(max_examples=60, deadline=None)
@given(attention_cases())
def test_lambda_attention_matches_dense_float64_loop(case):
    q, k, v, n_local, n_global, cap, q_far, k_far, pos = case
    t = [torch.as_tensor(x) for x in (q, k, v, q_far, k_far)]
    got = lambda_attention(t[0], t[1], t[2], 0.7, LambdaSpec(n_local, n_global, cap),
                           far=(t[3], t[4]), positions=pos)  # fmt: skip
    want = loop_attention(q, k, v, 0.7, n_local, n_global, cap, q_far, k_far, pos)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)


def test_lambda_attention_float32_within_1e5_of_the_float64_loop():
    rng = np.random.default_rng(3)
    q, k, v, qf, kf = (rng.normal(size=(1, 2, 70, 8)) for _ in range(5))
    pos = np.arange(70)[None]
    got = lambda_attention(*(torch.as_tensor(x, dtype=torch.float32) for x in (q, k, v)), 0.35,
                           LambdaSpec(n_local=16, n_global=10, cap=16),
                           far=(torch.as_tensor(qf).float(), torch.as_tensor(kf).float()),
                           positions=pos)  # fmt: skip
    want = loop_attention(q, k, v, 0.35, 16, 10, 16, qf, kf, pos)
    assert np.abs(got.numpy() - want).max() <= 1e-5


@pytest.mark.parametrize("n, n_local, n_global", [(9, 3, 2), (7, None, 0), (12, 4, 0), (5, 9, 9)])
def test_lambda_mask_is_the_loop_definition(n, n_local, n_global):
    assert np.array_equal(lambda_mask(n, n_local, n_global), loop_mask(n, n_local, n_global))


def test_blockwise_logits_grow_as_n_times_window():
    """Memory model: N^2 dense; about N (2 n_local + n_global) blockwise (8x smaller at 8L... )."""
    dense, banded = logit_elements(1024, None), logit_elements(1024, 128, 10)
    assert dense == 1024**2 and banded == 1024 * (2 * 128 + 10)
    assert logit_elements(1024, 128, 10) * 2 < logit_elements(2048, 128, 10) * 1.01


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 4])
def test_far_query_key_is_the_logit_at_distance_cap(layout, rotary_dim):
    rng = np.random.default_rng(0)
    d, cap, amplitude = 8, 11, 1.3
    r = d if rotary_dim is None else rotary_dim
    theta = np.concatenate([10.0 ** (-np.arange(r // 2) * 2.0 / r), np.zeros((d - r) // 2)])
    q, k = rng.normal(size=(2, 5, d))
    qf, kf = far_query_key(torch.as_tensor(q), torch.as_tensor(k), theta, cap,
                           amplitude=amplitude, layout=layout, rotary_dim=rotary_dim)  # fmt: skip
    # the model's logit at distance cap: a R(p+cap) q against a R(p) k, any p
    gain = np.ones(d)
    rot = np.arange(d) < r if layout == "half" or rotary_dim is None else np.arange(d) < r
    gain[rot] = amplitude
    p = 7.0
    qr = rotate(q, np.full(5, p + cap), theta, layout=layout, rotary_dim=rotary_dim) * gain
    kr = rotate(k, np.full(5, p), theta, layout=layout, rotary_dim=rotary_dim) * gain
    np.testing.assert_allclose(qf.numpy() @ kf.numpy().T, qr @ kr.T, rtol=0, atol=1e-12)


@pytest.mark.parametrize("cap", [None, 0, 5, 40])
@pytest.mark.parametrize("spacing", [1, 3])
def test_the_cap_as_products_is_split_head_at_the_capped_distances(cap, spacing):
    # split_head(cap=L) builds W and f from matrix products; distances= rotates term by term
    rng = np.random.default_rng(1)
    n, d = 30, 10
    q, k = rng.normal(size=(2, n, d))
    kbar = rng.normal(size=d)
    theta = np.concatenate([100.0 ** (-np.arange(4) * 2.0 / 8), [0.0]])
    pos = spacing * np.arange(n) + 2
    spec = RopeSpec.from_arrays(theta, 0.4, rotary_dim=8)
    got = split_head(q, k, spec, Measure(bounds=False), positions=pos, cap=cap, kbar=kbar)
    want = split_head(q, k, spec, distances=capped_distances(pos, cap), kbar=kbar)
    assert got.bound is None and got.bound_loose is None
    np.testing.assert_array_equal(got.delta, want.delta)
    for x in "WfgE":
        np.testing.assert_allclose(getattr(got, x), getattr(want, x), atol=1e-11)
    if cap is not None and spacing * (n - 1) > cap:  # the cap moves W: not the true distances
        true = split_head(q, k, spec, positions=pos, kbar=kbar)
        assert np.abs(true.W - got.W)[got.mask].max() > 0.1


@pytest.mark.parametrize("kwargs", [{"cap": -1}, {"cap": 2, "distances": np.zeros((4, 4))}])
def test_a_cap_is_a_distance_and_not_a_second_map(kwargs):
    q = np.ones((4, 2))
    with pytest.raises(RopesplitError, match="cap must be a distance >= 0, without distances"):
        split_head(q, q, RopeSpec.from_arrays([1.0], 1.0), **kwargs)


def capped_distances(positions, cap=None) -> np.ndarray:
    """The float64 twin of the capped attention's distances, min(p_i - p_j, cap), (N, N)."""
    p = np.asarray(positions, dtype=np.float64)
    delta = p[:, None] - p[None, :]
    return delta if cap is None else np.minimum(delta, float(cap))


def test_capped_distances_and_buckets():
    assert capped_distances([0, 2, 5], 3).tolist() == [[0, -2, -5], [2, 0, -3], [3, 3, 0]]
    assert bucket_edges(8, (1, 2, 4, 8), 40) == [(0, 8), (8, 16), (16, 32), (32, 40)]
    assert bucket_means(np.arange(10.0), [(0, 2), (2, 10)]) == [0.5, 5.5]


def test_range_measures_on_known_truth():
    inside = np.linspace(-1.0, 1.0, 101)
    assert outside_share(inside, -1.0, 1.0) == 0.0
    assert outside_share(np.r_[inside, 1.5, -3.0], -1.0, 1.0) == pytest.approx(2 / 103)
    got = component_range(2 * inside + 3, 1.0, 5.0)  # the trained range itself: [-1, 1]
    assert (
        got["outside"] == 0.0
        and got["lo"] == pytest.approx(-0.98)
        and got["hi"] == pytest.approx(0.98)
    )
    rounding = component_range(np.r_[inside, 1.0 + 1e-7], -1.0, 1.0)  # float32-level excursion
    assert rounding["outside"] == 0.0
    assert component_range(np.r_[inside, 1.001], -1.0, 1.0)["outside"] == pytest.approx(1 / 102)
    assert relative_change(inside, inside) == 0.0
    assert relative_change(1.1 * inside, inside) == pytest.approx(0.1)
    assert rank_correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert rank_correlation([1, 1, 1], [1, 2, 3]) is None


@settings(max_examples=40, deadline=None)
@given(arrays(np.int64, st.integers(3, 12), elements=st.integers(-300, 300), unique=True))
def test_rank_correlation_ignores_monotone_maps(ints):
    x = ints / 100.0
    assert rank_correlation(x, np.exp(x)) == pytest.approx(1.0)
    assert rank_correlation(x, -(x**3)) == pytest.approx(-1.0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: lambda_mask(4, 0), "n_local must be at least 1"),
        (lambda: LambdaSpec(cap=-1), "distance cap must be >= 0"),
        (lambda: lambda_attention(torch.zeros(1, 2, 4, 2), torch.zeros(1, 2, 4, 2),
                                  torch.zeros(1, 2, 4, 2), 1.0, LambdaSpec(cap=3)),
         r"a distance cap needs far=\(query_far, key_far\)"),
        (lambda: lambda_attention(torch.zeros(1, 3, 4, 2), torch.zeros(1, 2, 4, 2),
                                  torch.zeros(1, 2, 4, 2), 1.0), "3 query heads do not divide"),
        (lambda: bucket_edges(8, (2, 4)), "multiples must start at 1"),
        (lambda: lm_settings(0), "training length must be at least 1"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(call, message):
    with pytest.raises(RopesplitError, match=message):
        call()


# --------------------------------------------------------------------------- inside a model


def tiny(dtype: str = "float64", *, kv: int = 2, layers: int = 2):
    config = llama_config(hidden_size=32, num_attention_heads=4, num_key_value_heads=kv,
                           num_hidden_layers=layers, intermediate_size=48, vocab_size=64,
                           max_position_embeddings=256, head_dim=8)  # fmt: skip
    return load_model(config, seed=0, placement=Placement(dtype=dtype))


@pytest.fixture(scope="module")
def tiny64():
    return tiny()


IDS = torch.as_tensor(np.random.default_rng(5).integers(0, 64, 90))


@pytest.mark.parametrize("name", LAMBDA_SETTINGS)
def test_each_layer_in_the_model_matches_the_float64_loop(tiny64, name):
    spec = lm_settings(16, 4)[name]
    with install(tiny64, spec, keep=[0, 1]) as state, torch.no_grad():
        tiny64.model(
            input_ids=IDS[None], attention_mask=torch.ones_like(IDS[None]), use_cache=False
        )
    for layer, kept in state.kept.items():
        query, key, value = (kept[x].numpy() for x in ("query", "key", "value"))
        theta = 10000.0 ** (-np.arange(4) * 2.0 / 8)  # the config's default RoPE base, d = 8
        cap = spec.cap if spec.cap is not None else 0
        q_raw, k_raw = kept["q"].numpy(), kept["k"].numpy()
        q_far = rotate(q_raw, np.full(90, cap), theta)  # R(L) q, unrotated k
        want = loop_attention(query, key, value, kept["scaling"], spec.n_local, spec.n_global,
                              spec.cap, q_far, k_raw, [np.arange(90)])  # fmt: skip
        got = kept["out"].transpose(1, 2).numpy()  # (1, H, N, dv)
        # transformers' eager attention (vanilla) takes its softmax in float32 even in float64
        tol = 1e-6 if name == "vanilla" else 1e-10
        assert np.abs(got - want).max() <= tol, (name, layer)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_identical_to_the_unmodified_model_when_n_within_l(dtype):
    """float32: bit for bit. float64: the eager softmax runs in float32, ours in float64."""
    loaded = tiny(dtype)
    ids = IDS[:40]
    vanilla = run_setting(loaded, ids, LambdaSpec())
    for name, spec in lm_settings(40, 4).items():
        got = run_setting(loaded, ids, spec).nll
        if dtype == "float32":
            assert np.array_equal(got, vanilla.nll), name
        else:
            assert np.abs(got - vanilla.nll).max() <= 1e-6, name


def test_capture_under_lm_infinite_is_the_settings_own(tiny64):
    """Layer 0's q/k do not depend on attention; layer 1's do, and the capture sees it."""
    spec = lm_settings(16, 4)
    vanilla = run_setting(tiny64, IDS, spec["vanilla"], layers=[0, 1])
    lminf = run_setting(tiny64, IDS, spec["LM-Infinite"], layers=[0, 1])
    (q0, q1), (r0, r1) = ([run.layers[i].q.double().numpy() for i in (0, 1)]
                          for run in (vanilla, lminf))  # fmt: skip  # float64 pre-RoPE queries
    assert np.array_equal(q0, r0)
    early = np.abs(q1[:, :16] - r1[:, :16]).max()  # causal
    late = np.abs(q1[:, 16:] - r1[:, 16:]).max()
    assert early <= 1e-6 < 1e-3 < late  # (eager's float32 softmax is the 1e-7 in early)
    for run in (vanilla, lminf):
        assert all(qk.rope_max_rel_diff <= 1e-5 for qk in run.layers.values())  # float32 tables
        assert run.layers[0].scale == pytest.approx(8**-0.5)


def test_in_length_windows():
    n, length = 37, 8
    starts = window_starts(n, length)
    for pos, s in enumerate(starts):  # holds x_n and x_{n+1}, at positions 0..L-1, max context
        assert s <= pos and pos + 1 <= s + length - 1
        assert pos < length - 1 or pos - s >= length - length // 2 - 1
    loaded = tiny("float32")
    vanilla = run_setting(loaded, IDS[:n], LambdaSpec()).nll
    windowed = windowed_nll(loaded, IDS[:n], length)
    np.testing.assert_allclose(windowed[: length - 1], vanilla[: length - 1], atol=1e-5)


def test_sliding_window_models_are_refused():
    config = T.MistralConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                             num_hidden_layers=1, intermediate_size=48, vocab_size=64,
                             max_position_embeddings=256, sliding_window=8)  # fmt: skip
    loaded = load_model(config, seed=0)
    with pytest.raises(RopesplitError, match="full attention"):
        run_setting(loaded, IDS[:20], lm_settings(8, 2)["LM-Infinite"])


# --------------------------------------------------------------------------- known truth: a rise


def periodic_model(length: int = 16, vocab: int = 8, amplitude: float = 20.0):
    r"""A one-layer model whose only attention is positional: ``f(Delta) = A cos(pi Delta / L)``.

    Queries and keys are constant biases in one RoPE pair of frequency
    ``pi / L`` (base ``(L / pi)^2``, head_dim 4), so ``W = f`` (``g = E = 0``):
    within ``[0, L]`` the logit falls from ``A`` (the token itself) to ``-A``;
    beyond ``L`` it rises back to ``A`` at ``2L``, a distance never seen. The
    value/output copy the attended tokens' one-hots into dimensions the
    unembedding reads (the embedding itself is invisible to it), so the
    prediction is the attended mixture. On "sticky" sequences (the next token
    repeats the current one with probability 0.9) the loss must rise beyond
    ``2L`` without the cap, where far tokens get the self-logit, and not with it.
    """
    heads = vocab // 4
    config = llama_config(vocab_size=vocab, hidden_size=2 * vocab, num_attention_heads=heads,
                           num_key_value_heads=heads, head_dim=4, num_hidden_layers=1,
                           intermediate_size=4, attention_bias=True,
                           rope_theta=(length / math.pi) ** 2, max_position_embeddings=8 * length,
                           tie_word_embeddings=False, rms_norm_eps=1e-6,
                           ropesplit_train_length=length)  # fmt: skip
    loaded = load_model(config, seed=0)
    model, bias = loaded.model, math.sqrt(2 * amplitude / 4**-0.5)  # s a^2 = A
    layer = model.model.layers[0]
    attn = layer.self_attn
    with torch.no_grad():
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, :vocab] = torch.eye(vocab)
        for proj in (attn.q_proj, attn.k_proj):
            proj.weight.zero_()
            proj.bias.zero_()
            proj.bias.view(heads, 4)[:, 1] = bias  # pair 1 (coordinates 1, 3): theta = pi / L
        attn.v_proj.weight.zero_()
        attn.v_proj.bias.zero_()
        attn.v_proj.weight[:, :vocab] = torch.eye(vocab) / math.sqrt(2 * vocab)
        attn.o_proj.weight.zero_()
        attn.o_proj.bias.zero_()
        attn.o_proj.weight[vocab:, :] = torch.eye(vocab)
        layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        model.lm_head.weight[:, vocab:] = 3 * torch.eye(vocab)
    return loaded


def sticky_tokens(n: int, vocab: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = [int(rng.integers(vocab))]
    for _ in range(n - 1):
        out.append(out[-1] if rng.random() < 0.9 else int(rng.integers(vocab)))
    return np.asarray(out)


def test_a_model_whose_loss_rises_without_the_cap():
    length = 16
    loaded = periodic_model(length)
    ids = sticky_tokens(8 * length)
    in_length = windowed_nll(loaded, ids, length)[2 * length :].mean()
    far = {name: run_setting(loaded, ids, spec).nll[2 * length :].mean()
           for name, spec in lm_settings(length, 2).items()}  # fmt: skip
    assert far["vanilla"] > 1.3 * in_length  # unseen distances near 2L take the self-logit
    assert far["cap only"] <= 1.05 * in_length
    assert far["LM-Infinite"] <= 1.05 * in_length


def test_install_restores_the_model_even_after_an_error():
    loaded = tiny("float32", layers=1)
    home = sys.modules[type(loaded.attn.modules[0]).__module__]
    original = home.apply_rotary_pos_emb
    with pytest.raises(RuntimeError, match="boom"), install(loaded, lm_settings(8)["LM-Infinite"]):
        raise RuntimeError("boom")
    assert home.apply_rotary_pos_emb is original
    assert loaded.model.config._attn_implementation == "eager"
    assert not any(m._forward_pre_hooks for m in loaded.attn.modules)


def test_in_length_windows_restore_bos_as_the_model_was_trained():
    """Every in-length window starts with BOS when the text does, and each loss is
    -log p(x_{n+1} | BOS, x_{s..n}) computed here one window at a time."""
    n, length = 29, 8
    loaded = tiny("float32")
    bos = int(loaded.config.bos_token_id)
    ids = torch.cat([torch.tensor([bos]), IDS[1:n]])  # (n,), BOS first
    seen = []
    forward = loaded.model.forward

    def spy(*args, **kwargs):
        seen.append(kwargs["input_ids"].clone())
        return forward(*args, **kwargs)

    loaded.model.forward = spy
    try:
        got = windowed_nll(loaded, ids, length)
    finally:
        loaded.model.forward = forward
    assert all(bool((w[:, 0] == bos).all()) for w in seen)  # every window starts with BOS
    assert max(w.shape[1] for w in seen) == length  # BOS + L - 1 text tokens
    starts = window_starts(n - 1, length - 1)  # over the text after BOS
    for pos in range(n - 1):
        if pos == 0:
            window, at = ids[:2], 0
        else:
            s = int(starts[pos - 1])
            window = torch.cat([ids[:1], ids[1 + s : 1 + s + length - 1]])
            at = pos - s  # x_pos sits at window position 1 + (pos - 1 - s)
        with torch.no_grad():
            logits = loaded.model(input_ids=window[None]).logits[0].double()
        expected = -torch.log_softmax(logits[at], dim=-1)[ids[pos + 1]].item()
        assert got[pos] == pytest.approx(expected, abs=1e-5), pos


def test_positional_range_is_each_querys_own_range_over_trained_distances():
    """f(q_i, Delta) over Delta = 0..L per query (loop twin), and a pooled range that
    hides what one query never met: query 0's f beyond L leaves its own range, not the pool's."""
    from ropesplit.numerics.length import outside_query_range, positional_range

    rng = np.random.default_rng(3)
    d, n, length = 8, 5, 6
    theta = 1.0 / 10.0 ** (np.arange(d // 2) / 2)
    q, kbar = rng.normal(size=(n, d)), rng.normal(size=d)
    lo, hi = positional_range(q, kbar, RopeSpec.from_arrays(theta, 0.5), length)
    for i in range(n):  # float64 loop twin over (Delta, l), half layout
        values = []
        for delta in range(length + 1):
            total = 0.0
            for pair in range(d // 2):
                a, b = q[i, pair], q[i, pair + d // 2]
                c, e = kbar[pair], kbar[pair + d // 2]
                phi = theta[pair] * delta
                total += (a * c + b * e) * np.cos(phi) + (a * e - b * c) * np.sin(phi)
            values.append(0.5 * total)
        assert lo[i] == pytest.approx(min(values), abs=1e-12)
        assert hi[i] == pytest.approx(max(values), abs=1e-12)
    values = np.zeros((2, 2))
    values[0, 0] = hi[0] + 0.5 * (hi[1] - hi[0]) if hi[1] > hi[0] else hi[0] + 1.0
    values[1, 1] = (lo[1] + hi[1]) / 2  # inside its own range
    mask = np.eye(2, dtype=bool)
    assert outside_query_range(values, lo[:2], hi[:2], mask) == 0.5
    assert outside_query_range(values, lo[:2], hi[:2], np.zeros((2, 2), bool)) == 0.0


def test_lm_infinite_reads_the_rope_geometry_as_the_capture_does():
    """Regression: lminfinite copied capture's table helpers and drifted (another eps); both
    now call capture.table_geometry, so layout, theta and scale agree exactly."""
    from ropesplit.empirical.model.capture import capture

    loaded = tiny("float32")
    run = run_setting(loaded, IDS[:32], LambdaSpec(), layers=[0, 1])
    cache = capture(loaded, IDS[:32])
    for index in (0, 1):
        mine, theirs = run.layers[index], cache.layers[index]
        assert mine.layout == theirs.layout
        np.testing.assert_array_equal(mine.theta, theirs.theta)
        assert mine.scale == theirs.scale
