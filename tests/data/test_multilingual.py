"""Smoothed language sampling, XLM text streams and TLM pairs."""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import multilingual as ml
from keras_ctx.data.masking import MLMMasker


def test_smoothed_probabilities_by_hand():
    # p = (0.9, 0.1); alpha = 0.5: sqrt -> (0.9487, 0.3162), normalised (0.75, 0.25).
    np.testing.assert_allclose(ml.smoothed_probabilities([900, 100], 0.5), [0.75, 0.25])
    q = ml.smoothed_probabilities({"en": 8, "is": 1}, ml.MBERT_ALPHA)
    want = np.array([8 / 9, 1 / 9]) ** 0.7
    np.testing.assert_allclose([q["en"], q["is"]], want / want.sum())
    np.testing.assert_allclose(ml.smoothed_probabilities([3, 1], 0.0), [0.5, 0.5])
    assert ml.MBERT_ALPHA == 0.7 and ml.XLM_ALPHA == 0.5
    with pytest.raises(ValueError, match="positive counts"):
        ml.smoothed_probabilities([3, 0], 0.5)
    with pytest.raises(ValueError, match="alpha"):
        ml.smoothed_probabilities([3, 1], 1.5)


def test_sample_languages_follows_q():
    datasets = {"en": tf.data.Dataset.from_tensors(0), "sw": tf.data.Dataset.from_tensors(1)}
    mixed = ml.sample_languages(datasets, {"en": 900, "sw": 100}, alpha=0.5, seed=1)
    draws = np.array(list(mixed.take(4000).as_numpy_iterator()))
    assert abs(draws.mean() - 0.25) < 0.03  # q_sw = 0.25 (vs p_sw = 0.1 unsmoothed)
    with pytest.raises(ValueError, match="same languages"):
        ml.sample_languages(datasets, {"en": 1}, alpha=0.5)


def test_text_stream_opens_sentences_with_eos_and_cuts_windows():
    sentences = tf.data.Dataset.from_generator(
        lambda: iter([[5, 6], [7, 8, 9], [10]]), output_signature=tf.TensorSpec([None], tf.int32))
    windows = list(ml.text_stream(sentences, 4, eos_id=1, language_id=3).as_numpy_iterator())
    # </s> 5 6 </s> | 7 8 9 </s> | 10 (dropped: partial)
    assert [w["token_ids"].tolist() for w in windows] == [[1, 5, 6, 1], [7, 8, 9, 1]]
    assert all(w["language_ids"].tolist() == [3] * 4 for w in windows)
    assert windows[0]["position_ids"].tolist() == [0, 1, 2, 3]


def test_tlm_pair_layout_and_masking_on_both_sides():
    pairs = tf.data.Dataset.from_tensor_slices(([[5, 6, 7]] * 64, [[20, 21, 22]] * 64))
    examples = ml.tlm_pairs(pairs, 12, eos_id=1, pad_id=0, source_language=0,
                            target_language=1, swap=False)
    first = next(examples.as_numpy_iterator())
    assert first["token_ids"].tolist() == [1, 5, 6, 7, 1, 1, 20, 21, 22, 1, 0, 0]
    assert first["position_ids"].tolist()[:10] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert first["language_ids"].tolist()[:10] == [0] * 5 + [1] * 5
    assert first["padding_mask"].tolist() == [1] * 10 + [0, 0]
    masker = MLMMasker(30, mask_token_id=2, special_token_ids=(0, 1), seed=0)
    batch = next(masker.apply(examples.batch(64)).as_numpy_iterator())
    positions = batch["mask_positions"][batch["mask_weights"] > 0]
    assert (positions < 5).any() and (positions >= 5).any()  # both sides masked
    originals = batch["mask_ids"][batch["mask_weights"] > 0]
    assert not np.isin(originals, [0, 1]).any()
    swapped = ml.tlm_pairs(pairs, 12, 1, 0, 0, 1, swap=True, seed=3)
    starts = [e["token_ids"][1] for e in swapped.as_numpy_iterator()]
    assert 10 < sum(s == 20 for s in starts) < 54  # both directions, about half each


def test_tlm_truncates_each_side():
    example = ml.tlm_example(np.arange(10, 20), np.arange(30, 40), 10, 1, 0, 0, 1)
    # (10 - 4) // 2 = 3 tokens per side.
    assert example["token_ids"].numpy().tolist() == [1, 10, 11, 12, 1, 1, 30, 31, 32, 1]
    with pytest.raises(ValueError, match="no room"):
        ml.tlm_example([1], [2], 5, 1, 0, 0, 1)


def test_xlm_masker_masks_rare_tokens_more_and_never_eos_or_pad():
    # Lample & Conneau 2019, Sec. 3.3: weights proportional to 1/sqrt(frequency).
    vocab, pad, eos, mask = 64, 2, 1, 5
    counts = np.ones(vocab)
    counts[10] = 400.0  # weight 1/20 of the others'
    masker = ml.xlm_masker(vocab, mask, eos, pad, counts, seed=3)
    ids = np.tile(np.array([eos] + [10, 11] * 20 + [pad] * 7, np.int32), (512, 1))
    batch = {"token_ids": ids, "padding_mask": (ids != pad).astype(np.int32)}
    masked = next(iter(masker.apply(tf.data.Dataset.from_tensors(batch))))
    chosen = masked["mask_ids"].numpy()[masked["mask_weights"].numpy() > 0]
    assert np.all(masked["mask_weights"].numpy().sum(axis=1) == 6)  # round(0.15 * 40)
    assert not np.isin(chosen, (eos, pad)).any()
    # Uniform masking would give ~1:1; the weights give at most ~1:20 per draw.
    assert np.mean(chosen == 10) < 0.1


def test_tlm_pairs_leave_out_long_and_empty_pairs():
    # XLM's loader removes a pair with an empty side or a side over max_len
    # (remove_empty_sentences, remove_long_sentences); truncating one side would
    # leave a pair that no longer translates.
    sides = [([5] * 3, [6] * 3), ([5] * 4, [6] * 9), ([5] * 8, [6] * 2), ([], [6] * 2),
             ([5] * 4, [6] * 4)]
    pairs = tf.data.Dataset.from_generator(
        lambda: iter(sides), output_signature=(tf.TensorSpec([None], tf.int32),) * 2)
    kept = list(ml.tlm_pairs(pairs, 20, 1, 0, 0, 1, swap=False).as_numpy_iterator())
    # (20 - 4) // 2 = 8 tokens a side: the 9-token side and the empty side go.
    assert [int(e["padding_mask"].sum()) for e in kept] == [10, 14, 12]
    kept = list(ml.tlm_pairs(pairs, 20, 1, 0, 0, 1, swap=False, max_length=3)
                .as_numpy_iterator())
    assert [int(e["padding_mask"].sum()) for e in kept] == [10]
