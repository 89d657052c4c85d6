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

`keras_ctx.families` names each family's builder and `keras-ctx pretrain`
(`keras_ctx.commands.pretrain`) calls it with the run's sizes;
`keras_ctx.data.layouts` holds the same families' prepared layouts.
"""

import warnings

from keras_ctx.common import validation
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.data import noise, permutation, segments, xlnet_stream
from keras_ctx.data.knowledge_masking import (
    KnowledgeMasker,
    KnowledgeMaskingSchedule,
    Lexicon,
    collocation_lexicon,
    occurs_in,
)
from keras_ctx.data.maskers import check_duplicate, continuations, masker_for, never_masked_ids
from keras_ctx.data.ngram_masking import MAX_NGRAM
from keras_ctx.data.span_masking import SpanMasker
from keras_ctx.data.token_counts import of_corpus as counts_of
from keras_ctx.data.tokenizers import (continuation_table, known_token_id, special_token_ids,
                                       token_id_of, tokenize_documents)
from keras_ctx.data.vocabulary import bilm_inputs, sentence_rows


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



def bert_dataset(documents, tokenizer, batch_size, sequence_length=128, static_masking=True,
                 duplicate=1, special_ids=None, vocabulary_size=None, seed=0,
                 max_predictions=None, **masking):
    """BERT: NSP pairs + MLM; static masking (fixed masks) or dynamic.

    `duplicate` (static only): BERT's dupe_factor, that many passes over the
    documents, each instance masked once, all shuffled together.
    """
    check_duplicate(duplicate, static_masking)
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    pairs = segments.nsp_pairs(documents, sequence_length, ids["cls"], ids["sep"], ids["pad"],
                               seed=seed, static=static_masking, duplicate=duplicate)
    batches = pairs.batch(batch_size, drop_remainder=True)
    masker = masker_for(tokenizer, ids, vocab, dynamic=not static_masking, seed=seed,
                     max_predictions=max_predictions, **masking)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


def roberta_dataset(documents, tokenizer, batch_size, sequence_length=512,
                    packing="full_sentences", special_ids=None, vocabulary_size=None, seed=0,
                    max_predictions=None, **masking):
    """RoBERTa: packed sentences, dynamic masking, no NSP (Liu et al. 2019).

    `packing`: "full_sentences", "doc_sentences", or "two_segments" (ELECTRA's
    two-segment examples, `segments.two_segment_examples`).
    """
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    packed = segments.pack_sentences(documents, sequence_length, ids["cls"], ids["sep"],
                                     ids["pad"], mode=packing, seed=seed)
    batches = packed.batch(batch_size, drop_remainder=True)
    masker = masker_for(tokenizer, ids, vocab, dynamic=True, seed=seed,
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
    check_duplicate(duplicate, static_masking)
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    pairs = segments.sop_pairs(documents, sequence_length, ids["cls"], ids["sep"], ids["pad"],
                               seed=seed, static=static_masking, duplicate=duplicate)
    batches = pairs.batch(batch_size, drop_remainder=True)
    masker = masker_for(tokenizer, ids, vocab, whole_word_masking=whole_word_masking,
                     max_ngram=max_ngram, dynamic=not static_masking, seed=seed,
                     max_predictions=max_predictions, **masking)
    return masker.apply(batches).prefetch(tf.data.AUTOTUNE)


# Stage lengths of the ERNIE recipe: the paper gives none (Sun et al. 2019,
# Sec. 3.2 only orders the stages); these are keras_ctx's choice.
ERNIE_STAGE_STEPS = 10_000


def ernie_schedule(phrases=True, entities=True, stage_steps=None):
    """Basic, then phrase, then entity masking, `stage_steps` each (the last until the end;
    None: `ERNIE_STAGE_STEPS`, read when called).

    Without entities the entity stage is left out; without phrases the phrase stage masks
    words (basic units), so the entity stage still starts at 2 x `stage_steps` (the step
    `keras-ctx pretrain` names for it).
    """
    stage_steps = stage_steps or ERNIE_STAGE_STEPS
    levels = ["basic"] + (["phrase" if phrases else "basic"] if phrases or entities else []) \
        + ["entity"] * bool(entities)
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
    table = continuations(tokenizer, word_continuations) if whole_word_basic else None
    learned = isinstance(phrases, str) and phrases == "collocations"
    given = {name: units for name, units in (("phrases", None if learned else phrases),
                                             ("entities", entities)) if units is not None}
    if learned or given:  # the lexicons are matched against the corpus, read once
        documents = segments.load_documents(documents)
    if learned:
        phrases = collocation_lexicon(documents, table)
    phrases, entities = (_lexicon(tokenizer, texts) for texts in (phrases, entities))
    for name, lexicon in (("phrases", phrases), ("entities", entities)):
        if name in given and not occurs_in(lexicon, documents):
            warnings.warn(f"No entry of the {name} lexicon ({len(lexicon)} entries) occurs "
                          f"in the corpus (tokenized as the run's tokenizer does): its stage "
                          f"would mask none of them. Check the lexicon's spelling and case.",
                          stacklevel=2)
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
    masker = KnowledgeMasker(vocab, ids["mask"], never_masked_ids(ids), schedule, table,
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


# SpanBERT's random replacements by the frequency of the corpus it trains on (masking.py
# `np.random.choice(tokens)`): the recipe counts its documents first.
SPANBERT_COUNTS = "corpus"


def spanbert_dataset(documents, tokenizer, batch_size, sequence_length=512,
                     special_ids=None, vocabulary_size=None, word_continuations=None,
                     seed=0, max_predictions=None, token_counts=SPANBERT_COUNTS):
    """SpanBERT: single contiguous segments, span masking + SBO targets (Joshi et al. 2020).

    `token_counts`: random replacements by corpus frequency as SpanBERT's
    (`SpanMasker`): "corpus" (the default) counts `documents` first, in one
    streamed pass (`keras_ctx.data.token_counts`; `keras-ctx pretrain` keeps them in
    the run directory and a resumed run reads them back); or the counts per id; None:
    uniform over the vocabulary."""
    documents, ids, vocab = _prepare(documents, tokenizer, special_ids, vocabulary_size)
    if isinstance(token_counts, str):
        validation.one_of("token_counts", token_counts, (SPANBERT_COUNTS,))
        token_counts = counts_of(documents, tokenizer, vocab)  # kept by a resumable run
    word_continuations = continuations(tokenizer, word_continuations)
    packed = segments.pack_sentences(documents, sequence_length, ids["cls"], ids["sep"],
                                     ids["pad"], mode="full_sentences", seed=seed)
    batches = packed.batch(batch_size, drop_remainder=True)
    masker = SpanMasker(vocab, ids["mask"], word_continuations,
                        special_token_ids=never_masked_ids(ids),
                        max_predictions=max_predictions, seed=seed, token_counts=token_counts)
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
    end_id = token_id_of(tokenizer, end_token, "the end of each document")
    chunks = token_chunks(documents, tokenizer, sequence_length, end_id, seed).map(
        causal_lm_example)
    return chunks.batch(batch_size, drop_remainder=True)


def causal_lm_example(ids):
    """A GPT example of one full-length chunk of the token stream."""
    return {"token_ids": ids, "padding_mask": tf.ones_like(ids)}


# T5's objective (Raffel et al. 2020, Sec. 3.1.4): 15% noise in spans of mean length 3.
T5_CORRUPTION = dict(noise_density=0.15, mean_noise_span_length=3.0)


def span_corruption_dataset(documents, tokenizer, batch_size, sequence_length=512,
                            num_sentinels=100, eos_token="</s>", seed=0, **corruption):
    """T5: i.i.d. span corruption, 15% noise, mean span 3 (Raffel et al. 2020).

    The `num_sentinels` <extra_id_i> ids follow the tokenizer's vocabulary
    (counting down from the last); id 0 (<pad>) starts the decoder. Chunks
    of `noise.span_corruption_tokens_length(sequence_length)` tokens fill
    the encoder's `sequence_length` (T5's random_spans_helper).
    `corruption`: `noise_density` and `mean_noise_span_length` (`T5_CORRUPTION`).
    """
    length = noise.span_corruption_tokens_length(sequence_length,
                                                 **{**T5_CORRUPTION, **corruption})
    examples = token_chunks(documents, tokenizer, length, None, seed).map(
        span_corruption_example(tokenizer, sequence_length, num_sentinels, eos_token,
                                **corruption))
    return examples.batch(batch_size, drop_remainder=True)


def span_corruption_example(tokenizer, sequence_length, num_sentinels=100, eos_token="</s>",
                            noise_density=T5_CORRUPTION["noise_density"],
                            mean_noise_span_length=T5_CORRUPTION["mean_noise_span_length"]):
    """T5's map from one chunk of `noise.span_corruption_tokens_length(sequence_length,
    noise_density, mean_noise_span_length)` ids to encoder (`sequence_length`) / decoder
    features."""
    eos_id = token_id_of(tokenizer, eos_token, "T5's end of text")
    first_sentinel = tokenizer.vocabulary_size() + num_sentinels - 1
    corruption = dict(noise_density=noise_density,
                      mean_noise_span_length=mean_noise_span_length)
    _, decoder_length = noise.span_corruption_lengths(
        noise.span_corruption_tokens_length(sequence_length, **corruption), **corruption)
    encoder_length = sequence_length
    return lambda ids: noise.seq2seq_features(
        noise.span_corruption(ids, first_sentinel_id=first_sentinel, eos_id=eos_id,
                              **corruption),
        encoder_length, decoder_length, decoder_start_id=0)


def denoising_dataset(documents, tokenizer, batch_size, sequence_length=512, seed=0,
                      **infilling):
    """BART: sentence permutation + text infilling (Lewis et al. 2020, Table 1's best).

    fairseq ids: <s>, <pad>, </s>, <mask>; the decoder starts with </s>.
    `infilling`: `denoising_example`'s rate, poisson_lambda and mask_random.
    """
    examples = token_chunks(documents, tokenizer, sequence_length - 2, None, seed).map(
        denoising_example(tokenizer, sequence_length, **infilling))
    return examples.batch(batch_size, drop_remainder=True)


# The BART authors' run (fairseq issue #1899, the first author's BART-large command:
# `--mask 0.3 --mask-random 0.1 --poisson-lambda 3.5 --mask-length span-poisson
# --replace-length 1 --permute-sentences 1 --rotate 0.0 --insert 0.0`); the paper
# gives lambda 3 and no random tokens (Lewis et al. 2020, Sec. 2.2).
BART_INFILLING = dict(rate=0.3, poisson_lambda=3.5, mask_random=0.1)


