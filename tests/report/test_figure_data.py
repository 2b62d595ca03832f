"""Figure data gathered from the layers: per-pair energy, head choice, head split.

The captures come from tiny randomly initialised models built from a config.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T
from conftest import llama_config
from hypothesis import example, given, settings
from hypothesis import strategies as st
from ropesplit.empirical import load_model
from ropesplit.empirical import capture

from ropesplit.core.errors import RopesplitError
from ropesplit.report import figure_data

COMMON = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=32,
              vocab_size=64, max_position_embeddings=64)  # fmt: skip


def _cache(config, n_tokens=12):
    loaded = load_model(config, seed=0)
    ids = torch.randint(0, 64, (n_tokens,), generator=torch.Generator().manual_seed(1))
    return capture(loaded, ids, keep_probs=False)


@pytest.fixture(scope="module")
def llama():
    return _cache(llama_config(num_key_value_heads=2, **COMMON))


@pytest.fixture(scope="module")
def neox():
    return _cache(T.GPTNeoXConfig(rotary_pct=0.5, **COMMON))  # partial rotary


def _energy_loop(cache, which):
    """float64 loop twin: pair l of the half layout is (x_l, x_{l + r/2}) over rotating coords."""
    out = []
    for layer in cache.layers:
        x = getattr(layer, which).double().numpy()  # (heads, N, d)
        heads, n, d = x.shape
        r = layer.rotary_dim
        pairs = [(l, l + r // 2) for l in range(r // 2)]
        pairs += [(r + l, r + l + (d - r) // 2) for l in range((d - r) // 2)]  # non-rotating
        energy = np.zeros(len(pairs))
        for h in range(heads):
            for p, (a, b) in enumerate(pairs):
                z = [complex(x[h, t, a], x[h, t, b]) for t in range(n)]
                mean = sum(z) / n
                energy[p] += sum(abs(v - mean) ** 2 for v in z)
        out.append(energy)
    return np.array(out)


@pytest.mark.parametrize("which", ["k", "q"])
@pytest.mark.parametrize("model", ["llama", "neox"])
def test_pair_energy_matches_loop_twin(model, which, request):
    cache = request.getfixturevalue(model)
    assert cache.layers[0].layout == "half"
    fast = figure_data.pair_energy(cache, which)
    np.testing.assert_allclose(fast, _energy_loop(cache, which), rtol=1e-10, atol=1e-12)


def test_pair_energy_data_has_control_and_typical_distances(llama):
    data = figure_data.pair_energy_data(llama, llama)
    L, P = len(llama.layers), llama.layers[0].theta.shape[0]
    assert data["energy_k"].shape == data["energy_q_control"].shape == (L, P)
    np.testing.assert_array_equal(data["theta"], llama.layers[0].theta)
    i, j = np.tril_indices(llama.n_tokens)
    assert data["distances"] == tuple(sorted({1.0, min(16.0, float(np.median(i - j))),
                                              round(float(np.median(i - j)))}))  # fmt: skip


def test_pair_energy_rejects_unknown_side(llama):
    with pytest.raises(RopesplitError, match="^which must be 'k' or 'q', got 'v'"):
        figure_data.pair_energy(llama, "v")


ROWS = st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(values=ROWS)
@example(values=[0.5, 0.1, 0.9, 0.3])  # even count: the lower middle, 0.3
def test_median_head_has_as_many_heads_below_as_above(values):
    heads = [{"layer": k // 3, "head": k % 3, "r_split": v} for k, v in enumerate(values)]
    layer, head = figure_data.median_head(heads)
    chosen = next(r["r_split"] for r in heads if (r["layer"], r["head"]) == (layer, head))
    below = sum(v < chosen for v in values)
    above = sum(v > chosen for v in values)
    ties = sum(v == chosen for v in values)
    assert below <= (len(values) - 1) // 2 < below + ties  # the lower median's rank
    assert above <= len(values) // 2 + ties


def test_median_head_skips_undefined_values():
    heads = [{"layer": 0, "head": 0, "r_split": None}, {"layer": 0, "head": 1, "r_split": 0.2},
             {"layer": 1, "head": 0, "r_split": float("nan")}]  # fmt: skip
    assert figure_data.median_head(heads) == (0, 1)
    with pytest.raises(RopesplitError, match="^no head has a finite r_split"):
        figure_data.median_head(heads[:1])


@pytest.mark.parametrize(
    ("text", "expected"), [("3.1", (3, 1)), ("0.0", (0, 0)), ("12.8", (12, 8))]
)
def test_parse_head(text, expected):
    assert figure_data.parse_head(text) == expected


@pytest.mark.parametrize("text", ["3", "3.", ".1", "a.b", "-1.2", "3.1.2"])
def test_parse_head_rejects(text):
    with pytest.raises(RopesplitError, match="^head must be LAYER.HEAD"):
        figure_data.parse_head(text)


def test_head_split_reads_its_kv_head_and_rejects_bad_indices(llama):
    split = figure_data.head_split(llama, 1, 3)  # query head 3 reads KV head kv_map[3] = 1
    layer = llama.layers[1]
    q = layer.q[3].double().numpy()
    k = layer.k[int(layer.kv_map[3])].double().numpy()
    from ropesplit.numerics.rope import rotate

    pos = np.arange(llama.n_tokens)
    W = layer.scale * rotate(q, pos, layer.theta) @ rotate(k, pos, layer.theta).T  # (N, N)
    np.testing.assert_allclose(np.where(split.mask, split.W, 0), np.tril(W), atol=1e-10)
    with pytest.raises(RopesplitError, match=r"^head must lie in \[0, 4\) for layer 1, got 4"):
        figure_data.head_split(llama, 1, 4)
    with pytest.raises(RopesplitError, match=r"^layer must lie in \[0, 2\), got 2"):
        figure_data.head_split(llama, 2, 0)


def test_bound_data_samples_real_and_synthetic_heads_under_their_bound(llama):
    """Figure 4's samples: each real head and each synthetic pattern (split under its own
    RopeSpec), at most ``points`` causal pairs each, every |E| within its bound."""
    data = figure_data.bound_data(llama, [(0, 1), (1, 3)], seed=0, points=20)
    assert list(data["samples"]) == ["layer 0 head 1", "layer 1 head 3", "synthetic: random",
                                     "synthetic: structured", "synthetic: adversarial"]  # fmt: skip
    for bound, abs_e in data["samples"].values():
        assert bound.shape == abs_e.shape and 0 < bound.size <= 20
        assert (abs_e <= bound + 1e-12).all()
