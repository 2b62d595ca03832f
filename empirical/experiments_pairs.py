"""Moved to :mod:`ropesplit.empirical.experiments.pairs`.

Kept while ``experiments_length`` imports it.
"""

from ropesplit.empirical.experiments.pairs import layer_pairs  # noqa: F401
