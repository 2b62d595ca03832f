"""The paper's claims as pre-registered primary tests, fixed in code before any run.

Han & Ji (ACL 2025) make five claims (``docs/paper.md``). Each gets exactly
one :class:`PrimaryTest`: the per-passage statistic it reads, the split it
uses (the paper's own: reference distance 0 and the mean key), the unit of
replication, the minimum number of units, the nulls printed beside it, and
its conditions (statistic or paired difference, direction, threshold). A
claim's verdict is its primary test; everything else the run measures is
secondary and shown descriptively (Holm-corrected where it is tested).

A primary test with several conditions is an intersection-union test: each
condition's 95% t interval over the units must lie on the predicted side of
its threshold for the claim to agree (the claim is accepted at level 0.05
only when every condition is), any interval wholly on the other side makes
it disagree, anything else is inconclusive. Below ``min_n`` units the
verdict is ``inconclusive: too few replicates`` whatever the numbers.

Heads are nested in passages: a passage's value is the mean over its heads
(as the paper averages over heads), so the interval is over passages.
Paired conditions subtract, passage by passage, the same statistic of the
random-init twin (the control seed rotates over ``CONTROL_SEEDS`` across
passages, so the interval carries the spread between initialisations too).

This module imports nothing (a test pins every field, so a change to the
registry is a visible change to the tests); ``ropesplit.empirical.verdicts``
evaluates it on a run's per-passage rows.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CLAIMS",
    "CONTROL_SEEDS",
    "LEVEL",
    "PAPER_SPLIT",
    "Condition",
    "PrimaryTest",
    "Secondary",
    "primary",
]

LEVEL = 0.95  # every interval: two-sided 95% t interval over the units
PAPER_SPLIT = "zero"  # the paper's split: every key deviation compared at distance 0
SENSITIVITY_SPLIT = "distance:1000"  # the LM-Infinite authors' public code's reference distance
TOOLKIT_SPLIT = "mean"  # the toolkit's own best split (THEORY section 6); never judges the paper
CONTROL_SEEDS = (0, 1, 2)  # random-init twins; passage p is paired with seed p mod 3
MIN_PASSAGES = 8  # fewer passages than this: inconclusive, too few replicates


@dataclass(frozen=True)
class Condition:
    """One condition of a primary test.

    ``compare="level"`` tests the statistic itself against ``threshold``;
    ``compare="paired"`` tests the per-unit difference statistic minus its
    ``null`` statistic (same unit) against ``threshold``. ``direction`` is the
    side the claim predicts (``"above"`` or ``"below"``).
    """

    measure: str  # key of the per-unit rows
    compare: str  # "level" | "paired"
    direction: str  # "above" | "below"
    threshold: float
    null: str | None = None  # with "paired": the key subtracted per unit
    why: str = ""  # the threshold's origin, in words


@dataclass(frozen=True)
class Secondary:
    """A secondary statistic: shown beside the primary, tested one-sided, Holm-corrected."""

    measure: str
    compare: str
    direction: str
    threshold: float
    null: str | None = None
    what: str = ""


@dataclass(frozen=True)
class PrimaryTest:
    """A claim and its one pre-registered primary test (see the module docstring)."""

    claim: int
    statement: str  # the paper's claim, in a line
    statistic: str  # what the primary statistic is, in words
    source: str  # which measurement produces the rows: "passages" or "order"
    split: str  # the reference rotation the statistic uses ("" where none applies)
    unit: str  # the unit of replication
    min_n: int
    nulls: tuple[str, ...]  # keys of null statistics printed beside the primary
    conditions: tuple[Condition, ...]
    prediction: str  # the prediction in words, with its thresholds
    gate: Condition | None = None  # a validity check (positive control): failing it -> inconclusive
    secondary: tuple[Secondary, ...] = ()


CLAIMS: tuple[PrimaryTest, ...] = (
    PrimaryTest(
        claim=1,
        statement="Position generalization: shuffling ~5% of tokens barely matters, ~10% hurts",
        statistic="curvature of the loss damage, l(10%) - 2 l(5%), l = log loss ratio on "
        "unchanged targets within 8 tokens after a moved one; nested adjacent swaps",
        source="order",
        split="",
        unit="passages",
        min_n=MIN_PASSAGES,
        nulls=(),  # an order-blind model gives every log ratio exactly 0 (a known-truth test)
        conditions=(
            Condition("curvature", "level", "above", 0.0,
                      why="damage that bends upward between 5% and 10% (a linear one gives 0)"),
            Condition("log_ratio_10", "level", "above", 0.0, why="10% of tokens moved hurts"),
        ),  # fmt: skip
        prediction="the damage from 5% to 10% exceeds the damage from 0 to 5% (curvature > 0) "
        "and 10% hurts (log ratio > 0), both 95% intervals over passages",
        gate=Condition("positive", "level", "above", 0.0,
                       why="positive control: swapping half the tokens must hurt"),  # fmt: skip
        secondary=(Secondary("log_ratio_5", "level", "above", 0.0, what="5% already hurts"),),
    ),
    PrimaryTest(
        claim=2,
        statement="Attention logits split: W ~ f(q, i-j) + g(q, k)",
        statistic="r_split = corr(W, f + g) over causal pairs, reference distance 0, mean key; "
        "mean over heads per passage (the paper averages over heads)",
        source="passages",
        split=PAPER_SPLIT,
        unit="passages",
        min_n=MIN_PASSAGES,
        nulls=("r_split_control", "r_split_shuffled"),
        conditions=(
            Condition("r_split", "level", "above", 0.90,
                      why="the paper's 0.959 less a stated tolerance of about 0.06"),
            Condition("r_split", "paired", "above", 0.0, null="r_split_control",
                      why="above the random-init twin of the same architecture"),
        ),  # fmt: skip
        prediction="mean r_split under the paper's split above 0.90 (paper: 0.959) and above the "
        "random-init control, both 95% intervals over passages",
        secondary=(
            Secondary("r_split_distance1000", "level", "above", 0.90,
                      what="sensitivity: reference distance 1000 (LM-Infinite's code)"),
            Secondary("r_split", "paired", "above", 0.0, null="r_split_shuffled",
                      what="above the trained model with shuffled frequencies"),
            Secondary("r_split_mean", "level", "above", 0.90,
                      what="the toolkit's own split (mean rotation); not the paper's measure"),
        ),  # fmt: skip
    ),
    PrimaryTest(
        claim=3,
        statement="Controlled distance: a dummy distance moves the distance component only",
        statistic="key_corr at D = N/2: corr of the key effects of W^D and g, heads weighted by "
        "their key-effect variance, reference distance 0",
        source="passages",
        split=PAPER_SPLIT,
        unit="passages",
        min_n=MIN_PASSAGES,
        nulls=("key_corr_control",),
        conditions=(
            Condition("key_corr", "level", "above", 0.90,
                      why="the key component stays put (exactly 1 when E = 0)"),
            Condition("key_corr", "paired", "above", 0.0, null="key_corr_control",
                      why="more than at random init"),
        ),  # fmt: skip
        prediction="the weighted key_corr at the dummy distance N/2 above 0.90 and above the "
        "random-init control, both 95% intervals over passages",
        secondary=(
            Secondary("visible_change", "paired", "below", 0.0, null="visible_change_control",
                      what="the row-centred logit change is smaller than at random init"),
        ),  # fmt: skip
    ),
    PrimaryTest(
        claim=4,
        statement="A learned pattern in q/k makes the split hold",
        statistic="lowfreq_share_k: share of key-deviation energy in the slower half of the "
        "pairs, mean over heads per passage",
        source="passages",
        split=PAPER_SPLIT,
        unit="passages",
        min_n=MIN_PASSAGES,
        nulls=("lowfreq_share_k_control", "lowfreq_share_k_shuffled"),
        conditions=(
            Condition("lowfreq_share_k", "level", "above", 0.5,
                      why="more than half the key deviation sits in the slower half"),
            Condition("lowfreq_share_k", "paired", "above", 0.0,
                      null="lowfreq_share_k_control", why="learned: above the random-init twin"),
        ),  # fmt: skip
        prediction="lowfreq_share_k above 0.5 and above the random-init control, both 95% "
        "intervals over passages (the theorem itself is checked by derive and bound)",
        secondary=(
            Secondary("lowfreq_share_k", "paired", "above", 0.0, null="lowfreq_share_k_shuffled",
                      what="above the same keys with shuffled frequencies"),
        ),  # fmt: skip
    ),
    PrimaryTest(
        claim=5,
        statement="Perturbed positions move only the positional term",
        statistic="g_share = mean |g' - g| / mean |W' - W| in the model's own run with position "
        "ids jittered by up to 4 (layers >= 1; layer 0's g cannot move); e_share = ||dE|| / "
        "||dW|| for the same jitter with the same q, k; reference distance 0",
        source="passages",
        split=PAPER_SPLIT,
        unit="passages",
        min_n=MIN_PASSAGES,
        nulls=("g_share_control", "e_share_control"),
        conditions=(
            Condition("g_share", "level", "below", 0.5,
                      why="the semantic term carries less than half the logit change"),
            Condition("e_share", "paired", "below", 0.0, null="e_share_control",
                      why="the remainder moves less than at random init (the mechanism)"),
        ),  # fmt: skip
        prediction="g_share below 0.5 and e_share below the random-init control's, both 95% "
        "intervals over passages",
        secondary=(
            Secondary("e_share", "level", "below", 0.5,
                      what="the remainder carries less than half the rotation-only change"),
            Secondary("g_share", "paired", "below", 0.0, null="g_share_control",
                      what="g moves less than at random init"),
        ),  # fmt: skip
    ),
)


def primary(claim: int) -> PrimaryTest:
    """The primary test of claim ``claim`` (1-5)."""
    for test in CLAIMS:
        if test.claim == claim:
            return test
    raise KeyError(f"claim must be one of 1-{len(CLAIMS)}, got {claim}")
