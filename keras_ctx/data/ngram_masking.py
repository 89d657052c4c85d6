"""Masking whole units: whole words, ALBERT's n-grams, ERNIE's phrases and entities.

A *unit* is a run of consecutive candidate tokens that is masked all
together or not at all:
  - a word: a token starts a word unless `continuation_table[token_id]` is
    true (WordPiece "##" pieces; byte-level BPE / SentencePiece pieces
    without the leading "Ġ" / "▁"; `keras_ctx.data.tokenizers.continuation_table`
    builds it from a tokenizer). Without a table every token is a unit.
  - an annotated span: `unit_ids` (batch, time), equal non-negative ids on
    consecutive positions make one unit (a phrase from a chunker, an entity
    from NER or a lexicon, `keras_ctx.data.knowledge_masking`); -1 leaves a
    position to the word units.

Selection, as ALBERT's released create_pretraining_data.py
(create_masked_lm_predictions with do_whole_word_mask=True, ngram=3,
favor_shorter_ngram=True; Lan et al. 2020, Sec. 4.1); with n = 1 it is
BERT's whole-word masking:

    budget = min(max_predictions, max(1, round(0.15 * L))), L the row's tokens
    for each unit s, in a random order, while fewer than `budget` are masked:
        n ~ p(n) proportional to 1/n, n = 1..3
        the n-gram is units s .. s+n-1 (fewer at the end of the row)
        while it would exceed the budget and n > 1: n -= 1
        skip it if it still exceeds the budget or touches a masked unit
        else mask all its tokens

Each masked token then gets BERT's 80/10/10 by its own draw, as in ALBERT's
and ERNIE 1.0's released code. The budget's L counts every real token of the
row, [CLS] and [SEP] included, as the released scripts' len(tokens)
(`keras_ctx.data.masking.prediction_budget`); positions are listed in
increasing order.

Dense TensorFlow on (batch, time) with a while loop over a row's units: a
tf.data map (data-side; the pretraining step is unchanged).
"""

import numpy as np
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.common.validation import positive_int

from keras_ctx.data.masking import (
    MASK_RATE,
    MASK_TOKEN_RATE,
    RANDOM_TOKEN_RATE,
    Masker,
    _check_rates,
    candidate_mask,
    corrupted_batch,
    default_max_predictions,
    prediction_budget,
    real_lengths,
)

MAX_NGRAM = 3  # ALBERT create_pretraining_data.py: --ngram=3, --favor_shorter_ngram=True


def ngram_pmf(max_ngram=MAX_NGRAM, favor_shorter_ngram=True):
    """ALBERT's p(n) for n = 1..max_ngram: proportional to 1/n (reversed if not favor_shorter)."""
    positive_int("max_ngram", max_ngram)
    pvals = 1.0 / np.arange(1, max_ngram + 1)
    pvals /= pvals.sum()
    return pvals if favor_shorter_ngram else pvals[::-1].copy()


def _shift_right(x, fill):
    return tf.concat([tf.fill([tf.shape(x)[0], 1], fill), x[:, :-1]], axis=1)


def check_continuation_table(continuation_table, vocabulary_size):
    """The table as a numpy bool array of one entry per vocabulary id."""
    table = np.asarray(continuation_table, bool)
    if table.shape != (vocabulary_size,):
        raise ValueError(
            f"continuation_table has shape {table.shape} but vocabulary_size is "
            f"{vocabulary_size}: build it from the tokenizer the model uses "
            "(keras_ctx.data.tokenizers.continuation_table).")
    return table


def unit_starts(token_ids, candidates, continuation_table=None, unit_ids=None):
    """(batch, time) bool: True at the first token of every unit (see the module docstring).

    Args:
        token_ids: (batch, time) int, ids below len(continuation_table).
        candidates: (batch, time) bool, tokens that may be masked; a
            non-candidate always ends a unit.
        continuation_table: optional bool per vocabulary id, True for pieces
            that continue a word.
        unit_ids: optional (batch, time) int: equal ids >= 0 on consecutive
            positions form one unit; -1 = not annotated (word units).
    """
    token_ids = tf.cast(token_ids, tf.int32)
    candidates = tf.cast(candidates, tf.bool)
    previous = _shift_right(candidates, False)
    word_start = tf.ones_like(candidates)
    if continuation_table is not None:
        table = tf.constant(np.asarray(continuation_table, bool))
        check = tf.debugging.assert_less(
            token_ids, tf.shape(table)[0],
            message="token id >= vocabulary_size of the continuation_table")
        with tf.control_dependencies([check]):
            word_start = ~tf.gather(table, token_ids)
    boundary = word_start
    if unit_ids is not None:
        unit_ids = tf.cast(unit_ids, tf.int32)
        before = _shift_right(unit_ids, -1)
        boundary = tf.where(unit_ids >= 0, tf.not_equal(unit_ids, before),
                            (before >= 0) | word_start)
    return candidates & (~previous | boundary)


