"""Smoothed language sampling, XLM text streams and TLM pairs."""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import multilingual as ml
from keras_ctx.data.masking import MLMMasker
from tests.data import xlm_masking_reference as reference


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
    masker = ml.xlm_masker(vocab, mask, eos, pad, counts, seed=3, max_predictions=48)
    ids = np.tile(np.array([eos] + [10, 11] * 20 + [pad] * 7, np.int32), (512, 1))
    batch = {"token_ids": ids, "padding_mask": (ids != pad).astype(np.int32)}
    masked = next(iter(masker.apply(tf.data.Dataset.from_tensors(batch))))
    chosen = masked["mask_ids"].numpy()[masked["mask_weights"].numpy() > 0]
    # XLM's mask_out: ceil(0.15 * 41 * 512) = 3149 targets over the batch.
    assert masked["mask_weights"].numpy().sum() == 3149
    assert not np.isin(chosen, (eos, pad)).any()
    # Uniform masking would give ~1:1; the weights give at most ~1:20 per draw.
    assert np.mean(chosen == 10) < 0.1


def _targets(out):
    rows, slots = np.nonzero(np.asarray(out["mask_weights"]) > 0)
    return rows, np.asarray(out["mask_positions"])[rows, slots]


def test_xlm_masker_draws_over_the_batch_as_mask_out():
    """XLM's `mask_out` (xlm/trainer.py @cd281d3, transcribed) draws its targets
    over the whole batch: rows of rare tokens get more of them. keras_ctx drew 15%
    of each row before issue 54 (half the targets in the rare rows here)."""
    vocab, pad, eos, mask = 400, 0, 1, 2
    counts = np.zeros(vocab)
    counts[10:200] = 10_000.0  # frequent
    counts[200:] = 25.0  # rare: weight 20 times a frequent id's
    rng = np.random.default_rng(0)
    rows = 64
    ids = np.where(np.arange(rows)[:, None] % 2 == 0, rng.integers(200, 400, (rows, 40)),
                   rng.integers(10, 200, (rows, 40))).astype(np.int32)
    ids[:, 0] = eos
    batch = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    rare_share, theirs, per_row = [], [], []
    for seed in range(20):
        out = ml.xlm_masker(vocab, mask, eos, pad, counts, seed=seed, max_predictions=40)(
            batch, tf.constant([seed, 0]))
        row, position = _targets(out)
        assert (position > 0).all()  # XLM: pred_mask[0] = 0
        rare_share.append(np.mean(row % 2 == 0))
        per_row.append(len(row))
        np.random.seed(seed)
        _, _, pred = reference.mask_out(ids.T.astype(np.int64),
                                        reference.mask_scores(counts, 0.5, pad), 0.5, pad,
                                        mask, vocab)
        theirs.append(pred[:, ::2].sum() / pred.sum())
        assert pred.sum() == len(row) == np.ceil(0.15 * rows * 40)  # 384 targets
    assert np.mean(rare_share) == pytest.approx(np.mean(theirs), rel=0.03)
    assert np.mean(theirs) > 0.8  # 20:1 weights over 1,280 rare and 1,280 frequent tokens


def test_xlm_masker_with_xlms_default_sample_alpha_0():
    """`--sample_alpha 0` (train.py's default): each position a target with
    probability 0.15, </s> included, padding and position 0 never."""
    vocab, pad, eos, mask = 64, 0, 1, 2
    rng = np.random.default_rng(1)
    ids = rng.integers(3, vocab, (256, 32)).astype(np.int32)
    ids[:, ::8] = eos
    ids[:, 28:] = pad
    out = ml.xlm_masker(vocab, mask, eos, pad, np.ones(vocab), sample_alpha=0,
                        max_predictions=28)({"token_ids": ids,
                                             "padding_mask": (ids != pad).astype(np.int32)},
                                            tf.constant([4, 4]))
    row, position = _targets(out)
    assert (position > 0).all() and (position < 28).all()
    assert len(row) / (256 * 27) == pytest.approx(0.15, abs=0.01)
    assert np.mean(ids[row, position] == eos) == pytest.approx(3 / 27, abs=0.02)


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


def _corpus():
    """The built-in corpus under XLM's own tokenizer (Moses words, lower case without
    accents, 8,000 "</w>" BPE pieces learnt on them), XLM's dictionary counts (its 14
    specials 0), and pairs of consecutive sentences as stand-in translations."""
    from keras_ctx import registry
    from keras_ctx.data import corpora, tokenizers, xlm_text

    documents = corpora.builtin_documents()
    tokenizer = registry.get("xlm").train_tokenizer(
        corpora.sample_sentences("builtin", seed=0), 8000)
    ids = tokenizers.special_token_ids(tokenizer)
    sentences = [np.asarray(s).reshape(-1).astype(np.int64)
                 for s in tokenizer.tokenize([s for d in documents for s in d]).to_list()]
    counts = np.bincount(np.concatenate(sentences), minlength=tokenizer.vocabulary_size())
    counts[:len(xlm_text.XLM_SPECIAL_TOKENS)] = 0  # dictionary.py: specials count 0
    starts = np.cumsum([0] + [len(d) for d in documents])
    pairs = [(sentences[i], sentences[i + 1]) for a, b in zip(starts[:-1], starts[1:])
             for i in range(a, b - 1)]
    return ids, counts, sentences, pairs


