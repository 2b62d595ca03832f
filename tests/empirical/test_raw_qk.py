"""Raw activations in: RopeSpec and analyze_qk on known truth, layouts, orders."""

from __future__ import annotations

import re
import types
from dataclasses import replace

import numpy as np
import pytest
import torch
import transformers as T
from conftest import llama_config, tiny_llama

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.adapter.configs import rope_spec
from ropesplit.empirical.analysis.analyze import DEFAULT_MEASURE, analyze_capture
from ropesplit.empirical.analysis.raw import RowLabels, analyze_qk
from ropesplit.empirical.model.capture import capture
from ropesplit.numerics.rope import from_pairs, rotate, to_pairs
from ropesplit.numerics.spec import RopeSpec, looks_rotated
from ropesplit.numerics.stats import layer_statistics

D, N = 16, 48
STATS = ("r_split", "r_split_rowcentred", "remainder_share", "lowfreq_share_k", "tightness_max")


def _qk(seed=0, *, still=False, heads=4, kv=2):
    """Queries and keys (H, N, d), (Hkv, N, d): keys a constant kbar plus a deviation spread
    over every pair, or (``still``) only in the theta = 0 pairs of the spec below."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(heads, N, D))
    kbar = 3.0 * rng.normal(size=(kv, 1, D))
    dev = rng.normal(size=(kv, N, D))
    if still:
        dev[..., [6, 7, 14, 15]] *= 1.0  # the last two pairs (half layout) have theta = 0
        keep = np.zeros(D, bool)
        keep[[6, 7, 14, 15]] = True
        dev[..., ~keep] = 0.0
    return q, kbar + 0.5 * dev


SPEC = RopeSpec(theta=(1.0, 0.3, 0.05, 0.01, 0.002, 0.0005, 0.0, 0.0), scale=0.25)


def test_the_rows_are_numerics_layer_statistics_and_exact_when_keys_deviate_only_in_still_pairs():
    q, k = _qk(1)
    only_zero = replace(DEFAULT_MEASURE, reference="zero", references=("zero",))
    rows = analyze_qk(q, k, SPEC, only_zero).heads
    want = layer_statistics(q, k, RopeSpec.from_arrays(SPEC.frequencies, SPEC.scale,
                                                       kv_map=[0, 0, 1, 1]))  # fmt: skip
    for row, w in zip(rows, want, strict=True):
        for stat in STATS:
            assert row[stat] == pytest.approx(getattr(w, stat), rel=1e-12, abs=1e-15)
    q, k = _qk(2, still=True)
    exact = analyze_qk(q, k, SPEC).heads  # E = 0: the split is exact
    assert all(r["r_split"] == pytest.approx(1.0, abs=1e-12) for r in exact)
    assert all(r["remainder_share"] < 1e-12 for r in exact)


def test_hf_and_tl_orders_and_both_layouts_give_the_same_statistics():
    q, k = _qk(3)
    hf = analyze_qk(q[None], k[None], SPEC).heads
    tl = analyze_qk(q.transpose(1, 0, 2)[None], k.transpose(1, 0, 2)[None], SPEC, order="tl").heads
    inter = RopeSpec(SPEC.theta, SPEC.scale, layout="interleaved")
    qi = from_pairs(to_pairs(q, "half"), "interleaved")  # the same pairs, other coordinates
    ki = from_pairs(to_pairs(k, "half"), "interleaved")
    moved = analyze_qk(qi, ki, inter).heads
    for a, b, c in zip(hf, tl, moved, strict=True):
        for stat in STATS:
            assert a[stat] == b[stat]
            assert c[stat] == pytest.approx(a[stat], rel=1e-10, abs=1e-13)


def test_post_rope_input_is_refused_or_unrotated_on_request():
    q, k = _qk(4)
    pos = np.arange(N, dtype=np.float64)
    qr, kr = rotate(q, pos, SPEC.frequencies), rotate(k, pos, SPEC.frequencies)
    given, unrot = looks_rotated(k, SPEC)
    assert given > 0.5 > 0.2 > unrot  # pre-RoPE: the constant part shows as given
    given, unrot = looks_rotated(kr, SPEC)
    assert unrot > 0.5 > 0.2 > given  # post-RoPE: only after un-rotating
    with pytest.raises(RopesplitError, match="^k looks post-RoPE"):
        analyze_qk(qr, kr, SPEC)
    back = analyze_qk(qr, kr, SPEC, rotated=True)
    plain = analyze_qk(q, k, SPEC)
    for a, b in zip(back.heads, plain.heads, strict=True):
        assert a["r_split"] == pytest.approx(b["r_split"], rel=1e-10)
    assert back.to_dict()["rotated_input"] == 1.0 and plain.to_dict()["tokens"] == N
    with pytest.raises(RopesplitError, match="^rotated=True but k looks pre-RoPE"):
        analyze_qk(q, k, SPEC, rotated=True)


def test_a_captured_layer_through_analyze_qk_is_the_same_analysis_as_analyze():
    loaded = tiny_llama(2, seed=3)
    ids = torch.randint(0, 128, (40,), generator=torch.Generator().manual_seed(2))
    cache = capture(loaded, ids)
    want = [r for r in analyze_capture(cache) if r["layer"] == 1]
    layer = cache.layers[1]
    spec = RopeSpec.from_arrays(layer.theta, layer.scale, layer.layout, layer.rotary_dim,
                                layer.window, layer.kv_map)  # fmt: skip
    got = analyze_qk(layer.q, layer.k, spec, labels=RowLabels(layer=1)).heads
    for a, b in zip(got, want, strict=True):
        assert (a["layer"], a["head"], a["kv_head"]) == (b["layer"], b["head"], b["kv_head"])
        for stat in STATS:
            assert a[stat] == pytest.approx(b[stat], rel=1e-12, abs=1e-15)


def test_rope_spec_from_configs():
    llama = llama_config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                          rope_theta=500.0)  # fmt: skip
    spec = rope_spec(llama)
    assert spec.head_dim == 16 and spec.theta[0] == 1.0 and spec.layout == "half"
    assert spec.theta[1] == pytest.approx(500.0 ** (-2 / 16)) and spec.kv_map == (0, 0, 1, 1)
    assert spec.scale == pytest.approx(16**-0.5)
    tl = types.SimpleNamespace(d_head=8, rotary_base=100.0, rotary_dim=4,
                               rotary_adjacent_pairs=True, n_heads=2, n_key_value_heads=None,
                               positional_embedding_type="rotary")  # fmt: skip
    spec = rope_spec(tl)
    assert spec.layout == "interleaved" and spec.rotary_dim == 4 and spec.theta == (1.0, 0.1,
                                                                                      0.0, 0.0)
    assert RopeSpec.from_base(4, 100.0).theta == (1.0, 0.1)
    with pytest.raises(RopesplitError, match="^GPT2Config states no rope_theta"):
        rope_spec(T.GPT2Config())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda q, k: (q[..., :15], k[..., :15]), "the RopeSpec has head dim 16, the tensors 15"),
        (lambda q, k: (np.stack([q, q]), np.stack([k, k])), "analyze_qk takes one sequence"),
        (lambda q, k: (q[0], k[0]), "q must be (batch, head, pos, d) or without the batch"),
        (lambda q, k: (np.where(q > 2, np.nan, q), k), "q holds"),
        (lambda q, k: (q, k[:, :10]), "k must hold 48 positions of dim 16 like q"),
        (lambda q, k: (q, k[:1].repeat(3, 0)), "4 query heads cannot share 3 KV heads evenly"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(change, message):
    q, k = change(*_qk(5))
    with pytest.raises(RopesplitError, match=f"^{re.escape(message)}"):
        analyze_qk(q, k, SPEC)
    with pytest.raises(RopesplitError, match="^layout must be 'half' or 'interleaved'"):
        RopeSpec((1.0,), 1.0, layout="pairs")
    with pytest.raises(RopesplitError, match="^order must be one of hf, tl"):
        analyze_qk(*_qk(5), SPEC, order="xy")