def ngram_mask(token_ids, seed, vocabulary_size, mask_token_id, starts=None,
               padding_mask=None, special_token_ids=(), mask_rate=MASK_RATE,
               mask_token_rate=MASK_TOKEN_RATE, random_token_rate=RANDOM_TOKEN_RATE,
               max_predictions=None, pmf=(1.0,), random_token_range=None):
    """Masks whole n-grams of units in a (batch, time) batch (see the module docstring).

    Args:
        token_ids: (batch, time) int.
        seed: (2,) int stateless seed.
        starts: (batch, time) bool from `unit_starts`; None: every token is a unit.
        pmf: p(n) for n = 1..len(pmf) (`ngram_pmf`); (1.0,) masks single units.
        Others: as `keras_ctx.data.masking.mask_tokens`.

    Returns:
        dict with `token_ids` (corrupted), `mask_positions` (batch, P) in
        increasing order, `mask_ids`, `mask_weights`, and `ngram_lengths`
        (batch, time): each placed n-gram's length in units, in the order
        they were placed, 0-padded.
    """
    _check_rates(mask_rate, mask_token_rate, random_token_rate)
    token_ids = tf.cast(tf.convert_to_tensor(token_ids), tf.int32)
    length = token_ids.shape[1]
    if max_predictions is None:
        max_predictions = default_max_predictions(length, mask_rate)
    max_predictions = min(max_predictions, length)
    pmf = np.asarray(pmf, np.float64)
    if pmf.ndim != 1 or not len(pmf) or np.any(pmf < 0) or not np.isclose(pmf.sum(), 1.0):
        raise ValueError(f"`pmf` must be probabilities of n = 1, 2, ...; got {pmf}.")
    max_n = len(pmf)
    seeds = tf.unstack(tf.random.experimental.stateless_split(
        tf.cast(tf.convert_to_tensor(seed), tf.int32), 4))
    candidates = candidate_mask(token_ids, padding_mask, special_token_ids)
    if starts is None:
        starts = candidates
    starts = (tf.cast(starts, tf.bool) | ~_shift_right(candidates, False)) & candidates

    batch = tf.shape(token_ids)[0]
    span = tf.range(length)
    unit = tf.where(candidates, tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, -1)
    num_units = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
    # Tokens per unit, (batch, time) indexed by unit, and their prefix sums.
    rows = tf.range(batch)[:, None] * length
    segments = tf.where(candidates, unit + rows, batch * length)
    size = tf.math.unsorted_segment_sum(tf.ones_like(unit), segments, batch * length + 1)
    size = tf.reshape(size[:-1], [batch, length])
    before = tf.concat([tf.zeros([batch, 1], tf.int32), tf.cumsum(size, axis=1)], axis=1)
    n = tf.reduce_sum(tf.cast(candidates, tf.int32), axis=1)
    budget = tf.cast(prediction_budget(real_lengths(token_ids, padding_mask), n, mask_rate,
                                       max_predictions), tf.int32)

    # The units in a random order (ALBERT: rng.shuffle(ngram_indexes)).
    scores = tf.random.stateless_uniform([batch, length], seeds[0])
    scores = tf.where(span[None] < num_units[:, None], scores, 2.0)
    order = tf.argsort(scores, axis=1, stable=True)
    draws = tf.random.stateless_categorical(
        tf.math.log(tf.constant(pmf[None], tf.float32)), batch * length, seeds[1])
    draws = tf.reshape(tf.cast(draws, tf.int32), [batch, length]) + 1
    grams = tf.range(1, max_n + 1)[None]                                   # (1, N)

    def body(k, count, covered, made, lengths):
        start = order[:, k]
        ends = tf.minimum(start[:, None] + grams, num_units[:, None])     # (B, N)
        tokens = (tf.gather(before, ends, batch_dims=1)
                  - tf.gather(before, start[:, None], batch_dims=1))
        # n, then n-1, ... 1 until the n-gram fits the budget.
        fits = (grams <= draws[:, k:k + 1]) & (count[:, None] + tokens <= budget[:, None])
        chosen = tf.reduce_max(tf.where(fits, grams, 0), axis=1)
        units = tf.minimum(chosen, num_units - start)
        in_gram = (span[None] >= start[:, None]) & (span[None] < (start + units)[:, None])
        free = ~tf.reduce_any(in_gram & covered, axis=1)
        take = (k < num_units) & (count < budget) & (chosen > 0) & free
        covered |= in_gram & take[:, None]
        count += tf.where(take, tf.gather(tokens, tf.maximum(chosen - 1, 0), batch_dims=1), 0)
        lengths = tf.where(take[:, None] & (span[None] == made[:, None]), units[:, None],
                           lengths)
        return k + 1, count, covered, made + tf.cast(take, tf.int32), lengths

    def cond(k, count, *_):
        return (k < length) & tf.reduce_any((k < num_units) & (count < budget))

    zeros = tf.zeros([batch, length], tf.int32)
    _, _, covered, _, lengths = tf.while_loop(
        cond, body, (0, tf.zeros([batch], tf.int32), tf.zeros([batch, length], tf.bool),
                     tf.zeros([batch], tf.int32), zeros))

    selected = candidates & tf.gather(covered, tf.maximum(unit, 0), batch_dims=1)
    order_key = tf.where(selected, length - span[None], 0)
    keys, positions = tf.math.top_k(order_key, k=max_predictions)
    weights = tf.cast(keys > 0, tf.float32)
    positions = tf.where(keys > 0, positions, 0)
    out = corrupted_batch(token_ids, selected, positions, weights, (seeds[2], seeds[3]),
                          vocabulary_size, mask_token_id, mask_token_rate,
                          random_token_rate, random_token_range)
    out["ngram_lengths"] = lengths
    return out