def _xlm_statistics(x, corrupted, pred, counts, mask_id, pad_id):
    """Masked share of the real tokens, share of targets among the 100 most frequent
    ids, mean log10 count of the targets, [MASK] share; rows of (time,) arrays."""
    targets = x[pred]
    top = np.argsort(-counts)[:100]
    return (pred.sum() / (x != pad_id).sum(), np.isin(targets, top).mean(),
            np.log10(np.maximum(counts, 1))[targets].mean(), np.mean(corrupted[pred] == mask_id))


def _ours(masker, examples, counts, ids):
    xs, news, preds = [], [], []
    for batch in masker.apply(examples.batch(32, drop_remainder=True)).as_numpy_iterator():
        rows, slots = np.nonzero(batch["mask_weights"] > 0)
        positions = batch["mask_positions"][rows, slots]
        x = batch["token_ids"].copy()
        x[rows, positions] = batch["mask_ids"][rows, slots]
        pred = np.zeros(x.shape, bool)
        pred[rows, positions] = True
        xs.append(np.where(batch["padding_mask"] > 0, x, ids["pad"]))
        news.append(batch["token_ids"])
        preds.append(pred)
    return _xlm_statistics(*(np.concatenate(a) for a in (xs, news, preds)), counts,
                           ids["mask"], ids["pad"])


def _released(batches, counts, ids, vocabulary):
    """XLM's mask_out on its own (time, batch) batches, rows padded to 256."""
    scores = reference.mask_scores(counts, 0.5, ids["pad"])
    xs, news, preds = [], [], []
    for x in batches:
        new, _, pred = reference.mask_out(x, scores, 0.5, ids["pad"], ids["mask"], vocabulary)
        for values, out, fill in ((x, xs, ids["pad"]), (new, news, ids["pad"]),
                                  (pred, preds, False)):
            out.append(np.pad(values.T, ((0, 0), (0, 256 - len(values))),
                              constant_values=fill))
    return _xlm_statistics(*(np.concatenate(a) for a in (xs, news, preds)), counts,
                           ids["mask"], ids["pad"])


def _tlm_batches(pairs, ids):
    for batch in reference.parallel_batches(pairs, 32):
        x1, l1 = reference.batch_sentences([a for a, _ in batch], ids["pad"], ids["sep"])
        x2, l2 = reference.batch_sentences([b for _, b in batch], ids["pad"], ids["sep"])
        yield reference.concat_batches(x1, l1, 0, x2, l2, 1, ids["pad"], ids["sep"])[0]


# XLM's released batches and mask_out (--sample_alpha 0.5) re-run on the built-in
# corpus under XLM's tokenizer, seeds 0-2 (docs/notes/data-references.md, XLM): masked
# share, targets among the 100 most frequent ids, mean log10 count of the targets, mask share.
RELEASED = {"stream": (0.1494, 0.1626, 1.6349, 0.8019),
            "tlm": (0.1516, 0.1716, 1.6564, 0.8016)}


@pytest.mark.slow  # the built-in corpus through Moses and its BPE, three seeds (about 60 s)
def test_xlm_streams_and_tlm_match_the_released_masking_on_our_rows():
    ids, counts, sentences, pairs = _corpus()
    vocabulary, eos, pad = len(counts), ids["sep"], ids["pad"]
    spec = tf.TensorSpec([None], tf.int64)
    streams = tf.data.Dataset.from_generator(lambda: iter(sentences), output_signature=spec)
    parallel = tf.data.Dataset.from_generator(lambda: iter(pairs), output_signature=(spec,) * 2)
    results = {"stream": [], "tlm": []}
    for seed in (0, 1, 2):
        masker = ml.xlm_masker(vocabulary, ids["mask"], eos, pad, counts, seed=seed)
        np.random.seed(seed)
        results["stream"].append((
            _released(reference.stream_batches(sentences, 256, 32, eos), counts, ids,
                      vocabulary),
            _ours(masker, ml.text_stream(streams, 256, eos, 0), counts, ids)))
        np.random.seed(seed)
        results["tlm"].append((
            _released(_tlm_batches(pairs, ids), counts, ids, vocabulary),
            _ours(masker, ml.tlm_pairs(parallel, 256, eos, pad, 0, 1, seed=seed), counts,
                  ids)))
    for name, runs in results.items():
        released, ours = np.mean(runs, axis=0)
        np.testing.assert_allclose(released, RELEASED[name], rtol=0.01)  # as recorded
        np.testing.assert_allclose(ours, released, rtol=0.03)  # issue 54: within 3%
