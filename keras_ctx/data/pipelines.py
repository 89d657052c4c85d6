"""Raw documents -> pretraining batches, one builder per family's objective.

Each builder takes a tf.data.Dataset of documents (1-D tf.string sentences, as
`keras_ctx.data.corpora.documents(source)` gives) and a tokenizer from
`keras_ctx.data.tokenizers`, or, with `tokenizer=None`, documents already
tokenized (ragged [sentences, tokens] int32) plus `special_ids` and
`vocabulary_size`. Output batches have static shapes (drop_remainder=True)
so the pretrainers' train steps compile with XLA.

The MLM builders take the masking options: `mask_token_rate` /
`random_token_rate` (BERT's 80/10/10 by default; ELECTRA's recipe 85/0/15),
`whole_word_masking` (words from the tokenizer's pieces: WordPiece "##",
byte-level BPE "Ġ", SentencePiece "▁"; `word_continuations` without a
tokenizer) and `max_ngram` (ALBERT's n-grams, p(n) proportional to 1/n).

    bert_dataset     NSP pairs (`duplicate` passes, shuffled together), static or
                     dynamic masks
    roberta_dataset  FULL-/DOC-SENTENCES packing, dynamic masks, no NSP
    albert_dataset   SOP pairs, n-gram masks of whole words (n <= 3)
    ernie_dataset    NSP pairs, knowledge masking in stages (basic, phrase, entity)
    spanbert_dataset single contiguous segments, span masks + SBO targets
    causal_lm_dataset  GPT / GPT-2: the token stream cut into chunks
    span_corruption_dataset  T5: sentinel span corruption
    denoising_dataset  BART: sentence permutation + text infilling
    permutation_dataset  XLNet: two-segment examples + permutation masks
    bilm_dataset     ELMo: sentences as characters + word ids

`keras_ctx.families` names each family's builder; `keras_ctx.recipes`
calls it with the run's sizes.
"""

import dataclasses
import warnings
from typing import Callable, Optional

import numpy as np
from keras_ctx.optional import tensorflow as tf

from keras_ctx.data import noise, permutation, segments
from keras_ctx.data.knowledge_masking import (
    KnowledgeMasker,
    KnowledgeMaskingSchedule,
    Lexicon,
    collocation_lexicon,
)
from keras_ctx.data.masking import MLMMasker
from keras_ctx.data.ngram_masking import MAX_NGRAM, NgramMasker
from keras_ctx.data.span_masking import SpanMasker
from keras_ctx.data.tokenizers import (continuation_table, special_token_ids, tokenize_documents,
                                      vocabulary)
from keras_ctx.data.vocabulary import bilm_inputs


def _prepare(documents, tokenizer, special_ids, vocabulary_size):
    if tokenizer is not None:
        documents = tokenize_documents(documents, tokenizer)
        special_ids = dict(special_token_ids(tokenizer), **(special_ids or {}))
        vocabulary_size = vocabulary_size or tokenizer.vocabulary_size()
    if special_ids is None or vocabulary_size is None:
        raise ValueError("Without a tokenizer, give `special_ids` and `vocabulary_size`.")
    for role in ("cls", "sep", "pad", "mask"):
        if role not in special_ids:
            raise ValueError(f"`special_ids` needs a {role!r} id.")
    return documents, special_ids, vocabulary_size


def _continuations(tokenizer, word_continuations):
    if word_continuations is None:
        if tokenizer is None:
            raise ValueError("Without a tokenizer, give `word_continuations` "
                             "(keras_ctx.data.tokenizers.continuation_table).")
        word_continuations = continuation_table(tokenizer)
    return word_continuations


def _specials(special_ids):
    return tuple(sorted(set(special_ids.values())))


def _masker(tokenizer, special_ids, vocabulary_size, whole_word_masking=False, max_ngram=1,
            word_continuations=None, **kwargs):
    """BERT's token masking, or whole-word / n-gram masking (`NgramMasker`)."""
    if whole_word_masking or max_ngram > 1:
        table = (_continuations(tokenizer, word_continuations) if whole_word_masking
                 else None)
        return NgramMasker(vocabulary_size, special_ids["mask"], _specials(special_ids), table,
                           max_ngram=max_ngram, **kwargs)
    return MLMMasker(vocabulary_size, special_ids["mask"], special_token_ids=_specials(special_ids),
                     **kwargs)


