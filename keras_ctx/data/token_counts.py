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


def of_arrays(id_arrays, vocabulary_size):
    """(vocabulary_size,) int64 counts of the ids in `id_arrays` (int arrays)."""
    ids = [np.asarray(a, np.int64).ravel() for a in id_arrays]
    ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocabulary_size):
        raise ConfigError(f"token id {int(ids.max() if ids.max() >= vocabulary_size else ids.min())}"
                          f" is outside the vocabulary of {vocabulary_size}: count with the "
                          "tokenizer that made the ids.")
    return np.bincount(ids, minlength=vocabulary_size).astype(np.int64)


def of_documents(documents, vocabulary_size):
    """The counts of a tf.data of tokenized documents (ragged [sentences, tokens] ids), in
    one streamed pass (`_DOCUMENTS_PER_COUNT` documents at a time)."""
    if documents.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ConfigError("The token counts are made in one pass over the documents, which "
                          "repeat forever here: count them before `.repeat()`, or give the "
                          "counts.")
    flat = documents.map(lambda document: tf.cast(document.flat_values, tf.int32))
    batches = flat.ragged_batch(_DOCUMENTS_PER_COUNT).map(
        lambda ids: (tf.math.bincount(ids.flat_values, minlength=vocabulary_size,
                                      maxlength=vocabulary_size, dtype=tf.int64), ids.nrows()))
    progress.say("Counting the corpus' token ids (SpanBERT draws its random replacements "
                 "by their frequency: one pass)...")
    counts = np.zeros(vocabulary_size, np.int64)
    for part, _ in progress.current().count(batches.as_numpy_iterator(), "documents counted",
                                            weight=lambda item: int(item[1])):
        counts += part
    progress.say(f"Counted {int(counts.sum()):,} tokens, {int(np.count_nonzero(counts)):,} "
                 f"of the {vocabulary_size:,} ids.")
    return counts


def as_record(counts):
    """The counts as a JSON list of ints (what the manifest holds)."""
    return [int(c) for c in counts]


def from_record(record, vocabulary_size, where):
    """The (vocabulary_size,) counts a manifest recorded, or ConfigError naming `where`."""
    counts = np.asarray(record if record is not None else [], np.int64)
    if counts.shape != (vocabulary_size,) or counts.min(initial=0) < 0 or counts.sum() <= 0:
        raise ConfigError(f"{where} holds no count of the corpus' {vocabulary_size} token ids "
                          "(SpanBERT's random replacements are drawn by them): prepare the "
                          "data again with this keras_ctx.")
    return counts


__all__ = ["of_arrays", "of_documents", "as_record", "from_record", "MANIFEST_KEY"]
