"""The one seam between transformers and ropesplit: everything that reads transformers.

- :mod:`~ropesplit.empirical.adapter.calls`: what a model rotates and how it attends,
  read from inside its forward pass (the attention registry, hooks, the RoPE call);
- :mod:`~ropesplit.empirical.adapter.configs`: what a config states (RoPE parameters,
  layer types, head shapes), turned into ropesplit's own objects;
- :mod:`~ropesplit.empirical.adapter.weights`: where a model keeps the weights and
  buffers ropesplit edits in place (``k_proj``, ``inv_freq``).

No other module of ropesplit reads a transformers config field (a test checks it
through the AST); ``numerics`` reads only :class:`~ropesplit.numerics.spec.RopeSpec`.

May import: no other wing of empirical (transformers, numerics and core only).
"""

from ropesplit.empirical.adapter.calls import *  # noqa: F403
from ropesplit.empirical.adapter.calls import __all__ as _calls_all

__all__ = list(_calls_all)
