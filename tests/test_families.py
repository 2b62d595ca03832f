"""Every RoPE causal-LM family of the installed transformers: analysed or refused in one line.

``tests/families.py`` enumerates the families from transformers' auto
mappings, builds each tiny and runs ``ropesplit analyze`` on it; the table in
docs/analyse-your-model.md is that run's (``python tests/families.py``
rewrites it) and is checked here against a fresh one.
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
        assert run[name].reason.startswith("probabilities "), run[name]
    if "gptj" not in families.required():  # its attention is a private method there
        assert run["gptj"].status == "refused"
        assert "has no module-level apply_rotary_pos_emb and eager_attention_forward" in (
            run["gptj"].reason)


def test_multi_head_latent_attention_is_refused_with_its_reason(run):
    assert run["deepseek_v3"].status == "refused"
    assert "multi-head latent attention" in run["deepseek_v3"].reason


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
