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
"""

from ropesplit.empirical.analyze import Analysis, analyze
from ropesplit.empirical.capture import Capture, LayerCapture, capture
from ropesplit.empirical.experiments import EXPERIMENTS, run_experiments
from ropesplit.empirical.models import LoadedModel, continuation_loss, forward, load_model
from ropesplit.empirical.raw import analyze_qk
from ropesplit.empirical.text import default_text, read_text, tokenize

__all__ = [
    "EXPERIMENTS",
    "Analysis",
    "Capture",
    "LayerCapture",
    "LoadedModel",
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
