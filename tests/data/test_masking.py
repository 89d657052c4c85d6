import inspect

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import masking

SPECIALS = (0, 1, 2, 3)  # pad, unk-like, cls, sep
MASK_ID = 4
VOCAB = 1000


def _batch(batch=64, length=128, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, VOCAB, size=(batch, length)).astype("int32")
    lengths = rng.integers(16, length + 1, size=batch)
    padding = (np.arange(length)[None] < lengths[:, None]).astype("int32")
    ids[:, 0] = 2
    ids[np.arange(batch), lengths - 1] = 3
    ids[padding == 0] = 0
    return ids, padding


def _mask(ids, padding, seed=(1, 2)):
    out = masking.mask_tokens(ids, tf.constant(seed), VOCAB, MASK_ID, padding_mask=padding,
                              special_token_ids=SPECIALS)
    return {k: v.numpy() for k, v in out.items()}


def test_selection_rate_split_and_never_special_or_padding():
    ids, padding = _batch(batch=256)
    out = _mask(ids, padding)
    candidates = (padding == 1) & ~np.isin(ids, SPECIALS)
    weights = out["mask_weights"]
    selected = np.zeros_like(ids, bool)
    for b in range(len(ids)):
        positions = out["mask_positions"][b][weights[b] > 0]
        assert len(set(positions)) == len(positions)
        selected[b, positions] = True
        # create_pretraining_data.py: round(15% of the real tokens, [CLS] and [SEP]
        # counted) per sequence, at least one, in increasing order.
        assert len(positions) == max(1, round(0.15 * padding[b].sum()))
        assert (np.diff(positions) > 0).all()
    assert not (selected & ~candidates).any(), "selected a special or padding token"
    rate = selected.sum() / padding.sum()
    assert abs(rate - 0.15) < 0.01
    # Outside the selection nothing changes.
    np.testing.assert_array_equal(out["token_ids"][~selected], ids[~selected])
    # 80 / 10 / 10 among the selected.
    new, old = out["token_ids"][selected], ids[selected]
    n = selected.sum()
    masked = (new == MASK_ID).mean()
    unchanged = (new == old).mean()
    randomised = ((new != MASK_ID) & (new != old)).mean()
    tolerance = 4 * np.sqrt(0.1 * 0.9 / n)  # 4 standard errors
    assert abs(masked - 0.8) < 4 * np.sqrt(0.16 / n)
    assert abs(unchanged - 0.1) < tolerance + 1.0 / VOCAB
    assert abs(randomised - 0.1) < tolerance
    # Labels are the original ids, only where weighted; empty slots are 0.
    labels = np.take_along_axis(ids, out["mask_positions"], axis=1)
    np.testing.assert_array_equal(out["mask_ids"][weights > 0], labels[weights > 0])
    assert (out["mask_ids"][weights == 0] == 0).all()
    assert (out["mask_positions"][weights == 0] == 0).all()


def test_same_seed_same_masks_and_different_seed_different_masks():
    ids, padding = _batch(batch=8)
    a, b, c = _mask(ids, padding, (5, 5)), _mask(ids, padding, (5, 5)), _mask(ids, padding, (6, 5))
    np.testing.assert_array_equal(a["token_ids"], b["token_ids"])
    assert (a["mask_positions"] != c["mask_positions"]).any()


@pytest.mark.parametrize("weighted", [False, True])
def test_compiles_with_xla(weighted):
    ids, padding = _batch(batch=4, length=32)
    weights = _weighted_vocab()[1] if weighted else None
    fn = tf.function(lambda i, p, s: masking.mask_tokens(
        i, s, VOCAB, MASK_ID, padding_mask=p, special_token_ids=SPECIALS,
        token_weights=weights), jit_compile=True)
    out = {k: v.numpy() for k, v in fn(ids, padding, tf.constant([3, 4])).items()}
    # (XLA's random bits may differ from the eager kernels'; the recipe may not.)
    candidates = (padding == 1) & ~np.isin(ids, SPECIALS)
    for b in range(len(ids)):
        positions = out["mask_positions"][b][out["mask_weights"][b] > 0]
        assert len(set(positions)) == max(1, round(0.15 * padding[b].sum()))
        assert candidates[b, positions].all()


def _epochs(masker, dataset, epochs=2):
    stream = list(masker.apply(dataset).repeat(epochs).as_numpy_iterator())
    per_epoch = len(stream) // epochs
    return stream[:per_epoch], stream[per_epoch:]


