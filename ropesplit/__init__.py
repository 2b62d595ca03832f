"""ropesplit: verify why RoPE attention logits split into position plus meaning.

Layers (dependencies point one way, left to right)::

    ropesplit.theory     sympy derivations of docs/theory.md, every step checked
    ropesplit.numerics   the same formulas as vectorised numpy/torch code
    ropesplit.empirical  real model activations in, the split measured per head
    ropesplit.cli        the `ropesplit` command and its subcommands

Shapes used throughout (one attention head)::

    q, k      (N, d)      pre-RoPE query / key features, N tokens, head dim d
    theta     (P,)        RoPE frequencies, P = d / 2 rotation pairs
    q~, k~    (N, P)      the same features as complex pairs z = x + i y
    W, f, g, E (N, N)     logits and their split W = f + g + E (causal j <= i)

This root module stays import-light: it pulls in neither sympy nor numpy.
"""

from ropesplit.core.errors import RopesplitError, ValidationError

__version__ = "0.1.0"
__all__ = ["RopesplitError", "ValidationError", "__version__"]
