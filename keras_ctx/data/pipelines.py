"""Raw documents -> pretraining batches for BERT, RoBERTa, ALBERT and SpanBERT.

Each builder takes a tf.data.Dataset of documents (1-D tf.string sentences, as
`keras_ctx.data.corpora.documents(source)` gives) and a tokenizer from
`keras_ctx.data.tokenizers`, or, with `tokenizer=None`, documents already
tokenized (ragged [sentences, tokens] int32) plus `special_ids` and
`vocabulary_size`. Output batches have static shapes (drop_remainder=True)
so the pretrainers' train steps compile with XLA.

    bert_dataset     NSP pairs, static masks (BERT) duplicated `duplicate` times
    roberta_dataset  FULL-/DOC-SENTENCES packing, dynamic masks, no NSP
    albert_dataset   SOP pairs, masks
    spanbert_dataset single contiguous segments, span masks + SBO targets
"""

import tensorflow as tf

from keras_ctx.data import segments
from keras_ctx.data.masking import MLMMasker
from keras_ctx.data.span_masking import SpanMasker
from keras_ctx.data.tokenizers import continuation_table, special_token_ids, tokenize_documents


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


def _masker(special_ids, vocabulary_size, **kwargs):
    specials = tuple(sorted({special_ids[r] for r in special_ids}))
    return MLMMasker(vocabulary_size, special_ids["mask"], special_token_ids=specials, **kwargs)


def bert_dataset(documents, tokenizer, batch_size, sequence_length=128, static_masking=True,
                 duplicate=1, special_ids=None, vocabulary_size=None, seed=0,
                 max_predictions=None):
    """BERT: NSP pairs + MLM; static masking (fixed masks, `duplicate` copies) or dynamic."""
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    pairs = segments.nsp_pairs(documents, sequence_length, ids["cls"], ids["sep"], ids["pad"],
                               seed=seed, static=static_masking)
    batches = pairs.batch(batch_size, drop_remainder=True)
    masker = _masker(ids, vocab, dynamic=not static_masking,
                     duplicate=duplicate if static_masking else 1, seed=seed,
                     max_predictions=max_predictions)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


def roberta_dataset(documents, tokenizer, batch_size, sequence_length=512,
                    packing="full_sentences", special_ids=None, vocabulary_size=None, seed=0,
                    max_predictions=None):
    """RoBERTa: packed sentences, dynamic masking, no NSP (Liu et al. 2019)."""
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    packed = segments.pack_sentences(documents, sequence_length, ids["cls"], ids["sep"],
                                     ids["pad"], mode=packing, seed=seed)
    batches = packed.batch(batch_size, drop_remainder=True)
    masker = _masker(ids, vocab, dynamic=True, seed=seed, max_predictions=max_predictions)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


def albert_dataset(documents, tokenizer, batch_size, sequence_length=512, special_ids=None,
                   vocabulary_size=None, seed=0, max_predictions=None):
    """ALBERT: SOP pairs + MLM (Lan et al. 2020)."""
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    pairs = segments.sop_pairs(documents, sequence_length, ids["cls"], ids["sep"], ids["pad"],
                               seed=seed)
    batches = pairs.batch(batch_size, drop_remainder=True)
    masker = _masker(ids, vocab, dynamic=True, seed=seed, max_predictions=max_predictions)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


def spanbert_dataset(documents, tokenizer, batch_size, sequence_length=512,
                     special_ids=None, vocabulary_size=None, word_continuations=None,
                     seed=0, max_predictions=None):
    """SpanBERT: single contiguous segments, span masking + SBO targets (Joshi et al. 2020)."""
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    if word_continuations is None:
        if tokenizer is None:
            raise ValueError("Without a tokenizer, give `word_continuations` "
                             "(keras_ctx.data.tokenizers.continuation_table).")
        word_continuations = continuation_table(tokenizer)
    packed = segments.pack_sentences(documents, sequence_length, ids["cls"], ids["sep"],
                                     ids["pad"], mode="full_sentences", seed=seed)
    batches = packed.batch(batch_size, drop_remainder=True)
    specials = tuple(sorted(set(ids.values())))
    masker = SpanMasker(vocab, ids["mask"], word_continuations, special_token_ids=specials,
                        max_predictions=max_predictions, seed=seed)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)
