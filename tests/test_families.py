"""Every RoPE causal-LM family of the installed transformers: analysed or refused in one line.

``tests/families.py`` enumerates the families from transformers' auto
mappings, builds each tiny and runs ``ropesplit analyze`` on it; the table in
docs/analyse-your-model.md is that run's (``python tests/families.py``
rewrites it) and is checked here against a fresh one. The table states what
every machine reproduces (status, a refusal's cause, the tolerances validated);
the residuals, whose last digits differ between machines, are held here under
those tolerances instead of being compared digit for digit.
"""

from __future__ import annotations

import families
import pytest
import transformers

pytestmark = pytest.mark.slow  # 126 families built and analysed (make test-fast leaves it out)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return {f.model_type: f for f in families.run_all(tmp_path_factory.mktemp("families"))}


def test_every_family_is_analysed_or_refused_in_one_line(run):
    assert len(run) >= len(families.REQUIRED)
    broken = {name: f.reason for name, f in run.items() if f.status not in ("analysed", "refused")}
    assert not broken, broken
    for f in run.values():
        assert f.reason and "\n" not in f.reason, f


def test_the_named_families_are_analysed_with_the_capture_validated(run):
    missing = [name for name in families.required() if run[name].status != "analysed"]
    assert not missing, {name: run[name].reason for name in missing}
    for name in families.required():
        assert run[name].reason == families.validated(), run[name]
        assert run[name].record is not None, run[name]
    if "gptj" not in families.required():  # its attention is a private method there
        assert run["gptj"].status == "refused"
        assert "none of its layers is softmax attention with RoPE" in run["gptj"].reason


def test_each_analysed_family_s_residuals_are_within_the_tolerances(run):
    """What the table's "validated: ... <= ..." states, on this machine's residuals: each of
    probabilities, logits and RoPE at or under its float32 tolerance, the one the record
    says it was validated at."""
    tol = families.tolerance_constants()
    analysed = {name: f for name, f in run.items() if f.status == "analysed"}
    assert analysed
    over = {}
    for name, f in analysed.items():
        assert f.record is not None, f
        for key, tolerance_key, _ in families.RESIDUALS:
            assert f.record[tolerance_key] == tol[key], (name, tolerance_key, f.record)
            value = f.record[key]
            if not 0.0 <= value <= tol[key]:  # NaN fails too
                over[f"{name}.{key}"] = (value, tol[key])
    assert not over, over


def test_refusals_carry_no_measured_numbers():
    """A refusal's line in the table keeps its cause and drops what it measured."""
    theta = ("theta of layer 6 does not match rope_theta 500000 (default; relative error "
             "3.0e+01, tolerance 1.0e-04)")  # fmt: skip
    assert families.stable(theta) == (
        "theta of layer 6 does not match rope_theta 500000 (default; relative error over the "
        "tolerance 1.0e-04)")
    checks = ("reconstruction_max_abs_diff 3.10e-04 exceeds 0.0001, logit_max_rel_diff "
              "2.00e-07 within 1e-05, rope_max_rel_diff nan exceeds 1e-05: the capture does not "
              "reproduce the model's attention")  # fmt: skip
    assert families.stable(checks) == (
        "reconstruction_max_abs_diff exceeds 0.0001, logit_max_rel_diff within 1e-05, "
        "rope_max_rel_diff exceeds 1e-05: the capture does not reproduce the model's attention")
    assert families.stable("tightness_max 1.000001 exceeds 1: the remainder bound failed") == (
        "tightness_max exceeds 1: the remainder bound failed")
    kept = "the tiny config keeps 33M parameters (not built)"  # a count: the same everywhere
    assert families.stable(kept) == kept


def test_at_least_nine_in_ten_families_are_analysed(run):
    """On the release the docs table is for, or a newer one (older releases attend in
    private methods that no registry call reaches, GPT-J's case before 5.24)."""
    families.from_documented_release()
    done = sum(f.status == "analysed" for f in run.values())
    assert done >= families.ANALYSED_SHARE * len(run), {
        name: f.reason for name, f in run.items() if f.status != "analysed"}


