"""The interventions' logit changes against the dense float64 split (numerics.split)."""

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics import intervention
from ropesplit.numerics.measure import Measure
from ropesplit.numerics.rope import frequencies, to_pairs
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.split import split_head

N, D = 10, 8
THETA = frequencies(D, 20.0)  # (4,): 1, 0.47, 0.22, 0.106
SPLIT_ONLY = Measure(bounds=False)  # the components by subtraction, no bounds
_X = hnp.arrays(np.float64, (N, D), elements=st.floats(-2, 2, allow_nan=False, width=64))


class _Numpy:
    """The module's functions with numpy results (they return torch tensors)."""

    def __getattr__(self, name):
        fn = getattr(intervention, name)
        return lambda *a, **k: np.asarray(fn(*a, **k))


iv = _Numpy()


def _pairs(q, k, kbar):
    return to_pairs(q)[None], to_pairs(k)[None], to_pairs(kbar)[None]  # (1, N, P), (1, P)


@settings(deadline=None, max_examples=25)
@given(q=_X, k=_X, kbar=hnp.arrays(np.float64, (D,), elements=st.floats(-2, 2, width=64)),
       c=st.integers(0, 6))  # fmt: skip
def test_edits_match_the_dense_split(q, k, kbar, c):
    """-E, -g, the pair-deviation removal and the caps, each against numerics.split."""
    s, pos = 0.5, np.arange(N, dtype=np.float64)
    qc, kc, kb = _pairs(q, k, kbar)
    mask = np.tril(np.ones((N, N), dtype=bool))
    for ref in ("zero", f"distance:{c}"):
        sp = split_head(q, k, RopeSpec.from_arrays(THETA, s), Measure(reference=ref, bounds=False),
                        kbar=kbar)  # fmt: skip
        m = None if ref == "zero" else sp.m
        np.testing.assert_allclose(iv.drop_remainder(qc, kc, kb, THETA, pos, s, m)[0],
                                   np.where(mask, -sp.E, 0.0), atol=1e-10)  # fmt: skip
        np.testing.assert_allclose(iv.drop_semantic(qc, kc, kb, s, m)[0],
                                   np.where(mask, -sp.g, 0.0), atol=1e-10)  # fmt: skip
    sp = split_head(q, k, RopeSpec.from_arrays(THETA, s), SPLIT_ONLY, kbar=kbar)
    every = np.ones(THETA.size)
    np.testing.assert_allclose(iv.drop_pair_deviation(qc, kc, kb, THETA, pos, s, every)[0],
                               np.where(mask, -(sp.g + sp.E), 0.0), atol=1e-10)  # fmt: skip
    capped = split_head(q, k, RopeSpec.from_arrays(THETA, s), SPLIT_ONLY, kbar=kbar, cap=c)
    f_only = iv.cap_positional(qc, kc, kb, THETA, pos, s, c)[0]
    rest = iv.cap_rest(qc, kc, kb, THETA, pos, s, c)[0]
    far = mask & (pos[:, None] - pos[None, :] > c)
    np.testing.assert_allclose(f_only, np.where(far, capped.f - sp.f, 0.0), atol=1e-10)
    np.testing.assert_allclose(f_only + rest, np.where(mask, capped.W - sp.W, 0.0), atol=1e-10)
    order = np.roll(np.arange(THETA.size), 1)
    shuffled = split_head(q, k, RopeSpec.from_arrays(THETA[order], s), SPLIT_ONLY)
    np.testing.assert_allclose(iv.shuffle_frequencies(qc, kc, THETA, pos, s, order)[0],
                               np.where(mask, shuffled.W - sp.W, 0.0), atol=1e-10)  # fmt: skip


def test_known_truth_zero_changes():
    """Constant keys: E = 0 and g = 0, so dropping E changes nothing and capping g + E
    changes nothing; a zero reference key: f = 0, so capping f changes nothing. Random
    keys: each edit moves the logits (the tests above could not pass by returning 0)."""
    rng = np.random.default_rng(0)
    q = rng.normal(size=(N, D))
    const = np.tile(rng.normal(size=D), (N, 1))
    qc, kc, kb = _pairs(q, const, const[0])
    pos = np.arange(N, dtype=np.float64)
    assert np.abs(iv.drop_remainder(qc, kc, kb, THETA, pos, 1.0)).max() < 1e-12
    assert np.abs(iv.cap_rest(qc, kc, kb, THETA, pos, 1.0, 3)).max() < 1e-12
    k = rng.normal(size=(N, D))
    qc, kc, zero = _pairs(q, k, np.zeros(D))
    assert np.abs(iv.cap_positional(qc, kc, zero, THETA, pos, 1.0, 3)).max() == 0.0
    _, _, kb = _pairs(q, k, k.mean(0))
    for edit in (iv.drop_remainder(qc, kc, kb, THETA, pos, 1.0),
                 iv.cap_positional(qc, kc, kb, THETA, pos, 1.0, 3),
                 iv.cap_rest(qc, kc, kb, THETA, pos, 1.0, 3)):  # fmt: skip
        assert np.abs(edit).max() > 0.1


