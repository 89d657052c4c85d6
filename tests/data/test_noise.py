import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import noise


def merge_span_corruption(inputs, targets, first_sentinel_id, eos_id):
    """Independent reconstruction: each sentinel in the inputs is replaced by the
    target tokens after the same sentinel."""
    inputs, targets = list(inputs), list(targets)
    assert inputs[-1] == eos_id and targets[-1] == eos_id
    spans, current = {}, None
    for token in targets[:-1]:
        if token > first_sentinel_id - 100:
            current = token
            spans[current] = []
        else:
            spans[current].append(token)
    out = []
    for token in inputs[:-1]:
        out.extend(spans[token] if token in spans else [token])
    return out


def test_random_spans_noise_mask_follows_t5_statistics():
    tf.random.set_seed(0)
    lengths = []
    for _ in range(200):
        mask = noise.random_spans_noise_mask(114, 0.15, 3.0).numpy()
        assert mask.sum() == round(114 * 0.15)  # exactly 17 noise tokens
        assert not mask[0]  # T5 starts with a non-noise span
        starts = np.flatnonzero(mask & ~np.pad(mask[:-1], (1, 0)))
        assert len(starts) == round(17 / 3.0)  # 6 spans
        ends = np.flatnonzero(mask & ~np.pad(mask[1:], (0, 1), constant_values=False))
        lengths.extend(ends - starts + 1)
    assert min(lengths) >= 1
    np.testing.assert_allclose(np.mean(lengths), 17 / 6, rtol=1e-6)


def test_span_corruption_inputs_and_targets_reconstruct_the_original_exactly():
    tf.random.set_seed(1)
    rng = np.random.default_rng(0)
    for length in (10, 57, 128):
        original = rng.integers(3, 1000, size=length).astype("int32")
        out = noise.span_corruption(original, first_sentinel_id=32099, eos_id=1)
        inputs, targets = out["inputs"].numpy(), out["targets"].numpy()
        assert (len(inputs), len(targets)) == noise.span_corruption_lengths(length)
        assert merge_span_corruption(inputs, targets, 32099, 1) == list(original)
        sentinels = [t for t in inputs if t >= 32000]
        assert sentinels == list(range(32099, 32099 - len(sentinels), -1))
        # Targets have the same sentinels, plus one closing the last span when the
        # sequence ends with non-noise (T5's format).
        assert [t for t in targets if t >= 32000][:len(sentinels)] == sentinels


def test_span_corruption_hand_computed_case():
    mask = tf.constant(np.array([0, 1, 1, 0, 0, 1, 0], bool))
    out = noise.span_corruption(tf.constant([10, 11, 12, 13, 14, 15, 16]), noise_mask=mask,
                                first_sentinel_id=99)
    np.testing.assert_array_equal(out["inputs"], [10, 99, 13, 14, 98, 16])
    # As in T5: "10 <X> 13 14 <Y> 16" -> "<X> 11 12 <Y> 15 <Z>".
    np.testing.assert_array_equal(out["targets"], [99, 11, 12, 98, 15, 97])


def test_text_infilling_span_lengths_are_poisson_3_and_text_is_recoverable():
    tf.random.set_seed(2)
    rng = np.random.default_rng(1)
    all_lengths = []
    for _ in range(150):
        original = rng.integers(10, 100, size=200).astype("int32")
        noised, lengths = noise.text_infilling(original, mask_id=4, rate=0.3,
                                               return_span_lengths=True)
        noised, lengths = noised.numpy(), lengths.numpy()
        assert lengths.sum() == math.ceil(200 * 0.3)  # exactly 60 tokens masked
        assert (noised == 4).sum() == len(lengths)  # one mask per span, 0-length ones too
        # Recover: each mask consumes its span's tokens of the original, in order.
        rebuilt, position, span = [], 0, 0
        for token in noised:
            if token == 4:
                rebuilt.extend([None] * lengths[span])
                position += lengths[span]
                span += 1
            else:
                assert token == original[position]
                rebuilt.append(token)
                position += 1
        assert position == 200 and len(rebuilt) == 200
        all_lengths.extend(lengths[:-1])  # the last span is cut to fit
    all_lengths = np.array(all_lengths)
    assert abs(all_lengths.mean() - 3.0) < 0.15  # Poisson(3): mean 3, variance 3
    assert abs(all_lengths.var() - 3.0) < 0.5
    assert abs((all_lengths == 0).mean() - math.exp(-3)) < 0.02  # zero-length inserts


def test_text_infilling_in_whole_words():
    # fairseq denoising_dataset.py (span-poisson with mask_whole_words): the budget is
    # ceil(0.3 * words) words, every span whole words; each mask consumes its span's
    # words of the original, in order.
    tf.random.set_seed(4)
    rng = np.random.default_rng(5)
    for _ in range(40):
        sizes = rng.integers(1, 4, size=60)  # 60 words of 1-3 tokens
        original = np.arange(10, 10 + sizes.sum()).astype("int32")
        starts = np.zeros(len(original), bool)
        starts[np.cumsum(sizes) - sizes] = True
        words = np.split(original, np.cumsum(sizes)[:-1])
        noised, lengths = noise.text_infilling(original, mask_id=4, rate=0.3,
                                               return_span_lengths=True, word_starts=starts)
        noised, lengths = noised.numpy(), lengths.numpy()
        assert lengths.sum() == math.ceil(60 * 0.3)  # 18 words
        assert (noised == 4).sum() == len(lengths)
        word, span, i = 0, 0, 0
        while i < len(noised):
            if noised[i] == 4:
                word += lengths[span]
                span += 1
                i += 1
            else:  # a kept word, all its tokens
                np.testing.assert_array_equal(noised[i:i + len(words[word])], words[word])
                i += len(words[word])
                word += 1
        assert word == 60 and span == len(lengths)