def _check_duplicate(duplicate, static_masking):
    if duplicate != 1 and not static_masking:
        raise ValueError("`duplicate` copies are for static masking; dynamic masking draws "
                         "new masks every epoch (use duplicate=1).")


def bert_dataset(documents, tokenizer, batch_size, sequence_length=128, static_masking=True,
                 duplicate=1, special_ids=None, vocabulary_size=None, seed=0,
                 max_predictions=None, **masking):
    """BERT: NSP pairs + MLM; static masking (fixed masks) or dynamic.

    `duplicate` (static only): BERT's dupe_factor, that many passes over the
    documents, each instance masked once, all shuffled together.
    """
    _check_duplicate(duplicate, static_masking)
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    pairs = segments.nsp_pairs(documents, sequence_length, ids["cls"], ids["sep"], ids["pad"],
                               seed=seed, static=static_masking, duplicate=duplicate)
    batches = pairs.batch(batch_size, drop_remainder=True)
    masker = _masker(tokenizer, ids, vocab, dynamic=not static_masking, seed=seed,
                     max_predictions=max_predictions, **masking)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


def roberta_dataset(documents, tokenizer, batch_size, sequence_length=512,
                    packing="full_sentences", special_ids=None, vocabulary_size=None, seed=0,
                    max_predictions=None, **masking):
    """RoBERTa: packed sentences, dynamic masking, no NSP (Liu et al. 2019)."""
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    packed = segments.pack_sentences(documents, sequence_length, ids["cls"], ids["sep"],
                                     ids["pad"], mode=packing, seed=seed)
    batches = packed.batch(batch_size, drop_remainder=True)
    masker = _masker(tokenizer, ids, vocab, dynamic=True, seed=seed,
                     max_predictions=max_predictions, **masking)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


def albert_dataset(documents, tokenizer, batch_size, sequence_length=512, special_ids=None,
                   vocabulary_size=None, seed=0, max_predictions=None, whole_word_masking=True,
                   max_ngram=MAX_NGRAM, static_masking=False, duplicate=1, **masking):
    """ALBERT: SOP pairs + n-gram MLM (Lan et al. 2020).

    Masks n-grams of whole words, n <= 3 with p(n) proportional to 1/n, as
    the released create_pretraining_data.py (do_whole_word_mask=True, ngram=3).
    That script writes static masks (dupe_factor=40): `static_masking=True,
    duplicate=40`, as `bert_dataset`; the default masks dynamically.
    """
    _check_duplicate(duplicate, static_masking)
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    pairs = segments.sop_pairs(documents, sequence_length, ids["cls"], ids["sep"], ids["pad"],
                               seed=seed, static=static_masking, duplicate=duplicate)
    batches = pairs.batch(batch_size, drop_remainder=True)
    masker = _masker(tokenizer, ids, vocab, whole_word_masking=whole_word_masking,
                     max_ngram=max_ngram, dynamic=not static_masking, seed=seed,
                     max_predictions=max_predictions, **masking)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


# Stage lengths of the ERNIE recipe: the paper gives none (Sun et al. 2019,
# Sec. 3.2 only orders the stages); these are keras_ctx's choice.
ERNIE_STAGE_STEPS = 10_000


def ernie_schedule(phrases=True, entities=True, stage_steps=ERNIE_STAGE_STEPS):
    """Basic, then phrase, then entity masking, `stage_steps` each (the last until the end).

    A level without units (no lexicon, no annotations) is left out.
    """
    levels = ["basic"] + ["phrase"] * bool(phrases) + ["entity"] * bool(entities)
    return KnowledgeMaskingSchedule(tuple(
        (level, None if i == len(levels) - 1 else stage_steps) for i, level in enumerate(levels)))


