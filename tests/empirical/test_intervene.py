"""Interventions inside the forward pass, on known truth."""

import numpy as np
import pytest
import torch
from conftest import TINY_VOCAB, tiny_llama

from ropesplit.core.errors import RopesplitError
from ropesplit.empirical.experiments.intervene import Edit, calibrate_kbars, intervened_nll

GEN = torch.Generator().manual_seed(0)
IDS = torch.randint(0, TINY_VOCAB, (2, 48), generator=GEN)
CALIBRATION = torch.randint(0, TINY_VOCAB, (2, 48), generator=GEN)


def _constant_keys(seed=0):
    """A tiny Llama whose pre-RoPE keys are one vector in every layer: delta = 0, so
    W = f exactly (g = E = 0)."""
    model = tiny_llama(2, seed=seed, attention_bias=True)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in model.model.model.layers:
            layer.self_attn.k_proj.weight.zero_()
            layer.self_attn.k_proj.bias.normal_(0.0, 2.0, generator=gen)
            layer.self_attn.q_proj.weight.mul_(8.0)  # logits large enough for edits to show
    return model


def _sharp(seed=0):
    """A tiny Llama with large logits (q and k weights x 8): E is large."""
    model = tiny_llama(2, seed=seed)
    with torch.no_grad():
        for layer in model.model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    return model


def test_an_edit_on_no_heads_is_bit_identical():
    model = _sharp()
    kbars = calibrate_kbars(model, CALIBRATION)
    clean = intervened_nll(model, IDS, None)
    for edit in (Edit("remainder", (0, 1), heads=(), kbars=kbars),
                 Edit("remainder", (), kbars=kbars), Edit("shuffle", ())):  # fmt: skip
        assert np.array_equal(intervened_nll(model, IDS, edit), clean)


def test_dropping_the_remainder_changes_nothing_where_logits_are_f_plus_g():
    """Known truth: constant keys make E = 0 (and g = 0); dropping E, or capping g + E, leaves
    the loss to float rounding, while the same edits on a model with large E move it."""
    exact = _constant_keys()
    kbars = calibrate_kbars(exact, CALIBRATION)
    clean = intervened_nll(exact, IDS, None)
    for kind in ("remainder", "semantic", "cap_rest"):
        edited = intervened_nll(exact, IDS, Edit(kind, (0, 1), kbars=kbars, length=8))
        assert np.abs(edited - clean).max() < 1e-5, kind
    moved = intervened_nll(exact, IDS, Edit("cap_f", (0, 1), kbars=kbars, length=8))
    assert np.abs(moved - clean).mean() > 1e-3  # f is all it has: capping f moves the loss
    # a split with kbar = 0 has f = 0: all of W is g + E, and capping f alone is no edit
    sharp = _sharp()
    zero = {layer: np.zeros_like(k) for layer, k in calibrate_kbars(sharp, CALIBRATION).items()}
    clean_sharp = intervened_nll(sharp, IDS, None)
    assert np.array_equal(intervened_nll(sharp, IDS, Edit("cap_f", (0, 1), kbars=zero, length=8)),
                          clean_sharp)  # fmt: skip
    rest = intervened_nll(sharp, IDS, Edit("cap_rest", (0, 1), kbars=zero, length=8))
    assert np.abs(rest - clean_sharp).mean() > 1e-3
    sharp = _sharp()
    kbars = calibrate_kbars(sharp, CALIBRATION)
    clean = intervened_nll(sharp, IDS, None)
    for kind in ("remainder", "noise", "fast_keys", "shuffle"):
        edited = intervened_nll(sharp, IDS, Edit(kind, (0, 1), kbars=kbars))
        assert np.abs(edited - clean).mean() > 1e-3, kind


def test_one_head_edits_only_that_head():
    """The edit reaches the heads named and no other: editing head 0 of layer 1 differs
    from editing head 1, and each differs from the clean run only downstream of layer 1."""
    model = _sharp()
    kbars = calibrate_kbars(model, CALIBRATION)
    a = intervened_nll(model, IDS, Edit("remainder", (1,), heads=(0,), kbars=kbars))
    b = intervened_nll(model, IDS, Edit("remainder", (1,), heads=(1,), kbars=kbars))
    assert not np.array_equal(a, b)


def test_bad_edits_are_one_line():
    bad = (({"kind": "melt"}, "edit must be one of"),
           ({"kind": "remainder", "layers": (0,)}, "edit remainder needs kbar"),
           ({"kind": "cap_f", "layers": (), "length": 0}, "edit cap_f needs"),
           ({"kind": "shuffle", "reference": "x"}, "reference must be"))
    for kwargs, message in bad:
        with pytest.raises(RopesplitError, match=f"^{message}"):
            Edit(**kwargs)
    with pytest.raises(RopesplitError, match=r"^edit layers must lie in \[0, 2\)"):
        intervened_nll(tiny_llama(2), IDS, Edit("shuffle", (5,)))
