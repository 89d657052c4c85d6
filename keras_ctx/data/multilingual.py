"""Multilingual pretraining data: smoothed language sampling, XLM text streams and TLM pairs.

Language sampling (exponentially smoothed, so that small languages are seen
more often than their share of the data):

    p_i = n_i / sum_j n_j,      q_i = p_i^alpha / sum_j p_j^alpha

alpha = 0.7 for mBERT (Devlin et al., multilingual/README.md: "exponentiate
each probability by some factor S and then re-normalize ... S=0.7") and
alpha = 0.5 for XLM (Lample & Conneau 2019, Sec. 3.1).

XLM (Lample & Conneau 2019, Sec. 3.2-3.4) feeds CLM and MLM with streams of
text: consecutive sentences, each opened by </s>, cut into fixed-length
windows (256 tokens in the paper); and TLM with a parallel pair
`</s> source </s> </s> target </s>`, positions restarting at 0 where the
target begins, each token carrying its side's language id, masked on both
sides so that a masked word can be predicted from its translation.

Examples are dicts of int32 (sequence_length,) `token_ids`, `padding_mask`,
`position_ids`, `language_ids` (the XLM backbone's inputs); batch them with
`drop_remainder=True`, then mask with `xlm_masker` (an `MLMMasker` with
special_token_ids = (pad, eos) that draws tokens with weights 1/sqrt(count),
Lample & Conneau 2019, Sec. 3.3).
"""

import numpy as np
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.common.validation import positive_int

MBERT_ALPHA = 0.7  # Devlin et al., google-research/bert multilingual.md
XLM_ALPHA = 0.5  # Lample & Conneau 2019, Sec. 3.1
XLM_STREAM_LENGTH = 256  # Lample & Conneau 2019, Sec. 3.3
XLM_MAX_LENGTH = 100  # facebookresearch/XLM train.py --max_len: longer pairs are removed


def smoothed_probabilities(sizes, alpha):
    """q_i = p_i^alpha / sum_j p_j^alpha with p_i = n_i / sum_j n_j.

    Args:
        sizes: sentence (or token) counts per language, a list or a dict.
        alpha: smoothing exponent (MBERT_ALPHA 0.7, XLM_ALPHA 0.5; 1 = by size,
            0 = uniform).

    Returns:
        numpy float64 probabilities (a dict when `sizes` is a dict).
    """
    names = list(sizes) if isinstance(sizes, dict) else None
    counts = np.asarray(list(sizes.values()) if names else sizes, np.float64)
    if counts.ndim != 1 or not len(counts) or np.any(counts <= 0):
        raise ValueError(f"`sizes` must be positive counts, one per language; got {sizes!r}.")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"`alpha` must be in [0, 1], got {alpha}.")
    p = counts / counts.sum()
    q = p ** alpha
    q = q / q.sum()
    return dict(zip(names, q)) if names else q


def sample_languages(datasets, sizes, alpha, seed=0):
    """Interleaves per-language datasets, drawing language i with probability q_i.

    Args:
        datasets: {language: tf.data.Dataset}; each is repeated forever, so the
            mixture keeps q whatever the datasets' lengths.
        sizes: {language: count} giving p_i (e.g. sentences per language).
        alpha: smoothing exponent (MBERT_ALPHA, XLM_ALPHA).
        seed: sampling seed.

    Returns:
        An infinite tf.data.Dataset; take() or steps_per_epoch bounds it.
        Batch each language's dataset first to sample whole batches per
        language as XLM does.
    """
    missing = sorted(set(datasets) ^ set(sizes))
    if missing:
        raise ValueError(f"`datasets` and `sizes` must name the same languages; {missing} "
                         "appear in only one.")
    q = smoothed_probabilities({name: sizes[name] for name in datasets}, alpha)
    return tf.data.Dataset.sample_from_datasets(
        [datasets[name].repeat() for name in datasets], weights=[q[name] for name in datasets],
        seed=seed)


def _check_ids(name, values):
    if values < 0:
        raise ValueError(f"`{name}` must be a non-negative id, got {values}.")


def text_stream(sentences, sequence_length, eos_id, language_id):
    """XLM's CLM / MLM input: sentences, each opened by </s>, cut into windows.

    Args:
        sentences: tf.data.Dataset of 1-D int token ids, one sentence each, in
            corpus order.
        sequence_length: window length (XLM_STREAM_LENGTH in the paper).
        eos_id: id of </s>.
        language_id: the stream's language id.

    Returns:
        tf.data.Dataset of dicts (token_ids, padding_mask, position_ids,
        language_ids), each (sequence_length,); a last partial window is dropped.
    """
    _check_ids("eos_id", eos_id)
    _check_ids("language_id", language_id)
    positive_int("sequence_length", sequence_length, least=2)

    def opened(sentence):
        sentence = tf.cast(sentence, tf.int32)
        return tf.concat([[eos_id], sentence], axis=0)

    tokens = sentences.map(opened).unbatch().batch(sequence_length, drop_remainder=True)

    def example(window):
        return {"token_ids": window,
                "padding_mask": tf.ones_like(window),
                "position_ids": tf.range(sequence_length, dtype=tf.int32),
                "language_ids": tf.fill([sequence_length], tf.constant(language_id, tf.int32))}

    return tokens.map(example)