def ernie_dataset(documents, tokenizer, batch_size, sequence_length=512, phrases=None,
                  entities=None, schedule=None, whole_word_basic=True, special_ids=None,
                  vocabulary_size=None, word_continuations=None, seed=0, max_predictions=None,
                  **masking):
    """ERNIE 1.0: NSP pairs + knowledge masking in stages (Sun et al. 2019).

    Args:
        phrases, entities: `Lexicon`s or lists of texts (tokenized with
            `tokenizer`); their matches are masked whole in the phrase and
            entity stages. phrases="collocations": learned from the corpus
            (`collocation_lexicon`, word2phrase's score).
        schedule: a `KnowledgeMaskingSchedule`; default `ernie_schedule` over
            the levels that have units.
        whole_word_basic: basic units are words (English, as the paper) or,
            False, single tokens (Chinese characters).

    The stream repeats before masking, so the schedule counts training steps.
    """
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    table = _continuations(tokenizer, word_continuations) if whole_word_basic else None
    learned = isinstance(phrases, str) and phrases == "collocations"
    if learned:
        documents = segments.load_documents(documents)
        phrases = collocation_lexicon(documents, table)
    phrases, entities = (_lexicon(tokenizer, texts) for texts in (phrases, entities))
    if schedule is None:
        schedule = ernie_schedule(phrases is not None, entities is not None)
        missing = [name for name, units in (("phrases", phrases), ("entities", entities))
                   if units is None]
        if missing:
            found = " (no collocation in this corpus scores above the threshold)" * (
                learned and phrases is None)
            warnings.warn(f"ERNIE masking without {' or '.join(missing)}{found}: give them "
                          f"(lexicons) for their stages; this run's stages: "
                          f"{schedule.levels}.", stacklevel=2)
    pairs = segments.nsp_pairs(documents, sequence_length, ids["cls"], ids["sep"], ids["pad"],
                               seed=seed)
    batches = pairs.batch(batch_size, drop_remainder=True).repeat()
    masker = KnowledgeMasker(vocab, ids["mask"], _specials(ids), schedule, table,
                             phrases=phrases, entities=entities, dynamic=True, seed=seed,
                             max_predictions=max_predictions, **masking)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


def _lexicon(tokenizer, texts):
    if texts is None or isinstance(texts, Lexicon):
        return texts
    if isinstance(texts, str):
        raise ValueError(f"phrases / entities must be a Lexicon, a list of texts or "
                         f"phrases='collocations', got {texts!r}.")
    if tokenizer is None:
        raise ValueError("Without a tokenizer, give phrases / entities as "
                         "keras_ctx.data.knowledge_masking.Lexicon of token ids.")
    return Lexicon.from_texts(tokenizer, texts)


def spanbert_dataset(documents, tokenizer, batch_size, sequence_length=512,
                     special_ids=None, vocabulary_size=None, word_continuations=None,
                     seed=0, max_predictions=None):
    """SpanBERT: single contiguous segments, span masking + SBO targets (Joshi et al. 2020)."""
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    word_continuations = _continuations(tokenizer, word_continuations)
    packed = segments.pack_sentences(documents, sequence_length, ids["cls"], ids["sep"],
                                     ids["pad"], mode="full_sentences", seed=seed)
    batches = packed.batch(batch_size, drop_remainder=True)
    masker = SpanMasker(vocab, ids["mask"], word_continuations, special_token_ids=_specials(ids),
                        max_predictions=max_predictions, seed=seed)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


def token_documents(documents, tokenizer, end_id=None):
    """Each document as one flat 1-D token sequence (+ an end token)."""
    def flatten(sentences):
        tokens = sentences.flat_values
        if end_id is not None:
            tokens = tf.concat([tokens, [end_id]], 0)
        return tokens

    return tokenize_documents(documents, tokenizer).map(flatten)


def token_chunks(documents, tokenizer, length, end_id=None, seed=0):
    """The documents' tokens as one stream cut into `length`-token chunks, shuffled.

    The stream repeats the corpus before it is cut, so the tokens at the end
    of one pass start the next chunk instead of being dropped.
    """
    stream = token_documents(documents, tokenizer, end_id).repeat().unbatch()
    return stream.batch(length, drop_remainder=True).shuffle(2048, seed=seed)


