"""Corruptions for encoder-decoder pretraining, as tf.data maps.

T5 span corruption (Raffel et al., 2020):
    `random_spans_noise_mask`, `span_corruption` (noise spans -> sentinels in the
    inputs; the targets hold the spans, each after its sentinel).
BART noising (Lewis et al., 2020), each a function of one 1-D token tensor,
composable with `compose`:
    `token_masking`, `token_deletion`, `text_infilling`, `sentence_permutation`,
    `document_rotation`.
`seq2seq_features` pads (inputs, targets) to the static shapes a jit-compiled
`Seq2SeqPretrainer` step needs.

Example:
>>> noise = compose(partial(text_infilling, mask_id=50264),
...                 partial(sentence_permutation, sentence_end_id=4))
>>> ds = documents.map(lambda ids: {"inputs": noise(ids), "targets": ids})
>>> ds = ds.map(partial(seq2seq_features, encoder_length=128, decoder_length=128,
...                     decoder_start_id=2)).batch(8, drop_remainder=True)
"""

import numpy as np
from keras_ctx.common import validation
from keras_ctx.common.optional import tensorflow as tf

# ---------------------------------------------------------------------- T5


def _t5_noise(noise_density, mean_noise_span_length):
    """The checked (density, mean span): some but not all tokens noise, spans of at least
    one token on average (T5's round(noise / mean) spans would outnumber the tokens)."""
    return (validation.open_fraction("noise_density", noise_density),
            validation.number_at_least("mean_noise_span_length", mean_noise_span_length, 1))


def _random_segmentation(num_items, num_segments):
    """Random composition of `num_items` into `num_segments` positive lengths."""
    first_in_segment = tf.pad(
        tf.random.shuffle(tf.range(num_items - 1) < num_segments - 1), [[1, 0]]
    )
    segment_id = tf.cumsum(tf.cast(first_in_segment, tf.int32))
    return tf.math.unsorted_segment_sum(tf.ones_like(segment_id), segment_id, num_segments)


def random_spans_noise_mask(length, noise_density=0.15, mean_noise_span_length=3.0):
    """T5's noise mask: round(length * density) noise tokens in
    round(noise / mean_span_length) spans, alternating with non-noise spans,
    starting with non-noise (t5/data/preprocessors.py `random_spans_noise_mask`).

    Args:
        length: int (or scalar int tensor) sequence length.
    Returns:
        bool (length,) mask, true for noise.
    """
    noise_density, mean_noise_span_length = _t5_noise(noise_density, mean_noise_span_length)
    original_length = length
    length = tf.maximum(tf.cast(length, tf.int32), 2)
    float_length = tf.cast(length, tf.float32)
    num_noise_tokens = tf.cast(tf.round(float_length * noise_density), tf.int32)
    num_noise_tokens = tf.clip_by_value(num_noise_tokens, 1, length - 1)
    num_noise_spans = tf.cast(
        tf.round(tf.cast(num_noise_tokens, tf.float32) / mean_noise_span_length), tf.int32
    )
    num_noise_spans = tf.maximum(num_noise_spans, 1)
    num_nonnoise_tokens = length - num_noise_tokens
    noise_span_lengths = _random_segmentation(num_noise_tokens, num_noise_spans)
    nonnoise_span_lengths = _random_segmentation(num_nonnoise_tokens, num_noise_spans)
    interleaved = tf.reshape(tf.stack([nonnoise_span_lengths, noise_span_lengths], axis=1), [-1])
    span_starts = tf.cumsum(interleaved)[:-1]
    span_start_indicator = tf.math.unsorted_segment_sum(
        tf.ones_like(span_starts), span_starts, length
    )
    span_num = tf.cumsum(span_start_indicator)
    is_noise = tf.equal(span_num % 2, 1)
    return is_noise[:original_length]


