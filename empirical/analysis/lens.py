r"""TransformerLens models as a source: a ``HookedTransformer`` and its ``run_with_cache`` cache.

TransformerLens names a layer's pre-RoPE queries and keys
``blocks.L.attn.hook_q`` and ``blocks.L.attn.hook_k`` (``(batch, pos, head,
d_head)``; keys with the KV heads of grouped-query attention), the rotated
ones ``hook_rot_q``/``hook_rot_k``. :func:`analyze_lens` reads the pre-RoPE
ones of every layer, from a cache the user already has or from one
``run_with_cache`` restricted to those names, builds the layer's
:class:`~ropesplit.numerics.spec.RopeSpec` from ``model.cfg``
(:func:`~ropesplit.empirical.adapter.configs.rope_spec`: ``rotary_base``,
``rotary_dim``, ``rotary_adjacent_pairs`` for the pair layout, ``n_key_value_heads``,
``attn_scale``, Llama-3 scaling) and returns the
:class:`~ropesplit.empirical.analysis.analyze.Analysis` of
:func:`~ropesplit.empirical.analysis.raw.analyze_qk`, every layer's rows together.
TransformerLens itself comes from the ``lens`` extra
(``pip install 'ropesplit[lens]'``: ``transformer-lens`` 3.x, the last with
``HookedTransformer``); this module imports it only to run a model.
"""

from __future__ import annotations

import math
from typing import Any

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.adapter.configs import lens_dtype, lens_name, n_layers, rope_spec
from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE, Analysis
from ropesplit.empirical.analysis.raw import RowLabels, analyze_qk
from ropesplit.numerics.measure import Measure

__all__ = ["analyze_lens", "lens_names"]


def lens_names(layer: int) -> tuple[str, str]:
    """The hook names of layer ``layer``'s pre-RoPE queries and keys."""
    return f"blocks.{layer}.attn.hook_q", f"blocks.{layer}.attn.hook_k"


def analyze_lens(
    model: Any,
    tokens: Any = None,
    *,
    cache: Any = None,
    measure: Measure = DEFAULT_MEASURE,
) -> Analysis:
    """Every layer of a ``HookedTransformer`` on one sequence ``tokens (1, N)``, or on its
    ``cache`` (an ``ActivationCache`` holding the ``hook_q``/``hook_k`` of every layer),
    measured as ``measure`` says (:func:`~ropesplit.empirical.analysis.analyze.analyze_batch`)."""
    cfg = model.cfg
    spec = rope_spec(cfg)
    if cache is None:
        if tokens is None:
            raise RopesplitError("analyze_lens needs tokens or a cache")
        import torch

        wanted = {name for layer in range(n_layers(cfg)) for name in lens_names(layer)}
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens, names_filter=lambda name: name in wanted)
    rows: list[dict[str, Any]] = []
    n_tokens = 0
    for layer in range(n_layers(cfg)):
        q_name, k_name = lens_names(layer)
        if q_name not in cache or k_name not in cache:
            raise RopesplitError(f"the cache has no {q_name} and {k_name}; run_with_cache "
                                 "without a names_filter that drops them")  # fmt: skip
        part = analyze_qk(cache[q_name], cache[k_name], spec, measure, order="tl",
                          labels=RowLabels(layer=layer, name=lens_name(cfg)))  # fmt: skip
        rows += part.heads
        n_tokens = part.n_tokens or 0
    return Analysis(model=lens_name(cfg),
                    random_init=False, token_ids=[], heads=rows,
                    reconstruction_max_abs_diff=math.nan,
                    dtype=lens_dtype(cfg),
                    n_tokens=n_tokens)  # fmt: skip