def test_dynamic_masks_differ_between_epochs_static_masks_do_not():
    ids, padding = _batch(batch=32, length=64)
    dataset = tf.data.Dataset.from_tensor_slices(
        {"token_ids": ids, "padding_mask": padding}).batch(8, drop_remainder=True)
    dynamic = masking.MLMMasker(VOCAB, MASK_ID, SPECIALS, dynamic=True, seed=3)
    first, second = _epochs(dynamic, dataset)
    assert all((a["mask_positions"] != b["mask_positions"]).any()
               for a, b in zip(first, second))
    static = masking.MLMMasker(VOCAB, MASK_ID, SPECIALS, dynamic=False, seed=3)
    first, second = _epochs(static, dataset)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a["token_ids"], b["token_ids"])
    # Same seed, same stream across two fresh pipelines (reproducible).
    again, _ = _epochs(static, dataset)
    np.testing.assert_array_equal(first[0]["mask_positions"], again[0]["mask_positions"])


def test_bad_arguments():
    with pytest.raises(ValueError, match="vocabulary"):
        masking.MLMMasker(10, 12)
    with pytest.raises(ValueError, match="mask_rate"):
        masking.mask_tokens(np.ones((1, 4), "int32"), [0, 0], 10, 4, mask_rate=1.5)


def test_inverse_frequency_weights_by_hand():
    np.testing.assert_allclose(masking.inverse_frequency_weights([0, 1, 4, 100]),
                               [1.0, 1.0, 0.5, 0.1], rtol=1e-6)
    with pytest.raises(ValueError, match="counts"):
        masking.inverse_frequency_weights([[1, 2]])


def _weighted_vocab():
    # ids 10..19 with counts 1, 4, 9, ..., 100 -> weights 1/sqrt(count) = 1, 1/2, ..., 1/10.
    counts = np.full(VOCAB, 50.0)
    counts[10:20] = np.arange(1, 11) ** 2
    return counts, masking.inverse_frequency_weights(counts)


def test_weighted_selection_matches_successive_multinomial_draws():
    # Rows of the 10 ids 10..19: round(0.15 * 10) = 2 draws without replacement,
    # P(i chosen) = p_i + sum_{j != i} p_j p_i / (1 - p_j) (XLM's np.random.choice).
    _, weights = _weighted_vocab()
    rows = 20000
    ids = np.tile(np.arange(10, 20, dtype="int32"), (rows, 1))
    out = masking.mask_tokens(ids, tf.constant([3, 4]), VOCAB, MASK_ID,
                              token_weights=weights)
    used = out["mask_weights"].numpy()
    assert np.all(used.sum(axis=1) == 2)  # the 15% budget is kept
    chosen = out["mask_ids"].numpy()[used > 0]
    observed = np.bincount(chosen - 10, minlength=10)
    p = weights[10:20].astype(np.float64) / weights[10:20].sum(dtype=np.float64)
    inclusion = p + p * np.array([sum(p[j] / (1 - p[j]) for j in range(10) if j != i)
                                  for i in range(10)])
    np.testing.assert_allclose(inclusion.sum(), 2.0, rtol=1e-9)
    expected = inclusion * rows
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < 30, (chi2, observed, expected)  # chi2(9) 99.9% point is 27.9


def test_weighted_selection_prefers_rare_tokens_and_keeps_budget():
    counts = np.full(VOCAB, 1.0)
    counts[500] = 10000.0  # frequent: weight 0.01 vs 1 for the others
    weights = masking.inverse_frequency_weights(counts)
    ids, padding = _batch(batch=256)
    ids = np.where((padding == 1) & (np.arange(ids.shape[1]) % 2 == 0) & (ids > 3), 500, ids)
    out = masking.mask_tokens(ids, tf.constant([5, 6]), VOCAB, MASK_ID, padding_mask=padding,
                              special_token_ids=SPECIALS, token_weights=weights)
    out = {k: v.numpy() for k, v in out.items()}
    np.testing.assert_array_equal(out["mask_weights"].sum(axis=1),
                                  np.maximum(1, np.round(0.15 * padding.sum(axis=1))))
    chosen = out["mask_ids"][out["mask_weights"] > 0]
    assert not np.isin(chosen, SPECIALS).any()
    frequent_share = np.mean(chosen == 500)
    # About half of the candidates are id 500; uniform masking would pick ~50% of them.
    assert frequent_share < 0.03, frequent_share


def test_token_weights_are_checked():
    with pytest.raises(ValueError, match="one weight per vocabulary id"):
        masking.MLMMasker(VOCAB, MASK_ID, token_weights=np.ones(VOCAB - 1))
    bad = np.ones(VOCAB)
    bad[7] = 0.0
    with pytest.raises(ValueError, match="positive"):
        masking.MLMMasker(VOCAB, MASK_ID, token_weights=bad)


