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
`drop_remainder=True`, then mask with `xlm_masker` (XLM's `mask_out`: targets
drawn over the batch with weights 1/sqrt(count), Lample & Conneau 2019, Sec. 3.3).
"""

import numpy as np
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.common.validation import (non_negative_int, non_negative_number, positive_int,
                                         probability)

from keras_ctx.data.masking import (
    MASK_RATE,
    MASK_TOKEN_RATE,
    RANDOM_TOKEN_RATE,
    Masker,
    candidate_mask,
    corrupted_batch,
    gumbel_keys,
    sorted_slots,
)

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
    alpha = probability("alpha", alpha)
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
    non_negative_int(name, values)


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


# Prediction slots per token: XLM draws its targets over the whole batch, so a row
# may hold more than 15% (keras_ctx's choice; docs/notes/data-references.md, XLM).
XLM_SLOT_RATE = 0.25
XLM_SAMPLE_ALPHA = 0.5  # Lample & Conneau 2019, Sec. 3.3: weights 1/sqrt(frequency)


def xlm_target_scores(token_counts, sample_alpha, pad_id, eos_id):
    """XLM's `mask_scores` (xlm/trainer.py @cd281d3): max(count, 1) ** -sample_alpha,
    0 for <pad>, </s> and every id the corpus never holds (XLM's dictionary counts
    its special words 0), as float32 per vocabulary id."""
    counts = np.asarray(token_counts, np.float64)
    if counts.ndim != 1 or not len(counts) or np.any(counts < 0) or not np.all(
            np.isfinite(counts)):
        raise ValueError("`token_counts` must be a 1-D array of non-negative token counts, "
                         f"one per vocabulary id; got shape {counts.shape}.")
    scores = np.maximum(counts, 1.0) ** -float(sample_alpha)
    scores[counts == 0] = 0.0
    scores[[pad_id, eos_id]] = 0.0
    return scores.astype(np.float32)


class XLMMasker(Masker):
    """XLM's `mask_out` (xlm/trainer.py @cd281d3) as a tf.data map over batches.

    With `sample_alpha` > 0, ceil(mask_rate * N) targets are drawn without
    replacement over the whole batch's N real tokens, by weights
    `xlm_target_scores` (XLM draws over slen * bs positions, its padding with
    weight 0; its batches grouped by length carry little padding, keras_ctx's
    fixed-length TLM rows much, so N counts the real tokens). With
    `sample_alpha` 0 (XLM's code default), every real position is a target with
    probability `mask_rate`, </s> included. Either way position 0 of every row
    is never a target (XLM: `pred_mask[0] = 0`), and each target gets 80/10/10.
    Output keys as `keras_ctx.data.masking.MLMMasker`; `max_predictions`
    slots per row (default ceil(XLM_SLOT_RATE T)), a row that draws more keeps
    its highest-drawn targets.
    """

    def __init__(self, vocabulary_size, mask_token_id, eos_id, pad_id, token_counts,
                 sample_alpha=XLM_SAMPLE_ALPHA, mask_rate=MASK_RATE,
                 mask_token_rate=MASK_TOKEN_RATE, random_token_rate=RANDOM_TOKEN_RATE,
                 max_predictions=None, dynamic=True, seed=0):
        super().__init__(vocabulary_size, mask_token_id, (pad_id,), mask_rate,
                         mask_token_rate, random_token_rate, max_predictions,
                         dynamic=dynamic, seed=seed)
        self.sample_alpha = non_negative_number("sample_alpha", sample_alpha)
        self.scores = xlm_target_scores(token_counts, sample_alpha, pad_id, eos_id)
        if len(self.scores) != vocabulary_size:
            raise ValueError(f"`token_counts` has {len(self.scores)} entries for a "
                             f"vocabulary of {vocabulary_size}: count every id.")

    def __call__(self, batch, seed):
        batch = dict(batch)
        token_ids = tf.cast(batch["token_ids"], tf.int32)
        length = token_ids.shape[1]
        slots = min(length, self.max_predictions or int(np.ceil(XLM_SLOT_RATE * length)))
        seeds = tf.unstack(tf.random.experimental.stateless_split(
            tf.cast(seed, tf.int32), 3))
        real = candidate_mask(token_ids, batch.get("padding_mask"), self.special_token_ids)
        uniform = tf.random.stateless_uniform(tf.shape(token_ids), seeds[0])
        if self.sample_alpha == 0:
            drawn = real & (uniform <= self.mask_rate)
            scores = uniform
        else:
            weights = tf.gather(tf.constant(self.scores), token_ids)
            # Gumbel top-k over the batch: numpy's choice(replace=False, p=) in XLM.
            scores = gumbel_keys(uniform, weights, real & (weights > 0))
            count = tf.math.ceil(self.mask_rate * tf.reduce_sum(tf.cast(real, tf.float32)))
            flat = tf.sort(tf.reshape(scores, [-1]), direction="DESCENDING")
            count = tf.minimum(tf.cast(count, tf.int32), tf.size(flat))
            threshold = tf.gather(flat, tf.maximum(count - 1, 0))
            drawn = (scores >= threshold) & (count > 0) & tf.math.is_finite(scores)
        drawn &= tf.range(length)[None] > 0  # XLM: pred_mask[0] = 0
        # The row's `slots` highest-drawn targets, listed in increasing position.
        key = tf.where(drawn, scores, -float("inf"))
        top, positions = tf.math.top_k(key, k=slots)
        weights = tf.cast(top > -float("inf"), tf.float32)
        positions = sorted_slots(positions, weights)  # top_k: the used slots come first
        selected = tf.reduce_any(
            tf.equal(positions[:, :, None], tf.range(length)[None, None]) &
            (weights[:, :, None] > 0), axis=1)
        batch.update(corrupted_batch(token_ids, selected, positions, weights,
                                     (seeds[1], seeds[2]), self.vocabulary_size,
                                     self.mask_token_id, self.mask_token_rate,
                                     self.random_token_rate, self.random_token_range))
        return batch


def xlm_masker(vocabulary_size, mask_id, eos_id, pad_id, token_counts, seed=0, **kwargs):
    """XLM's MLM / TLM masking: 15% of the batch's tokens, drawn by 1/sqrt(frequency), 80/10/10.

    Lample & Conneau 2019, Sec. 3.3: the masked tokens "are sampled according
    to a multinomial distribution whose weights are proportional to the square
    root of their invert frequencies" (XLM's `--sample_alpha 0.5`; its code's
    default 0 draws uniformly). `token_counts` are the training corpus' counts
    per vocabulary id (XLM's dictionary counts).

    Returns:
        an `XLMMasker` (`masker.apply(batched_dataset)`); `kwargs` go to it
        (sample_alpha, dynamic, max_predictions, ...).
    """
    for name, value in (("mask_id", mask_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        _check_ids(name, value)
    return XLMMasker(vocabulary_size, mask_id, eos_id, pad_id, token_counts, seed=seed,
                     **kwargs)


__all__ = ["MBERT_ALPHA", "XLM_ALPHA", "XLM_MAX_LENGTH", "XLM_SAMPLE_ALPHA", "XLM_SLOT_RATE",
           "XLM_STREAM_LENGTH", "XLMMasker", "sample_languages", "smoothed_probabilities",
           "text_stream", "tlm_example", "tlm_pairs", "xlm_masker", "xlm_target_scores"]
