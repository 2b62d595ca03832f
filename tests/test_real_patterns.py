"""Real models' layer patterns: every RoPE softmax layer analysed, every other layer named.

``tests/real_patterns.py`` builds each published layer pattern of
tests/data/real_layer_patterns.json at the tiny width and runs ``ropesplit
analyze`` on it; the expected kinds come from the fixture's fields alone, the
analysed and not-analysed layers from the analysis record.
"""

from __future__ import annotations

import pytest
import real_patterns
import transformers

pytestmark = pytest.mark.slow  # eleven models built and analysed (make test-fast leaves it out)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return {r.name: r for r in real_patterns.run_all(tmp_path_factory.mktemp("patterns"))}


def test_every_tiny_pattern_keeps_each_kind_of_its_real_model():
    for model in real_patterns.models():
        full = real_patterns.kinds(model)
        assert len(full) == model["config"]["num_hidden_layers"], model["name"]
        assert set(full[: model["tiny_layers"]]) == set(full), model["name"]


def test_no_model_is_refused(run):
    refused = {name: r.reason for name, r in run.items() if r.status != "analysed"}
    assert not refused, refused


def test_rope_layers_are_analysed_and_the_others_are_named(run):
    for name, r in run.items():
        rope = tuple(i for i, kind in enumerate(r.kinds) if kind == "rope")
        others = {i: kind for i, kind in enumerate(r.kinds) if kind != "rope"}
        assert r.analysed == rope, (name, r.analysed, rope)
        assert r.not_analysed is not None, name
        assert {i for i, _ in r.not_analysed} == set(others), (name, r.not_analysed, others)


def test_the_docs_table_is_this_run(run):
    documented = real_patterns.documented()
    if not documented.startswith(f"transformers {transformers.__version__}:"):
        pytest.skip(f"the docs table is for another transformers ({documented.split(':')[0]})")
    assert documented == real_patterns.table(list(run.values())), (
        "docs/analyse-your-model.md is stale: run `python tests/real_patterns.py`")
