"""The seed paper's published numbers and words, in one import-free module.

Han & Ji, "Computation Mechanism Behind LLM Position Generalization", ACL 2025
(arXiv 2503.13305). Every layer may import this module: it imports nothing.
These are the only constants from outside a run that ropesplit shows beside
its own measurements; each is quoted once, where it is compared.

:data:`QUOTES` holds the paper's own sentences that the claims registry
(``ropesplit.claims.registry``) cites as the origin of a threshold or of a claim, each
with where it stands in the paper. A sentence marked ``verbatim=False`` is the
project's paraphrase of a result whose exact wording could not be checked
offline (``docs/paper.md`` says so beside it); it is never shown as a quote.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "PAPER_CITATION",
    "PAPER_ORDER_HARMFUL",
    "PAPER_ORDER_HARMLESS",
    "PAPER_R_SPLIT",
    "QUOTES",
    "Quote",
]

PAPER_CITATION = "Han & Ji (ACL 2025)"
PAPER_R_SPLIT = 0.959  # corr(W, f + g) in a Llama-family model (claim 2; the abstract's number)
PAPER_ORDER_HARMLESS = 0.05  # shuffling up to ~5% of the tokens barely moves the loss (claim 1)
PAPER_ORDER_HARMFUL = 0.10  # more than ~10% clearly hurts (claim 1)


@dataclass(frozen=True)
class Quote:
    """A sentence of the paper and where it stands in it."""

    text: str
    where: str  # section, figure or table
    verbatim: bool = True  # False: the project's paraphrase (the wording was not checked)


QUOTES: dict[str, Quote] = {
    "tolerance": Quote(
        "Despite this sequential nature, large language models (LLMs) exhibit remarkable "
        "tolerance in handling textual positions", "Section 1 (Introduction), first paragraph"),
    "perturbations": Quote(
        "They can understand texts with position perturbations and generalize to longer texts "
        "than those encountered during training with the latest techniques.", "Abstract"),
    "order_rates": Quote(
        "shuffling up to about 5% of the tokens barely moves perplexity or task scores; more "
        "than about 10% hurts", "the word-order perturbation experiment", verbatim=False),
    "disentangle": Quote(
        "this work reveals that LLMs learn a counterintuitive disentanglement of attention "
        "logits. Their values show a 0.959 linear correlation with an approximation of the "
        "arithmetic sum of positional relevance and semantic importance.", "Abstract"),
    "controlled_distance": Quote(
        "re-evaluating the same query/key pairs at a dummy distance shifts the distance "
        "component and leaves the key component unchanged", "the controlled-distance experiment",
        verbatim=False),
    "pattern": Quote(
        "we identify a prevalent pattern in intermediate features, which we prove theoretically "
        "enables this effect. The pattern, which is different from how randomly initialized "
        "parameters would behave, suggests that it is a learned behavior rather than a natural "
        "result of the model architecture.", "Abstract"),
    "criteria": Quote(
        "Based on these findings, we provide computational explanations and criteria for "
        "LLMs' position flexibilities.", "Abstract"),
}  # fmt: skip