def test_electra_rates_mask_85_percent_and_never_replace_at_random():
    # google-research/electra pretrain_helpers.mask: 85% [MASK], 15% unchanged.
    ids, padding = _batch(batch=256)
    out = masking.mask_tokens(ids, tf.constant([7, 8]), VOCAB, MASK_ID, padding_mask=padding,
                              special_token_ids=SPECIALS,
                              mask_token_rate=masking.ELECTRA_MASK_TOKEN_RATE,
                              random_token_rate=masking.ELECTRA_RANDOM_TOKEN_RATE)
    out = {k: v.numpy() for k, v in out.items()}
    used = out["mask_weights"] > 0
    new = np.take_along_axis(out["token_ids"], out["mask_positions"], 1)[used]
    old = out["mask_ids"][used]
    n = used.sum()
    assert abs(np.mean(new == MASK_ID) - 0.85) < 4 * np.sqrt(0.85 * 0.15 / n)
    np.testing.assert_array_equal(new[new != MASK_ID], old[new != MASK_ID])  # no random ids
    assert abs(np.mean(new == old) - 0.15) < 4 * np.sqrt(0.85 * 0.15 / n)


def test_recipes_pass_their_papers_masking():
    from keras_ctx import families
    from keras_ctx.data import pipelines

    electra = families.get("electra").dataset
    assert electra.builder is pipelines.roberta_dataset
    assert electra.options["mask_token_rate"] == 0.85
    assert electra.options["random_token_rate"] == 0.0
    # ALBERT's recipe keeps albert_dataset's defaults: whole-word n-grams, n <= 3.
    albert = families.get("albert").dataset
    assert albert.builder is pipelines.albert_dataset
    assert not {"max_ngram", "whole_word_masking"} & set(albert.options)
    defaults = inspect.signature(pipelines.albert_dataset).parameters
    assert defaults["max_ngram"].default == 3 and defaults["whole_word_masking"].default


def _nsp_documents(count=40):
    # Documents of two sentences: with short_seq_prob=0 each pass makes one
    # instance per document whose segment A is the first sentence.
    return [[[10 + 2 * d, 11 + 2 * d], [200 + d, 201 + d]] for d in range(count)]


def test_static_duplicates_are_shuffled_globally_with_different_masks():
    from keras_ctx.data import segments

    k, count = 3, 40
    docs = _nsp_documents(count)
    pairs = segments.nsp_pairs(docs, 12, 2, 3, 0, short_seq_prob=0.0, seed=1, static=True,
                               duplicate=k)
    # Instances whose A is a document's first sentence (a random B puts the second
    # back: it starts another instance, left out here).
    stream = [int(example["token_ids"][1] - 10) // 2 for example in pairs.as_numpy_iterator()
              if example["token_ids"][1] < 200]
    assert sorted(stream) == sorted(list(range(count)) * k)  # each instance exactly k times
    # Global shuffle (BERT: rng.shuffle(instances)): the k copies are not
    # together, and documents are not in the order of any one pass.
    positions = {d: [i for i, x in enumerate(stream) if x == d] for d in range(count)}
    gaps = [np.diff(p).min() for p in positions.values()]
    assert np.mean(gaps) > 4 * 2, gaps  # batches of 4 rows: no batch holds its copies
    batches = [set(stream[i:i + 8]) for i in range(0, len(stream), 4)]
    assert np.mean([len(b) for b in batches]) > 7  # consecutive batches: ~all distinct
    first_pass = [x for i, x in enumerate(stream) if positions[x][0] == i]
    assert abs(np.corrcoef(first_pass, range(count))[0, 1]) < 0.5
    # Same instances and order every epoch (static); BERT's masks per copy differ.
    again = [int(e["token_ids"][1] - 10) // 2 for e in pairs.as_numpy_iterator()
             if e["token_ids"][1] < 200]
    assert again == stream


def test_bert_dataset_duplicates_with_static_masks():
    from keras_ctx.data import pipelines

    docs = tf.data.Dataset.from_generator(
        lambda: (tf.ragged.constant(d, dtype=tf.int32) for d in _nsp_documents()),
        output_signature=tf.RaggedTensorSpec((None, None), tf.int32, ragged_rank=1))
    data = pipelines.bert_dataset(docs, None, 4, sequence_length=12, duplicate=2,
                                  special_ids={"pad": 0, "unk": 1, "cls": 2, "sep": 3,
                                               "mask": MASK_ID},
                                  vocabulary_size=VOCAB)
    first = list(data.as_numpy_iterator())
    assert len(first) >= 2 * 40 // 4  # at least one instance per document and copy
    second = list(data.as_numpy_iterator())
    for a, b in zip(first, second):  # static: identical masks every epoch
        np.testing.assert_array_equal(a["token_ids"], b["token_ids"])
    with pytest.raises(ValueError, match="static"):
        pipelines.bert_dataset(docs, None, 4, sequence_length=12, duplicate=2,
                               static_masking=False, special_ids={}, vocabulary_size=VOCAB)