def test_multi_head_latent_attention_is_analysed_on_its_rope_subhead_too(run):
    """DeepSeek-V3's record holds the whole-head numbers and the RoPE sub-head's."""
    assert run["deepseek_v3"].status == "analysed"
    record = run["deepseek_v3"].record
    assert record is not None and "summary_rope_subhead" in record
    assert {"rotary_share", "r_split_rope_subhead"} <= set(record["heads"][0])


def test_refusals_say_what_the_model_is(run):
    """A family with no RoPE softmax layer is refused in one line that says so."""
    families.from_documented_release()
    for name in ("granitemoehybrid", "zamba2"):
        assert "none of its" in run[name].reason and "softmax attention with RoPE" in (
            run[name].reason), run[name]


def test_the_enumeration_is_transformers_own(run):
    """Each family comes from the causal-LM auto mapping, and each RoPE config is in."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    assert set(run) <= set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    assert {"llama", "gptj", "deepseek_v3"} <= set(run) and "gpt2" not in run


def test_the_docs_table_is_this_run(run):
    documented = families.documented()
    if not documented.startswith(f"transformers {transformers.__version__}:"):
        pytest.skip(f"the docs table is for another transformers ({documented.split(':')[0]})")
    assert documented == families.table(list(run.values())), (
        "docs/analyse-your-model.md is stale: run `python tests/families.py`")


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    return {f.model_type: f for f in families.run_encoders(tmp_path_factory.mktemp("encoders"))}


def test_every_encoder_is_analysed_or_refused_in_one_line(encoders):
    assert set(families.ENCODERS) <= set(encoders)
    broken = {name: f.reason for name, f in encoders.items()
              if f.status not in ("analysed", "refused")}  # fmt: skip
    assert not broken, broken
    for f in encoders.values():
        assert f.reason and "\n" not in f.reason, f


def test_ten_of_the_twelve_named_encoders_are_analysed_with_the_capture_validated(encoders):
    families.from_documented_release()
    named = {name: encoders[name] for name in families.ENCODERS}
    done = [name for name, f in named.items() if f.status == "analysed"]
    assert len(done) >= families.ENCODERS_ANALYSED, {
        name: f.reason for name, f in named.items() if f.status != "analysed"}
    for name in done:
        assert named[name].reason == families.validated() and named[name].record, name


def test_encoders_are_measured_on_the_pairs_their_calls_let_through(encoders):
    """ESM's layers both ways (every pair of 24 tokens), ModernBERT's global layer both ways
    and its local layers on the band |i - j| <= local_attention / 2 = 4; each row names it.
    From the docs table's release on (ESM rotated in a method of its own before 5.25)."""
    families.from_documented_release()
    n = families.TOKENS
    band = n * 9 - 2 * (4 * 5 // 2)  # |i - j| <= 4 on 24 tokens
    esm = encoders["esm"].record
    assert esm is not None and {(h["n_pairs"], h["mask"]) for h in esm["heads"]} == {
        (n * n, "both ways")}
    bert = encoders["modernbert"].record
    assert bert is not None
    layers = {h["layer"]: (h["n_pairs"], h["mask"]) for h in bert["heads"]}
    assert layers == {0: (n * n, "both ways"),
                      1: (band, "both ways within 4 back and 4 ahead"),
                      2: (band, "both ways within 4 back and 4 ahead")}  # fmt: skip


def test_the_docs_encoder_table_is_this_run(encoders):
    start, end = families.ENCODERS_START, families.ENCODERS_END
    documented = families.documented(start, end)
    if not documented.startswith(f"transformers {transformers.__version__}:"):
        pytest.skip(f"the docs table is for another transformers ({documented.split(':')[0]})")
    assert documented == families.encoder_table(list(encoders.values())), (
        "docs/analyse-your-model.md is stale: run `python tests/families.py encoders`")
