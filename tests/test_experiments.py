"""The paper's experiments on tiny randomly initialised Llama models (issue 5).

No download: every model is built from a config. What the tests pin down:
the numbers come from real forward passes on inputs that really are
perturbed (seen through hooks on the model, not read back from our own
variables), a 0% perturbation is the baseline itself (ratio exactly 1), the
distance cap reproduces the model where it cannot bite and a direct numpy
computation where it does, and every vectorised measurement has a float64
loop twin.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
import transformers as T
from hypothesis import example, given, note, settings
from hypothesis import strategies as st
from ropesplit.empirical import capture, continuation_loss, load_model
from ropesplit.empirical.experiments import run_experiments
from ropesplit.empirical.experiments_cap import CAP_ATTENTION, capped_attention, distance_cap
from ropesplit.empirical.experiments_distance import (
    DISTANCES,
    additive_fit,
    detrend,
    distance_experiment,
    layer_distance,
)
from ropesplit.empirical.experiments_forward import (
    context_length,
    continuation_losses,
    forward_batch,
    model_context,
    ratio_summary,
)
from ropesplit.empirical.experiments_length import length_components, length_experiment
from ropesplit.empirical.experiments_order import ORDER_RATES, order_experiment, order_inputs
from ropesplit.empirical.experiments_position import causal_pairs, position_inputs, shift_bounds

from ropesplit.errors import RopesplitError

VOCAB = 128
N_TOKENS = 48
BASE = 10000.0


def tiny_llama(layers: int = 2, *, seed: int = 0, context: int = 256):
    config = T.LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=layers,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=context,
    )
    return load_model(config, seed=seed)


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama()


@pytest.fixture(scope="module")
def distinct_ids():
    """Distinct tokens, so that any re-ordering changes the ids the model sees."""
    return torch.as_tensor(np.random.default_rng(1).permutation(VOCAB)[:N_TOKENS])


class Seen:
    """A hook on one module that records rows of ids the model really used; removed on exit."""

    def __init__(self, module, *, pre: bool):
        self.rows: list[tuple[int, ...]] = []
        if pre:
            self.handle = module.register_forward_pre_hook(self.record_pre, with_kwargs=True)
        else:
            self.handle = module.register_forward_hook(self.record)

    def record(self, module, args, output):
        self.rows.extend(tuple(r) for r in args[0].tolist())  # the embedding's input ids

    def record_pre(self, module, args, kwargs):
        positions = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
        self.rows.extend(tuple(r) for r in positions.tolist())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def seen_input_ids(loaded) -> Seen:
    """Every row of input ids the embedding read (a forward hook)."""
    return Seen(loaded.model.get_input_embeddings(), pre=False)


def seen_position_ids(loaded) -> Seen:
    """Every row of position ids the rotary embedding turned into angles (a pre-hook)."""
    (rotary,) = [m for m in loaded.model.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    return Seen(rotary, pre=True)


# --------------------------------------------------------------------------- forward passes


def test_batched_losses_match_the_empirical_layers_single_pass(tiny, distinct_ids):
    start = context_length(N_TOKENS)
    ids = distinct_ids.numpy()
    ours = continuation_losses(tiny, ids[None], np.arange(N_TOKENS)[None], start)
    reference = continuation_loss(tiny, distinct_ids, start=start)
    assert ours.shape == (1,)
    assert math.isclose(ours[0], reference, rel_tol=1e-6)


def test_losses_do_not_depend_on_the_batch_size(tiny, distinct_ids):
    rng = np.random.default_rng(3)
    ids = np.stack([rng.permutation(distinct_ids.numpy()) for _ in range(5)])  # (5, N)
    positions = np.broadcast_to(np.arange(N_TOKENS), ids.shape)
    one = continuation_losses(tiny, ids, positions, 36, batch_size=1)
    many = continuation_losses(tiny, ids, positions, 36, batch_size=4)
    np.testing.assert_allclose(one, many, rtol=1e-5)
    assert len(set(np.round(one, 6))) == 5  # five different inputs, five different losses


def test_identical_rows_run_once_and_share_their_loss(tiny, distinct_ids):
    ids = np.stack([distinct_ids.numpy()] * 3)
    positions = np.broadcast_to(np.arange(N_TOKENS), ids.shape)
    with seen_input_ids(tiny) as seen:
        losses = continuation_losses(tiny, ids, positions, 36)
    assert len(seen.rows) == 1
    assert losses[0] == losses[1] == losses[2]


def test_perturbed_position_ids_keep_the_mask_causal_by_index(tiny, distinct_ids):
    """Regression (issue 5): without an explicit attention mask, transformers reads a
    position step other than +1 as a new packed sequence and masks across it."""
    positions = torch.as_tensor(np.arange(N_TOKENS)[::-1].copy())[None]  # every step is -1
    weights = []
    handle = tiny.attn[0].register_forward_hook(lambda m, a, out: weights.append(out[1]))
    try:
        forward_batch(tiny, distinct_ids[None], positions, 1)
    finally:
        handle.remove()
    (probs,) = weights  # (1, H, N, N)
    causal = torch.tril(torch.ones(N_TOKENS, N_TOKENS, dtype=torch.bool))
    assert (probs[0][:, causal] > 0).all()  # every earlier token is attended
    assert (probs[0][:, ~causal] == 0).all()


def test_ratio_summary_is_mean_and_sample_std_of_the_ratio():
    summary = ratio_summary(np.array([2.0, 3.0, 4.0]), 2.0)
    assert summary == {"loss": 3.0, "ratio": 1.5, "spread": pytest.approx(0.5)}
    assert ratio_summary(np.array([2.0]), 2.0)["spread"] == 0.0


def test_model_context_prefers_the_original_length_of_scaled_rope():
    plain = tiny_llama(1, context=96)
    assert model_context(plain) == 96
    plain.config.rope_parameters = {
        "rope_type": "yarn", "rope_theta": BASE, "factor": 4.0,
        "original_max_position_embeddings": 24,
    }  # fmt: skip
    assert model_context(plain) == 24


@pytest.mark.parametrize(
    ("ids", "positions", "start", "message"),
    [
        (np.zeros((2, 8)), np.zeros((2, 7)), 4, "ids and positions must both be (B, N)"),
        (np.zeros((1, 8)), np.zeros((1, 8)), 8, "continuation start must lie in [1, 8)"),
        (np.full((1, 8), VOCAB), np.zeros((1, 8)), 4, f"token ids must lie in [0, {VOCAB})"),
        (np.zeros((1, 8)), -np.ones((1, 8)), 4, "positions must be >= 0"),
    ],
)
def test_bad_forward_input_is_one_line(tiny, ids, positions, start, message):
    with pytest.raises(RopesplitError, match=None) as info:
        continuation_losses(tiny, ids, positions, start)
    assert str(info.value).startswith(message)


# --------------------------------------------------------------------------- word order


@pytest.fixture(scope="module")
def order_run(tiny, distinct_ids):
    with seen_input_ids(tiny) as seen:
        rows = order_experiment(tiny, distinct_ids, seeds=2, seed=5)
    return rows, seen.rows


def test_order_rows_cover_every_scheme_and_rate(order_run):
    rows, _ = order_run
    assert [(r["scheme"], r["rate"]) for r in rows] == [
        (s, r) for s in ("adjacent", "subset") for r in ORDER_RATES
    ]
    for row in rows:
        assert set(row) == {"scheme", "rate", "loss", "ratio", "spread", "moved"}
        assert all(isinstance(row[k], float) for k in ("rate", "loss", "ratio", "spread"))


def test_rate_zero_is_the_baseline_itself(order_run, distinct_ids):
    rows, seen = order_run
    for row in rows:
        if row["rate"] == 0.0:
            assert row["ratio"] == 1.0 and row["spread"] == 0.0 and row["moved"] == 0.0
    assert tuple(distinct_ids.tolist()) in seen


def test_nonzero_rates_change_what_the_model_reads(order_run, distinct_ids):
    rows, seen = order_run
    labels, batch = order_inputs(distinct_ids, seeds=2, seed=5)
    original = tuple(distinct_ids.tolist())
    context = context_length(N_TOKENS)
    assert set(seen) == {tuple(r) for r in batch.tolist()} | {original}  # each input, run once
    assert len(seen) == len(set(seen))
    for label, row in zip(labels, batch.tolist(), strict=True):
        changed = tuple(row) != original
        assert changed == (label["moved"] > 0)
        assert row[context:] == list(original[context:])  # the continuation is untouched
        if label["scheme"] == "subset" and label["rate"] > 0:
            assert changed  # a derangement of at least two distinct tokens
    moved = {(r["scheme"], r["rate"]): r["moved"] for r in rows}
    assert moved["subset", 0.2] == pytest.approx(round(0.2 * context) / context)


def test_order_experiment_is_deterministic_per_seed(tiny, distinct_ids, order_run):
    again = order_experiment(tiny, distinct_ids, seeds=2, seed=5)
    assert again == order_run[0]
    _, other = order_inputs(distinct_ids, seeds=2, seed=6)
    _, first = order_inputs(distinct_ids, seeds=2, seed=5)
    assert not np.array_equal(first, other)


# --------------------------------------------------------------------------- position ids


def test_position_inputs_reach_the_rotary_embedding(tiny, distinct_ids):
    labels, positions = position_inputs(N_TOKENS, shifts=(0, 2, 8), seeds=2, seed=1)
    context = context_length(N_TOKENS)
    with seen_position_ids(tiny) as seen:
        continuation_losses(
            tiny, np.broadcast_to(distinct_ids.numpy(), positions.shape), positions, context
        )
    assert set(seen.rows) == {tuple(p) for p in positions.tolist()}
    for label, row in zip(labels, positions.tolist(), strict=True):
        t = label["t"]
        moved = np.asarray(row[:context]) - t != np.arange(context)
        assert (tuple(row) == tuple(range(N_TOKENS))) == (t == 0)
        assert moved.any() == (t > 0)
        assert row[context:] == list(range(context + t, N_TOKENS + t))  # continuation: offset only


# --------------------------------------------------------------------------- distance cap


def _numpy_capped_probs(hidden, attn, positions, cap):
    """Layer 0's attention probabilities, float64, from the weights: RoPE at min(Delta, L)."""
    h = hidden.double().numpy()  # (N, hidden)
    (n_tokens, _) = h.shape
    d, n_heads, n_kv = attn.head_dim, 4, 2
    q = (h @ attn.q_proj.weight.detach().double().numpy().T).reshape(n_tokens, n_heads, d)
    k = (h @ attn.k_proj.weight.detach().double().numpy().T).reshape(n_tokens, n_kv, d)
    theta = BASE ** (-np.arange(d // 2) * 2.0 / d)  # (d/2,)
    probs = np.zeros((n_heads, n_tokens, n_tokens))
    for head in range(n_heads):
        for i in range(n_tokens):
            logits = np.full(n_tokens, -np.inf)
            for j in range(i + 1):
                delta = min(positions[i] - positions[j], cap)
                total = 0.0
                for pair in range(d // 2):  # half layout: (x_l, x_{l+P})
                    a, b = q[i, head, pair], q[i, head, pair + d // 2]
                    c, e = k[j, head // 2, pair], k[j, head // 2, pair + d // 2]
                    angle = theta[pair] * delta
                    total += (a * c + b * e) * math.cos(angle) + (a * e - b * c) * math.sin(angle)
                logits[j] = total / math.sqrt(d)
            probs[head, i] = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    return probs


def test_cap_matches_a_direct_numpy_computation():
    loaded = tiny_llama(1)
    ids = torch.arange(3, 3 + 20)[None]
    positions = (torch.arange(20) * 3)[None]  # distances up to 57
    seen = {}

    def keep_hidden(module, args, kwargs):
        seen["hidden"] = kwargs["hidden_states"][0].clone()  # (N, hidden), the layer's input

    def keep_probs(module, args, out):
        seen["probs"] = out[1]  # (1, H, N, N)

    pre = loaded.attn[0].register_forward_pre_hook(keep_hidden, with_kwargs=True)
    post = loaded.attn[0].register_forward_hook(keep_probs)
    try:
        with distance_cap(loaded, positions, 10) as state:
            forward_batch(loaded, ids, positions, 1)
    finally:
        pre.remove()
        post.remove()
    expected = _numpy_capped_probs(seen["hidden"], loaded.attn[0], positions[0].tolist(), 10)
    np.testing.assert_allclose(seen["probs"][0].double().numpy(), expected, atol=1e-5)
    far = int(((positions[0][:, None] - positions[0][None, :]) > 10).tril().sum())
    assert state.far == far > 0  # pairs really evaluated at the cap
    uncapped = _numpy_capped_probs(seen["hidden"], loaded.attn[0], positions[0].tolist(), 10**9)
    assert np.abs(uncapped - expected).max() > 1e-3  # the cap changed the attention


@pytest.mark.parametrize("stride", [1, 3])
def test_a_cap_that_cannot_bite_reproduces_the_model(tiny, distinct_ids, stride):
    positions = (torch.arange(N_TOKENS) * stride)[None]
    plain = forward_batch(tiny, distinct_ids[None], positions, 1)
    with distance_cap(tiny, positions, stride * (N_TOKENS - 1)) as state:
        capped = forward_batch(tiny, distinct_ids[None], positions, 1)
    assert state.far == 0
    assert float((plain - capped).abs().max()) <= 1e-5


def test_cap_restores_the_model_even_after_an_error(tiny, distinct_ids):
    home = sys.modules[type(tiny.attn[0]).__module__]
    original = home.apply_rotary_pos_emb
    positions = torch.arange(N_TOKENS)[None]
    with pytest.raises(RuntimeError), distance_cap(tiny, positions, 4):
        raise RuntimeError("boom")
    assert home.apply_rotary_pos_emb is original
    assert tiny.model.config._attn_implementation == "eager"
    assert not any(m._forward_pre_hooks for m in tiny.attn)
    with pytest.raises(RopesplitError, match=f"attention '{CAP_ATTENTION}' runs only inside"):
        capped_attention(tiny.attn[0], *[torch.zeros(1, 4, 2, 16)] * 3, None, 0.25)
    with pytest.raises(RopesplitError, match="distance cap must be >= 0, got -1"):
        with distance_cap(tiny, positions, -1):
            pass


# --------------------------------------------------------------------------- pairs and bounds

P = 8  # pairs per synthetic head
D_HEAD = 2 * P


def fake_layer(q, k, theta, *, scale=0.25, layout="half", rotary_dim=None):
    """A LayerCapture from synthetic pre-RoPE q (H, N, d) and k (Hkv, N, d), float64 kept."""
    from ropesplit.empirical.capture import LayerCapture

    n_heads, n_kv = q.shape[0], k.shape[0]
    n_tokens, d = q.shape[1], q.shape[2]
    return LayerCapture(
        layer=0, q=torch.as_tensor(q), k=torch.as_tensor(k), cos=torch.ones(n_tokens, d),
        sin=torch.zeros(n_tokens, d), theta=np.asarray(theta, dtype=np.float64),
        rope_amplitude=1.0, attn_scale=scale, scale=scale,
        kv_map=np.arange(n_heads) // (n_heads // n_kv), window=None, softcap=None,
        layout=layout, rotary_dim=rotary_dim or d, rope_base=BASE,
        reconstruction_max_abs_diff=0.0,
    )  # fmt: skip


def _logit(q, k, theta, delta, s):
    """THEORY.md section 2, real form, one pair at a time (half layout)."""
    total = 0.0
    for pair, th in enumerate(theta):
        a, b, c, e = q[pair], q[pair + P], k[pair], k[pair + P]
        total += (a * c + b * e) * math.cos(th * delta) + (a * e - b * c) * math.sin(th * delta)
    return s * total


def _rotate(x, p, theta):
    """R(p) x in the half layout, written out: (x_l, x_{l+P}) turned by p theta_l."""
    half = len(x) // 2
    c, s = np.cos(theta * p), np.sin(theta * p)
    return np.concatenate([x[:half] * c - x[half:] * s, x[half:] * c + x[:half] * s])


def test_pairs_reproduce_the_models_rotation(tiny, distinct_ids):
    """W from the complex pairs equals the model's own rotated q . k (float64 loop twin)."""
    from ropesplit.empirical.experiments_pairs import layer_pairs

    cache = capture(tiny, distinct_ids[:12])
    layer = cache.layers[1]
    qc, kc = layer_pairs(layer)  # (H, N, P)
    d = layer.head_dim
    theta = BASE ** (-np.arange(d // 2) * 2.0 / d)
    q, k = layer.q.double().numpy(), layer.k.double().numpy()
    for head, (i, j) in [(0, (5, 2)), (3, (11, 0)), (2, (7, 7))]:
        w = layer.scale * np.real(
            np.sum(qc[head, i] * np.conj(kc[head, j]) * np.exp(1j * theta * (i - j)))
        )
        kv = layer.kv_map[head]
        expected = layer.scale * _rotate(q[head, i], i, theta) @ _rotate(k[kv, j], j, theta)
        assert math.isclose(w, expected, rel_tol=1e-9, abs_tol=1e-12)


@given(n=st.integers(1, 40), budget=st.integers(1, 900), seed=st.integers(0, 2**16))
@settings(max_examples=50, deadline=None)
@example(n=40, budget=819, seed=0)  # all but one pair
def test_causal_pairs_are_distinct_causal_and_uniformly_indexed(n, budget, seed):
    i, j = causal_pairs(n, budget, np.random.default_rng(seed))
    total = n * (n + 1) // 2
    assert len(i) == min(budget, total)
    assert np.all(j <= i) and np.all(j >= 0) and np.all(i < n)
    assert len(set(zip(i.tolist(), j.tolist(), strict=True))) == len(i)
    ti, tj = np.tril_indices(n)  # the row-major enumeration the formula inverts
    index = {(a, b): m for m, (a, b) in enumerate(zip(ti.tolist(), tj.tolist(), strict=True))}
    assert all((a, b) in index for a, b in zip(i.tolist(), j.tolist(), strict=True))


def test_shift_bounds_twin_and_the_bound_holds():
    rng = np.random.default_rng(4)
    n_tokens = 10
    q, k = rng.normal(size=(2, n_tokens, D_HEAD)), rng.normal(size=(1, n_tokens, D_HEAD)) + 1.5
    theta = 100.0 ** (-np.arange(P) / P)
    layer = fake_layer(q, k, theta)
    positions = np.arange(n_tokens)
    pairs = causal_pairs(n_tokens, None, rng)
    out = shift_bounds(layer, positions, (0, 1, 5), pairs)
    kbar = k[0].mean(axis=0)
    for ti, t in enumerate((0, 1, 5)):
        for head in range(2):
            changes = {"W": [], "f": [], "E": []}
            bounds = {"W": [], "f": [], "E": []}
            for i, j in zip(*pairs, strict=True):
                for name, key in (("W", k[0, j]), ("f", kbar), ("E", k[0, j] - kbar)):
                    moved = _logit(q[head, i], key, theta, i - j + t, 0.25)
                    changes[name].append(abs(moved - _logit(q[head, i], key, theta, i - j, 0.25)))
                    bounds[name].append(0.25 * sum(
                        abs(complex(q[head, i, l], q[head, i, l + P]))
                        * abs(complex(key[l], key[l + P]))
                        * 2 * abs(math.sin(theta[l] * t / 2)) for l in range(P)))  # fmt: skip
            for name in ("W", "f", "E"):
                assert math.isclose(
                    out[f"measured_{name}"][ti, head],
                    np.mean(changes[name]),
                    rel_tol=1e-9,
                    abs_tol=1e-12,
                )
                assert math.isclose(
                    out[f"bound_{name}"][ti, head],
                    np.mean(bounds[name]),
                    rel_tol=1e-9,
                    abs_tol=1e-12,
                )
    assert np.all(out["tightness"] <= 1 + 1e-12)
    assert np.all(
        out["bound_W"] <= out["bound_f"] + out["bound_E"] + 1e-12
    )  # |k_l| <= |kbar_l| + |delta_l|
    assert np.all(out["tightness"][1:] > 0.5)  # the bound is not vacuous here
    assert np.all(out["bound_W"][0] == 0)


@given(seed=st.integers(0, 2**16), t=st.integers(1, 64))
@settings(max_examples=25, deadline=None)
def test_measured_change_never_exceeds_its_bound(seed, t):
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(2, 12, D_HEAD)), rng.normal(size=(2, 12, D_HEAD)) * rng.uniform(0.1, 3)
    theta = 1000.0 ** (-np.arange(P) / P)
    out = shift_bounds(fake_layer(q, k, theta), np.arange(12), (t,), causal_pairs(12, None, rng))
    note(f"tightness={out['tightness']}")
    assert np.all(out["tightness"] <= 1 + 1e-12)
    for name in ("W", "f", "E"):
        assert np.all(out[f"measured_{name}"] <= out[f"bound_{name}"] + 1e-12)


# --------------------------------------------------------------------------- controlled distance


def _design_fit(w, distance):
    """The same least squares through an explicit design matrix and lstsq (the loop twin)."""
    n = w.shape[0]
    i, j = np.tril_indices(n)
    cols = (3 if distance else 2) * n
    x = np.zeros((len(i), cols))
    off = n if distance else 0
    if distance:
        x[np.arange(len(i)), i - j] = 1.0
    x[np.arange(len(i)), off + i] = 1.0
    x[np.arange(len(i)), off + n + j] = 1.0
    sol, *_ = np.linalg.lstsq(x, w[i, j], rcond=None)
    return x @ sol  # fitted values on the causal pairs (gauge-free)


@given(n=st.integers(3, 9), k=st.integers(1, 3), seed=st.integers(0, 2**16), distance=st.booleans())
@settings(max_examples=30, deadline=None)
@example(n=3, k=1, seed=0, distance=True)
def test_additive_fit_twin_and_gauge(n, k, seed, distance):
    w = np.random.default_rng(seed).normal(size=(n, n, k))
    fit = additive_fit(w, distance=distance)
    i, j = np.tril_indices(n)
    for col in range(k):
        ours = fit["b"][i, col] + fit["c"][j, col]
        if distance:
            ours = ours + fit["a"][i - j, col]
        np.testing.assert_allclose(ours, _design_fit(w[:, :, col], distance), atol=1e-10)
    assert np.allclose(fit["c"].sum(axis=0), 0, atol=1e-10)
    if distance:  # c off span{1, j}: the linear-trend gauge fixed
        assert np.allclose(np.arange(n) @ fit["c"], 0, atol=1e-9)
        np.testing.assert_allclose(detrend(fit["c"]), fit["c"], atol=1e-10)


def test_additive_fit_agrees_with_the_numerics_three_axis_fit():
    from ropesplit.numerics.fit import three_axis_fit

    w = np.random.default_rng(5).normal(size=(12, 12))
    ours = additive_fit(w[:, :, None], distance=True)
    theirs = three_axis_fit(w)
    i, j = np.tril_indices(12)
    fitted = ours["a"][i - j, 0] + ours["b"][i, 0] + ours["c"][j, 0]
    np.testing.assert_allclose(fitted, theirs.fitted[i, j], atol=1e-8)
    np.testing.assert_allclose(ours["c"][:, 0], detrend(theirs.c[:, None])[:, 0], atol=1e-8)


def test_an_exactly_additive_matrix_is_recovered():
    rng = np.random.default_rng(2)
    n = 8
    a, b, c = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    idx = np.arange(n)
    w = (a[np.subtract.outer(idx, idx).clip(min=0)] + b[:, None] + c[None, :])[:, :, None]
    fit = additive_fit(w, distance=True)
    np.testing.assert_allclose(fit["c"][:, 0], detrend(c[:, None])[:, 0], atol=1e-10)


def _pattern_layer(high_deviation: float, seed: int = 0, n_tokens: int = 24):
    """Keys = a constant kbar plus deviation in the non-rotating pairs (E = 0), or in the
    fastest pair as well (``high_deviation`` > 0, E != 0)."""
    rng = np.random.default_rng(seed)
    theta = np.concatenate([10.0 ** (-np.arange(P // 2) / 2), np.zeros(P // 2)])  # last half still
    q = rng.normal(size=(2, n_tokens, D_HEAD))
    kbar = rng.normal(size=D_HEAD)
    dev = np.zeros((1, n_tokens, D_HEAD))
    still = [*range(P // 2, P), *range(P + P // 2, 2 * P)]  # the theta = 0 pairs, both halves
    dev[..., still] = rng.normal(size=(n_tokens, len(still)))
    dev[..., [0, P]] = high_deviation * rng.normal(size=(n_tokens, 2))  # pair 0: 1 rad per token
    return fake_layer(q, kbar + dev, theta)


def test_key_component_does_not_move_when_the_remainder_vanishes():
    rows = layer_distance(_pattern_layer(0.0), np.arange(24.0), DISTANCES)
    for row in rows:
        assert row["key_corr_d0"] == pytest.approx(1.0, abs=1e-9)  # W^D - W^D' is query-only
    shifts = {row["distance"]: row["distance_shift"] for row in rows if row["head"] == 0}
    assert len({round(v, 6) for v in shifts.values()}) == len(DISTANCES)  # u moves with D


def test_key_component_moves_when_deviation_sits_in_fast_pairs():
    rows = layer_distance(_pattern_layer(3.0), np.arange(24.0), DISTANCES)
    worst = min(row["key_corr_d0"] for row in rows)
    assert worst < 0.9, worst


def test_distance_experiment_rows_and_means(tiny, distinct_ids):
    cache = capture(tiny, distinct_ids[:20])
    rows = distance_experiment(cache, layers=[1], distances=(0, 32))
    heads = [r for r in rows if r["scope"] == "head"]
    assert len(heads) == 4 * 2 and {r["layer"] for r in heads} == {1}
    (mean32,) = [r for r in rows if r["scope"] == "layer" and r["distance"] == 32]
    assert mean32["key_corr"] == pytest.approx(
        np.mean([r["key_corr"] for r in heads if r["distance"] == 32])
    )
    assert [r["scope"] for r in rows[-2:]] == ["all", "all"]
    assert all(-1 <= r["key_corr"] <= 1 and r["distance_shift"] >= 0 for r in rows)
    with pytest.raises(RopesplitError, match=r"layers must lie in \[0, 2\), got \[2\]"):
        distance_experiment(cache, layers=[2])


# --------------------------------------------------------------------------- length


def test_length_components_twin():
    layer = _pattern_layer(1.0, n_tokens=9)
    from ropesplit.empirical.experiments_pairs import layer_pairs

    qc, kc = layer_pairs(layer)
    q, k = layer.q.numpy(), layer.k.numpy()
    kbar = k[0].mean(axis=0)
    stride, cap = 5, 17
    out = length_components(qc[0], kc[0], layer.theta, layer.scale, stride, cap)
    i, j = np.tril_indices(9)
    for setting, dist in (("original", i - j), ("spaced", stride * (i - j)),
                          ("capped", np.minimum(stride * (i - j), cap))):  # fmt: skip
        for m in range(0, len(i), 7):
            f = _logit(q[0, i[m]], kbar, layer.theta, dist[m], layer.scale)
            g = layer.scale * q[0, i[m]] @ (k[0, j[m]] - kbar)
            w = _logit(q[0, i[m]], k[0, j[m]], layer.theta, dist[m], layer.scale)
            assert out[setting]["f"][m] == pytest.approx(f, abs=1e-10)
            assert out[setting]["g"][m] == pytest.approx(g, abs=1e-10)
            assert out[setting]["E"][m] == pytest.approx(w - f - g, abs=1e-10)
    assert out["original"]["g"] is out["capped"]["g"] is out["spaced"]["g"]  # position-free
    trained = [
        [_logit(q[0, a], kbar, layer.theta, dd, layer.scale) for dd in range(cap + 1)] for a in i
    ]
    np.testing.assert_allclose(out["trained"]["lo"], np.min(trained, axis=1), atol=1e-10)
    np.testing.assert_allclose(out["trained"]["hi"], np.max(trained, axis=1), atol=1e-10)


def test_length_experiment_on_a_tiny_model(distinct_ids):
    loaded = tiny_llama(2, context=32)  # training length 32: 24 tokens spaced reach 2 L
    ids = distinct_ids[:24]
    cache = capture(loaded, ids)
    with seen_position_ids(loaded) as seen:
        rows = length_experiment(loaded, ids, cache, layers=[0, 1])
    by = {r["setting"]: r for r in rows}
    stride = math.ceil(2 * 32 / 23)
    assert by["spaced"]["stride"] == stride and by["spaced"]["max_distance"] == 23 * stride
    assert by["capped"]["cap"] == 32 and by["capped"]["max_distance"] == 32
    assert tuple(range(0, 24 * stride, stride)) in seen.rows  # spaced ids reached the model
    assert by["original"]["ratio"] == 1.0
    assert by["spaced"]["loss"] != by["original"]["loss"] != by["capped"]["loss"]
    assert by["capped"]["f_outside"] == 0.0 and by["original"]["f_outside"] == 0.0
    for key in ("g_min", "g_max", "g_q01", "g_q99"):
        assert by["original"][key] == by["spaced"][key] == by["capped"][key]
    with pytest.raises(RopesplitError, match="24 tokens already exceed the training length 16"):
        length_experiment(tiny_llama(1, context=16), ids, cache, layers=[0])


# --------------------------------------------------------------------------- all four


def test_run_experiments_record(tiny, distinct_ids):
    record = run_experiments(tiny, distinct_ids[:40], experiments=("order", "length"), seeds=1)
    assert list(record) == ["header", "order", "length"]
    head = record["header"]
    assert head["tokens"] == 40 and head["context_tokens"] == 30 and head["seeds"] == 1
    assert head["token_ids"] == distinct_ids[:40].tolist() and len(head["token_ids_sha256"]) == 64
    again = run_experiments(tiny, distinct_ids[:40], experiments=("order", "length"), seeds=1)
    assert again == record  # deterministic for a given seed
    with pytest.raises(RopesplitError, match="experiments must be among distance, order"):
        run_experiments(tiny, distinct_ids, experiments=("shuffle",))