def denoising_example(tokenizer, sequence_length, rate=BART_INFILLING["rate"],
                      poisson_lambda=BART_INFILLING["poisson_lambda"],
                      mask_random=BART_INFILLING["mask_random"]):
    """BART's map from one chunk of `sequence_length - 2` ids to encoder / decoder features:
    sentences shuffled, then `noise.text_infilling` in whole words (its arguments)."""
    bos, pad, eos, mask, period = (token_id_of(tokenizer, t, "BART's noise") for t in (
        "<s>", "<pad>", "</s>", "<mask>", "."))
    # fairseq's span-poisson masking over `is_beginning_of_word` (GPT-2 BPE: "Ġ").
    starts = tf.constant(~continuation_table(tokenizer))
    corrupt = noise.compose(
        lambda ids: noise.sentence_permutation(ids, period),
        lambda ids: noise.text_infilling(
            ids, mask, rate, poisson_lambda, word_starts=tf.gather(starts, ids),
            mask_random=mask_random, vocab_size=tokenizer.vocabulary_size()))

    def example(ids):
        wrap = lambda t: tf.concat([[bos], t, [eos]], 0)  # noqa: E731
        return noise.seq2seq_features({"inputs": wrap(corrupt(ids)), "targets": wrap(ids)},
                                      sequence_length + 1, sequence_length,
                                      decoder_start_id=eos, pad_id=pad)

    return example



