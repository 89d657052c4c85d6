import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data.permutation import permutation_masks, sample_permutation, text_stream


def _np(features):
    return {name: value.numpy() for name, value in features.items()}


def _runs(is_target):
    """Lengths of the maximal runs of consecutive targets."""
    runs, current = [], 0
    for flag in list(is_target) + [False]:
        if flag:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


def _check_row(tokens, real, f, num_predict, k):
    """Checks one sequence's features against their definition, by loops."""
    length = len(tokens)
    order = f["factorization_order"]
    assert sorted(order) == list(range(length))  # a permutation of the positions
    rank = np.argsort(order)
    n_real = int(real.sum())
    n_targets = min(n_real // k, num_predict)
    # Exactly the last 1/K of the order is predicted, never padding.
    targets = set(order[length - n_targets:].tolist())
    assert all(real[p] for p in targets)
    assert all(not real[p] for p in order[:length - n_real])  # padding first
    # target_mapping: one-hot rows for the targets (position order), zero rows after.
    mapping = f["target_mapping"]
    assert set(np.unique(mapping)) <= {0.0, 1.0}
    want_rows = [1.0] * n_targets + [0.0] * (num_predict - n_targets)
    np.testing.assert_array_equal(mapping.sum(1), want_rows)
    positions = mapping[:n_targets].argmax(1)
    assert positions.tolist() == sorted(targets)
    np.testing.assert_array_equal(f["target_ids"][:n_targets], tokens[positions])
    np.testing.assert_array_equal(f["target_weights"], mapping.sum(1))
    # perm_mask (1 = may not attend): the context sees the context; target z_t
    # sees the context and the targets before it in the order.
    for i in range(length):
        for j in range(length):
            if j not in targets:
                visible = True
            else:
                visible = i in targets and rank[j] < rank[i]
            assert f["perm_mask"][i, j] == (0 if visible else 1), (i, j)


@pytest.mark.parametrize("span_based", [False, True])
def test_masks_consistent_with_the_sampled_order(span_based):
    rng = np.random.default_rng(0)
    length, k = 18, 6
    tokens = rng.integers(1, 100, (6, length)).astype("int32")
    padding = np.ones_like(tokens)
    padding[3, 11:] = 0  # 11 real tokens: 1 target
    padding[4, :] = np.array([0] * 4 + [1] * 14)  # left padding: 2 targets
    padding[5, 4:] = 0  # 4 real tokens: no target
    features = _np(sample_permutation(tokens, padding, span_based=span_based, seed=1))
    assert features["perm_mask"].shape == (6, length, length)
    assert features["target_mapping"].shape == (6, length // k, length)
    assert features["target_weights"].sum(1).tolist() == [3, 3, 3, 1, 2, 0]
    for row in range(6):
        _check_row(tokens[row], padding[row],
                   {name: value[row] for name, value in features.items()}, length // k, k)
    # Unbatched input gives unbatched features, with the same rules.
    single = _np(sample_permutation(tokens[0], span_based=span_based, seed=2))
    assert single["perm_mask"].shape == (length, length)
    _check_row(tokens[0], np.ones(length), single, length // k, k)


def test_targets_uniform_and_spans_longer():
    batch, length = 400, 60
    tokens = np.tile(np.arange(length, dtype="int32"), (batch, 1))
    plain = _np(sample_permutation(tokens, seed=3))
    spans = _np(sample_permutation(tokens, span_based=True, seed=4))
    for features in (plain, spans):
        is_target = features["target_mapping"].sum(1)  # (batch, length)
        assert (is_target.sum(1) == length // 6).all()
    # Plain: every position a target 1/6 of the time (400 draws, sd ~ 0.019).
    frequency = plain["target_mapping"].sum(1).mean(0)
    assert np.abs(frequency - 1 / 6).max() < 0.08
    assert abs(frequency.mean() - 1 / 6) < 1e-6
    # Span-based targets come in runs (XLNet's n-grams, E[n] = 2.19 for n <= 5).
    plain_runs = np.mean([r for row in plain["target_mapping"].sum(1) for r in _runs(row)])
    span_runs = np.mean([r for row in spans["target_mapping"].sum(1) for r in _runs(row)])
    assert plain_runs < 1.35 < 1.7 < span_runs


def test_text_stream_rows_continue():
    batch, length = 3, 5
    docs = [np.arange(100 * d, 100 * d + 4 + 3 * d, dtype="int32") for d in range(12)]
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(docs), output_signature=tf.TensorSpec((None,), tf.int32)
    )
    batches = list(text_stream(dataset, length, batch, separator_id=-1).as_numpy_iterator())
    assert batches and all(b["token_ids"].shape == (batch, length) for b in batches)
    streams = [np.concatenate([np.append(d, -1) for d in docs[row::batch]])
               for row in range(batch)]
    # The streams end together, when the shortest one runs out.
    assert len(batches) == min(len(s) for s in streams) // length
    for row in range(batch):
        got = np.concatenate([b["token_ids"][row] for b in batches])
        np.testing.assert_array_equal(got, streams[row][:len(got)])
    assert all(b["padding_mask"].all() and not b["segment_ids"].any() for b in batches)

    plm = permutation_masks(text_stream(dataset, 12, 2), seed=0)
    element = next(iter(plm))
    assert element["perm_mask"].shape == (2, 12, 12)
    assert element["target_mapping"].shape == (2, 2, 12)
    np.testing.assert_array_equal(element["target_weights"].numpy(), np.ones((2, 2)))


def test_permutation_masks_on_plain_tensors():
    dataset = tf.data.Dataset.from_tensor_slices(np.arange(48, dtype="int32").reshape(4, 12))
    element = next(iter(permutation_masks(dataset, seed=0)))
    assert set(element) >= {"token_ids", "padding_mask", "segment_ids", "perm_mask",
                            "target_mapping", "target_ids", "target_weights"}
    assert element["perm_mask"].shape == (12, 12)


def test_bad_inputs():
    with pytest.raises(ValueError, match="k"):
        sample_permutation(np.arange(12), k=1)
    with pytest.raises(ValueError, match="at least 6 tokens"):
        sample_permutation(np.arange(4))
    with pytest.raises(ValueError, match="num_predict"):
        sample_permutation(np.arange(12), num_predict=13)
    with pytest.raises(ValueError, match="1-D integer token id"):
        text_stream(tf.data.Dataset.from_tensor_slices(["a b"]), 4, 2)
    with pytest.raises(ValueError, match="static length"):
        permutation_masks(
            tf.data.Dataset.from_generator(
                lambda: iter([np.arange(7)]), output_signature=tf.TensorSpec((None,), tf.int64)
            )
        )


def test_seeded_sampling_is_reproducible():
    dataset = tf.data.Dataset.from_tensor_slices(np.arange(240, dtype="int32").reshape(20, 12))

    def orders(seed, span_based=False):
        data = permutation_masks(dataset, seed=seed, span_based=span_based)
        return np.stack([e["factorization_order"] for e in data.as_numpy_iterator()])

    np.testing.assert_array_equal(orders(7), orders(7))
    np.testing.assert_array_equal(orders(7, True), orders(7, True))
    assert (orders(7) != orders(8)).any()
    assert len({tuple(row) for row in orders(7)}) == 20  # a fresh order per element
    same = sample_permutation(np.arange(12), seed=3)["factorization_order"]
    np.testing.assert_array_equal(same, sample_permutation(np.arange(12), seed=3)["factorization_order"])
