"""SpanBERT's span masking (Joshi et al. 2020, Sec. 3.1), as a tf.data map.

Repeatedly: sample a span length l (in whole words) from Geo(p=0.2) clipped
at l_max=10 (the pmf truncated to 1..10 and renormalised, as the SpanBERT
code does: mean 3.8 words), a uniformly random starting word, and mask the
l complete words, until ceil(15%) of the tokens are masked (SpanBERT's
masking.py: mask_num = ceil(0.15 n) of the block's n tokens). The 80/10/10 rule is
applied per span: all its tokens become [MASK], or all random tokens, or all
stay. A span never overlaps an earlier one and never pushes the count over
the budget (it is shortened to the words that fit), so masks are whole words.

Words: a token starts a word unless `continuation_table[token_id]` is true
(WordPiece "##" pieces; for byte-level BPE / SentencePiece the pieces
without the leading "Ġ" / "▁"); `keras_ctx.data.tokenizers.continuation_table`
builds it from a tokenizer.

For the span boundary objective each prediction slot also gets the span's
boundary positions s-1, e+1 and the token's offset i-s in the span.
"""



import numpy as np
from keras_ctx.common import validation
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.data import token_counts as corpus_counts

from keras_ctx.data.masking import (
    MASK_RATE,
    MASK_TOKEN_RATE,
    RANDOM_TOKEN_RATE,
    Masker,
    candidate_mask,
    corrupt_selected,
    default_max_predictions,
)

GEOMETRIC_P = 0.2  # Joshi et al. 2020
MAX_SPAN_WORDS = 10


def span_length_pmf(p=GEOMETRIC_P, max_length=MAX_SPAN_WORDS):
    """P(l) for l = 1..max_length: p (1-p)^(l-1), renormalised (p 1: every span one word)."""
    p = validation.fraction("p", p)
    max_length = validation.positive_int("max_span_words", max_length)
    lengths = np.arange(1, max_length + 1)
    pmf = p * (1 - p) ** (lengths - 1)
    return pmf / pmf.sum()


def sample_span_lengths(shape, seed, p=GEOMETRIC_P, max_length=MAX_SPAN_WORDS):
    """Stateless samples of span lengths (int32, in words)."""
    logits = tf.math.log(tf.constant(span_length_pmf(p, max_length), tf.float32))[None]
    count = int(np.prod(shape))
    samples = tf.random.stateless_categorical(logits, count, seed)[0] + 1
    return tf.reshape(tf.cast(samples, tf.int32), shape)


def _word_table(candidates, starts):
    """Word index of each candidate token (-1 elsewhere) and per-word first/last token."""
    length = tf.shape(candidates)[0]
    previous = tf.concat([[False], candidates[:-1]], axis=0)
    starts = candidates & (starts | ~previous)
    word_id = tf.where(candidates, tf.cumsum(tf.cast(starts, tf.int32)) - 1, -1)
    num_words = tf.reduce_sum(tf.cast(starts, tf.int32))
    positions = tf.range(length)
    segment = tf.where(candidates, word_id, length)  # non-candidates to a spare segment
    first = tf.math.unsorted_segment_min(positions, segment, length + 1)[:length]
    last = tf.math.unsorted_segment_max(positions, segment, length + 1)[:length]
    return word_id, num_words, first, last


