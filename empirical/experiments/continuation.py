r"""The continuation the loss-based experiments score, and the summary of their draws.

A prompt of ``N`` tokens is a context (the first :data:`CONTEXT_SHARE`, 75%) and a
continuation (the rest), whose mean next-token loss
(:func:`~ropesplit.empirical.model.passes.continuation_losses`) each experiment compares
across perturbed contexts; :func:`draw_summary` summarises a setting's draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError

__all__ = [
    "CONTEXT_SHARE",
    "context_tokens",
    "draw_summary",
]


CONTEXT_SHARE = 0.75  # the first 75% of the tokens are the context, the rest the continuation


def context_tokens(n_tokens: int, share: float = CONTEXT_SHARE) -> int:
    """Tokens in the context, ``round(share N)``; the continuation keeps at least one token."""
    context = int(round(share * n_tokens))
    if not 1 <= context < n_tokens:
        raise RopesplitError(
            f"tokens must leave a context and a continuation, got {n_tokens} tokens "
            f"(context {context})"
        )
    return context


def draw_summary(losses: Any, baseline: float, seed: int = 0) -> dict[str, Any]:
    r"""Mean loss, mean ratio to ``baseline`` and its 95% t interval over the draws.

    .. math:: \mathrm{ratio} = \frac1S\sum_s L_s / L_0,\qquad
              [\mathrm{ci\_low}, \mathrm{ci\_high}] = \mathrm{ratio}
              \pm t_{0.975,\,S-1}\,\mathrm{sd}_s/\sqrt S

    (``numerics.intervals.t_interval``: the draws are the replicates; a
    percentile bootstrap over 3-8 draws under-covers). A single
    draw has no interval: ``ci_low`` and ``ci_high`` are NaN, which every
    verdict reads as inconclusive. ``seed`` is kept for the signature (the t
    interval draws nothing).
    """
    from ropesplit.numerics.intervals import t_interval

    ratios = np.asarray(losses, dtype=np.float64) / baseline  # (S,)
    low = high = float("nan")
    if ratios.size >= 2:
        ci = t_interval(ratios, unit="draws")
        low, high = ci.low, ci.high
    return {"loss": float(np.mean(losses)), "ratio": float(ratios.mean()), "ci_low": low,
            "ci_high": high, "draws": int(ratios.size)}  # fmt: skip