def causal_lm_dataset(documents, tokenizer, batch_size, sequence_length=1024,
                      end_token="<|endoftext|>", seed=0):
    """GPT / GPT-2: documents joined by `end_token`, cut into full-length chunks."""
    end_id = tokenizer.token_to_id(end_token)
    chunks = token_chunks(documents, tokenizer, sequence_length, end_id, seed).map(
        causal_lm_example)
    return chunks.batch(batch_size, drop_remainder=True)


def causal_lm_example(ids):
    """A GPT example of one full-length chunk of the token stream."""
    return {"token_ids": ids, "padding_mask": tf.ones_like(ids)}


def span_corruption_dataset(documents, tokenizer, batch_size, sequence_length=512,
                            num_sentinels=100, eos_token="[SEP]", seed=0):
    """T5: i.i.d. span corruption, 15% noise, mean span 3 (Raffel et al. 2020).

    The `num_sentinels` <extra_id_i> ids follow the tokenizer's vocabulary
    (counting down from the last); id 0 (<pad>) starts the decoder.
    """
    examples = token_chunks(documents, tokenizer, sequence_length, None, seed).map(
        span_corruption_example(tokenizer, sequence_length, num_sentinels, eos_token))
    return examples.batch(batch_size, drop_remainder=True)


def span_corruption_example(tokenizer, sequence_length, num_sentinels=100, eos_token="[SEP]"):
    """T5's map from one `sequence_length` chunk of ids to encoder / decoder features."""
    eos_id = tokenizer.token_to_id(eos_token)
    first_sentinel = tokenizer.vocabulary_size() + num_sentinels - 1
    encoder_length, decoder_length = noise.span_corruption_lengths(sequence_length)
    return lambda ids: noise.seq2seq_features(
        noise.span_corruption(ids, first_sentinel_id=first_sentinel, eos_id=eos_id),
        encoder_length, decoder_length, decoder_start_id=0)


def denoising_dataset(documents, tokenizer, batch_size, sequence_length=512, seed=0):
    """BART: sentence permutation + text infilling (Lewis et al. 2020, Table 1's best).

    fairseq ids: <s>, <pad>, </s>, <mask>; the decoder starts with </s>.
    """
    examples = token_chunks(documents, tokenizer, sequence_length - 2, None, seed).map(
        denoising_example(tokenizer, sequence_length))
    return examples.batch(batch_size, drop_remainder=True)


def denoising_example(tokenizer, sequence_length):
    """BART's map from one chunk of `sequence_length - 2` ids to encoder / decoder features."""
    bos, pad, eos, mask = (tokenizer.token_to_id(t) for t in ("<s>", "<pad>", "</s>", "<mask>"))
    period = tokenizer.token_to_id(".")
    # 30% of tokens masked in Poisson(3) spans, sentences shuffled.
    corrupt = noise.compose(lambda ids: noise.sentence_permutation(ids, period),
                            lambda ids: noise.text_infilling(ids, mask))

    def example(ids):
        wrap = lambda t: tf.concat([[bos], t, [eos]], 0)  # noqa: E731
        return noise.seq2seq_features({"inputs": wrap(corrupt(ids)), "targets": wrap(ids)},
                                      sequence_length + 1, sequence_length,
                                      decoder_start_id=eos, pad_id=pad)

    return example


def xlnet_word_starts(tokenizer):
    """Bool array over ids: True where a piece starts a word (XLNet `_is_start_piece`).

    Pieces that open a word (SentencePiece "▁"), special tokens and the
    punctuation pieces XLNet lists start a span of `span_mask`.
    """
    punctuation = set('!"#$%&()*+,-./:;?@[\\]^_`{|}~')
    pieces = vocabulary(tokenizer)
    return ~continuation_table(tokenizer) | [p in punctuation for p in pieces]