def tlm_example(source, target, sequence_length, eos_id, pad_id, source_language,
                target_language):
    """One TLM example from a parallel pair (numpy or tensors of 1-D ids).

    `</s> source </s> </s> target </s>`, padded with `pad_id` to
    `sequence_length`; positions 0.. on each side; the side's language id.
    Each side is truncated to (sequence_length - 4) // 2 tokens when too long.
    """
    source = tf.cast(source, tf.int32)
    target = tf.cast(target, tf.int32)
    side = (sequence_length - 4) // 2
    if side < 1:
        raise ValueError(f"`sequence_length` {sequence_length} leaves no room for a pair "
                         "(it needs 4 </s> and a token per side).")
    eos = tf.constant([eos_id], tf.int32)
    first = tf.concat([eos, source[:side], eos], 0)
    second = tf.concat([eos, target[:side], eos], 0)
    tokens = tf.concat([first, second], 0)
    length = tf.shape(tokens)[0]
    pad = sequence_length - length
    positions = tf.concat([tf.range(tf.shape(first)[0]), tf.range(tf.shape(second)[0])], 0)
    languages = tf.concat([tf.fill(tf.shape(first), source_language),
                           tf.fill(tf.shape(second), target_language)], 0)

    def padded(values, fill):
        return tf.ensure_shape(tf.concat([values, tf.fill([pad], fill)], 0), [sequence_length])

    return {"token_ids": padded(tokens, pad_id),
            "padding_mask": padded(tf.ones_like(tokens), 0),
            "position_ids": padded(positions, 0),
            "language_ids": padded(tf.cast(languages, tf.int32), source_language)}


def tlm_pairs(pairs, sequence_length, eos_id, pad_id, source_language, target_language,
              swap=True, seed=0, max_length=XLM_MAX_LENGTH):
    """TLM examples from a dataset of (source ids, target ids) pairs.

    With `swap` (XLM trains TLM in both directions), each pair is presented
    target-first with probability 1/2. A pair with an empty side, or a side
    longer than `max_length` tokens (or than the (sequence_length - 4) // 2
    that fit), is left out, as XLM's loader removes empty and long sentences
    (`remove_empty_sentences`, `remove_long_sentences(max_len)`): a truncated
    side would no longer translate the other.
    """
    for name, value in (("eos_id", eos_id), ("pad_id", pad_id),
                        ("source_language", source_language),
                        ("target_language", target_language)):
        _check_ids(name, value)
    positive_int("max_length", max_length)
    longest = min(max_length, (sequence_length - 4) // 2)

    def fits(source, target):
        sizes = tf.stack([tf.size(source), tf.size(target)])
        return tf.reduce_all((sizes > 0) & (sizes <= longest))

    def make(source, target):
        forward = tlm_example(source, target, sequence_length, eos_id, pad_id,
                              source_language, target_language)
        if not swap:
            return forward
        backward = tlm_example(target, source, sequence_length, eos_id, pad_id,
                               target_language, source_language)
        flip = tf.random.uniform([], seed=seed) < 0.5
        return {k: tf.where(flip, backward[k], forward[k]) for k in forward}

    return pairs.filter(fits).map(make)


def xlm_masker(vocabulary_size, mask_id, eos_id, pad_id, token_counts, seed=0, **kwargs):
    """XLM's MLM / TLM masking: BERT's 15% / 80-10-10, tokens drawn by 1/sqrt(frequency).

    Lample & Conneau 2019, Sec. 3.3: the masked tokens "are sampled according
    to a multinomial distribution whose weights are proportional to the square
    root of their invert frequencies". `token_counts` are the training
    corpus' counts per vocabulary id (XLM's dictionary counts).

    Returns:
        a `keras_ctx.data.masking.MLMMasker` (`masker.apply(batched_dataset)`);
        `kwargs` go to it (dynamic, max_predictions, ...).
    """
    from keras_ctx.data.masking import MLMMasker, inverse_frequency_weights

    for name, value in (("mask_id", mask_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        _check_ids(name, value)
    return MLMMasker(vocabulary_size, mask_id, special_token_ids=(pad_id, eos_id), seed=seed,
                     token_weights=inverse_frequency_weights(token_counts), **kwargs)


__all__ = ["MBERT_ALPHA", "XLM_ALPHA", "XLM_MAX_LENGTH", "XLM_STREAM_LENGTH", "sample_languages",
           "smoothed_probabilities", "text_stream", "tlm_example", "tlm_pairs", "xlm_masker"]