def _spans_to_sentinels(tokens, noise_mask, first_sentinel_id):
    """Each run of noise -> one sentinel (first_sentinel_id, first_sentinel_id - 1, ...)."""
    previous = tf.pad(noise_mask[:-1], [[1, 0]])
    first_noise = noise_mask & ~previous
    subsequent_noise = noise_mask & previous
    sentinel = first_sentinel_id + 1 - tf.cumsum(tf.cast(first_noise, tokens.dtype))
    tokens = tf.where(first_noise, sentinel, tokens)
    return tf.boolean_mask(tokens, ~subsequent_noise)


def span_corruption(token_ids, noise_density=0.15, mean_noise_span_length=3.0,
                    first_sentinel_id=32099, eos_id=None, noise_mask=None):
    """T5's span corruption of one 1-D token sequence.

    Inputs keep the non-noise tokens with each noise span replaced by one
    sentinel; targets are the noise spans, each after its sentinel (so
    inputs + targets reconstruct the original exactly). T5's sentinels are
    <extra_id_i> = 32099 - i.

    Args:
        token_ids: (length,) int tensor.
        noise_density: 0.15 (Raffel et al., 2020, Sec. 3.3.4).
        mean_noise_span_length: 3.
        first_sentinel_id: the first sentinel; later ones count down.
        eos_id: appended to inputs and targets when given.
        noise_mask: optional precomputed mask (for tests).

    Returns:
        {"inputs": (n_in,), "targets": (n_out,)}; for a fixed length the
        lengths are fixed too (`span_corruption_lengths`).
    """
    _t5_noise(noise_density, mean_noise_span_length)
    token_ids = tf.convert_to_tensor(token_ids)
    if noise_mask is None:
        noise_mask = random_spans_noise_mask(
            tf.size(token_ids), noise_density, mean_noise_span_length
        )
    inputs = _spans_to_sentinels(token_ids, noise_mask, first_sentinel_id)
    targets = _spans_to_sentinels(token_ids, ~noise_mask, first_sentinel_id)
    if eos_id is not None:
        eos = tf.constant([eos_id], token_ids.dtype)
        inputs = tf.concat([inputs, eos], 0)
        targets = tf.concat([targets, eos], 0)
    return {"inputs": inputs, "targets": targets}


def span_corruption_lengths(length, noise_density=0.15, mean_noise_span_length=3.0,
                            eos=True):
    """(inputs_length, targets_length) that `span_corruption` gives for `length` tokens.

    The counts in float32, rounded half to even, as `random_spans_noise_mask`
    draws them (a tie such as 70 * 0.15 rounds up there, not in float64).
    """
    noise_density, mean_noise_span_length = _t5_noise(noise_density, mean_noise_span_length)
    length = max(length, 2)
    noise = int(np.round(np.float32(length) * np.float32(noise_density)))
    noise = min(max(noise, 1), length - 1)
    spans = max(int(np.round(np.float32(noise) / np.float32(mean_noise_span_length))), 1)
    extra = 1 if eos else 0
    return length - noise + spans + extra, noise + spans + extra


def span_corruption_tokens_length(inputs_length, noise_density=0.15,
                                  mean_noise_span_length=3.0):
    """The most tokens whose corrupted inputs (sentinels and EOS) fit `inputs_length`.

    T5's `random_spans_helper` (t5/data/preprocessors.py): pretraining text is
    cut into chunks this long (568 tokens for 512 inputs, 114 targets), so the
    encoder is filled rather than padded.
    """
    tokens = inputs_length - 1
    while span_corruption_lengths(tokens + 1, noise_density,
                                  mean_noise_span_length)[0] <= inputs_length:
        tokens += 1
    return tokens


# -------------------------------------------------------------------- BART


def token_masking(token_ids, mask_id, rate=0.15):
    """Replaces each token with `mask_id` with probability `rate` (BERT-style)."""
    rate = validation.probability("rate", rate)
    token_ids = tf.convert_to_tensor(token_ids)
    masked = tf.random.uniform(tf.shape(token_ids)) < rate
    return tf.where(masked, tf.cast(mask_id, token_ids.dtype), token_ids)