def permutation_dataset(documents, tokenizer, batch_size, sequence_length=512, seed=0,
                        reuse_len=None, num_predict=None, perm_size=None, bi_data=True,
                        num_replicas=None, eod_token="<eod>"):
    """XLNet: two-segment examples + permutation masks, as its released code (Yang et al. 2019).

    `permutation.two_segment_stream` (data_utils.py: [reuse, A, <sep>, B,
    <sep>, <cls>], B the continuation or a random segment, span targets, the
    backward `bi_data` rows), then `permutation.permutation_masks` with the
    reuse part ordered on its own (its `_local_perm` and `get_dataset`).
    Defaults are the released ones scaled to `sequence_length`: reuse_len =
    perm_size = T / 2 (256 of 512), num_predict 85 of 512, mask_alpha 6,
    mask_beta 1, bi_data. `num_replicas` defaults to the current
    tf.distribute strategy's (each replica's rows are a forward and a
    backward half, marked `is_backward`). Train with
    `XLNetPretrainer(reuse_len=...)` set the same.
    """
    ids = special_token_ids(tokenizer)
    eod_id = tokenizer.token_to_id(eod_token) if eod_token in vocabulary(tokenizer) else None
    if num_replicas is None:
        num_replicas = tf.distribute.get_strategy().num_replicas_in_sync
    reuse_len = permutation.default_reuse_len(sequence_length) if reuse_len is None else reuse_len
    if num_predict is None:
        num_predict = permutation.default_num_predict(sequence_length)
    stream = permutation.two_segment_stream(
        tokenize_documents(documents, tokenizer), sequence_length, batch_size, ids["sep"],
        ids["cls"], reuse_len=reuse_len, num_predict=num_predict, bi_data=bi_data,
        num_replicas=num_replicas, eod_id=eod_id, word_starts=xlnet_word_starts(tokenizer),
        seed=seed)
    return permutation.permutation_masks(
        stream, num_predict=num_predict, seed=seed, functional_ids=(ids["sep"], ids["cls"]),
        reuse_len=reuse_len, perm_size=perm_size).prefetch(tf.data.AUTOTUNE)


def bilm_dataset(documents, vocabulary, batch_size, sequence_length=64, seed=0):
    """ELMo: shuffled sentences -> `character_ids` + word `token_ids` (Peters et al. 2018)."""
    sentences = documents.unbatch().shuffle(10_000, seed=seed)
    return (sentences.batch(batch_size, drop_remainder=True)
            .map(lambda s: bilm_inputs(s, vocabulary, sequence_length)))


