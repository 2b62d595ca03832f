"""The synthetic tasks: their sequences, and the measures on known truth."""

import numpy as np
import pytest

from ropesplit.core.errors import RopesplitError
from ropesplit.numerics.emergence import weighted_slow_share
from ropesplit.numerics.rope import to_pairs
from ropesplit.numerics.spec import RopeSpec
from ropesplit.numerics.stats import head_statistics
from ropesplit.numerics.tasks import MIN_DISTANCE, OFFSET, pairs_in, task_batch, task_vocab

L, V = 64, 32


@pytest.mark.parametrize("task", ["recall", "offset"])
def test_every_answer_is_where_its_task_says(task):
    batch = task_batch(task, np.random.default_rng(0), 6, L, V)
    ids, labels, distance, source = (np.asarray(x) for x in batch)
    keys, values, size = task_vocab(V)
    pairs = pairs_in(L)
    assert (ids[:, 0] == size - 2).all() and ids.max() < size
    for b in range(6):
        at = np.flatnonzero(labels[b] >= 0)
        assert at.size == pairs and (labels[b, at] == ids[b, at]).all()
        store = ids[b, 1 : 1 + pairs] - V  # (key, value) of each stored pair token
        assert (store >= 0).all()
        if task == "recall":
            assert len(set((store // values).tolist())) == pairs  # distinct keys
            assert (distance[b, at] >= MIN_DISTANCE).all()
            held = ids[b, source[b, at]] - V  # the pair token each answer is read from
            assert (held // values == ids[b, at - 1]).all()  # it holds the query's key
            assert (keys + held % values == ids[b, at]).all()  # and the answer as its value
        else:
            assert (source[b, at] == at - OFFSET).all()
            assert (ids[b, source[b, at]] == ids[b, at]).all()  # copied from OFFSET back
    assert np.ptp(distance[distance > 0]) > L / 2 or task == "offset"  # distances spread
    with pytest.raises(RopesplitError, match="^a task sequence of 20 tokens holds"):
        task_batch("recall", np.random.default_rng(0), 1, 20, V)


def _recall_rows_drawn_one_by_one(rng, batch, length, vocab):
    """The recall batch's draws as first written: per query ``rng.choice`` among the pairs
    far enough (the loop twin of task_batch's; a recorded run's batches must not move)."""
    n_keys, n_values, _ = task_vocab(vocab)
    pairs = pairs_in(length)
    rows = []
    for _ in range(batch):
        keys = rng.permutation(n_keys)[:pairs]
        values = rng.integers(0, n_values, size=pairs)
        chosen = []
        for t in range(pairs):
            at = 1 + pairs + 2 * t
            chosen.append(int(rng.choice(np.flatnonzero(at - (1 + np.arange(pairs))
                                                        >= MIN_DISTANCE))))  # fmt: skip
        rows.append((keys, values, chosen))
    return rows


@pytest.mark.parametrize(("length", "vocab", "seed"), [(64, 32, 0), (128, 64, 1), (97, 64, 2)])
def test_recall_batches_are_the_draws_of_one_choice_per_query(length, vocab, seed):
    ids, _, _, source = (np.asarray(x) for x in
                         task_batch("recall", np.random.default_rng(seed), 5, length, vocab))
    n_keys, n_values, _ = task_vocab(vocab)
    pairs = pairs_in(length)
    at = 1 + pairs + 2 * np.arange(pairs)
    for b, (keys, values, chosen) in enumerate(_recall_rows_drawn_one_by_one(
            np.random.default_rng(seed), 5, length, vocab)):  # fmt: skip
        assert (ids[b, 1 : 1 + pairs] == vocab + keys * n_values + values).all()
        assert (source[b, at + 1] == 1 + np.array(chosen)).all()
        assert (ids[b, at] == keys[chosen]).all()


P = 40  # pairs of the hand-built head: two rotating (theta 1, 0.1), 38 non-rotating
THETA = np.array([1.0, 0.1] + [0.0] * (P - 2))
SLOW = [*range(2, P), *range(P + 2, 2 * P)]  # half layout: pair l is (l, l + P)
FAST = [0, 1, P, P + 1]


def _recall_head(where: str):
    """A hand-built retrieval head on one recall sequence: a query carries its key token's
    embedding, and each stored pair token its key's, in the non-rotating pairs
    (``where="slow"``: one-hot) or in the rotating ones (``"fast"``); other keys carry none."""
    ids, labels, _, source = (np.asarray(x)[0] for x in
                              task_batch("recall", np.random.default_rng(1), 1, L, V))  # fmt: skip
    keys, values, _ = task_vocab(V)
    emb = (np.eye(len(SLOW))[:keys] if where == "slow"
           else np.random.default_rng(2).normal(size=(keys, len(FAST))))  # fmt: skip
    dims = SLOW if where == "slow" else FAST
    q, k = np.zeros((L, 2 * P)), np.full((L, 2 * P), 0.5)
    is_key, is_pair = ids < keys, (ids >= V) & (ids < V + keys * values)
    q[np.ix_(is_key, dims)] = 8.0 * emb[ids[is_key]]
    k[np.ix_(is_pair, dims)] += emb[(ids[is_pair] - V) // values]
    return q, k, ids, labels, source


def test_a_content_head_in_non_rotating_pairs_has_r_split_1_and_slow_share_1():
    """Known truth: keys deviating only in non-rotating pairs give E = 0, so
    r_split = 1 and the weighted slow share 1, and the head retrieves every answer by
    content (its attention's top key follows the query's key). The same head with its
    content in the rotating pairs has neither."""
    for where, want in (("slow", True), ("fast", False)):
        q, k, ids, labels, _ = _recall_head(where)
        stats = head_statistics(q, k, RopeSpec.from_arrays(THETA, 0.5), kbar=k[1:].mean(0))
        delta = k - k[1:].mean(0)  # BOS left out of kbar
        share = weighted_slow_share(to_pairs(q)[None], to_pairs(delta)[None], THETA)[0]
        assert bool(stats.r_split > 1 - 1e-9) is want, where
        assert bool(share > 1 - 1e-12) is want, where
        if where == "slow":
            w = np.where(np.tril(np.ones((L, L), dtype=bool)), q @ k.T, -np.inf)
            at = np.flatnonzero(labels >= 0)
            keys, values, _ = task_vocab(V)
            read = ids[w[at - 1].argmax(-1)] - V  # the pair token each query attends most
            assert (keys + read % values == labels[at]).all()  # its value is the answer
        else:
            assert share < 0.2


def _softmax_causal(w):
    w = np.where(np.tril(np.ones(w.shape[-2:], dtype=bool)), w, -np.inf)
    w = np.exp(w - w.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def test_retrieval_score_is_1_on_the_content_head_and_low_on_positional_ones():
    """Known truth for the retrieval head's score: the hand-built content head's attention
    sits on the stored pair token that holds the query's key (score near 1); a
    previous-token head scores 0 and an even spread exactly the mean of 1 / (query row + 1)."""
    from ropesplit.numerics.emergence import retrieval_score

    q, k, ids, labels, source = _recall_head("slow")
    content = _softmax_causal(q @ k.T)  # (L, L)
    previous = np.eye(L, k=-1)
    previous[0, 0] = 1.0  # the first row has only itself
    even = _softmax_causal(np.zeros((L, L)))
    score = retrieval_score(np.stack([content, previous, even]), source)
    answers = np.flatnonzero(source >= 0)
    assert score[0] > 0.95  # the rest: e^-8 of the logit on each of the other keys
    assert score[1] == 0.0  # the pair sits >= MIN_DISTANCE back, never one token back
    np.testing.assert_allclose(score[2], np.mean(1.0 / answers), rtol=1e-12)
    assert np.isnan(retrieval_score(content[None], np.full(L, -1))).all()
    with pytest.raises(RopesplitError, match="probs must be"):
        retrieval_score(content, source)


def test_task_scores_through_the_fast_attention_are_eagers_to_float32_rounding():
    """The recall evaluation captures nothing, so it runs through SDPA: its losses are
    eager attention's to float32 rounding, and its accuracy (argmax) is eager's."""
    import torch
    from conftest import llama_config

    from ropesplit.empirical import load_model
    from ropesplit.empirical.model.passes import model_pass
    from ropesplit.empirical.training.train_measure import task_scores

    loaded = load_model(llama_config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                     num_hidden_layers=2, intermediate_size=64,
                                     vocab_size=task_vocab(V)[2], max_position_embeddings=L))
    rng = np.random.default_rng(1)
    ids, labels, distance, _ = (np.asarray(x) for x in task_batch("recall", rng, 4, L, V))
    fast = task_scores(loaded, ids, labels, distance)
    with torch.no_grad():  # the eager pass as load_model leaves the model
        assert loaded.model.config._attn_implementation == "eager"
        logits = model_pass(loaded.model, torch.as_tensor(ids)).logits.double()
    at = np.nonzero(labels >= 0)
    scores = logits[at[0], at[1] - 1]  # (answers, vocab)
    loss = torch.nn.functional.cross_entropy(scores, torch.as_tensor(labels[at]),
                                             reduction="none").numpy()  # fmt: skip
    eager = [float(loss[at[0] == v].mean()) for v in range(ids.shape[0])]
    np.testing.assert_allclose(fast["losses"], eager, rtol=1e-5, atol=1e-6)
    right = (scores.argmax(-1).numpy() == labels[at]).mean()
    assert fast["accuracy"] == right


@pytest.mark.parametrize("rate", [0.05, 0.15, 0.5])
def test_masked_tokens_mask_at_the_rate_never_bos_at_least_one_a_row(rate):
    """The masked-LM inputs: labels exactly where the inputs hold <mask>, the original token
    there, BOS never masked, every row at least one, the share near ``rate`` over many rows
    (a binomial tolerance of 5 standard deviations)."""
    from ropesplit.numerics.tasks import IGNORE, masked_tokens

    ids = np.random.default_rng(1).integers(0, 256, size=(400, 64))
    inputs, labels = masked_tokens(ids, np.random.default_rng(2), 999, rate=rate)
    chosen = labels != IGNORE
    assert ((inputs == 999) == chosen).all() and (labels[chosen] == ids[chosen]).all()
    assert (inputs[~chosen] == ids[~chosen]).all()
    assert not chosen[:, 0].any() and chosen.any(1).all()
    n = chosen[:, 1:].size
    assert abs(chosen[:, 1:].mean() - rate) <= 5 * np.sqrt(rate * (1 - rate) / n) + 1 / 64
    with pytest.raises(RopesplitError, match="masking needs rows of 2 tokens"):
        masked_tokens(ids[:, :1], np.random.default_rng(0), 999)
