"""The seed paper's published numbers, in one import-free module.

Han & Ji, "Computation Mechanism Behind LLM Position Generalization", ACL 2025
(arXiv 2503.13305). Every layer may import this module: it imports nothing.
These are the only constants from outside a run that ropesplit shows beside
its own measurements; each is quoted once, where it is compared.
"""

__all__ = ["PAPER_CITATION", "PAPER_ORDER_HARMFUL", "PAPER_ORDER_HARMLESS", "PAPER_R_SPLIT"]

PAPER_CITATION = "Han & Ji (ACL 2025)"
PAPER_R_SPLIT = 0.959  # mean over heads of corr(W, f + g), a Llama-family model (claim 2)
PAPER_ORDER_HARMLESS = 0.05  # shuffling up to ~5% of the tokens barely moves the loss (claim 1)
PAPER_ORDER_HARMFUL = 0.10  # more than ~10% clearly hurts (claim 1)