@pytest.mark.slow  # a byte-level BPE and the recipe's graph (~20 s on 2 cores); by
# default test_text_infilling_in_whole_words checks the word units themselves
def test_bart_recipe_masks_whole_words():
    # The BART family's examples: every <mask> stands for whole words of its byte-level
    # BPE ("Ġ" starts a word), so the token after a mask starts a word (or is </s>).
    from keras_ctx import registry
    from keras_ctx.data import pipelines, tokenizers

    text = ["Unbelievably, the reconfiguration of extraordinarily long words continued."] * 30
    tokenizer = registry.get("bart").train_tokenizer(text, 300)
    starts = ~tokenizers.continuation_table(tokenizer)
    ids = tokenizers.tokenize_documents(tf.data.Dataset.from_tensors(tf.constant(text[:4])),
                                        tokenizer)
    stream = next(iter(ids)).flat_values.numpy()
    example = pipelines.denoising_example(tokenizer, 64)
    mask, eos = tokenizer.token_to_id("<mask>"), tokenizer.token_to_id("</s>")
    tf.random.set_seed(0)
    after = []
    for x, _, _ in tf.data.Dataset.from_tensors(stream[:62]).repeat(30).map(example):
        inputs = x["encoder_token_ids"].numpy()
        after += [t for m, t in zip(inputs[:-1], inputs[1:]) if m == mask and t != mask]
    assert after and all(starts[t] or t == eos for t in after)


def test_token_masking_and_deletion_rates_keep_the_rest_in_order():
    tf.random.set_seed(3)
    original = np.arange(10, 20010, dtype="int32")
    masked = noise.token_masking(original, mask_id=4, rate=0.15).numpy()
    assert abs((masked == 4).mean() - 0.15) < 0.01
    np.testing.assert_array_equal(masked[masked != 4], original[masked != 4])
    deleted = noise.token_deletion(original, rate=0.15).numpy()
    assert abs(1 - len(deleted) / len(original) - 0.15) < 0.01
    assert np.isin(deleted, original).all() and (np.diff(deleted) > 0).all()  # a subsequence


def test_sentence_permutation_and_document_rotation():
    tf.random.set_seed(4)
    document = np.array([5, 6, 2, 7, 2, 8, 9, 10, 2, 11, 12], "int32")  # 2 = full stop
    sentences = [[5, 6, 2], [7, 2], [8, 9, 10, 2], [11, 12]]
    concatenations = {tuple(np.concatenate(order))
                      for order in itertools.permutations(sentences)}
    orders = set()
    for _ in range(30):
        permuted = tuple(noise.sentence_permutation(document, sentence_end_id=2).numpy())
        assert permuted in concatenations  # whole sentences, reordered
        orders.add(permuted)
        rotated = noise.document_rotation(document).numpy()
        assert any((np.roll(document, -k) == rotated).all() for k in range(len(document)))
    assert len(orders) > 5


def test_composed_noise_and_seq2seq_features_under_tf_data():
    tf.random.set_seed(5)
    fn = noise.compose(lambda ids: noise.text_infilling(ids, mask_id=4),
                       noise.document_rotation)
    docs = tf.data.Dataset.from_tensor_slices(np.arange(400, dtype="int32").reshape(4, 100) + 10)
    ds = docs.map(noise.bart_noise(fn)).map(
        lambda e: noise.seq2seq_features(e, encoder_length=110, decoder_length=100,
                                         decoder_start_id=2))
    for (x, labels, weights), original in zip(ds, docs):
        np.testing.assert_array_equal(labels, original)  # the target is the document
        assert weights.numpy().sum() == 100
        np.testing.assert_array_equal(x["decoder_token_ids"][1:], original[:-1])
        assert x["decoder_token_ids"][0] == 2
        enc = x["encoder_token_ids"].numpy()[x["encoder_padding_mask"].numpy() > 0]
        assert (enc == 4).sum() >= 1 and len(enc) < 100
    too_long = tf.data.Dataset.from_tensors({"inputs": tf.range(20), "targets": tf.range(5)})
    with pytest.raises(tf.errors.InvalidArgumentError, match="nothing is truncated"):
        list(too_long.map(lambda e: noise.seq2seq_features(e, 10, 10, 2)))


def test_t5_chunks_fill_the_encoder_as_random_spans_helper():
    # t5/data/preprocessors.py random_spans_helper: 568 tokens make 512 inputs and 114
    # targets (noise density 0.15, mean span 3, a sentinel per span, EOS).
    assert noise.span_corruption_tokens_length(512) == 568
    assert noise.span_corruption_lengths(568) == (512, 114)
    for length in (32, 64, 100, 128, 256):
        tokens = noise.span_corruption_tokens_length(length)
        assert noise.span_corruption_lengths(tokens)[0] <= length
        assert noise.span_corruption_lengths(tokens + 1)[0] > length
        # The masks drawn agree with the sizing (70 * 0.15 is a tie in float32 too).
        for seed in range(3):
            tf.random.set_seed(seed)
            out = noise.span_corruption(tf.range(10, 10 + tokens), eos_id=1)
            assert (len(out["inputs"]), len(out["targets"])) == noise.span_corruption_lengths(
                tokens)
