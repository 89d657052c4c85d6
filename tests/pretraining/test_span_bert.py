import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import pipelines, span_masking
from keras_ctx.models import BertBackbone
from keras_ctx.pretraining import SpanBertPretrainer
from keras_ctx.pretraining.masked_lm import backbone_inputs
from tests.backends import first_batch
from tests.pretraining import synthetic as syn

MASK_ID, SPECIALS, VOCAB = 4, (0, 1, 2, 3, 4), 300


def _geometric_reference(p=0.2, max_length=10):
    # Joshi et al. 2020: Geo(0.2) on 1..10 (renormalised), mean 3.8 words.
    lengths = np.arange(1, max_length + 1)
    pmf = p * (1 - p) ** (lengths - 1)
    return pmf / pmf.sum()


def test_span_length_sampler_matches_the_clipped_geometric():
    reference = _geometric_reference()
    assert abs((reference * np.arange(1, 11)).sum() - 3.8) < 0.01
    samples = span_masking.sample_span_lengths((50000,), tf.constant([3, 4])).numpy()
    assert samples.min() >= 1 and samples.max() <= 10
    frequencies = np.bincount(samples, minlength=11)[1:] / len(samples)
    errors = 4 * np.sqrt(reference * (1 - reference) / len(samples))
    assert (np.abs(frequencies - reference) < errors).all()
    assert abs(samples.mean() - 3.8) < 0.05