# --- One masker base: the same masks as before for fixed seeds (pinned from the
# maskers before they shared `Masker`), and the same checks everywhere.

def _pinned_case():
    ids = np.array([[1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 2],
                    [1, 15, 16, 17, 18, 19, 20, 21, 2, 0, 0, 0]], "int32")
    table = np.zeros(30, bool)
    table[[6, 9, 16, 20]] = True  # continuation pieces: words (5 6), (8 9), (15 16), (19 20)
    return {"token_ids": ids, "padding_mask": (ids != 0).astype("int32")}, table


PINNED = {  # masker: (token_ids, mask_positions) for seed (7, 11), mask_rate 0.3
    # BERT / ALBERT budget round(0.3 * L), [CLS] and [SEP] counted: 4 of 12, 3 of 9
    # tokens; SpanBERT's ceil(0.3 n) of its candidates: 4 of 10 (whole words fill 3), 3 of
    # 7; ceil(0.3 * 12) = 4 slots.
    "mlm": ([[1, 5, 6, 7, 3, 3, 3, 11, 12, 3, 14, 2], [1, 15, 3, 17, 3, 19, 3, 21, 2, 0, 0, 0]],
            [[4, 5, 6, 9], [2, 4, 6, 0]]),
    "ngram": ([[1, 5, 6, 3, 3, 9, 3, 11, 12, 13, 14, 2], [1, 3, 3, 3, 18, 19, 20, 21, 2, 0, 0, 0]],
              [[3, 4, 5, 6], [1, 2, 3, 0]]),
    "span": ([[1, 5, 6, 7, 8, 9, 10, 3, 3, 3, 14, 2], [1, 14, 28, 11, 18, 19, 20, 21, 2, 0, 0, 0]],
             [[7, 8, 9, 0], [1, 2, 3, 0]]),
    # ERNIE 1.0 (batching.py): each unit drawn alone; ceil(0.25 * 12) = 3 slots.
    "knowledge@5": ([[1, 5, 6, 7, 8, 9, 10, 11, 3, 13, 14, 2],
                     [1, 3, 3, 3, 18, 19, 20, 21, 2, 0, 0, 0]],
                    [[8, 0, 0], [1, 2, 3]]),
}


def _maskers(table, vocabulary_size=30, **rates):
    from keras_ctx.data.knowledge_masking import KnowledgeMasker, KnowledgeMaskingSchedule
    from keras_ctx.data.ngram_masking import NgramMasker
    from keras_ctx.data.span_masking import SpanMasker

    specials = (0, 1, 2)
    schedule = KnowledgeMaskingSchedule((("basic", 1), ("entity", None)))
    return {  # name: a function making the masker (each raises on its own)
        "mlm": lambda: masking.MLMMasker(vocabulary_size, 3, specials, seed=1, **rates),
        "ngram": lambda: NgramMasker(vocabulary_size, 3, specials, table, max_ngram=3, **rates),
        "span": lambda: SpanMasker(vocabulary_size, 3, table, specials, **rates),
        "knowledge@5": lambda: KnowledgeMasker(vocabulary_size, 3, specials, schedule, table,
                                               **rates),
    }


def test_every_masker_gives_the_pinned_masks_for_a_fixed_seed():
    batch, table = _pinned_case()
    seed = tf.constant([7, 11], tf.int32)
    entities = np.array([[-1, 0, 0, 0, -1, 1, 1, -1, -1, -1, -1, -1]] * 2, "int32")
    for name, make in _maskers(table, mask_rate=0.3).items():
        masker = make()
        if name == "knowledge@5":
            out = masker((tf.constant(5, tf.int64), dict(batch, entity_ids=entities)), seed)
        else:
            out = masker(batch, seed)
        ids, positions = PINNED[name]
        np.testing.assert_array_equal(out["token_ids"], ids, err_msg=name)
        np.testing.assert_array_equal(out["mask_positions"], positions, err_msg=name)