class NgramMasker(Masker):
    """A tf.data map over batches: whole-word / n-gram masking of `token_ids`.

    `NgramMasker(..., continuation_table=table)` is whole-word masking;
    `max_ngram=3` adds ALBERT's n-grams of words. A batch's `unit_ids`, when
    present, groups annotated positions into units (ERNIE). Output keys as
    `keras_ctx.data.masking.MLMMasker`.

    Args:
        vocabulary_size, mask_token_id, special_token_ids: as `Masker`.
        mask_rate, mask_token_rate, random_token_rate: as `Masker`.
        max_predictions, random_token_range, dynamic, seed: as `Masker`.
        continuation_table: bool per vocabulary id (word units), or None
            (every token is a unit).
        max_ngram: largest n-gram in units (ALBERT: 3; whole words: 1).
        favor_shorter_ngram: p(n) proportional to 1/n (True, ALBERT's
            default) or to 1/(max_ngram + 1 - n).

    Example:
    >>> table = keras_ctx.data.tokenizers.continuation_table(tokenizer)
    >>> masker = NgramMasker(vocab, mask_id, specials, table, max_ngram=3)
    >>> batches = masker.apply(batches)

    References:
        Lan et al. 2020 (ALBERT), Sec. 4.1; google-research/albert
        create_pretraining_data.py.
    """

    def __init__(self, vocabulary_size, mask_token_id, special_token_ids=(),
                 continuation_table=None, max_ngram=1, favor_shorter_ngram=True,
                 mask_rate=MASK_RATE, mask_token_rate=MASK_TOKEN_RATE,
                 random_token_rate=RANDOM_TOKEN_RATE, max_predictions=None,
                 random_token_range=None, dynamic=True, seed=0):
        super().__init__(vocabulary_size, mask_token_id, special_token_ids, mask_rate,
                         mask_token_rate, random_token_rate, max_predictions,
                         random_token_range, dynamic, seed)
        self.continuation_table = (None if continuation_table is None else
                                   check_continuation_table(continuation_table,
                                                            vocabulary_size))
        self.max_ngram = max_ngram
        self.favor_shorter_ngram = favor_shorter_ngram
        self.pmf = ngram_pmf(max_ngram, favor_shorter_ngram)

    def mask(self, batch, seed, unit_ids=None):
        """The masked batch (a new dict); `unit_ids` (batch, time) overrides the batch's."""
        batch = dict(batch)
        if unit_ids is None:
            unit_ids = batch.get("unit_ids")
        candidates = candidate_mask(batch["token_ids"], batch.get("padding_mask"),
                                    self.special_token_ids)
        starts = unit_starts(batch["token_ids"], candidates, self.continuation_table, unit_ids)
        masked = ngram_mask(
            batch["token_ids"], seed, self.vocabulary_size, self.mask_token_id, starts,
            padding_mask=batch.get("padding_mask"), special_token_ids=self.special_token_ids,
            mask_rate=self.mask_rate, mask_token_rate=self.mask_token_rate,
            random_token_rate=self.random_token_rate, max_predictions=self.max_predictions,
            pmf=self.pmf, random_token_range=self.random_token_range)
        masked.pop("ngram_lengths")
        batch.update(masked)
        return batch

    def __call__(self, batch, seed):
        return self.mask(batch, seed)


__all__ = ["NgramMasker", "ngram_mask", "ngram_pmf", "unit_starts", "check_continuation_table",
           "MAX_NGRAM"]