@settings(deadline=None, max_examples=25)
@given(term=hnp.arrays(np.float64, (2, N, N), elements=st.floats(-3, 3, width=64)),
       seed=st.integers(0, 3))  # fmt: skip
def test_same_norm_noise_has_each_rows_norm(term, seed):
    xi = iv.same_norm_noise(term, seed)
    mask = np.tril(np.ones((N, N), dtype=bool))
    assert np.all(xi[:, ~mask] == 0)
    np.testing.assert_allclose(np.linalg.norm(np.where(mask, xi, 0), axis=-1),
                               np.linalg.norm(np.where(mask, term, 0), axis=-1), atol=1e-9)


def test_fast_pairs_and_matched_slow_weights():
    fast = iv.fast_pairs(THETA, 10)  # 9 theta >= 2 pi: theta >= 0.698
    assert fast.tolist() == [True, False, False, False]
    rng = np.random.default_rng(1)
    k, kbar = rng.normal(size=(1, N, 2)) + 1j * rng.normal(size=(1, N, 2)), np.zeros((1, 4))
    k = np.concatenate([k * [3.0, 0.1], rng.normal(size=(1, N, 2)) * 1j], -1)  # (1, N, 4)
    c = iv.matched_slow_weights(k, kbar, fast)
    e = (np.abs(k) ** 2).sum(1)[0]
    removed = (c[0, 1:] ** 2 * e[1:]).sum()
    assert c[0, 0] == 0 and removed == pytest.approx(min(e[0], e[1:].sum()))
    with pytest.raises(RopesplitError, match="^order must be a permutation"):
        iv.shuffle_frequencies(k, k, THETA, np.arange(N), 1.0, [0, 0, 1, 2])


def test_float32_input_runs_at_float32_and_matches_float64():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(2, N, D))
    qc, kc, kb = _pairs(q, k, k.mean(0))
    pos = np.arange(N, dtype=np.float64)
    want = intervention.drop_remainder(qc, kc, kb, THETA, pos, 0.5)
    got = intervention.drop_remainder(torch.from_numpy(qc).to(torch.complex64), kc, kb,
                                      THETA, pos, 0.5)  # fmt: skip
    assert want.dtype == torch.float64 and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)
    real = intervention.pairs(torch.from_numpy(q), "half")
    np.testing.assert_array_equal(real.numpy(), to_pairs(q))


@settings(deadline=None, max_examples=25)
@given(q=_X, k=_X, kbar=hnp.arrays(np.float64, (D,), elements=st.floats(-2, 2, width=64)),
       seed=st.integers(0, 50))  # fmt: skip
def test_the_structured_null_is_the_shuffled_remainder_at_the_rows_of_e(q, k, kbar, seed):
    """The remainder's null has E's row norms and is the remainder under the
    shuffled frequencies (dense twin), row by row rescaled."""
    s, pos = 0.5, np.arange(N, dtype=np.float64)
    qc, kc, kb = _pairs(q, k, kbar)
    order = np.random.default_rng(seed).permutation(THETA.size)
    got = -iv.structured_remainder(qc, kc, kb, THETA, pos, s, order)[0]  # (N, N)
    e = split_head(q, k, RopeSpec.from_arrays(THETA, s), SPLIT_ONLY, kbar=kbar).E
    e_pi = split_head(q, k, RopeSpec.from_arrays(THETA[order], s), SPLIT_ONLY, kbar=kbar).E
    mask = np.tril(np.ones((N, N), dtype=bool))
    for i in range(N):
        row, want = got[i][mask[i]], e[i][mask[i]]
        norm = np.linalg.norm(e_pi[i][mask[i]])
        assert np.linalg.norm(row) == pytest.approx(np.linalg.norm(want) if norm > 0 else 0.0,
                                                    abs=1e-9)  # fmt: skip
        if norm > 1e-9:
            np.testing.assert_allclose(row, e_pi[i][mask[i]] * np.linalg.norm(want) / norm,
                                       atol=1e-9)  # fmt: skip
    assert np.all(got[~mask] == 0.0)


@given(theta=hnp.arrays(np.float64, st.integers(1, 12), elements=st.floats(0.0, 1.0)),
       seed=st.integers(0, 10**6))  # fmt: skip
def test_band_order_keeps_every_pair_in_its_half(theta, seed):
    from ropesplit.numerics.rope import low_half

    order = intervention.band_order(theta, np.random.default_rng(seed))
    weight = low_half(theta)
    assert sorted(order.tolist()) == list(range(theta.size))
    assert np.array_equal(weight[order], weight)  # slow to slow, fast to fast