def span_mask_example(token_ids, seed, vocabulary_size, mask_token_id, continuation_table,
                      padding_mask=None, special_token_ids=(), mask_rate=MASK_RATE,
                      mask_token_rate=MASK_TOKEN_RATE, random_token_rate=RANDOM_TOKEN_RATE,
                      max_predictions=None, p=GEOMETRIC_P, max_span_words=MAX_SPAN_WORDS,
                      max_tries=None, token_counts=None):
    """Span masking of one sequence (time,). See the module docstring.

    `token_counts`: (vocabulary_size,) counts of each id in the training corpus;
    random replacements are then drawn by frequency, as SpanBERT's
    `np.random.choice(tokens)` over the corpus' token buffer (masking.py
    `span_masking`, "sample random token according to input distribution");
    None: uniformly over [0, vocabulary_size).

    Returns a dict: `token_ids` (corrupted), `mask_positions`, `mask_ids`,
    `mask_weights` (P,), `span_left_positions`, `span_right_positions`,
    `span_offsets` (P,) for SBO, and `span_word_lengths` (time,): the word
    length of each span made, in order, 0-padded.
    """
    token_ids = tf.cast(token_ids, tf.int32)
    length = token_ids.shape[0]
    if max_predictions is None:
        max_predictions = default_max_predictions(length, mask_rate)
    max_tries = max_tries or 4 * length
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int32), 5)
    table = tf.constant(np.asarray(continuation_table, bool))
    if table.shape[0] != vocabulary_size:
        raise ValueError(
            f"continuation_table has {table.shape[0]} entries but vocabulary_size is "
            f"{vocabulary_size}: build it from the tokenizer the model uses."
        )
    candidates = candidate_mask(token_ids, padding_mask, special_token_ids)
    starts = ~tf.gather(table, tf.clip_by_value(token_ids, 0, vocabulary_size - 1))
    word_id, num_words, first, last = _word_table(candidates, starts)
    word_tokens = last - first + 1
    n = tf.reduce_sum(tf.cast(candidates, tf.int32))
    # facebookresearch/SpanBERT masking.py: mask_num = math.ceil(len(sentence) * 0.15),
    # the block before [CLS]/[SEP] are added; Python's float64 product.
    budget = tf.cast(tf.math.ceil(tf.cast(n, tf.float64) * mask_rate), tf.int32)
    budget = tf.minimum(tf.maximum(budget, tf.minimum(n, 1)), max_predictions)

    span_lengths = sample_span_lengths((max_tries,), seeds[0], p, max_span_words)
    start_draws = tf.random.stateless_uniform((max_tries,), seeds[1])
    word_range = tf.range(length)

    def body(step, drawn, count, spans, span_of_word, span_start, span_end, lengths_made):
        # The length is kept until a span of it is placed (a start that overlaps
        # an earlier span is redrawn), so overlaps do not bias the lengths; the
        # start is uniform over the words where the whole span fits.
        span_length = tf.minimum(span_lengths[drawn], num_words)
        s = tf.minimum(
            tf.cast(start_draws[step] * tf.cast(num_words - span_length + 1, tf.float32),
                    tf.int32),
            num_words - span_length)
        e = s + span_length - 1
        in_span = (word_range >= s) & (word_range <= e)
        # Whole words that fit in the remaining budget (only the last span is cut).
        cum = tf.cumsum(tf.where(in_span, word_tokens, 0))
        fits = in_span & (cum <= budget - count)
        free = ~tf.reduce_any(in_span & (span_of_word >= 0))
        take = fits & free
        words = tf.reduce_sum(tf.cast(take, tf.int32))
        ok = words > 0
        e = s + words - 1
        span_of_word = tf.where(take, spans, span_of_word)
        count += tf.reduce_sum(tf.where(take, word_tokens, 0))
        index = [[tf.minimum(spans, length - 1)]]
        span_start = tf.where(ok, tf.tensor_scatter_nd_update(
            span_start, index, [tf.gather(first, tf.maximum(s, 0))]), span_start)
        span_end = tf.where(ok, tf.tensor_scatter_nd_update(
            span_end, index, [tf.gather(last, tf.maximum(e, 0))]), span_end)
        lengths_made = tf.where(ok, tf.tensor_scatter_nd_update(lengths_made, index, [words]),
                                lengths_made)
        spans += tf.cast(ok, tf.int32)
        drawn += tf.cast(ok, tf.int32)
        # A free start whose first word overflows the budget: the budget is spent.
        step = tf.where(free & ~ok, max_tries, step + 1)
        return step, drawn, count, spans, span_of_word, span_start, span_end, lengths_made

    def cond(step, count, *_):
        return (step < max_tries) & (count < budget) & (num_words > 0)

    zeros = tf.zeros((length,), tf.int32)
    _, _, _, _, span_of_word, span_start, span_end, lengths_made = tf.while_loop(
        cond, body, (0, 0, 0, 0, zeros - 1, zeros, zeros, zeros))

    span_of_token = tf.where(candidates, tf.gather(span_of_word, tf.maximum(word_id, 0)), -1)
    selected = span_of_token >= 0
    token_span = tf.maximum(span_of_token, 0)
    # 80/10/10 per span (Joshi et al. 2020): one draw per span.
    action = tf.gather(tf.random.stateless_uniform((length,), seeds[2]), token_span)
    if token_counts is None:
        random_ids = tf.random.stateless_uniform((length,), seeds[3], 0, vocabulary_size,
                                                 tf.int32)
    else:  # inverse CDF: the id whose cumulative count first exceeds the draw
        cumulative = tf.constant(np.cumsum(corpus_counts.checked(
            token_counts, vocabulary_size), dtype=np.float64))
        draws = tf.random.stateless_uniform((length,), seeds[3], dtype=tf.float64) * (
            cumulative[-1])
        random_ids = tf.cast(tf.searchsorted(cumulative, draws, side="right"), tf.int32)
    corrupted = corrupt_selected(token_ids, selected, action, random_ids, mask_token_id,
                                 mask_token_rate, random_token_rate)

    positions = tf.cast(tf.where(selected)[:, 0], tf.int32)
    count = tf.shape(positions)[0]
    pad = max_predictions - count
    positions = tf.pad(positions, [[0, pad]])
    positions = tf.ensure_shape(positions, (max_predictions,))
    weights = tf.cast(tf.range(max_predictions) < count, tf.float32)
    used = weights > 0
    spans_at = tf.gather(token_span, positions)
    left = tf.gather(span_start, spans_at) - 1
    right = tf.minimum(tf.gather(span_end, spans_at) + 1, length - 1)
    offsets = positions - tf.gather(span_start, spans_at)
    return {
        "token_ids": corrupted,
        "mask_positions": positions,
        "mask_ids": tf.where(used, tf.gather(token_ids, positions), 0),
        "mask_weights": weights,
        "span_left_positions": tf.where(used, tf.maximum(left, 0), 0),
        "span_right_positions": tf.where(used, right, 0),
        "span_offsets": tf.where(used, offsets, 0),
        "span_word_lengths": lengths_made,
    }


