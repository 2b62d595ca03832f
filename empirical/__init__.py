r"""ropesplit.empirical: real model activations in, the split measured per head.

The bridge from docs/theory.md to real models: load a Hugging Face causal LM with
RoPE (:func:`load_model`; default the embedded SmolLM2-135M-Instruct),
capture every layer's pre-RoPE queries and keys where the model rotates them
(:func:`capture`, validated against the model's own attention), measure
the statistics of docs/theory.md section 5 on every head (:func:`analyze`), and
run the paper's experiments (:func:`run_experiments`).

    >>> loaded = load_model()                                  # doctest: +SKIP
    >>> cache = capture(loaded, tokenize(loaded, default_text(), 64))  # doctest: +SKIP
    >>> cache["q", 3].shape                                     # doctest: +SKIP
    torch.Size([9, 64, 64])

Shapes: ``q (H, N, d)``, ``k (Hkv, N, d)``, ``theta (d/2,)``,
``probs (H, N, N)``; query head ``h`` reads KV head ``kv_map[h]``.

Importing this package imports none of its wings: each name below is looked up in its module
when first used (PEP 562), so ``ropesplit.empirical.experiments.settings`` and the other
plain-data modules import without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ropesplit.core.lazy import lazy_names

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time: __getattr__
    from ropesplit.empirical.analysis.analyze import Analysis, analyze
    from ropesplit.empirical.analysis.raw import RowLabels, analyze_qk
    from ropesplit.empirical.experiments import EXPERIMENTS, run_experiments
    from ropesplit.empirical.model.capture import Capture, LayerCapture, capture
    from ropesplit.empirical.model.loaded import LoadedModel
    from ropesplit.empirical.model.loading import Placement, load_model
    from ropesplit.empirical.model.passes import continuation_loss, forward
    from ropesplit.empirical.model.text import default_text, read_text, tokenize

# each public name -> the module that defines it
_HOMES = {
    "Analysis": "ropesplit.empirical.analysis.analyze",
    "analyze": "ropesplit.empirical.analysis.analyze",
    "RowLabels": "ropesplit.empirical.analysis.raw",
    "analyze_qk": "ropesplit.empirical.analysis.raw",
    "EXPERIMENTS": "ropesplit.empirical.experiments",
    "run_experiments": "ropesplit.empirical.experiments",
    "Capture": "ropesplit.empirical.model.capture",
    "LayerCapture": "ropesplit.empirical.model.capture",
    "capture": "ropesplit.empirical.model.capture",
    "LoadedModel": "ropesplit.empirical.model.loaded",
    "Placement": "ropesplit.empirical.model.loading",
    "load_model": "ropesplit.empirical.model.loading",
    "continuation_loss": "ropesplit.empirical.model.passes",
    "forward": "ropesplit.empirical.model.passes",
    "default_text": "ropesplit.empirical.model.text",
    "read_text": "ropesplit.empirical.model.text",
    "tokenize": "ropesplit.empirical.model.text",
}

__all__ = [
    "EXPERIMENTS",
    "Analysis",
    "Capture",
    "LayerCapture",
    "LoadedModel",
    "Placement",
    "RowLabels",
    "analyze",
    "analyze_qk",
    "capture",
    "continuation_loss",
    "default_text",
    "forward",
    "load_model",
    "read_text",
    "run_experiments",
    "tokenize",
]

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
