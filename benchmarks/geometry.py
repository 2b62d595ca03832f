"""Random-init models of a named published geometry, built in memory (no download).

``llama2-7b``: Llama-2-7B's shapes (hidden 4096, 32 heads of 128, no grouped
keys, MLP 11008, vocabulary 32000, RoPE base 10^4) with any number of
layers; the real model has 32. The benchmarks that measure how time and
memory grow with depth (``bench_memory.py``) and on a lent GPU
(``bench_device.py --geometry``) build it here.
"""

from __future__ import annotations

from typing import Any

GEOMETRIES: dict[str, dict[str, Any]] = {
    "llama2-7b": {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32,
                  "head_dim": 128, "intermediate_size": 11008, "vocab_size": 32000,
                  "max_position_embeddings": 4096, "rope_theta": 10000.0,
                  "num_hidden_layers": 32},  # fmt: skip
}


def geometry_config(name: str, layers: int | None = None) -> Any:
    """The ``transformers.LlamaConfig`` of geometry ``name`` with ``layers`` layers (None:
    the geometry's own)."""
    from transformers import LlamaConfig

    if name not in GEOMETRIES:
        raise SystemExit(f"unknown geometry {name!r}; known: {', '.join(GEOMETRIES)}")
    shape = dict(GEOMETRIES[name])
    if layers is not None:
        shape["num_hidden_layers"] = int(layers)
    return LlamaConfig(**shape)