def token_deletion(token_ids, rate=0.15):
    """Deletes each token with probability `rate` (the model must find where; 1 would
    delete them all)."""
    rate = validation.rate("rate", rate)
    token_ids = tf.convert_to_tensor(token_ids)
    return tf.boolean_mask(token_ids, tf.random.uniform(tf.shape(token_ids)) >= rate)


def poisson_span_log_probs(poisson_lambda):
    """fairseq's span-length distribution, as log-probabilities over 0, 1, ...

    denoising_dataset.py builds a Categorical over Poisson(lambda) probabilities
    for k = 0, 1, ... up to the first that falls under 1e-7 (kept), renormalised.
    """
    # lambda 0: only length 0, no span would ever cover a word.
    poisson_lambda = validation.positive_number("poisson_lambda", poisson_lambda)
    probs, term, k = [], np.exp(-poisson_lambda), 0
    while True:
        probs.append(term)
        k += 1
        term *= poisson_lambda / k
        if probs[-1] < 1e-7 or k == 128:
            break
    if len(probs) < 2:  # P(0) alone: no span would ever cover a word
        validation.refuse("poisson_lambda", "a mean span of 16 or less (above, P(0) < 1e-7 "
                          "leaves fairseq's span table only length 0)", poisson_lambda)
    return np.log(np.asarray(probs, np.float32))


def _span_lengths(budget, log_probs):
    """Span lengths drawn until they cover `budget` words, the last cut to fit
    (fairseq draws `budget` at a time while the sum falls short); zeros kept."""
    def draw():
        return tf.cast(tf.random.categorical(log_probs[None], budget)[0], tf.int32)

    lengths, = tf.while_loop(lambda drawn: tf.reduce_sum(drawn) < budget,
                             lambda drawn: (tf.concat([drawn, draw()], 0),), (draw(),),
                             shape_invariants=(tf.TensorShape([None]),))
    covered = tf.cumsum(lengths)
    num_spans = tf.minimum(tf.reduce_sum(tf.cast(covered < budget, tf.int32)) + 1,
                           tf.size(lengths))
    before = tf.concat([[0], covered], 0)[tf.maximum(num_spans - 1, 0)]
    return tf.concat([lengths[:num_spans - 1], [budget - before]], 0)[:num_spans]


def _replacements(count, mask_id, mask_random, vocab_size, dtype):
    """`count` replacement tokens: `mask_id`, or with probability `mask_random` a
    random id in [1, vocab_size) as fairseq draws them (`torch.randint(1, len(vocab))`)."""
    masks = tf.fill([count], tf.cast(mask_id, dtype))
    if not mask_random:
        return masks
    random_ids = tf.random.uniform([count], 1, vocab_size, dtype=tf.int32)
    return tf.where(tf.random.uniform([count]) < mask_random, tf.cast(random_ids, dtype), masks)


def _insert(tokens, num_inserts, mask_id, mask_random, vocab_size):
    """fairseq's `add_insertion_noise`: `num_inserts` tokens at uniformly drawn
    positions, ceil(num_inserts * mask_random) of them random ids, the rest masks.

    fairseq's item is `<s> tokens </s>` (`tokens` here comes without the two): it
    passes the share num_inserts / (len + 2) and inserts ceil((len + 2) * share), in
    float64, which is one more where the product rounds up (7 / 25 * 25 =
    7.000000000000001: 8 inserts into 23 tokens), as here.
    """
    size = tf.cast(tf.size(tokens) + 2, tf.float64)
    num_inserts = tf.cast(tf.math.ceil(size * (tf.cast(num_inserts, tf.float64) / size)),
                          tf.int32)
    num_random = tf.cast(tf.math.ceil(tf.cast(num_inserts, tf.float64) * mask_random), tf.int32)
    codes = tf.random.shuffle(tf.concat([  # 0 a kept token, 1 a mask, 2 a random id
        tf.zeros([tf.size(tokens)], tf.int32), tf.fill([num_inserts - num_random], 1),
        tf.fill([num_random], 2)], 0))
    source = tf.gather(tokens, tf.maximum(tf.cumsum(tf.cast(codes == 0, tf.int32)) - 1, 0))
    random_ids = tf.random.uniform(tf.shape(codes), 1, vocab_size or 2, dtype=tf.int32)
    return tf.where(codes == 0, source, tf.where(codes == 1, tf.cast(mask_id, tokens.dtype),
                                                 tf.cast(random_ids, tokens.dtype)))


