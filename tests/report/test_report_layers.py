"""The report's empirical section says which layers a hybrid pools and, for multi-head
latent attention, why the RoPE sub-head's numbers are the informative ones; a model of
whole RoPE heads on every layer (the default) gets neither sentence."""

from __future__ import annotations

from ropesplit.report.sections.empirical import _layers_and_subhead


def test_a_plain_record_adds_nothing():
    assert _layers_and_subhead({"layers_analysed": [0, 1], "layers_not_analysed": []}, {}) == []


def test_a_hybrid_names_its_pooled_layers_and_mla_its_subhead():
    record = {"layers_analysed": [3],
              "layers_not_analysed": [{"layer": 0, "kind": "linear_attention"}],
              "summary_rope_subhead": {"rotary_share": 0.25, "r_split_rope_subhead": 0.5}}
    control = {"summary_rope_subhead": {"rotary_share": 0.3, "r_split_rope_subhead": 0.4}}
    layers, subhead = _layers_and_subhead(record, control)
    assert layers == ("Layers analysed: 3; not analysed: 0 (linear_attention). Every mean "
                      "pools the analysed layers.")
    assert "high by construction" in subhead
    assert "r_split_rope_subhead 0.500 (control 0.400)" in subhead