def permutation_dataset(documents, tokenizer, batch_size, sequence_length=512, seed=0,
                        reuse_len=None, num_predict=None, perm_size=None, bi_data=True,
                        num_replicas=None, eod_token="<eod>"):
    """XLNet: two-segment examples + permutation masks, as its released code (Yang et al. 2019).

    `xlnet_stream.two_segment_stream` (data_utils.py: [reuse, A, <sep>, B,
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
    eod_id = known_token_id(tokenizer, eod_token)
    if num_replicas is None:
        num_replicas = tf.distribute.get_strategy().num_replicas_in_sync
    reuse_len = xlnet_stream.default_reuse_len(sequence_length) if reuse_len is None else reuse_len
    if num_predict is None:
        num_predict = xlnet_stream.default_num_predict(sequence_length)
    stream = xlnet_stream.two_segment_stream(
        tokenize_documents(documents, tokenizer), sequence_length, batch_size, ids["sep"],
        ids["cls"], reuse_len=reuse_len, num_predict=num_predict, bi_data=bi_data,
        num_replicas=num_replicas, eod_id=eod_id,
        word_starts=xlnet_stream.xlnet_word_starts(tokenizer), seed=seed)
    return permutation.permutation_masks(
        stream, num_predict=num_predict, seed=seed, functional_ids=(ids["sep"], ids["cls"]),
        reuse_len=reuse_len, perm_size=perm_size).prefetch(tf.data.AUTOTUNE)


def bilm_dataset(documents, vocabulary, batch_size, sequence_length=64, seed=0):
    """ELMo: shuffled sentences -> `character_ids` + word `token_ids` (Peters et al. 2018).

    A sentence longer than a row continues in the next rows (`sentence_rows`).
    """
    sentences = sentence_rows(documents.unbatch(), sequence_length).shuffle(10_000, seed=seed)
    return (sentences.batch(batch_size, drop_remainder=True)
            .map(lambda s: bilm_inputs(s, vocabulary, sequence_length)))
