"""The corpus' count of each token id, the distribution SpanBERT draws random replacements from.

SpanBERT replaces a span by random tokens drawn as `np.random.choice(tokens)` over the
training corpus' token buffer (facebookresearch/SpanBERT `pretraining/fairseq/data/
masking.py` `span_masking`; `no_nsp_span_bert_dataset.py` passes `self.dataset.tokens`,
the sentences' tokens without [CLS]/[SEP]): by corpus frequency. These counts are that
distribution, made in one streamed pass: a vocabulary-sized array in memory, never the
corpus. `keras-ctx prepare` counts each shard as it writes it and records the sum in the
manifest; a streamed run counts its corpus before training.
"""

import numpy as np

from keras_ctx.common import progress
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.optional import tensorflow as tf

MANIFEST_KEY = "token_counts"  # prepare's manifest: the corpus' count of each id
_DOCUMENTS_PER_COUNT = 1024  # documents counted per bincount (one V-sized sum each)


def _out_of_range(token_id, vocabulary_size):
    return ConfigError(f"token id {token_id} is outside the vocabulary of {vocabulary_size}: "
                       "count with the tokenizer that made the ids.")


def of_arrays(id_arrays, vocabulary_size):
    """(vocabulary_size,) int64 counts of the ids in `id_arrays` (int arrays)."""
    ids = [np.asarray(a, np.int64).ravel() for a in id_arrays]
    ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    outside = ids[(ids < 0) | (ids >= vocabulary_size)]
    if outside.size:
        raise _out_of_range(int(outside[0]), vocabulary_size)
    return np.bincount(ids, minlength=vocabulary_size).astype(np.int64)


def of_documents(documents, vocabulary_size):
    """The counts of a tf.data of tokenized documents (ragged [sentences, tokens] ids), in
    one streamed pass (`_DOCUMENTS_PER_COUNT` documents at a time)."""
    if documents.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ConfigError("The token counts are made in one pass over the documents, which "
                          "repeat forever here: count them before `.repeat()`, or give the "
                          "counts.")
    flat = documents.map(lambda document: tf.cast(document.flat_values, tf.int64))

    def count(ids):
        # An id outside [0, V) goes to one extra bin (bincount's maxlength would drop it
        # silently) and is refused below, with the first such id.
        ids = ids.flat_values
        outside = (ids < 0) | (ids >= vocabulary_size)
        binned = tf.cast(tf.where(outside, tf.cast(vocabulary_size, tf.int64), ids), tf.int32)
        first = tf.concat([tf.boolean_mask(ids, outside), tf.zeros(1, tf.int64)], 0)[0]
        return tf.math.bincount(binned, minlength=vocabulary_size + 1,
                                maxlength=vocabulary_size + 1, dtype=tf.int64), first

    batches = flat.ragged_batch(_DOCUMENTS_PER_COUNT).map(
        lambda ids: count(ids) + (ids.nrows(),))
    progress.say("Counting the corpus' token ids (SpanBERT draws its random replacements "
                 "by their frequency: one pass)...")
    counts = np.zeros(vocabulary_size, np.int64)
    for part, first_outside, _ in progress.current().count(
            batches.as_numpy_iterator(), "documents counted", weight=lambda item: int(item[2])):
        if part[vocabulary_size]:
            raise _out_of_range(int(first_outside), vocabulary_size)
        counts += part[:vocabulary_size]
    progress.say(f"Counted {int(counts.sum()):,} tokens, {int(np.count_nonzero(counts)):,} "
                 f"of the {vocabulary_size:,} ids.")
    return counts


def as_record(counts):
    """The counts as a JSON list of ints (what the manifest holds)."""
    return [int(c) for c in counts]


def checked(counts, vocabulary_size, where="`token_counts`"):
    """`counts` as (vocabulary_size,) int64, one non-negative count per id with a positive
    sum, or ConfigError naming `where` (a manifest, or the argument a user passed)."""
    array = np.asarray(counts if counts is not None else [])
    whole = array.size == 0 or (np.all(np.isfinite(array)) and np.all(array == np.round(array)))
    if (array.shape != (vocabulary_size,) or not whole or array.min(initial=0) < 0
            or array.sum() <= 0):
        raise ConfigError(f"{where} must hold one count of the corpus' token ids per id of "
                          f"the vocabulary of {vocabulary_size}, whole and non-negative, some "
                          f"positive (got shape {array.shape}): count them with "
                          "keras_ctx.data.token_counts, or prepare the data again with this "
                          "keras_ctx.")
    return array.astype(np.int64)


def from_record(record, vocabulary_size, where):
    """The (vocabulary_size,) counts a manifest recorded, or ConfigError naming `where`."""
    return checked(record, vocabulary_size, where)


__all__ = ["of_arrays", "of_documents", "as_record", "checked", "from_record", "MANIFEST_KEY"]