def _sequences(batch, length, seed=0, word_pieces=True):
    """Random ids; ids >= 200 are word-continuation pieces ("##x")."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, 200, size=(batch, length)).astype("int32")
    if word_pieces:
        continuing = rng.random((batch, length)) < 0.3
        ids = np.where(continuing, ids + 100, ids).astype("int32")
    lengths = rng.integers(length // 2, length + 1, size=batch)
    padding = (np.arange(length)[None] < lengths[:, None]).astype("int32")
    ids[:, 0] = 2
    ids[np.arange(batch), lengths - 1] = 3
    ids[padding == 0] = 0
    ids[:, 1] = np.minimum(ids[:, 1], 199)  # the first word starts after [CLS]
    return ids, padding


def _span_mask(ids, padding, seed=0):
    continuation = np.arange(VOCAB) >= 200
    masker = span_masking.SpanMasker(VOCAB, MASK_ID, continuation, special_token_ids=SPECIALS,
                                     seed=seed)
    dataset = tf.data.Dataset.from_tensor_slices(
        {"token_ids": ids, "padding_mask": padding}).batch(len(ids), drop_remainder=True)
    return next(masker.apply(dataset).as_numpy_iterator()), continuation


def test_span_masks_whole_words_budget_and_per_span_corruption():
    ids, padding = _sequences(128, 96)
    out, continuation = _span_mask(ids, padding)
    candidates = (padding == 1) & ~np.isin(ids, SPECIALS)
    selected = np.zeros_like(ids, bool)
    for b in range(len(ids)):
        positions = out["mask_positions"][b][out["mask_weights"][b] > 0]
        selected[b, positions] = True
    assert not (selected & ~candidates).any()
    # 15% of the tokens (+- 1%); whole words only, so a few rows fall short.
    rate = selected.sum() / candidates.sum()
    assert abs(rate - 0.15) < 0.01, rate
    # Whole words: a continuation piece is selected iff the piece before it is.
    is_continuation = continuation[ids] & candidates
    previous = np.roll(selected, 1, axis=1)
    assert (selected[is_continuation] == previous[is_continuation]).all()
    # Per-span 80/10/10 and SBO targets.
    actions, mixed = [], 0
    for b in range(len(ids)):
        w = out["mask_weights"][b] > 0
        positions = out["mask_positions"][b][w]
        left = out["span_left_positions"][b][w]
        right = out["span_right_positions"][b][w]
        offsets = out["span_offsets"][b][w]
        np.testing.assert_array_equal(positions, left + 1 + offsets)
        assert (out["mask_ids"][b][w] == ids[b, positions]).all()
        for s in np.unique(left):
            span = positions[left == s]
            end = right[left == s][0] - 1
            np.testing.assert_array_equal(span, np.arange(s + 1, end + 1))
            new, old = out["token_ids"][b, span], ids[b, span]
            if (new == MASK_ID).all():
                actions.append(0)
            elif (new == old).all():
                actions.append(2)
            else:
                # Random replacements may draw [MASK] itself (1 id in 300) but
                # a span is never part-masked by the 80% branch.
                mixed += (new == MASK_ID).mean() > 0.5
                actions.append(1)
    actions = np.array(actions)
    assert mixed == 0
    n = len(actions)
    assert abs((actions == 0).mean() - 0.8) < 4 * np.sqrt(0.16 / n)
    assert abs((actions == 2).mean() - 0.1) < 4 * np.sqrt(0.09 / n) + 0.02


def test_made_span_lengths_follow_the_clipped_geometric():
    ids, padding = _sequences(96, 256, seed=1, word_pieces=False)
    padding[:] = 1
    ids[:, 1:-1] = np.minimum(np.maximum(ids[:, 1:-1], 10), 199)
    ids[:, -1] = 3
    out, _ = _span_mask(ids, padding, seed=2)
    lengths = []
    for row in out["span_word_lengths"]:
        made = row[row > 0]
        lengths.extend(made[:-1])  # the last span is the one the budget may cut
    lengths = np.array(lengths)
    reference = _geometric_reference()
    mean, std = (reference * np.arange(1, 11)).sum(), 2.6
    assert abs(lengths.mean() - mean) < 4 * std / np.sqrt(len(lengths)), lengths.mean()
    assert lengths.max() <= 10


def test_dynamic_span_masks_differ_between_epochs():
    ids, padding = _sequences(8, 48)
    masker = span_masking.SpanMasker(VOCAB, MASK_ID, np.arange(VOCAB) >= 200,
                                     special_token_ids=SPECIALS)
    dataset = masker.apply(tf.data.Dataset.from_tensor_slices(
        {"token_ids": ids, "padding_mask": padding}).batch(8, drop_remainder=True)).repeat(2)
    first, second = list(dataset.as_numpy_iterator())
    assert (first["mask_positions"] != second["mask_positions"]).any()


def test_bad_continuation_table():
    with pytest.raises(ValueError, match="continuation_table"):
        span_masking.span_mask_example(np.ones(8, "int32"), [0, 0], 10, 4, np.zeros(5, bool))


def _spanbert_data(batch_size=32, count=150):
    return pipelines.spanbert_dataset(
        syn.dataset(syn.documents(count)), None, batch_size, sequence_length=32,
        special_ids=syn.SPECIAL, vocabulary_size=syn.VOCABULARY_SIZE,
        word_continuations=np.zeros(syn.VOCABULARY_SIZE, bool))


def _two_layer_bert():
    return BertBackbone(vocabulary_size=syn.VOCABULARY_SIZE, num_layers=2, num_heads=2,
                        hidden_size=64, intermediate_size=128, max_sequence_length=32,
                        dropout=0.0)


def test_spanbert_pretrainer_heads_are_tied_and_read_the_boundaries():
    batch = first_batch(_spanbert_data(batch_size=4, count=40))
    backbone = _two_layer_bert()
    model = SpanBertPretrainer(backbone)
    out = keras.tree.map_structure(keras.ops.convert_to_numpy, model(batch))
    p = batch["mask_positions"].shape[1]
    assert out["mlm"].shape == out["sbo"].shape == (4, p, syn.VOCABULARY_SIZE)
    assert model.sbo_head.token_embedding.embeddings is backbone.token_embedding.embeddings
    assert model.mlm_head.token_embedding.embeddings is backbone.token_embedding.embeddings
    assert not any("output_kernel" in w.path for w in model.weights)
    # The heads over the full sequence output give what the model (whose last
    # layer runs on the masked and boundary rows only) gives.
    assert model.sparse_last_layer and backbone.supports_sequence_output_at
    sequence = backbone(backbone_inputs(backbone, batch))["sequence_output"]
    again = model.sbo_head(sequence, batch["span_left_positions"],
                           batch["span_right_positions"], batch["span_offsets"])
    np.testing.assert_allclose(out["sbo"], keras.ops.convert_to_numpy(again), atol=1e-5)
    np.testing.assert_allclose(out["mlm"], keras.ops.convert_to_numpy(
        model.mlm_head(sequence, batch["mask_positions"])), atol=1e-5)
    # SBO logits depend on the boundary tokens, not on the masked tokens themselves.
    moved = dict(batch, span_left_positions=batch["span_left_positions"] * 0)
    changed = keras.ops.convert_to_numpy(model(moved)["sbo"])
    used = batch["mask_weights"] > 0
    rows = (batch["span_left_positions"] != 0) & used
    assert rows.any() and not np.allclose(changed[rows], out["sbo"][rows])


@pytest.mark.slow  # ~25 s, most of it tracing and XLA compilation
def test_spanbert_pretrainer_learns_under_xla():
    data = _spanbert_data().cache()
    model = SpanBertPretrainer(_two_layer_bert())
    model.compile(optimizer=keras.optimizers.Adam(2e-3), jit_compile=True)
    history = model.fit(data.repeat(), steps_per_epoch=25, epochs=3, verbose=0).history
    assert history["sbo_loss"][-1] < 0.75 * history["sbo_loss"][0], history
    assert history["loss"][-1] < history["loss"][0]
    # Chance is 1/105; the boundaries and the offset give the number away.
    assert history["sbo_accuracy"][-1] > 0.3, history


def test_span_budget_is_spanberts_ceil_of_the_block():
    # facebookresearch/SpanBERT masking.py: mask_num = math.ceil(len(sentence) * 0.15)
    # over the block without [CLS]/[SEP] (20 tokens -> 4: 20 * 0.15 is 3.0000000000000004).
    import math

    from keras_ctx.data.span_masking import span_mask_example

    table = np.zeros(100, bool)  # one-token words, spans of one word (p=1): always placed
    for n in range(1, 61):
        ids = np.zeros(64, "int32")
        ids[0], ids[1:n + 1], ids[n + 1] = 2, 10 + np.arange(n) % 80, 3
        out = span_mask_example(tf.constant(ids), tf.constant([n, 1]), 100, 4, table,
                                padding_mask=tf.constant((ids != 0).astype("int32")),
                                special_token_ids=(0, 1, 2, 3), p=1.0)
        assert int(np.asarray(out["mask_weights"]).sum()) == math.ceil(n * 0.15), n
