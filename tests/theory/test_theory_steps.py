"""The step objects: every id present and checked, and a broken formula fails its check.

Each kind of check (identity, layout permutation, inequality, corollary,
softmax, Abel summation) is shown to catch a deliberately wrong claim, so a
passing check means something.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest
import sympy as sp

from ropesplit import RopesplitError
from ropesplit.theory import STEPS, get_step
from ropesplit.theory.step import is_zero
from ropesplit.theory.sums import PAIR, PAIRS, indexed, over_pairs, summand_of

IDS = ("rope_relative", "layouts_equivalent", "logit_expansion", "split_exact",
       "remainder_bound", "exact_split_condition", "softmax_shift", "attention_bound",
       "perturbation_bound", "long_term_decay", "split_reference", "reference_bound",
       "mean_rotation_optimum", "mean_rotation_remainder", "mean_key_optimum",
       "split_any_pairs", "remainder_bound_any_pairs", "mean_rotation_both_ways",
       "mean_rotation_full_mask")


@pytest.fixture(scope="module")
def results(step_results):
    """``check_all()``, run once per test run (conftest's ``step_results``)."""
    return step_results


def test_all_steps_in_derivation_order():
    assert tuple(step.id for step in STEPS) == IDS


def test_every_step_checks(results):
    failed = {k: r.detail for k, r in results.items() if not r.checked}
    assert not failed
    assert all(r.seconds > 0 and r.method for r in results.values())


def test_inequalities_name_their_lemmas_and_uses_point_backwards():
    seen: set[str] = set()
    for step in STEPS:
        if step.kind == "inequality":
            assert step.lemmas
        assert set(step.uses) <= seen, step.id
        seen.add(step.id)


def test_unknown_step_is_a_one_line_error():
    with pytest.raises(RopesplitError, match=r"^unknown step 'split', expected one of rope_rel"):
        get_step("split")


def test_importing_theory_does_not_import_numpy_or_torch():
    code = ("import sys, ropesplit.theory as t; t.get_step('split_exact').numeric(*[1.0] * 9);"
            "print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _broken(step_id, claim):
    step = dataclasses.replace(get_step(step_id), claim=claim)
    return step, step.check()


def _norm(x, y):
    return sp.sqrt(x**2 + y**2)


def _re_h(a, b, dc, de, x, y, s):
    """s Re((a + i b)(dc - i de)(x + i y)), one pair."""
    return s * ((a * dc + b * de) * x + (a * de - b * dc) * y)


_j = sp.Symbol("j", integer=True, nonnegative=True)


def _wsum(w, x, n):
    return sp.Sum(w[_j] * x, (_j, 0, n - 1))


_D = sp.Symbol("D", integer=True)  # the offset index of mean_rotation_both_ways' claim


def _split_at(offset):
    """split_any_pairs' claim with the offset computed by ``offset(i, j)``."""
    split = get_step("split_exact").claim
    return lambda a, b, cb, eb, dc, de, t, i, j, s: split(a, b, cb, eb, dc, de, t, offset(i, j), s)


def _bound_at(offset, half=2):
    """remainder_bound_any_pairs' claim with the offset ``offset(i, j)`` and angle / ``half``."""
    def claim(a, b, dc, de, t, i, j, s):
        norms = s * _norm(a, b) * _norm(dc, de)
        D = offset(i, j)
        return norms * 2 * sp.Abs(sp.sin(t * D / half)), norms * sp.Min(2, t * sp.Abs(D))
    return claim


def _symmetric(factor, im):
    """mean_rotation_both_ways' claim as (w0 + factor sum w_D cos, im(theta, w, K))."""
    return lambda t, w, K: (w[0] + factor * sp.Sum(w[_D] * sp.cos(t * _D), (_D, 1, K)),
                            im(t, w, K))


# each row: (step, a wrong claim, what is wrong with it)
BROKEN = [
    ("logit_expansion",
     lambda a, b, c, e, t, D, s: s * ((a * c + b * e) * sp.cos(t * D) - (a * e - b * c) * sp.sin(t * D)),  # noqa: E501
     "wrong sign of the sin term"),
    ("rope_relative",
     lambda t, m, n: ((sp.cos(t * (m - n)), -sp.sin(t * (m - n))),
                      (sp.sin(t * (m - n)), sp.cos(t * (m - n)))),
     "R(m - n) instead of R(n - m)"),
    ("layouts_equivalent", lambda l, t, P: 2 * l + t,
     "identity map instead of the permutation"),
    ("split_exact",
     lambda a, b, cb, eb, dc, de, t, D, s: (
         s * ((a * cb + b * eb) * sp.cos(t * D) + (a * eb - b * cb) * sp.sin(t * D)),
         s * (a * dc + b * de),
         s * ((a * dc + b * de) * (sp.cos(t * D) - 1) + (a * de + b * dc) * sp.sin(t * D))),
     "E with a + where a - belongs"),
    ("remainder_bound",
     lambda a, b, dc, de, t, D, s: (s * _norm(a, b) * _norm(dc, de) * sp.Abs(sp.sin(t * D / 2)),
                                    s * _norm(a, b) * _norm(dc, de) * sp.Min(2, t * sp.Abs(D))),
     "tight bound missing its factor 2"),
    ("remainder_bound",
     lambda a, b, dc, de, t, D, s: (
         s * _norm(a, b) * _norm(dc, de) * 2 * sp.Abs(sp.sin(t * D / 2)),
         s * _norm(a, b) * _norm(dc, de) * sp.Min(2, 2 * t * sp.Abs(D))),
     "loose bound min(2, 2 theta |Delta|)"),
    ("exact_split_condition",
     lambda dc, de, t, s: s * _norm(dc, de) * 2 * sp.Abs(sp.sin(t)),
     "sin(theta) instead of sin(theta / 2)"),
    ("softmax_shift",
     lambda w0, w1, w2, w3, b: tuple(sp.exp(w) / (sp.exp(w0) + sp.exp(w1) + sp.exp(w2) + sp.exp(w3) + b)  # noqa: E501
                                     for w in (w0, w1, w2, w3)),
     "b added outside the exponentials"),
    ("attention_bound", lambda eps: (sp.exp(-eps), sp.exp(eps), sp.exp(eps) - 1),
     "e^eps instead of e^{2 eps}"),
    ("perturbation_bound",
     lambda a, b, c, e, t, tt, s: s * _norm(a, b) * _norm(c, e) * 2 * sp.Abs(sp.sin(t * tt)),
     "full angle instead of half angle"),
    ("split_reference",
     lambda a, b, cb, eb, dc, de, t, D, mr, mi, s: (
         _re_h(a, b, cb, eb, sp.cos(t * D), sp.sin(t * D), s), _re_h(a, b, dc, de, mr, mi, s),
         _re_h(a, b, dc, de, sp.cos(t * D) - mr, sp.sin(t * D) + mi, s)),
     "E_m with sin + mim"),
    ("split_reference",
     lambda a, b, cb, eb, dc, de, t, D, mr, mi, s: (
         _re_h(a, b, cb, eb, sp.cos(t * D), sp.sin(t * D), s), _re_h(a, b, dc, de, mr, -mi, s),
         _re_h(a, b, dc, de, sp.cos(t * D) - mr, sp.sin(t * D) + mi, s)),
     "conj(m) in g_m and E_m (still sums to W)"),
    ("reference_bound",
     lambda a, b, dc, de, t, D, mr, mi, s: s * _norm(a, b) * _norm(dc, de) * _norm(
         sp.cos(t * D) - mr, sp.sin(t * D) + mi),
     "chord to conj(m)"),
    ("reference_bound",
     lambda a, b, dc, de, t, D, mr, mi, s: s * _norm(a, b) * _norm(dc, de) * (1 - _norm(mr, mi)),
     "1 - |m| instead of |e^{i theta Delta} - m|"),
    ("mean_rotation_optimum",
     lambda t, D, w, n: (_wsum(w, sp.cos(t * D[_j]), n), -_wsum(w, sp.sin(t * D[_j]), n)),
     "conjugate mean rotation"),
    ("mean_rotation_optimum",
     lambda t, D, w, n: (sp.Sum(sp.cos(t * D[_j]), (_j, 0, n - 1)) / n,
                         sp.Sum(sp.sin(t * D[_j]), (_j, 0, n - 1)) / n),
     "unweighted mean rotation"),
    ("mean_rotation_remainder",
     lambda hrl, hil, hrk, hik, tl, tk, D, w, n, s: s**2 / 2 * (hrl * hrk + hil * hik) * (
         1 - _wsum(w, sp.cos(tl * D[_j]), n) * _wsum(w, sp.cos(tk * D[_j]), n)
         - _wsum(w, sp.sin(tl * D[_j]), n) * _wsum(w, sp.sin(tk * D[_j]), n)),
     "covariance replaced by 1 - Re(m_l conj(m_k)), no pseudo-covariance"),
    ("mean_key_optimum",
     lambda c, e, w, n: (sp.Sum(c[_j], (_j, 0, n - 1)) / n, sp.Sum(e[_j], (_j, 0, n - 1)) / n),
     "unweighted mean key"),
    # section 9: any set of pairs, offsets of both signs
    ("split_any_pairs", _split_at(lambda i, j: j - i), "offset j - i instead of i - j"),
    ("split_any_pairs", _split_at(lambda i, j: sp.Abs(i - j)),
     "offset |i - j|: a key after its query treated as one before it"),
    ("remainder_bound_any_pairs", _bound_at(lambda i, j: sp.Max(0, i - j)),
     "causal clamp max(0, i - j): no bound for a key after its query"),
    ("remainder_bound_any_pairs", _bound_at(lambda i, j: i - j, half=1),
     "full angle instead of half angle, either sign"),
    ("mean_rotation_both_ways", _symmetric(1, lambda t, w, K: 0),
     "w0 + sum w_D cos: the negative offsets dropped"),
    ("mean_rotation_both_ways",
     _symmetric(2, lambda t, w, K: 2 * sp.Sum(w[_D] * sp.sin(t * _D), (_D, 1, K))),
     "imaginary parts added instead of cancelled"),
    ("mean_rotation_full_mask", lambda t, n: sp.sinc(n * t / 2) / sp.sinc(t / 2),
     "Dirichlet kernel, not its square"),
    ("mean_rotation_full_mask", lambda t, n: n * (sp.sinc(n * t / 2) / sp.sinc(t / 2)) ** 2,
     "Fejer kernel over n instead of n^2"),
]


@pytest.mark.parametrize(("step_id", "claim", "why"), BROKEN, ids=[r[2] for r in BROKEN])
def test_a_broken_formula_fails_its_check(step_id, claim, why):
    step, result = _broken(step_id, claim)
    assert not result.checked, why
    assert "!= 0" in result.detail or "False" in result.detail or "raised" in result.detail


def test_a_broken_abel_summation_fails():
    good = get_step("long_term_decay").claim

    def shifted(hr, hi, theta, Delta, P):
        lhs, abel, decay = good(hr, hi, theta, Delta, P)
        return lhs, abel, decay - 1  # sum over m = 1..P of |S_m| off by one term's worth

    _, result = _broken("long_term_decay", shifted)
    assert not result.checked


def test_a_claim_that_cannot_even_build_is_a_failure_not_a_crash():
    def boom(*args):
        raise ZeroDivisionError("claim broke")

    bad = dataclasses.replace(get_step("logit_expansion"))
    object.__setattr__(bad, "claim", boom)  # bypass __post_init__'s lambdify of the claim
    result = bad.check()
    assert not result.checked
    assert result.detail.startswith("check raised ZeroDivisionError: claim broke")


def test_summand_of_combines_only_genuine_sums_over_pairs():
    (a,) = indexed("a")
    k = sp.Symbol("k", integer=True)
    assert summand_of(over_pairs(2 * a) - 2 * over_pairs(a)) == 0
    assert summand_of(over_pairs(a) - sp.Sum(a, (PAIR, 0, PAIRS))) is sp.nan  # other limits
    assert summand_of(over_pairs(a) - a * over_pairs(1)) is sp.nan  # coefficient depends on l
    assert summand_of(over_pairs(a) - sp.Sum(a.subs(PAIR, k), (k, 0, PAIRS - 1))) is sp.nan
    assert summand_of(a) is sp.nan  # not a sum at all
    assert summand_of(over_pairs(a) - over_pairs(a**2)) == a - a**2


def test_every_identity_on_pairs_is_also_checked_for_a_symbolic_pair_count(results):
    for step_id in ("logit_expansion", "split_exact", "split_reference", "mean_rotation_optimum",
                    "split_any_pairs"):
        assert "symbolic P" in results[step_id].detail, step_id
        assert "symbolic pair count P" in get_step(step_id).method, step_id
    assert "symbolic pair indices l, k" in get_step("mean_rotation_remainder").method


def test_every_method_states_its_generality():
    # one symbolic pair, a symbolic pair count, or the explicit sizes (d, P, n, rows) checked
    sizes = re.compile(r"one symbolic pair|symbolic pair count P|d = 2|P = \d|n = \d|rows? of \d")
    for step in STEPS:
        assert sizes.search(step.method), step.id


# --- section 9: which steps never used j <= i (issue 54) --------------------------------


def test_the_split_on_any_pairs_is_checked_with_positions_of_undecided_order(results):
    detail = results["split_any_pairs"].detail
    assert detail.startswith("sign of i - j undecided by sympy (i, j integers, no order): True")
    assert "sign of i - j and of u undecided by sympy: True" in results[
        "remainder_bound_any_pairs"].detail
    # the causal steps' own claims, each re-checked at a key after its query
    for step_id in ("logit_expansion", "split_exact", "split_reference"):
        assert f"{step_id} at Delta = -D" in detail, step_id
    assert "two-way full mask n = 3: W - (f + g + E) at all 9 pairs: = 0" in detail
    bound = results["remainder_bound_any_pairs"].detail
    assert "reference_bound at m = 1, Delta = -2v" in bound
    assert "exact_split_condition's claim^2 (at Delta = +1): = 0" in bound
    assert "offsets -D1, D2: E(X - c)^2" in results["mean_rotation_both_ways"].detail


def test_section_9_steps_point_at_section_9_and_at_the_causal_steps_they_reuse():
    from ropesplit.theory.derivation import PAPER

    for step_id in ("split_any_pairs", "remainder_bound_any_pairs", "mean_rotation_both_ways",
                    "mean_rotation_full_mask"):
        assert PAPER[step_id][0] == 9, step_id
    assert set(get_step("split_any_pairs").uses) >= {"split_exact", "split_reference"}
    assert "remainder_bound" in get_step("remainder_bound_any_pairs").uses


def test_a_causal_step_that_silently_used_j_le_i_fails_the_section_9_check(monkeypatch):
    import ropesplit.theory.both_ways as both_ways

    good = get_step("split_exact")
    planted = dataclasses.replace(good, claim=lambda a, b, cb, eb, dc, de, t, D, s: good.claim(
        a, b, cb, eb, dc, de, t, sp.Abs(D), s))  # |Delta|: right on causal pairs only
    *args, s = sp.symbols("a b cbar ebar dc de theta s", real=True)
    D = sp.Symbol("D", nonnegative=True)
    assert planted.claim(*args, D, s) == good.claim(*args, D, s)  # j <= i: no difference
    monkeypatch.setattr(both_ways, "SPLIT_EXACT", planted)
    result = get_step("split_any_pairs").check()
    assert not result.checked
    assert "split_exact at Delta = -D: W - (f + g + E): != 0" in result.detail


def test_is_zero_reduces_odd_powers_of_sine_and_still_refuses_nonzero():
    x = sp.Symbol("x", real=True)
    assert is_zero(sp.sin(x) ** 3 + sp.sin(x) * sp.cos(x) ** 2 - sp.sin(x))
    assert is_zero(sp.sin(3 * x) - sp.sin(x) * (1 + 2 * sp.cos(2 * x)))  # Dirichlet, K = 1
    assert not is_zero(sp.sin(x) ** 3 - sp.sin(x))
    assert not is_zero(sp.sin(3 * x) - sp.sin(x) * (1 + sp.cos(2 * x)))