def _cover_spans(token_ids, positions, head_words, spans, replacements):
    """fairseq's span placement with replace_length 1: the span of `spans[i]` words
    from word `head_words[i]` (its first token at `positions[head_words[i]]`)
    keeps its first token as `replacements[i]` and deletes the rest, up to the
    next `spans[i]`-th word start or the end. A head inside another span is
    deleted with it, so overlapping spans merge under the first one's token."""
    n = tf.size(token_ids)
    heads = tf.gather(positions, head_words)
    ends = tf.gather(tf.concat([positions, [n]], 0),
                     tf.minimum(head_words + spans, tf.size(positions)))
    edges = tf.math.unsorted_segment_sum(
        tf.concat([tf.ones_like(heads), -tf.ones_like(ends)], 0),
        tf.concat([heads + 1, ends], 0), n + 1)
    deleted = tf.cumsum(edges)[:n] > 0
    replaced = tf.tensor_scatter_nd_update(token_ids, heads[:, None], replacements)
    return tf.boolean_mask(replaced, ~deleted)


def text_infilling(token_ids, mask_id, rate=0.3, poisson_lambda=3.0, return_span_lengths=False,
                   word_starts=None, mask_random=0.0, vocab_size=None):
    """BART's text infilling as fairseq's denoising_dataset.py makes it
    (`add_whole_word_mask`, `--mask-length span-poisson --replace-length 1`).

    ceil(rate * words) words (in float32, as fairseq's torch sum) are covered by
    spans of Poisson(lambda) words, the last cut to fit; a zero-length span is an
    inserted mask. Each span starts at a word start drawn without replacement
    (fairseq's `randperm`): its first token becomes one mask and the rest of its
    words are deleted. Spans may overlap: a head inside an earlier span is
    deleted with it (the two merge under one mask), so the spans' union covers
    fewer words than their lengths add up to, as in fairseq. Inserted masks go
    to uniformly drawn positions of the result (`add_insertion_noise`).

    Args:
        token_ids: (n,) int tensor: the item without the <s> and </s> fairseq's has
            (they count in its inserts' rounding, `_insert`).
        rate: share of words masked (`--mask`; 0.3 in Lewis et al., 2020, Sec. 5.1).
        poisson_lambda: mean span length in words (`--poisson-lambda`; 3 in the
            paper, Sec. 2.2; 3.5 in the authors' run, fairseq issue #1899).
        return_span_lengths: also return the (num_spans,) lengths drawn, in
            order, zeros (inserts) included.
        word_starts: None (every token a word) or (n,) bool, True where a word
            starts, by the released rule (GPT-2 BPE: a piece that decodes with a
            leading space); tokens before the first start are never masked.
        mask_random: share of the spans (and inserts) given a random id in
            [1, vocab_size) instead of the mask (`--mask-random`; the paper
            describes none, the authors' run used 0.1).
        vocab_size: the ids' range, needed when mask_random > 0.
    """
    rate = validation.probability("rate", rate)
    mask_random = validation.probability("mask_random", mask_random)
    if mask_random and not vocab_size:
        raise ValueError("text_infilling(mask_random > 0) draws random ids: pass vocab_size.")
    token_ids = tf.convert_to_tensor(token_ids)
    n = tf.size(token_ids)
    starts = (tf.ones([n], tf.bool) if word_starts is None
              else tf.cast(tf.convert_to_tensor(word_starts), tf.bool))
    positions = tf.cast(tf.where(starts)[:, 0], tf.int32)
    words = tf.size(positions)
    budget = tf.cast(tf.math.ceil(tf.cast(words, tf.float32) * tf.constant(rate, tf.float32)),
                     tf.int32)
    lengths = _span_lengths(budget, tf.constant(poisson_span_log_probs(poisson_lambda)))
    spans = tf.boolean_mask(lengths, lengths > 0)
    num_spans = tf.size(spans)
    head_words = tf.random.shuffle(tf.range(words))[:num_spans]
    noised = _cover_spans(token_ids, positions, head_words, spans, _replacements(
        num_spans, mask_id, mask_random, vocab_size, token_ids.dtype))
    noised = _insert(noised, tf.size(lengths) - num_spans, mask_id, mask_random, vocab_size)
    if return_span_lengths:
        return noised, lengths
    return noised