class SpanMasker(Masker):
    """A tf.data map over *batches*: SpanBERT masking of `token_ids` (+ SBO targets).

    Args: as `span_mask_example`, plus `dynamic` / `seed` as `Masker`
    (SpanBERT, built on RoBERTa's recipe, masks dynamically); `token_counts`:
    random replacements by corpus frequency as SpanBERT's (None: uniform).
    """

    def __init__(self, vocabulary_size, mask_token_id, continuation_table, special_token_ids=(),
                 mask_rate=MASK_RATE, max_predictions=None, p=GEOMETRIC_P,
                 max_span_words=MAX_SPAN_WORDS, dynamic=True, seed=0,
                 mask_token_rate=MASK_TOKEN_RATE, random_token_rate=RANDOM_TOKEN_RATE,
                 token_counts=None):
        p = validation.fraction("p", p)  # before any work
        max_span_words = validation.positive_int("max_span_words", max_span_words)
        super().__init__(vocabulary_size, mask_token_id, special_token_ids, mask_rate,
                         mask_token_rate, random_token_rate, max_predictions,
                         dynamic=dynamic, seed=seed)
        self.kwargs = dict(vocabulary_size=vocabulary_size, mask_token_id=mask_token_id,
                           continuation_table=np.asarray(continuation_table, bool),
                           special_token_ids=self.special_token_ids, mask_rate=mask_rate,
                           mask_token_rate=mask_token_rate,
                           random_token_rate=random_token_rate,
                           max_predictions=max_predictions, p=p,
                           max_span_words=max_span_words,
                           token_counts=None if token_counts is None else
                           corpus_counts.checked(token_counts, vocabulary_size))

    def __call__(self, batch, seed):
        batch = dict(batch)
        count = batch["token_ids"].shape[0]
        seeds = tf.random.experimental.stateless_split(seed, count)
        padding = batch.get("padding_mask", tf.ones_like(batch["token_ids"]))

        def one(args):
            ids, mask, example_seed = args
            return span_mask_example(ids, example_seed, padding_mask=mask, **self.kwargs)

        length = batch["token_ids"].shape[1]
        p = self.kwargs["max_predictions"] or default_max_predictions(
            length, self.kwargs["mask_rate"])
        signature = {k: tf.TensorSpec((p,), tf.float32 if k == "mask_weights" else tf.int32)
                     for k in ("mask_positions", "mask_ids", "mask_weights",
                               "span_left_positions", "span_right_positions", "span_offsets")}
        signature["token_ids"] = tf.TensorSpec((length,), tf.int32)
        signature["span_word_lengths"] = tf.TensorSpec((length,), tf.int32)
        out = tf.map_fn(one, (batch["token_ids"], padding, seeds), fn_output_signature=signature)
        batch.update(out)
        return batch


__all__ = ["SpanMasker", "span_mask_example", "span_length_pmf", "sample_span_lengths",
           "GEOMETRIC_P", "MAX_SPAN_WORDS"]
