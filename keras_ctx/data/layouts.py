"""Prepared layouts: how `keras-ctx prepare` writes a family's examples and reads them back.

`keras-ctx prepare` (keras_ctx.data.prepare) writes a family's examples once,
before any corruption; the read side batches them and corrupts dynamically
(RoBERTa, ELECTRA, T5, BART: a fresh corruption every time an example is
read), or reads the masks written with them (BERT's static masks).
"""

import dataclasses
from typing import Callable, Optional

import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.common.errors import ConfigError
from keras_ctx.data import permutation, segments, xlnet_stream
from keras_ctx.data import token_counts as counts
from keras_ctx.data.maskers import check_duplicate, masker_for, never_masked_ids
from keras_ctx.data.span_masking import SpanMasker
from keras_ctx.data.tokenizers import (continuation_table, known_token_id, special_token_ids,
                                       token_id_of)
from keras_ctx.data.vocabulary import bilm_inputs, sentence_rows


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a family's pretraining examples are written to shards and read back.

    Args:
        name: the layout's name, recorded in the manifest.
        features: {feature name: length} of the int32 features written
            (length 0: a scalar).
        examples: (documents, numpy Generator) -> iterator of numpy example
            dicts, one epoch of a shard's documents (lists of int32 sentences).
        batches: tf.data of parsed example dicts -> the pretrainer's batches.
        copies: passes over a shard's documents held and shuffled together
            (BERT's dupe_factor); `keras_ctx.data.prepare` cuts shards that
            much smaller so a worker's memory stays bounded.
        with_copies: copies -> the same layout with that many copies, for
            layouts whose masks are drawn when written; None otherwise.
        tokenize: a list of sentences -> a list of int32 id arrays; None: the
            tokenizer's own `tokenize` (ELMo's word vocabulary gives its own).
        ordered: examples are read in the order written, each file whole, no
            shuffling (XLNet: row i of a batch continues row i of the one
            before, for Transformer-XL's memory); the file order still
            changes every epoch.
        records: "int32" (the features as little-endian int32,
            `prepare.record_bytes`) or "text" (one feature, a string:
            `prepare.text_record`).
        counted: (the manifest's token counts, where they come from) -> the
            same layout drawing by them, for a read side that needs the
            corpus' count of each id (SpanBERT's random replacements):
            `prepare` then counts each shard's ids and the manifest records
            their sum (`keras_ctx.data.token_counts`); None: nothing counted.
    """

    name: str
    features: dict
    examples: Callable
    batches: Callable
    copies: int = 1
    with_copies: Optional[Callable] = None
    tokenize: Optional[Callable] = None
    ordered: bool = False
    records: str = "int32"
    counted: Optional[Callable] = None


def _ids_and_size(tokenizer):
    return special_token_ids(tokenizer), tokenizer.vocabulary_size()


def pairs_layout(tokenizer, run, kind="nsp", duplicate=1, static_masking=False, **masking):
    """NSP (BERT) or SOP (ALBERT) pairs as `segments.pair_examples`.

    Args:
        kind: "nsp" or "sop".
        duplicate: passes over each shard's documents (BERT's dupe_factor),
            all instances shuffled together; with `static_masking` each copy
            gets its own masks.
        static_masking: masks drawn when the shard is written, as BERT's
            create_pretraining_data.py (dupe_factor 10, each instance masked
            once per copy); False: masks drawn every time an example is read.
        **masking: the masker's options (`_masker`).
    """
    check_duplicate(duplicate, static_masking)
    ids, vocab = _ids_and_size(tokenizer)
    length = run.sequence_length
    label = segments.PAIR_LABELS[kind]
    masker = masker_for(tokenizer, ids, vocab, dynamic=not static_masking, seed=run.seed,
                     **masking)
    features = {"token_ids": length, "segment_ids": length, "padding_mask": length, label: 0}
    # Masks drawn when written: a graph function (eager ops cost 10x).
    graph_masker = tf.function(masker, reduce_retracing=True)

    def examples(docs, rng):
        pairs = segments.pair_examples(kind, docs, length, ids["cls"], ids["sep"], ids["pad"],
                                       duplicate=duplicate, rng=rng)
        return static_masks(pairs, graph_masker, rng) if static_masking else pairs

    def batches(dataset):
        dataset = dataset.batch(run.batch_size, drop_remainder=True)
        if static_masking:
            return dataset.map(_weights_as_float).prefetch(tf.data.AUTOTUNE)
        return masker.apply(dataset).prefetch(tf.data.AUTOTUNE)

    if not static_masking:
        return Layout(kind, features, examples, batches)
    features.update(dict.fromkeys(_MASK_FEATURES, _predictions(masker, length)))
    return Layout(kind + "_static", features, examples, batches, copies=duplicate,
                  with_copies=lambda copies: pairs_layout(
                      tokenizer, run, kind, copies, static_masking, **masking))


_MASK_FEATURES = ("mask_positions", "mask_ids", "mask_weights")
_STATIC_GROUP = 512  # examples masked per call when a shard is written


def _predictions(masker, length):
    """The number of prediction slots `masker` gives a row of `length` ids.

    Probed with a row of [MASK]s: an id of the vocabulary (a whole-word
    masker looks every id up) that is never masked.
    """
    row = {"token_ids": tf.fill((1, length), masker.mask_token_id),
           "padding_mask": tf.ones((1, length))}
    return int(masker(row, tf.constant([0, 0]))["mask_positions"].shape[-1])


def static_masks(examples, masker, rng):
    """`examples` (numpy dicts) with masks drawn once by `masker` (seeds from `rng`).

    The rows are masked in groups of `_STATIC_GROUP` (one stateless seed per
    group, different masks for every row); `mask_weights` are written as
    ints (TFRecord features here are int64) and read back as float32.
    """
    group = []
    for example in examples:
        group.append(example)
        if len(group) == _STATIC_GROUP:
            yield from _mask_group(group, masker, rng)
            group = []
    if group:
        yield from _mask_group(group, masker, rng)


def _mask_group(group, masker, rng):
    batch = {key: tf.constant(np.stack([e[key] for e in group])) for key in group[0]}
    seed = tf.constant(rng.integers(0, 2**31 - 1, 2), tf.int32)
    masked = {key: np.asarray(value) for key, value in masker(batch, seed).items()}
    masked["mask_weights"] = masked["mask_weights"].astype(np.int32)
    for row in range(len(group)):
        yield {key: value[row] for key, value in masked.items()}


def _weights_as_float(batch):
    return dict(batch, mask_weights=tf.cast(batch["mask_weights"], tf.float32))


def packed_layout(tokenizer, run, spans=False, packing="full_sentences", token_counts=None,
                  **masking):
    """Packed sentences masked when read: FULL-SENTENCES (RoBERTa; SpanBERT with `spans`)
    or ELECTRA's two-segment examples (`packing="two_segments"`): `segments.packed_examples`.

    SpanBERT's random replacements are drawn by the corpus' `token_counts`, which the
    read side takes from the manifest (`Layout.counted`); its batches refuse to draw
    without them."""
    ids, vocab = _ids_and_size(tokenizer)
    length = run.sequence_length

    def examples(docs, rng):
        return segments.packed_examples(docs, length, ids["cls"], ids["sep"], ids["pad"],
                                        mode=packing, rng=rng)

    def batches(dataset):
        dataset = dataset.batch(run.batch_size, drop_remainder=True)
        if spans:
            if token_counts is None:
                raise ConfigError("SpanBERT's prepared examples draw random replacements by "
                                  "the corpus' token counts, which prepare's manifest holds: "
                                  "read them through PreparedInput (`pretrain --data`).")
            masker = SpanMasker(vocab, ids["mask"], continuation_table(tokenizer),
                                special_token_ids=never_masked_ids(ids), seed=run.seed,
                                token_counts=token_counts)
        else:
            masker = masker_for(tokenizer, ids, vocab, dynamic=True, seed=run.seed, **masking)
        return masker.apply(dataset).prefetch(tf.data.AUTOTUNE)

    features = {"token_ids": length, "segment_ids": length, "padding_mask": length}
    name = "packed_spans" if spans else "packed" if packing == "full_sentences" else packing
    counted = (lambda record, where: packed_layout(
        tokenizer, run, spans, packing, counts.checked(record, vocab, where), **masking)
    ) if spans else None
    return Layout(name, features, examples, batches, counted=counted)


def chunks_layout(tokenizer, run, example, length=None, end_token=None):
    """The token stream (documents joined by `end_token`) cut into `length`-id chunks.

    `example(tokenizer, run)` gives the map from a chunk to its features
    (`causal_lm_example`, `span_corruption_example`, `denoising_example`),
    applied when read. A shard's last partial chunk is dropped (less than one
    chunk per shard).
    """
    length = length or run.sequence_length
    end = [token_id_of(tokenizer, end_token, "the end of each document")] if end_token else []

    def examples(docs, rng):
        stream = np.concatenate([np.concatenate([*doc, end]).astype(np.int32)
                                 for doc in docs]) if docs else np.zeros(0, np.int32)
        for start in range(0, len(stream) - length + 1, length):
            yield {"token_ids": stream[start:start + length]}

    def batches(dataset):
        mapped = dataset.map(lambda features: example(tokenizer, run)(features["token_ids"]),
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return mapped.batch(run.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    return Layout("chunks", {"token_ids": length}, examples, batches)


def xlnet_layout(tokenizer, run, eod_token="<eod>", bi_data=True, reuse_len=None,
                 num_predict=None, perm_size=None):
    """XLNet: the rows of its two-segment batches, written in order (Yang et al. 2019).

    As the released create_tfrecords (zihangdai/xlnet data_utils.py) and
    `permutation_dataset`: each shard is one stream of its documents
    (`xlnet_stream.two_segment_stream`'s layout: [reuse, A, <sep>, B, <sep>,
    <cls>], span targets `is_masked` drawn when written, the backward
    `bi_data` rows), cut for the global batch `run.batch_size`, so the
    batch size is fixed when preparing (XLNet's files name their bsz too).
    When read: the rows in order (`Layout.ordered`), batched, then the
    permutation masks drawn afresh (`permutation.permutation_masks`, as
    XLNet's input_fn).
    """
    ids = special_token_ids(tokenizer)
    eod_id = known_token_id(tokenizer, eod_token)
    length, batch = run.sequence_length, run.batch_size
    if bi_data and batch % 2:
        raise ValueError(f"XLNet's prepared rows are laid out for one even global batch "
                         f"size (forward and backward halves), got {batch}: give "
                         "`batch_size` (--batch-size) to prepare, as to pretrain.")
    reuse_len = xlnet_stream.default_reuse_len(length) if reuse_len is None else reuse_len
    if num_predict is None:
        num_predict = xlnet_stream.default_num_predict(length)
    settings = dict(sequence_length=length, batch_size=batch, reuse_len=reuse_len,
                    num_predict=num_predict, bi_data=bool(bi_data), num_replicas=1,
                    sep_id=ids["sep"], cls_id=ids["cls"],
                    word_starts=np.asarray(xlnet_stream.xlnet_word_starts(tokenizer), bool),
                    mask_alpha=xlnet_stream.MASK_ALPHA, mask_beta=xlnet_stream.MASK_BETA,
                    max_span_length=5)

    def examples(docs, rng):
        if not docs:
            return
        data, sentence_ids = xlnet_stream.sentence_stream(docs, eod_id)
        for rows in xlnet_stream.shard_batches(data, sentence_ids, settings, rng):
            for row in range(batch):
                yield dict({name: value[row] for name, value in rows.items()}, row=row)

    def batches(dataset):
        def aligned(rows):
            check = tf.debugging.assert_equal(
                rows.pop("row"), tf.range(batch, dtype=tf.int32),
                message="XLNet's prepared rows were cut for another batch size; prepare "
                        "again with this run's batch size")
            with tf.control_dependencies([check]):
                return {name: tf.identity(value) for name, value in rows.items()}

        dataset = dataset.batch(batch, drop_remainder=True).map(aligned)
        return permutation.permutation_masks(
            dataset, num_predict=num_predict, seed=run.seed,
            functional_ids=(ids["sep"], ids["cls"]), reuse_len=reuse_len,
            perm_size=perm_size).prefetch(tf.data.AUTOTUNE)

    features = {"token_ids": length, "padding_mask": length, "segment_ids": length,
                "is_masked": length, "is_continuation": 0, "is_backward": 0, "row": 0}
    return Layout("xlnet_rows", features, examples, batches, ordered=True)


def bilm_layout(vocabulary, run):
    """ELMo: the corpus' sentences, shuffled, as text (Peters et al. 2018).

    The biLM reads each sentence as characters and predicts its words, with
    nothing drawn at random: a shard holds its sentences in a seeded order;
    `bilm_inputs` makes `character_ids` and word `token_ids` when read, a
    sentence longer than a row continuing in the next rows (`sentence_rows`),
    as `bilm_dataset` does.
    """
    def examples(docs, rng):
        sentences = [sentence for doc in docs for sentence in doc]
        for index in rng.permutation(len(sentences)):
            yield {"sentence": sentences[index]}

    def batches(dataset):
        sentences = sentence_rows(dataset.map(lambda record: record["sentence"]),
                                  run.sequence_length)
        return (sentences.batch(run.batch_size, drop_remainder=True)
                .map(lambda batch: bilm_inputs(batch, vocabulary, run.sequence_length),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .prefetch(tf.data.AUTOTUNE))

    return Layout("sentences", {"sentence": 0}, examples, batches,
                  tokenize=lambda sentences: sentences, records="text")