def sentence_permutation(token_ids, sentence_end_id):
    """Splits on `sentence_end_id` (full stops) and shuffles the sentences."""
    token_ids = tf.convert_to_tensor(token_ids)
    is_end = tf.cast(token_ids == sentence_end_id, tf.int32)
    sentence_index = tf.cumsum(is_end) - is_end
    sentences = tf.RaggedTensor.from_value_rowids(token_ids, sentence_index)
    order = tf.random.shuffle(tf.range(sentences.nrows()))
    return tf.gather(sentences, order).flat_values


def document_rotation(token_ids):
    """Rotates the document to begin at a uniformly chosen token."""
    token_ids = tf.convert_to_tensor(token_ids)
    n = tf.size(token_ids)
    start = tf.random.uniform([], 0, tf.maximum(n, 1), dtype=tf.int32)
    return tf.concat([token_ids[start:], token_ids[:start]], 0)


def compose(*functions):
    """One noising function applying `functions` left to right (BART combines them)."""

    def noise(token_ids):
        for function in functions:
            token_ids = function(token_ids)
        return token_ids

    return noise


def bart_noise(noise_fn):
    """A dataset map: 1-D documents -> {"inputs": noise_fn(doc), "targets": doc}."""

    def apply(token_ids):
        return {"inputs": noise_fn(token_ids), "targets": token_ids}

    return apply


# --------------------------------------------------------------- features


def _pad_to(tokens, length, pad_id, what):
    size = tf.size(tokens)
    check = tf.debugging.assert_less_equal(
        size, length,
        message=f"{what} is longer than {what}_length: raise it (nothing is truncated).",
    )
    with tf.control_dependencies([check]):
        padded = tf.pad(tokens, [[0, length - size]], constant_values=pad_id)
    return tf.ensure_shape(padded, [length]), tf.cast(tf.range(length) < size, tf.int32)


def seq2seq_features(example, encoder_length, decoder_length, decoder_start_id, pad_id=0):
    """{"inputs", "targets"} -> (x, y, sample_weight) padded to static lengths.

    The decoder reads `[decoder_start_id] + targets[:-1]` (teacher forcing)
    and predicts `targets`; a target longer than decoder_length fails
    loudly instead of being cut.
    """
    targets = tf.convert_to_tensor(example["targets"])
    encoder_ids, encoder_mask = _pad_to(example["inputs"], encoder_length, pad_id, "encoder")
    labels, label_mask = _pad_to(targets, decoder_length, pad_id, "decoder")
    decoder_ids = tf.concat([tf.constant([decoder_start_id], labels.dtype), labels[:-1]], 0)
    decoder_mask = tf.concat([[1], label_mask[:-1]], 0)
    x = {
        "encoder_token_ids": tf.cast(encoder_ids, tf.int32),
        "encoder_padding_mask": encoder_mask,
        "decoder_token_ids": tf.cast(decoder_ids, tf.int32),
        "decoder_padding_mask": decoder_mask,
    }
    return x, tf.cast(labels, tf.int32), tf.cast(label_mask, tf.float32)


__all__ = [
    "random_spans_noise_mask", "span_corruption", "span_corruption_lengths",
    "span_corruption_tokens_length",
    "token_masking", "token_deletion", "text_infilling", "sentence_permutation",
    "document_rotation", "compose", "bart_noise", "seq2seq_features",
]