# ---------------------------------------------------------------- prepared layouts
# `keras-ctx prepare` (keras_ctx.data.prepare) writes a family's examples once,
# before any corruption; the read side batches them and corrupts dynamically
# (RoBERTa, ELECTRA, T5, BART: a fresh corruption every time an example is read).


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
    _check_duplicate(duplicate, static_masking)
    ids, vocab = _ids_and_size(tokenizer)
    length = run.sequence_length
    label = segments.PAIR_LABELS[kind]
    masker = _masker(tokenizer, ids, vocab, dynamic=not static_masking, seed=run.seed,
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
    """The number of prediction slots `masker` gives a row of `length` ids."""
    row = {"token_ids": tf.fill((1, length), 10_000_000), "padding_mask": tf.ones((1, length))}
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


def packed_layout(tokenizer, run, spans=False, **masking):
    """FULL-SENTENCES packing (RoBERTa, ELECTRA; SpanBERT with `spans`), masked when read."""
    ids, vocab = _ids_and_size(tokenizer)
    length = run.sequence_length

    def examples(docs, rng):
        return segments.packed_examples(docs, length, ids["cls"], ids["sep"], ids["pad"],
                                        rng=rng)

    def batches(dataset):
        dataset = dataset.batch(run.batch_size, drop_remainder=True)
        if spans:
            masker = SpanMasker(vocab, ids["mask"], continuation_table(tokenizer),
                                special_token_ids=_specials(ids), seed=run.seed)
        else:
            masker = _masker(tokenizer, ids, vocab, dynamic=True, seed=run.seed, **masking)
        return masker.apply(dataset).prefetch(tf.data.AUTOTUNE)

    features = {"token_ids": length, "segment_ids": length, "padding_mask": length}
    return Layout("packed_spans" if spans else "packed", features, examples, batches)


def chunks_layout(tokenizer, run, example, length=None, end_token=None):
    """The token stream (documents joined by `end_token`) cut into `length`-id chunks.

    `example(tokenizer, run)` gives the map from a chunk to its features
    (`causal_lm_example`, `span_corruption_example`, `denoising_example`),
    applied when read. A shard's last partial chunk is dropped (less than one
    chunk per shard).
    """
    length = length or run.sequence_length
    end = [tokenizer.token_to_id(end_token)] if end_token else []

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
    (`permutation.two_segment_stream`'s layout: [reuse, A, <sep>, B, <sep>,
    <cls>], span targets `is_masked` drawn when written, the backward
    `bi_data` rows), cut for the global batch `run.batch_size`, so the
    batch size is fixed when preparing (XLNet's files name their bsz too).
    When read: the rows in order (`Layout.ordered`), batched, then the
    permutation masks drawn afresh (`permutation.permutation_masks`, as
    XLNet's input_fn).
    """
    ids = special_token_ids(tokenizer)
    eod_id = tokenizer.token_to_id(eod_token) if eod_token in vocabulary(tokenizer) else None
    length, batch = run.sequence_length, run.batch_size
    if bi_data and batch % 2:
        raise ValueError(f"XLNet's prepared rows are laid out for one even global batch "
                         f"size (forward and backward halves), got {batch}: give "
                         "`batch_size` (--batch-size) to prepare, as to pretrain.")
    reuse_len = permutation.default_reuse_len(length) if reuse_len is None else reuse_len
    if num_predict is None:
        num_predict = permutation.default_num_predict(length)
    settings = dict(sequence_length=length, batch_size=batch, reuse_len=reuse_len,
                    num_predict=num_predict, bi_data=bool(bi_data), num_replicas=1,
                    sep_id=ids["sep"], cls_id=ids["cls"],
                    word_starts=np.asarray(xlnet_word_starts(tokenizer), bool),
                    mask_alpha=permutation.MASK_ALPHA, mask_beta=permutation.MASK_BETA,
                    max_span_length=5)

    def examples(docs, rng):
        if not docs:
            return
        data, sentence_ids = _sentence_stream(docs, eod_id)
        for rows in permutation._shard_batches(data, sentence_ids, settings, rng):
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


def _sentence_stream(docs, eod_id):
    """One token stream of `docs` and its sentence ids, as XLNet's data_utils.py.

    Sentence ids alternate sentence by sentence (its sent_id); `eod_id`, if
    given, ends each document as a sentence of its own.
    """
    tokens, flags, flag = [], [], False
    for doc in docs:
        for sentence in doc:
            tokens.append(sentence)
            flags.append(np.full(len(sentence), flag))
            flag = not flag
        if eod_id is not None:
            tokens.append(np.array([eod_id], np.int32))
            flags.append(np.array([flag]))
            flag = not flag
    return np.concatenate(tokens).astype(np.int32), np.concatenate(flags)


def bilm_layout(vocabulary, run):
    """ELMo: the corpus' sentences, shuffled, as text (Peters et al. 2018).

    The biLM reads each sentence as characters and predicts its words, with
    nothing drawn at random: a shard holds its sentences in a seeded order;
    `bilm_inputs` makes `character_ids` and word `token_ids` when read, as
    `bilm_dataset` does.
    """
    def examples(docs, rng):
        sentences = [sentence for doc in docs for sentence in doc]
        for index in rng.permutation(len(sentences)):
            yield {"sentence": sentences[index]}

    def batches(dataset):
        return (dataset.batch(run.batch_size, drop_remainder=True)
                .map(lambda batch: bilm_inputs(batch["sentence"], vocabulary,
                                               run.sequence_length),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .prefetch(tf.data.AUTOTUNE))

    return Layout("sentences", {"sentence": 0}, examples, batches,
                  tokenize=lambda sentences: sentences, records="text")
