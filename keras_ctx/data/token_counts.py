"""The corpus' count of each token id, the distribution SpanBERT draws random replacements from.

SpanBERT replaces a span by random tokens drawn as `np.random.choice(tokens)` over the
training corpus' token buffer (facebookresearch/SpanBERT `pretraining/fairseq/data/
masking.py` `span_masking`; `no_nsp_span_bert_dataset.py` passes `self.dataset.tokens`,
the sentences' tokens without [CLS]/[SEP]): by corpus frequency. These counts are that
distribution, made in one streamed pass: a vocabulary-sized array in memory, never the
corpus. `keras-ctx prepare` counts each shard as it writes it and records the sum in the
manifest; a streamed run counts its corpus before training and keeps the counts in its
run directory (`kept_in`, `of_corpus`), so that a resumed run reads them back. A run of
several corpora (XLM's languages) keeps each one's counts, and its number of sentences,
apart (`kept_or_counted(part=...)`: token_counts.en.json), so a changed one alone is
counted again.
"""

import contextlib
import contextvars
import json
import os

import numpy as np

from keras_ctx.common import files, progress, validation
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.data import fingerprints

MANIFEST_KEY = "token_counts"  # prepare's manifest: the corpus' count of each id
KEPT_FILE = "token_counts.json"  # a run directory's: its corpus' counts, made once
# What `kept_in` writes: the counts and what they were made from (the corpus'
# fingerprint, keras_ctx.data.fingerprints, and the tokenizer's); read closed.
KEPT_SCHEMA = {"corpus": ((dict, type(None)), None, True),
               "tokenizer": ((str, type(None)), None, True),
               "vocabulary_size": (int, 1, True),
               MANIFEST_KEY: (validation.ListOf(int, 0), None, True),
               # the stream's elements counted (XLM's sentences, its languages' weights)
               "elements": (int, 0, False)}
_KEPT = contextvars.ContextVar("kept_token_counts", default=None)
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


def in_batch(ids, vocabulary_size):
    """(vocabulary_size + 1 counts, the first id outside [0, V) or 0) of a tensor of ids, in
    a tf.data map: an id outside goes to the extra last bin (bincount's maxlength would drop
    it silently), for `add` to refuse."""
    ids = tf.cast(ids, tf.int64)
    outside = (ids < 0) | (ids >= vocabulary_size)
    binned = tf.cast(tf.where(outside, tf.cast(vocabulary_size, tf.int64), ids), tf.int32)
    first = tf.concat([tf.boolean_mask(ids, outside), tf.zeros(1, tf.int64)], 0)[0]
    return tf.math.bincount(binned, minlength=vocabulary_size + 1,
                            maxlength=vocabulary_size + 1, dtype=tf.int64), first


def add(counts, part, first_outside):
    """`counts` += one `in_batch` result, or ConfigError naming the id outside."""
    vocabulary_size = len(counts)
    if part[vocabulary_size]:
        raise _out_of_range(int(first_outside), vocabulary_size)
    counts += part[:vocabulary_size]


SPANBERT_COUNT = ("the corpus'", "documents",
                  "SpanBERT draws its random replacements by their frequency")


def of_documents(documents, vocabulary_size):
    """The counts of a tf.data of tokenized documents (ragged [sentences, tokens] ids), in
    one streamed pass (`_DOCUMENTS_PER_COUNT` documents at a time)."""
    return counted(documents, vocabulary_size)[0]


def counted(elements, vocabulary_size, about=SPANBERT_COUNT):
    """(counts, number of elements) of a tf.data of token ids (documents, ragged
    [sentences, tokens], or sentences), in one streamed pass; `about`: (whose, the elements'
    name, why they are counted) for the log."""
    whose, unit, why = about
    if elements.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ConfigError(f"The token counts are made in one pass over the {unit}, which "
                          "repeat forever here: count them before `.repeat()`, or give the "
                          "counts.")
    batches = elements.ragged_batch(_DOCUMENTS_PER_COUNT).map(
        lambda ids: in_batch(ids.flat_values, vocabulary_size) + (ids.nrows(),))
    progress.say(f"Counting {whose} token ids ({why}: one pass)...")
    counts, total = np.zeros(vocabulary_size, np.int64), 0
    for part, first_outside, rows in progress.current().count(
            batches.as_numpy_iterator(), f"{unit} counted", weight=lambda item: int(item[2])):
        add(counts, part, first_outside)
        total += int(rows)
    progress.say(f"Counted {int(counts.sum()):,} tokens in {total:,} {unit}, "
                 f"{int(np.count_nonzero(counts)):,} of the {vocabulary_size:,} ids.")
    return counts, total


class _Kept:
    """Where `kept_record` reads and keeps a run's records (`kept_in`)."""

    def __init__(self, directory, corpus, resume):
        self.directory = os.fspath(directory)
        self.corpus = corpus
        self.resume = resume
        self.made = {}  # {path: the record made in the block}, written at its end

    def path(self, part=None):
        name = KEPT_FILE if part is None else KEPT_FILE.replace(".json", f".{part}.json")
        return os.path.join(self.directory, name)


