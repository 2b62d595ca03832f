"""The seed paper's reference numbers, re-exported from :mod:`ropesplit.paper` (their one home)."""

from ropesplit.paper import PAPER_ORDER_HARMFUL, PAPER_ORDER_HARMLESS, PAPER_R_SPLIT

__all__ = ["PAPER_ORDER_HARMFUL", "PAPER_ORDER_HARMLESS", "PAPER_R_SPLIT"]
