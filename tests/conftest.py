"""Shared tiny models for the tests: built from a config at random init, no hub, no download."""

from __future__ import annotations

import pytest

TINY_VOCAB = 128  # vocabulary of every tiny model here


def llama_config(**fields):
    """The one place the tests build a ``transformers.LlamaConfig`` (issue 22): ``fields`` as
    given, nothing else defaulted here, so each test states the shape it needs."""
    import transformers as T

    return T.LlamaConfig(**fields)


def tiny_llama(layers: int = 2, *, seed: int = 0, context: int = 256, heads: int = 4,
               kv_heads: int = 2, hidden: int = 64, **config):  # fmt: skip
    """A random-init Llama (``layers`` layers, ``heads`` query heads of dim ``hidden/heads``)
    loaded through ``ropesplit.empirical.load_model`` (eager attention, as every capture needs);
    ``config`` adds LlamaConfig fields (``attention_bias=True``, ...)."""
    from ropesplit.empirical import load_model

    config = llama_config(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        intermediate_size=64,
        vocab_size=TINY_VOCAB,
        max_position_embeddings=context,
        **config,
    )
    return load_model(config, seed=seed)


@pytest.fixture(scope="session")
def tiny_model():
    """One shared two-layer tiny Llama (seed 0)."""
    return tiny_llama()
