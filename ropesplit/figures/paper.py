"""The seed paper's reference numbers: the only constants the figures and the report show.

Han & Ji, "Computation Mechanism Behind LLM Position Generalization", ACL 2025.
Everything else drawn or printed is read from a run's own data.
"""

from __future__ import annotations

from ropesplit.empirical.analyze import PAPER_R_SPLIT  # mean corr(W, f + g), claim 2

__all__ = ["PAPER_ORDER_HARMFUL", "PAPER_ORDER_HARMLESS", "PAPER_R_SPLIT"]

PAPER_ORDER_HARMLESS = 0.05  # shuffling up to ~5% of the tokens barely moves the loss (claim 1)
PAPER_ORDER_HARMFUL = 0.10  # shuffling more than ~10% hurts (claim 1)
