"""Moved to :mod:`ropesplit.empirical.experiments.forward`.

Kept while ``experiments_length`` imports it.
"""

from ropesplit.empirical.experiments.forward import (  # noqa: F401
    CONTEXT_SHARE,
    context_length,
    continuation_losses,
    forward_batch,
    model_context,
)