def test_every_masker_shares_the_base_and_its_checks():
    _, table = _pinned_case()
    for name, make in _maskers(table).items():
        masker = make()
        assert isinstance(masker, masking.Masker), name
        assert (masker.mask_rate, masker.mask_token_rate, masker.random_token_rate) == (
            0.15, 0.8, 0.1), name
    for bad in (dict(mask_rate=1.5), dict(mask_token_rate=0.9, random_token_rate=0.2)):
        for name in ("mlm", "ngram", "span", "knowledge@5"):
            with pytest.raises(ValueError, match="must be"):
                _maskers(table, **bad)[name]()
    for name in ("mlm", "ngram", "span", "knowledge@5"):
        with pytest.raises(ValueError, match="not below vocabulary_size"):
            _maskers(table, vocabulary_size=3)[name]()



# google-research/bert create_pretraining_data.py (eedf571): the prediction count,
# [UNK], the order and number of the prediction slots.

def _sentence_pair_rows(lengths, length=128, body=50):
    """[CLS] tokens [SEP] tokens [SEP] rows of the given real lengths, padded."""
    ids = np.zeros((len(lengths), length), "int32")
    for r, n in enumerate(lengths):
        ids[r, :n] = body
        ids[r, 0], ids[r, n // 2], ids[r, n - 1] = 2, 3, 3
    return ids, (ids != 0).astype("int32")


def test_prediction_count_counts_cls_and_both_seps():
    from keras_ctx.data.maskers import masker_for

    lengths = list(range(4, 129))
    ids, padding = _sentence_pair_rows(lengths)
    ids_of = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": MASK_ID}
    masker = masker_for(None, ids_of, VOCAB, max_predictions=20)
    out = masker({"token_ids": ids, "padding_mask": padding}, tf.constant([3, 9]))
    counts = np.asarray(out["mask_weights"]).sum(axis=1)
    # num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * 0.15))))
    # with Python's round (half to even): e.g. 10 tokens -> 2, 30 -> 4, 50 -> 8.
    want = [min(20, max(1, int(round(n * 0.15)))) for n in lengths]
    np.testing.assert_array_equal(counts, want)
    assert out["mask_positions"].shape == (len(lengths), 20)  # exactly max_predictions slots


def test_unknown_tokens_may_be_masked_and_positions_are_sorted():
    from keras_ctx.data.maskers import masker_for

    ids_of = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": MASK_ID}
    ids = np.array([[2] + [1] * 14 + [3] + [1] * 13 + [3]] * 64, "int32")  # all [UNK]
    masker = masker_for(None, ids_of, VOCAB)
    out = {k: np.asarray(v) for k, v in masker(
        {"token_ids": ids, "padding_mask": np.ones_like(ids)}, tf.constant([1, 2])).items()}
    used = out["mask_weights"] > 0
    assert (used.sum(axis=1) == 4).all()  # round(30 * 0.15) = round(4.5) = 4
    assert (out["mask_ids"][used] == 1).all()  # only [UNK]s, never [CLS]/[SEP]
    for positions, weights in zip(out["mask_positions"], used):
        assert (np.diff(positions[weights]) > 0).all()  # sorted, as the script's masked_lms
        assert (positions[~weights] == 0).all()
    assert masking.default_max_predictions(128) == 20  # BERT's max_predictions_per_seq


def test_span_masker_draws_random_replacements_by_corpus_frequency_as_spanbert():
    # SpanBERT masking.py span_masking: sentence[i] = np.random.choice(tokens), `tokens`
    # the corpus' token buffer (no_nsp_span_bert_dataset.py): ids by frequency. Here
    # id 7 three times as common as id 9, no other id in the corpus.
    from keras_ctx.data.span_masking import SpanMasker

    counts = np.zeros(30)
    counts[[7, 9]] = [3, 1]
    table = np.zeros(30, bool)
    masker = SpanMasker(30, 4, table, (0, 1, 2, 3), mask_rate=0.5, mask_token_rate=0.0,
                        random_token_rate=1.0, token_counts=counts)
    rows = np.full((32, 40), 20, np.int32)
    out = masker({"token_ids": tf.constant(rows), "padding_mask": tf.ones_like(rows)},
                 tf.constant([0, 1], tf.int32))
    new = out["token_ids"].numpy()[out["token_ids"].numpy() != 20]
    assert set(new) == {7, 9} and len(new) > 500
    assert np.mean(new == 7) == pytest.approx(0.75, abs=0.04)
    released = np.random.RandomState(0).choice([7, 7, 7, 9], size=len(new))
    assert np.mean(released == 7) == pytest.approx(np.mean(new == 7), abs=0.05)
    with pytest.raises(ValueError, match="one count of the corpus. token ids per id of the vocabulary of 30"):
        SpanMasker(30, 4, table, token_counts=np.ones(29))
