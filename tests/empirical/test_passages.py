"""``measurement.passages``: a passage's row does not depend on the shard that measures it.

A claims shard forms its forward passes from the whole run's passages and measures each
passage beside the same others, in a worker even alone; so ``ropesplit merge`` of shards is
the whole run's record exactly, on a GPU too, whose float32 products differ with the batch.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import TINY_VOCAB, tiny_llama

from ropesplit.claims.registry import CONTROL_SEEDS
from ropesplit.core.io import _jsonable
from ropesplit.empirical.measurement import passages
from ropesplit.empirical.measurement.passages import BATCH, GROUP, control_seed, passes
from ropesplit.empirical.model.corpus import PassageIds


def _whole_run(n: int) -> tuple[list[list[int]], list[list[int]]]:
    """The batches the whole run formed before shards were formed from it (pinned: an
    unsharded run's numbers must not move)."""
    groups: list[list[int]] = []
    for seed in CONTROL_SEEDS:
        mine = [p for p in range(n) if control_seed(p) == seed]
        groups += [mine[i : i + GROUP] for i in range(0, len(mine), GROUP)]
    return [list(range(lo, min(lo + BATCH, n))) for lo in range(0, n, BATCH)], groups


@pytest.mark.parametrize("n", [8, 12, 17, 32, 61])
def test_a_shard_makes_the_whole_runs_batches_that_hold_its_passages(n):
    whole = _whole_run(n)
    assert passes(range(n), n) == whole
    for lo in range(n):
        for hi in range(lo + 1, n + 1):
            span = range(lo, hi)
            for mine, theirs in zip(passes(span, n), whole, strict=True):
                assert mine == [b for b in theirs if any(p in span for p in b)], (lo, hi)
    assert passes(range(12, 8), 8) == ([], [])  # a shard of word-order passages only
    with pytest.raises(ValueError, match="^passages 4:9 are not in a run of 8"):
        passes(range(4, 9), 8)


@pytest.fixture(scope="module")
def tiny():
    loaded = tiny_llama(2, seed=1)
    controls = {s: tiny_llama(2, seed=100 + s) for s in CONTROL_SEEDS}
    ids = torch.randint(0, TINY_VOCAB, (8, 32), generator=torch.Generator().manual_seed(0))
    return loaded, controls, PassageIds([f"p{k}" for k in range(8)], ids, 32, 0, "t")


@pytest.mark.slow  # the passages of a claims run, whole and in two sets of shards
def test_shards_measure_each_passage_in_the_whole_runs_batch_and_thread(tiny, monkeypatch):
    """One length, so that a shard's singleton groups measure one item a pass: the item runs
    in a worker as beside others (numba's and torch's threads reorder float64 sums at
    1e-16), and each shard pass is one of the whole run's, riders and positions alike."""
    from ropesplit.numerics.workers import serial

    loaded, controls, chosen = tiny
    seen: list[tuple[int, bytes, bytes]] = []
    real_capture = passages.capture_batch

    def capture_batch(model, ids, positions, **kw):
        seen.append((id(model), ids.numpy().tobytes(), np.asarray(positions).tobytes()))
        return real_capture(model, ids, positions, **kw)

    workers: list[bool] = []
    real_twin = passages._twin_layer

    def twin_layer(*args):
        workers.append(serial())
        return real_twin(*args)

    monkeypatch.setattr(passages, "capture_batch", capture_batch)
    monkeypatch.setattr(passages, "_twin_layer", twin_layer)

    def rows(span: range) -> list[dict]:
        got = passages.measure_passages(loaded, controls, ("t", chosen), span, lengths=[32],
                                        run=8)  # fmt: skip
        return json.loads(json.dumps(_jsonable(got)))  # as written: a NaN is null

    whole = rows(range(8))
    whole_passes = set(seen)
    assert len(whole_passes) == len(seen) == 2 + 2 * 5  # passes(range(8), 8)
    for shards in (((0, 4), (4, 8)), ((0, 3), (3, 5), (5, 8))):
        seen.clear()
        merged = [row for lo, hi in shards for row in rows(range(lo, hi))]
        assert merged == whole, shards
        assert set(seen) <= whole_passes, shards
    assert set(workers) == {torch.get_num_threads() >= 2}  # in a worker where there are two


@pytest.fixture(scope="module")
def tiny_esm():
    """A tiny random-init ESM (rotary, attention both ways), its twins, and 3 passages."""
    import families

    from ropesplit.empirical import load_model

    model_type, fields = families.ENCODERS["esm"]
    config = families.tiny_config(model_type, **fields)
    loaded = load_model(config, seed=1)
    controls = {s: load_model(config, seed=100 + s) for s in CONTROL_SEEDS}
    ids = torch.randint(4, 30, (3, 48), generator=torch.Generator().manual_seed(0))
    return loaded, controls, PassageIds([f"p{k}" for k in range(3)], ids, 48, 0, "t")


def test_an_encoder_is_captured_once_per_length_over_its_two_way_pairs(tiny_esm, monkeypatch):
    """Both ways, q and k at positions < L read the later tokens: each length is its own
    pass of the first L tokens (a prefix of the longest capture would be another number),
    and the split runs over every pair the mask lets through, offsets of both signs."""
    from ropesplit.empirical.model.capture import capture
    from ropesplit.numerics.mask import Mask
    from ropesplit.numerics.measure import Measure
    from ropesplit.numerics.stats import layer_statistics

    loaded, controls, chosen = tiny_esm
    assert loaded.attn.both_ways()
    shapes: list[tuple[int, int]] = []
    real_capture = passages.capture_batch

    def capture_batch(model, ids, positions, **kw):
        shapes.append(tuple(ids.shape))
        return real_capture(model, ids, positions, **kw)

    monkeypatch.setattr(passages, "capture_batch", capture_batch)
    (row, *_) = passages.measure_passages(loaded, controls, ("t", chosen), range(3),
                                          lengths=[24, 48], run=3)  # fmt: skip
    assert {n for _, n in shapes} == {24, 48}  # every model, at each length
    cell = row["cells"]["tokens=24,split=zero,heads=mean,layers=all"]

    def mean_r_split(cap, n, mask):
        values = []
        for layer in cap.layers:
            z = layer.pairs(n)
            split = Measure(reference="zero", split_only=True)
            values += [s.r_split for s in layer_statistics(z.q, z.k, layer.spec, split,
                                                           positions=np.arange(n), mask=mask)]
        return float(np.mean(values))

    alone = capture(loaded, chosen.ids[0, :24])
    assert all(layer.mask == Mask.both() for layer in alone.layers)
    assert cell["r_split"] == pytest.approx(mean_r_split(alone, 24, Mask.both()), rel=1e-9)
    longer = capture(loaded, chosen.ids[0, :48])  # its first 24 positions read 24 more tokens
    assert abs(cell["r_split"] - mean_r_split(longer, 24, Mask.both())) > 1e-6
    assert abs(cell["r_split"] - mean_r_split(alone, 24, None)) > 1e-6  # not the causal pairs
    assert np.isfinite([cell[k] for k in ("key_corr", "g_share", "e_share", "visible_change",
                                          "lowfreq_share_k", "r_split_control")]).all()
