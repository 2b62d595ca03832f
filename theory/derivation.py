r"""The derivation in order: every step of docs/theory.md, looked up by id, checked, written out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropesplit.core.errors import RopesplitError
from ropesplit.theory.both_ways import (
    MEAN_ROTATION_BOTH_WAYS,
    MEAN_ROTATION_FULL_MASK,
    REMAINDER_BOUND_ANY_PAIRS,
    SPLIT_ANY_PAIRS,
)
from ropesplit.theory.consequences import (
    ATTENTION_BOUND,
    LONG_TERM_DECAY,
    PERTURBATION_BOUND,
    SOFTMAX_SHIFT,
)
from ropesplit.theory.expansion import LAYOUTS_EQUIVALENT, LOGIT_EXPANSION, ROPE_RELATIVE
from ropesplit.theory.optimum import (
    MEAN_KEY_OPTIMUM,
    MEAN_ROTATION_OPTIMUM,
    MEAN_ROTATION_REMAINDER,
)
from ropesplit.theory.reference import REFERENCE_BOUND, SPLIT_REFERENCE
from ropesplit.theory.split import EXACT_SPLIT_CONDITION, REMAINDER_BOUND, SPLIT_EXACT
from ropesplit.theory.step import CheckResult, Step

__all__ = ["PAPER", "STEPS", "check_all", "derivation_markdown", "derive_record", "get_step",
           "where"]

STEPS: tuple[Step, ...] = (
    ROPE_RELATIVE,
    LAYOUTS_EQUIVALENT,
    LOGIT_EXPANSION,
    SPLIT_EXACT,
    REMAINDER_BOUND,
    EXACT_SPLIT_CONDITION,
    SOFTMAX_SHIFT,
    ATTENTION_BOUND,
    PERTURBATION_BOUND,
    LONG_TERM_DECAY,
    SPLIT_REFERENCE,
    REFERENCE_BOUND,
    MEAN_ROTATION_OPTIMUM,
    MEAN_ROTATION_REMAINDER,
    MEAN_KEY_OPTIMUM,
    SPLIT_ANY_PAIRS,
    REMAINDER_BOUND_ANY_PAIRS,
    MEAN_ROTATION_BOTH_WAYS,
    MEAN_ROTATION_FULL_MASK,
)
_BY_ID = {step.id: step for step in STEPS}

# where each step stands: its section of docs/theory.md and the paper's claim it rests
# (docs/paper.md numbers them 1-5; "toolkit" marks results the paper does not state)
PAPER: dict[str, tuple[int, str]] = {
    "rope_relative": (1, "2: RoPE logits depend on i - j"),
    "layouts_equivalent": (1, "toolkit: both pair layouts"),
    "logit_expansion": (2, "2: the logit as a sum over pairs"),
    "split_exact": (3, "2: W = f + g + E"),
    "remainder_bound": (3, "4: the theorem behind the pattern"),
    "exact_split_condition": (3, "4: when the split is exact"),
    "softmax_shift": (4, "5: softmax ignores a per-query offset"),
    "attention_bound": (4, "5: a small remainder, nearly the same attention"),
    "perturbation_bound": (4, "1 and 5: small position changes"),
    "long_term_decay": (4, "1: long distances"),
    "split_reference": (6, "2: the family of splits"),
    "reference_bound": (6, "4: the theorem for any reference"),
    "mean_rotation_optimum": (6, "toolkit: the best reference rotation"),
    "mean_rotation_remainder": (6, "toolkit: its remainder"),
    "mean_key_optimum": (6, "2: the mean key as kbar"),
    "split_any_pairs": (9, "toolkit: the split on any set of pairs"),
    "remainder_bound_any_pairs": (9, "toolkit: the bound on any set of pairs"),
    "mean_rotation_both_ways": (9, "toolkit: the reference rotation both ways"),
    "mean_rotation_full_mask": (9, "toolkit: the mean rotation of the two-way mask"),
}


def where(step_id: str) -> str:
    """``docs/theory.md N; the paper's claim C: what`` (or ``...; the toolkit's own: what``)."""
    section, claim = PAPER[step_id]
    own = claim.startswith("toolkit: ")
    return f"docs/theory.md {section}; " + (f"the toolkit's own: {claim.removeprefix('toolkit: ')}"
                                            if own else f"the paper's claim {claim}")


def get_step(step_id: str) -> Step:
    """The step named ``step_id``; a one-line error listing the ids otherwise."""
    try:
        return _BY_ID[step_id]
    except KeyError:
        raise RopesplitError(
            f"unknown step {step_id!r}, expected one of {', '.join(_BY_ID)}"
        ) from None


def check_all() -> dict[str, CheckResult]:
    """Run every step's check, in derivation order."""
    return {step.id: step.check() for step in STEPS}


