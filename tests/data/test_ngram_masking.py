"""Whole-word and ALBERT n-gram masking: units never split, budget, p(n) proportional to 1/n."""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import ngram_masking, pipelines
from keras_ctx.data.masking import candidate_mask
from tests.pretraining import synthetic as syn

SPECIALS = (0, 1, 2, 3)
MASK_ID = 4
VOCAB = 300
CONTINUATION = np.arange(VOCAB) >= 200  # ids 200.. continue a word ("##x")


def _random_rows(batch=128, length=64, seed=0):
    """[CLS] words [SEP] pad: words of 1-3 pieces (a start id < 200, then ids >= 200)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch, length), "int32")
    for b in range(batch):
        row = [2]
        limit = int(rng.integers(length // 2, length))
        while len(row) < limit - 1:
            row += [int(rng.integers(10, 200))] + list(rng.integers(200, VOCAB, rng.integers(0, 3)))
        row = row[:limit - 1] + [3]
        ids[b, :len(row)] = row
    return ids, (ids != 0).astype("int32")


def _words(row):
    """[(first, last)] token spans of the words of one row (numpy reference)."""
    spans, start = [], None
    for t, token in enumerate(row):
        if token in SPECIALS or not CONTINUATION[token]:
            if start is not None:
                spans.append((start, t - 1))
            start = None if token in SPECIALS else t
    return spans


def _ngram_mask(ids, padding, pmf=(1.0,), seed=(1, 2), **kwargs):
    candidates = candidate_mask(ids, padding, SPECIALS)
    starts = ngram_masking.unit_starts(ids, candidates, CONTINUATION)
    out = ngram_masking.ngram_mask(ids, tf.constant(seed), VOCAB, MASK_ID, starts, padding,
                                   SPECIALS, pmf=pmf, **kwargs)
    return {k: v.numpy() for k, v in out.items()}


@pytest.mark.parametrize("max_ngram", [1, 3])
def test_whole_words_are_never_split_and_the_budget_is_kept(max_ngram):
    ids, padding = _random_rows()
    out = _ngram_mask(ids, padding, ngram_masking.ngram_pmf(max_ngram))
    total = masked = budgets = 0
    for b in range(len(ids)):
        positions = out["mask_positions"][b][out["mask_weights"][b] > 0]
        selected = set(positions.tolist())
        n = int(padding[b].sum())  # ALBERT's len(tokens): [CLS] and [SEP] counted
        budget = max(1, round(0.15 * n))
        assert len(selected) <= budget  # BERT / ALBERT: never over num_to_predict
        for first, last in _words(ids[b]):
            inside = [t in selected for t in range(first, last + 1)]
            assert all(inside) or not any(inside), (b, first, last)
        assert positions.tolist() == sorted(positions)
        total, masked, budgets = total + n, masked + len(selected), budgets + budget
    # Words of 1-3 pieces rarely leave the budget unfilled: ~15% overall.
    assert 0.95 < masked / budgets <= 1.0, masked / budgets
    assert abs(masked / total - 0.15) < 0.01, masked / total


def test_ngram_lengths_follow_albert_pvals():
    # One-token words, 40 per row, budget round(0.15 * 40) = 6 >= 3: the first
    # n-gram of a row is never shortened by the budget or an overlap, only by
    # the row's end (ALBERT: cand_indexes[idx:idx + n]), so its length is
    # min(n, U - s) with n ~ p(n) = (1/n) / (1 + 1/2 + 1/3), s uniform.
    rows, units = 6000, 40
    ids = np.full((rows, units + 2), 50, "int32")
    ids[:, 0], ids[:, -1] = 2, 3
    out = _ngram_mask(ids, np.ones_like(ids), ngram_masking.ngram_pmf(3))
    first = out["ngram_lengths"][:, 0]
    observed = np.bincount(first, minlength=4)[1:4]
    p = np.array([1, 1 / 2, 1 / 3]) / (1 + 1 / 2 + 1 / 3)
    np.testing.assert_allclose(ngram_masking.ngram_pmf(3), p)
    expected = np.zeros(3)
    for s in range(units):
        for n in (1, 2, 3):
            expected[min(n, units - s) - 1] += p[n - 1] / units
    chi2 = (((observed - rows * expected) ** 2) / (rows * expected)).sum()
    assert chi2 < 13.8, (chi2, observed, rows * expected)  # chi2(2) 99.9% point
    # Every placed n-gram, in units, is 1..3 and their tokens make the masks.
    lengths = out["ngram_lengths"]
    np.testing.assert_array_equal(lengths.sum(axis=1), out["mask_weights"].sum(axis=1))
    assert lengths.max() == 3
    # favor_shorter_ngram=False reverses p (ALBERT's flag).
    np.testing.assert_allclose(ngram_masking.ngram_pmf(3, False), p[::-1])


def test_ngrams_are_contiguous_runs_of_whole_words_by_hand():
    # [CLS] w0 w1(2 pieces) w2 w3(3 pieces) [SEP]: 9 tokens, budget round(1.35) = 1
    # -> always one 1-token word (w0 or w2); never a piece of w1 or w3.
    row = np.array([[2, 10, 11, 201, 12, 13, 202, 203, 3]], "int32")
    seen = set()
    for seed in range(40):
        out = _ngram_mask(row, np.ones_like(row), ngram_masking.ngram_pmf(3), seed=(seed, 0))
        positions = tuple(out["mask_positions"][0][out["mask_weights"][0] > 0])
        assert positions in {(1,), (4,)}, positions
        seen.add(positions)
    assert len(seen) == 2


def test_unit_ids_group_annotated_positions_and_leave_the_rest_to_words():
    ids = np.array([[2, 10, 201, 11, 12, 13, 14, 202, 3, 0]], "int32")
    candidates = candidate_mask(ids, ids != 0, SPECIALS)
    unit_ids = np.array([[-1, -1, -1, 3, 3, 3, -1, -1, -1, -1]], "int32")
    starts = ngram_masking.unit_starts(ids, candidates, CONTINUATION, unit_ids).numpy()[0]
    # units: [10 ##201] [11 12 13] [14 ##202]
    np.testing.assert_array_equal(starts.astype(int), [0, 1, 0, 1, 0, 0, 1, 0, 0, 0])
    words_only = ngram_masking.unit_starts(ids, candidates, CONTINUATION).numpy()[0]
    np.testing.assert_array_equal(words_only.astype(int), [0, 1, 0, 1, 1, 1, 1, 0, 0, 0])


def test_masker_in_tf_data_and_the_albert_recipe_masks_ngrams():
    ids, padding = _random_rows(batch=8)
    data = tf.data.Dataset.from_tensor_slices({"token_ids": ids, "padding_mask": padding})
    masker = ngram_masking.NgramMasker(VOCAB, MASK_ID, SPECIALS, CONTINUATION, max_ngram=3)
    batch = next(iter(masker.apply(data.batch(4, drop_remainder=True))))
    # ceil(0.15 * 64) slots, as BERT's max_predictions_per_seq 20 for 128 tokens.
    assert batch["mask_positions"].shape == (4, 10) and "ngram_lengths" not in batch
    # The ALBERT recipe's default: whole-word n-grams (here every id is a word).
    albert = pipelines.albert_dataset(syn.dataset(syn.documents(60)), None, 16,
                                      sequence_length=24, special_ids=syn.SPECIAL,
                                      vocabulary_size=syn.VOCABULARY_SIZE,
                                      word_continuations=np.zeros(syn.VOCABULARY_SIZE, bool))
    runs = []
    for batch in albert.take(4).as_numpy_iterator():
        for positions, weights in zip(batch["mask_positions"], batch["mask_weights"]):
            used = positions[weights > 0]
            runs += list(np.diff(np.flatnonzero(np.diff(used) != 1), prepend=-1))
    assert max(runs) >= 2  # runs of adjacent masked words exist (n-grams)
    with pytest.raises(ValueError, match="word_continuations"):
        pipelines.albert_dataset(syn.dataset(syn.documents(4)), None, 2, sequence_length=24,
                                 special_ids=syn.SPECIAL, vocabulary_size=syn.VOCABULARY_SIZE)


def test_bad_arguments():
    with pytest.raises(ValueError, match="continuation_table"):
        ngram_masking.NgramMasker(VOCAB, MASK_ID, continuation_table=np.zeros(5, bool))
    with pytest.raises(ValueError, match="max_ngram"):
        ngram_masking.ngram_pmf(0)
    with pytest.raises(ValueError, match="pmf"):
        ngram_masking.ngram_mask(np.ones((1, 4), "int32"), [0, 0], 10, 4, pmf=(0.5, 0.2))


# 300 random words: too many for the small vocabularies, so most are split.
# 300 random words: too many for the small vocabularies, so most are split.
WORDS = ["".join(np.random.default_rng(i).choice(list("abcdefghij"), 3 + i % 6))
         for i in range(300)]


def _train_wordpiece(lines, size):
    import keras_hub

    # A hand-made vocabulary (training one takes seconds): letters and "##" letters.
    letters = list("abcdefghij")
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + letters + [
        "##" + c for c in letters] + ["abc", "##de", "##fgh"]
    return keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary)


@pytest.mark.parametrize("kind,size,marker", [
    ("wordpiece", 0, "##"),                   # "##" continues a word
    ("train_byte_level_bpe", 280, "\u0120"),  # "Ġ" starts a word
    ("train_sentencepiece", 60, "\u2581"),    # "▁" starts a word
])
def test_whole_word_masking_in_every_subword_pipeline(kind, size, marker):
    from keras_ctx.data import tokenizers

    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=int(rng.integers(6, 12)))) for _ in range(48)]
    tokenizer = (_train_wordpiece(lines, size) if kind == "wordpiece"
                 else getattr(tokenizers, kind)(lines, size))
    pieces = tokenizers.vocabulary(tokenizer)
    special = set(tokenizers.special_token_ids(tokenizer).values())
    if kind == "train_sentencepiece":  # the whole pipeline once
        documents = tf.data.Dataset.from_tensor_slices([lines[i:i + 3] for i in range(0, 48, 3)])
        data = pipelines.roberta_dataset(documents, tokenizer, 8, sequence_length=48,
                                         whole_word_masking=True)
        batches = list(data.take(3).as_numpy_iterator())
    else:  # the masker the pipelines build, on the tokenizer's rows
        rows = np.zeros((24, 48), "int32")
        for r, line in enumerate(lines[:24]):
            ids = np.asarray(tokenizer(line))[:46]
            rows[r, :len(ids) + 2] = [min(special)] + list(ids) + [max(special)]
        masker = ngram_masking.NgramMasker(
            tokenizer.vocabulary_size(), tokenizers.special_token_ids(tokenizer)["mask"],
            sorted(special), tokenizers.continuation_table(tokenizer))
        batches = [{k: np.asarray(v) for k, v in masker(
            {"token_ids": rows, "padding_mask": (rows != 0).astype("int32")},
            tf.constant([1, 2])).items()}]

    def starts_word(i):  # from the piece's spelling, independently of the masker
        if i in special:
            return True
        return not pieces[i].startswith("##") if marker == "##" else pieces[i].startswith(marker)

    multi = 0
    for batch in batches:
        original = batch["token_ids"].copy()
        used = batch["mask_weights"] > 0
        np.put_along_axis(original, batch["mask_positions"],
                          np.where(used, batch["mask_ids"],
                                   np.take_along_axis(original, batch["mask_positions"], 1)), 1)
        for row, positions, weights in zip(original, batch["mask_positions"], used):
            selected = set(positions[weights].tolist())
            word = []
            for t, i in enumerate(row.tolist() + [-1]):
                if i == -1 or i in special or starts_word(i):
                    inside = [p in selected for p in word]
                    assert all(inside) or not any(inside), (kind, word, row)
                    multi += len(word) > 1 and all(inside)
                    word = []
                if i != -1 and i not in special:
                    word.append(t)
    assert multi > 0  # words of several pieces were masked, whole


def test_albert_static_masks_with_duplicates_as_the_released_data():
    kwargs = dict(sequence_length=24, special_ids=syn.SPECIAL,
                  vocabulary_size=syn.VOCABULARY_SIZE,
                  word_continuations=np.zeros(syn.VOCABULARY_SIZE, bool))
    once = pipelines.albert_dataset(syn.dataset(syn.documents(30)), None, 4, **kwargs)
    twice = pipelines.albert_dataset(syn.dataset(syn.documents(30)), None, 4,
                                     static_masking=True, duplicate=2, **kwargs)
    first, again = list(twice.as_numpy_iterator()), list(twice.as_numpy_iterator())
    assert abs(len(first) - 2 * len(list(once.as_numpy_iterator()))) <= 1
    for a, b in zip(first, again):  # static: the same masks every epoch
        np.testing.assert_array_equal(a["token_ids"], b["token_ids"])


def _albert_reference(row, rng, max_ngram=3):
    """google-research/albert create_masked_lm_predictions (do_whole_word_mask=True),
    transcribed: the placed n-grams' lengths in words and the masked token count."""
    words = [list(range(first, last + 1)) for first, last in _words(row)]
    budget = max(1, round(0.15 * int((row != 0).sum())))  # len(tokens): [CLS], [SEP] too
    pvals = 1.0 / np.arange(1, max_ngram + 1)
    pvals /= pvals.sum()
    ngram_indexes = [[words[i:i + k] for k in range(1, max_ngram + 1)] for i in range(len(words))]
    rng.shuffle(ngram_indexes)
    covered, masked, lengths = set(), 0, []
    for candidate in ngram_indexes:
        if masked >= budget:
            break
        k = rng.choice(np.arange(1, max_ngram + 1), p=pvals)
        index_set = sum(candidate[k - 1], [])
        k -= 1
        while masked + len(index_set) > budget and k > 0:
            index_set = sum(candidate[k - 1], [])
            k -= 1
        if masked + len(index_set) > budget or covered & set(index_set):
            continue
        covered |= set(index_set)
        masked += len(index_set)
        lengths.append(len(candidate[k]))
    return lengths, masked


def test_ngram_masking_matches_the_released_algorithm_in_distribution():
    ids, padding = _random_rows(batch=1500, seed=3)
    out = _ngram_mask(ids, padding, ngram_masking.ngram_pmf(3), seed=(11, 12))
    ours = out["ngram_lengths"][out["ngram_lengths"] > 0]
    rng = np.random.default_rng(0)
    reference, masked = [], []
    for row in ids:
        lengths, count = _albert_reference(row, rng)
        reference += lengths
        masked.append(count)
    a = np.bincount(ours, minlength=4)[1:]
    b = np.bincount(reference, minlength=4)[1:]
    # Two-sample chi-square (homogeneity), 2 degrees of freedom.
    table = np.array([a, b], float)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    chi2 = ((table - expected) ** 2 / expected).sum()
    assert chi2 < 13.8, (chi2, a / a.sum(), b / b.sum())
    # The same masked tokens per row on average (the budget, short of it when
    # no word fits the remainder).
    ours_masked = out["mask_weights"].sum(1)
    assert abs(ours_masked.mean() - np.mean(masked)) < 0.1, (ours_masked.mean(), np.mean(masked))
