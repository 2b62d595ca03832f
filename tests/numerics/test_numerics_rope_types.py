"""Every RoPE type of transformers' table, against transformers' own formulas.

``numerics.rope.frequencies`` and ``attention_factor`` are compared with
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` (and the default rotary
embedding's ``compute_default_rope_parameters``) evaluated in float64: the
transformers modules compute in float32 (``torch.float``, ``Tensor.float()``), so the
test runs them with those two names meaning float64, which changes the precision of
their arithmetic and nothing else. The model's own float32 ``inv_freq`` buffer is checked
beside it, and a capture of a tiny model of each type passes its frequency check.
"""

from __future__ import annotations

import contextlib
import types

import numpy as np
import pytest
import torch
import transformers as T
import transformers.modeling_rope_utils as rope_utils
from hypothesis import given, settings
from hypothesis import strategies as st

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.adapter.configs import rope_spec
from ropesplit.empirical.adapter.configs import scaling as hf_scaling
from ropesplit.numerics.rope import SCALINGS, attention_factor, frequencies

D = 16  # head dim of the tiny configs
COMMON = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
              intermediate_size=32, vocab_size=64, max_position_embeddings=64)  # fmt: skip
PARAMS = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
             "original_max_position_embeddings": 16},
    "longrope": {"rope_type": "longrope", "rope_theta": 10000.0,
                 "original_max_position_embeddings": 16,
                 "short_factor": [1.0 + 0.1 * i for i in range(D // 2)],
                 "long_factor": [1.0 + 0.5 * i for i in range(D // 2)]},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
}  # fmt: skip


class _Torch64(types.ModuleType):
    """``torch`` with ``float`` and ``float32`` meaning float64."""

    float = torch.float64
    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


@contextlib.contextmanager
def float64_transformers():
    """transformers' RoPE initialisation computed in float64 (see the module docstring)."""
    llama = T.models.llama.modeling_llama
    saved = rope_utils.torch, llama.torch, torch.Tensor.float
    rope_utils.torch = llama.torch = _Torch64("torch")
    torch.Tensor.float = torch.Tensor.double
    try:
        yield
    finally:
        rope_utils.torch, llama.torch, torch.Tensor.float = saved


def config(kind: str, **params) -> T.LlamaConfig:
    return T.LlamaConfig(**COMMON, rope_parameters={**PARAMS[kind], **params})


def theirs(cfg: T.LlamaConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    """transformers' (inv_freq, attention_factor) of ``cfg`` at ``seq_len``, in float64."""
    kind = cfg.rope_parameters["rope_type"]
    with float64_transformers():
        if kind == "default":
            inv, factor = T.models.llama.modeling_llama.LlamaRotaryEmbedding \
                .compute_default_rope_parameters(cfg)  # fmt: skip
        else:
            inv, factor = rope_utils.ROPE_INIT_FUNCTIONS[kind](cfg, None, seq_len=seq_len)
    assert inv.dtype == torch.float64
    return inv.numpy(), float(factor)


def scaling(cfg: T.LlamaConfig, seq_len: int | None = None) -> dict | None:
    return hf_scaling(cfg.rope_parameters, cfg.max_position_embeddings, seq_len)


def ours(cfg: T.LlamaConfig, seq_len: int | None) -> np.ndarray:
    return frequencies(D, cfg.rope_parameters["rope_theta"], scaling=scaling(cfg, seq_len))


def test_the_table_is_transformers_table():
    """SCALINGS is a table as ROPE_INIT_FUNCTIONS is: rope_type -> the function computing it."""
    assert all(callable(compute) for compute in SCALINGS.values())
    assert set(SCALINGS) - {"ntk"} <= set(rope_utils.ROPE_INIT_FUNCTIONS)
    assert {"linear", "dynamic", "yarn", "longrope", "llama3"} <= set(SCALINGS)


@pytest.mark.parametrize("kind", sorted(PARAMS))
@pytest.mark.parametrize("seq_len", [None, 16, 200])  # at init, within, beyond the lengths
def test_frequencies_and_factor_match_transformers(kind, seq_len):
    cfg = config(kind)
    inv, factor = theirs(cfg, seq_len)
    np.testing.assert_allclose(ours(cfg, seq_len), inv, rtol=1e-12, atol=0)
    assert attention_factor(scaling(cfg)) == pytest.approx(factor, rel=1e-12)
    if kind in ("linear", "yarn", "llama3", "longrope"):  # the scaling really moves theta
        assert not np.allclose(ours(cfg, seq_len), frequencies(D, PARAMS[kind]["rope_theta"]))


@pytest.mark.parametrize("kind", sorted(PARAMS))
def test_the_models_own_buffer_and_the_spec(kind):
    """The rotary module's float32 ``inv_freq`` is these frequencies rounded; the adapter's
    rope_spec reads them off the config, its scale carrying the attention factor squared."""
    cfg = config(kind)
    module = T.models.llama.modeling_llama.LlamaRotaryEmbedding(cfg)
    np.testing.assert_allclose(module.inv_freq.double().numpy(), ours(cfg, None), rtol=3e-7)
    assert module.attention_scaling == pytest.approx(attention_factor(scaling(cfg)), rel=1e-6)
    spec = rope_spec(cfg)
    np.testing.assert_array_equal(np.asarray(spec.theta), ours(cfg, None))
    assert spec.scale == pytest.approx(D**-0.5 * module.attention_scaling**2, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(factor=st.floats(1.0, 32.0), base=st.floats(100.0, 1e6),
       old=st.sampled_from([8, 16, 32]), beta=st.tuples(st.floats(2.0, 64.0), st.floats(0.5, 2.0)),
       truncate=st.booleans(), mscale=st.sampled_from([None, (1.0, 0.0), (0.707, 0.707),
                                                        (1.0, 0.5)]))  # fmt: skip
def test_yarn_over_its_parameters(factor, base, old, beta, truncate, mscale):
    params = {"factor": factor, "rope_theta": base, "original_max_position_embeddings": old,
              "beta_fast": beta[0], "beta_slow": beta[1], "truncate": truncate}  # fmt: skip
    if mscale is not None:
        params |= {"mscale": mscale[0], "mscale_all_dim": mscale[1]}
    cfg = config("yarn", **params)
    inv, a = theirs(cfg, None)
    np.testing.assert_allclose(ours(cfg, None), inv, rtol=1e-12, atol=0)
    assert attention_factor(scaling(cfg)) == pytest.approx(a, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(factor=st.floats(1.0, 16.0), base=st.floats(100.0, 1e6), seq_len=st.integers(1, 4096))
def test_dynamic_over_lengths(factor, base, seq_len):
    cfg = config("dynamic", factor=factor, rope_theta=base)
    np.testing.assert_allclose(ours(cfg, seq_len), theirs(cfg, seq_len)[0], rtol=1e-12, atol=0)
    if seq_len <= cfg.max_position_embeddings:  # the default frequencies up to L_0
        np.testing.assert_allclose(ours(cfg, seq_len), frequencies(D, base), rtol=1e-12)


@pytest.mark.parametrize(("kind", "params", "message"), [
    ("longrope", {"short_factor": [1.0, 2.0]}, "longrope short_factor must have 8 entries"),
    ("yarn", {"original_max_position_embeddings": None}, "yarn RoPE scaling needs"),
])  # fmt: skip
def test_bad_parameters_are_one_line(kind, params, message):
    scaling = {**PARAMS[kind], **params, "type": kind}
    with pytest.raises(RopesplitError, match=message):
        frequencies(D, 10000.0, scaling=scaling)
    with pytest.raises(RopesplitError, match="scaling type must be default or one of"):
        frequencies(D, 10000.0, scaling={"rope_type": "proportional"})


@pytest.mark.parametrize("kind", sorted(PARAMS))
def test_a_capture_of_each_type_checks_its_frequencies(kind):
    """A tiny model of each type, 48 tokens (beyond yarn's, longrope's and llama3's original
    16 positions; within dynamic's 64): the capture's frequency check against the config
    passes, theta and the table amplitude are the config's."""
    from ropesplit.empirical import capture, load_model

    loaded = load_model(config(kind), seed=0)
    ids = torch.randint(0, 64, (48,), generator=torch.Generator().manual_seed(1))
    cache = capture(loaded, ids)
    theta = ours(loaded.config, 48)
    np.testing.assert_allclose(cache["theta", 0], theta, rtol=1e-5)
    a = attention_factor(scaling(loaded.config))
    assert cache["rope_amplitude", 0] == pytest.approx(a, rel=1e-5)



def test_a_rope_per_layer_type_is_read_per_layer_type():
    """Gemma 3 keeps one RoPE per layer type: the adapter's rope_spec reads the one asked for
    and, asked for none, says which there are."""
    cfg = T.Gemma3TextConfig(head_dim=D, **{**COMMON, "intermediate_size": 64})
    local = rope_spec(cfg, "sliding_attention")
    full = rope_spec(cfg, "full_attention")
    np.testing.assert_array_equal(local.theta, frequencies(D, 10000.0))
    np.testing.assert_array_equal(full.theta, frequencies(D, 1e6))
    with pytest.raises(RopesplitError, match="has a RoPE per layer type .*: give layer_type"):
        rope_spec(cfg)