def derive_record(results: Mapping[str, CheckResult] | None = None) -> dict[str, Any]:
    """``ropesplit derive --json``'s record, also the report's ``derive.json``:
    ``{"steps": [{id, kind, statement_latex, checked, method, seconds, lemmas, uses}],
    "all_checked", "seconds"}``; ``results`` from :func:`check_all` (None: listed, not run,
    so ``checked`` and ``seconds`` are None and nothing reads as checked)."""
    results = results or {}
    steps = [{"id": step.id, "kind": step.kind, "statement_latex": step.statement_latex,
              "checked": None if step.id not in results else results[step.id].checked,
              "method": step.method,
              "seconds": None if step.id not in results else results[step.id].seconds,
              "lemmas": list(step.lemmas), "uses": list(step.uses)} for step in STEPS]  # fmt: skip
    total = sum(r.seconds for r in results.values()) if results else None
    return {"steps": steps, "all_checked": bool(results) and all(r.checked for r in
            results.values()), "seconds": total}  # fmt: skip


_INTRO = """\
# The derivation, step by step

This page is generated by `ropesplit derive --out docs/derivation.md` from the
step objects in `ropesplit.theory`; do not edit it by hand (a test fails when
it is stale). It follows `docs/theory.md`: RoPE, the logit expansion, the additive
split `W = f + g + E`, its remainder bound, when the split is exact, the
consequences for attention, the family of splits by a reference rotation
`m_l` with its best member (the mean rotation) and the best reference key, and
attention both ways: the split, its bound and the mean rotation on any set of
pairs `(i, j)`, with offsets of either sign.

**How the steps are checked.** Each step carries the formula it claims.
`ropesplit derive --check` derives the same quantity independently with sympy
(matrix products, complex exponentials) and checks that the difference is
exactly zero, with exact rewrites (`expand_trig`, half angles, the relation
`cos^2 + sin^2 = 1`) rather than numerical sampling. An *inequality* rests on
standard lemmas, which are named below and **not** machine-proved; only its
algebraic part is checked symbolically. The test suite also falsifies every
bound numerically on random inputs (hypothesis) and compares every identity
with a direct float64 matrix computation. Each step's "how it is checked"
states its generality: a symbolic pair count `P` (a sympy `Sum` over the pair
index `l` whose summand is shown to vanish, resting on the named
block-diagonal lemma), or the sizes checked explicitly.

Notation: head dimension $d$ (even), $P = d/2$ rotation pairs, frequencies
$\\theta_l = b^{-2l/d}$, a pair $(x, y)$ is the complex number
$\\tilde v = x + i y$, query pair $\\tilde q_l = a + i b$, key pair
$\\tilde k_l = c + i e$, distance $\\Delta = i - j$, scale $s$, reference key
$\\bar k$ and deviation $\\delta = k - \\bar k$; reference rotation
$m_l$ (complex, $|m_l| \\le 1$), $h_l = \\tilde q_l\\overline{\\tilde\\delta_l}$.

## The chain of steps

"""


def _chain() -> str:
    rows = ["| # | step | kind | uses | theory.md | paper's claim |",
            "|---|------|------|------|-----------|---------------|"]
    for n, step in enumerate(STEPS, 1):
        uses = ", ".join(f"`{u}`" for u in step.uses) or "(none)"
        section, claim = PAPER[step.id]
        rows.append(f"| {n} | [`{step.id}`](#{step.id.replace('_', '-')}) | {step.kind} | {uses} "
                    f"| {section} | {claim} |")
    return "\n".join(rows) + "\n"


def _section(n: int, step: Step, result: CheckResult | None) -> str:
    lines = [f"## {n}. {step.title}", "", f'<a id="{step.id.replace("_", "-")}"></a>', "",
             f"`{step.id}` ({step.kind}; {where(step.id)})", "", step.statement, "", "$$",
             step.statement_latex, "$$", ""]
    if step.uses:
        lines += ["Builds on: " + ", ".join(f"`{u}`" for u in step.uses) + ".", ""]
    if step.lemmas:
        lines += ["Standard lemmas it rests on (named, not machine-proved):", ""]
        lines += [f"- {lemma}" for lemma in step.lemmas] + [""]
    lines += [f"How it is checked: {step.method}.", ""]
    lines += [f"Numeric form: `{step.numeric_doc}`.", ""]
    if result is not None and not result.checked:
        lines += [f"**FAILED** in this run: {result.detail}", ""]
    return "\n".join(lines)


def derivation_markdown(results: Mapping[str, CheckResult] | None = None) -> str:
    r"""The derivation as Markdown with ``$$...$$`` display math (byte-stable).

    ``results`` (from :func:`check_all`) only adds a **FAILED** note to steps
    whose check failed; a fully passing run gives the same text as none.
    """
    results = results or {}
    body = [_section(n, step, results.get(step.id)) for n, step in enumerate(STEPS, 1)]
    return _INTRO + _chain() + "\n" + "\n".join(body)