@contextlib.contextmanager
def kept_in(directory, corpus, resume=True):
    """Within it, `kept_record` (`of_corpus`'s counts, a recipe's other run files) reads a
    record kept in `directory` when it was made from the same inputs (`corpus`: the run's
    fingerprint; the tokenizer), or makes it; records made are written there (atomically)
    when the block ends without an error, i.e. once the run is claimed. A resumed run does
    not count again; a changed corpus (--corpus-changed continue) or another tokenizer is
    counted again. `resume`: whether the run resumes (`pretrain`'s --no-resume: False), for
    a record only a resumed run reads back (`kept_record(fresh_reads=False)`)."""
    kept = _Kept(directory, corpus, resume)
    token = _KEPT.set(kept)
    try:
        yield kept
    finally:
        _KEPT.reset(token)
    for path, record in kept.made.items():
        files.write_json(path, record)


def kept_here():
    """The `kept_in` block's record (its `directory`, `resume`, `made`), or None outside one."""
    return _KEPT.get()


def kept_record(name, made_from, make, read, fresh_reads=True, on_other=None):
    """The record `name` of the `kept_in` block's run directory: `made_from` (JSON, or a
    function that gives it) plus `make()`'s fields, read back where a record of the same
    `made_from` is kept there (and the run resumes, with `fresh_reads=False`), else made and
    kept once the run is claimed; `make()`'s fields alone outside a `kept_in` block. A run
    reads and keeps each record once.

    read: path -> the kept record, checked (`validation.read_fields`).
    fresh_reads: False for a record whose `made_from` leaves an input out on purpose (CoVe's
        target words are kept when the pair file changes): a new run makes it again.
    on_other: (kept record, made_from) -> None, called before a kept record of other inputs
        is made again (to say why).
    Returns (record, whether it was read back).
    """
    kept = _KEPT.get()
    if kept is None:
        return make(), False
    path = os.path.join(kept.directory, name)
    made_from = made_from() if callable(made_from) else made_from  # costly: within a run only
    made_from = json.loads(json.dumps(made_from))  # as read back (tuples as lists)
    if path in kept.made:  # asked twice in one run (CoVe's pretrainer and dataset)
        return kept.made[path], False
    if (fresh_reads or kept.resume) and os.path.isfile(path):
        record = read(path)
        if {key: record[key] for key in made_from} == made_from:
            return record, True
        if on_other is not None:
            on_other(record, made_from)
    kept.made[path] = {**made_from, **make()}
    return kept.made[path], False


def of_corpus(documents, tokenizer, vocabulary_size):
    """`of_documents(documents)` of a run's corpus, tokenized by `tokenizer`: read back from
    the run directory where `kept_in` kept them for this corpus and tokenizer."""
    return kept_or_counted(lambda: (of_documents(documents, vocabulary_size), None),
                           tokenizer, vocabulary_size)[0]


def kept_or_counted(count, tokenizer, vocabulary_size, part=None, whose="the corpus'"):
    """`count()`'s (counts, number of elements or None) of a run's corpus, tokenized by
    `tokenizer`: read back from the run directory where `kept_in` kept them for this corpus
    and tokenizer (the number None in a record written without it), through `kept_record`.

    part: (name, source) of one of the run's corpora, kept apart (token_counts.NAME.json)
        with the fingerprint of `source` (`fingerprints.corpus`), not the run's.
    """
    kept = _KEPT.get()
    if kept is None:
        return count()
    path = kept.path(part and part[0])
    made_from = {"corpus": fingerprints.corpus(part[1]) if part else kept.corpus,
                 "tokenizer": fingerprints.tokenizer(tokenizer),
                 "vocabulary_size": vocabulary_size}

    made = []

    def counted_now():
        made.extend(count())
        total = made[1]
        return {MANIFEST_KEY: as_record(made[0]), **({} if total is None else {"elements": total})}

    def other(record, made_from):
        changed = [key for key in made_from if record[key] != made_from[key]]
        progress.say(f"The token counts in {path} are of another {' and '.join(changed)}: "
                     f"counting again.{_corpus_change(record, made_from)}")

    record, read = kept_record(
        os.path.basename(path), made_from, counted_now,
        lambda path: validation.read_fields(path, "a run's token counts", KEPT_SCHEMA,
                                            "delete it (the run counts its corpus again)"),
        on_other=other)
    if made:  # counted now: as counted (an empty corpus is refused where it is read)
        return made[0], made[1]
    counts = checked(record[MANIFEST_KEY], vocabulary_size, path)
    if read:
        progress.say(f"Read {whose} token counts from {path} (counted when the run "
                     f"began: {int(counts.sum()):,} tokens).")
    return counts, record.get("elements")


def _corpus_change(record, made_from):
    """A sentence naming the corpus files that changed since the kept counts, or ""."""
    before, now = record["corpus"], made_from["corpus"]
    if before == now or not isinstance(before, dict):
        return ""
    return f" Since they were counted: {fingerprints.describe_change(before, now)}."


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


__all__ = ["of_arrays", "of_documents", "counted", "of_corpus", "kept_or_counted", "in_batch",
           "add", "kept_in", "kept_here", "kept_record", "as_record", "checked", "MANIFEST_KEY",
           "KEPT_FILE"]
