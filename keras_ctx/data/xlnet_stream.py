"""XLNet's input streams: consecutive rows for Transformer-XL's memory.

`text_stream(documents, sequence_length, batch_size)` makes the consecutive
batches of a stream of text that Transformer-XL's memory needs (row i of each
batch continues row i of the previous one).

`two_segment_stream` makes XLNet's released pretraining data (zihangdai/xlnet
data_utils.py): each example is [reuse part, A, <sep>, B, <sep>, <cls>], B the
text after A or a random segment with probability 0.5 each, so that the
relative segment encoding of "different segments" is trained. Built in numpy,
as XLNet builds its tfrecords; `keras_ctx.data.permutation.permutation_masks`
adds the order online, as XLNet's input_fn does.
"""

import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.common.validation import integer_in, positive_int
from keras_ctx.data.tokenizers import (START_PIECES, continuation_table, vocabulary,
                                      xlnet_word_start)


def text_stream(documents, sequence_length, batch_size, separator_id=None):
    """Consecutive (batch_size, sequence_length) batches of a token stream.

    The documents are dealt round-robin into `batch_size` streams; each stream
    is concatenated and cut into segments, so row i of batch s + 1 is the text
    that follows row i of batch s (Transformer-XL's `batchify`), as the memory
    of `XLNetPretrainer` expects. Do not shuffle the result.

    Args:
        documents: tf.data.Dataset of 1-D int token id tensors (any length).
        sequence_length: T.
        batch_size: B. Every batch is full: the streams end together, when
            the shortest one runs out; what is left of the others (less than
            the difference in their lengths) is dropped, as Transformer-XL's
            `batchify` drops its remainder. Deal many documents to keep the
            streams even.
        separator_id: if given, appended after each document.

    Returns:
        tf.data.Dataset of dicts `token_ids`, `padding_mask`, `segment_ids`,
        int32 (B, T) (padding_mask all 1, segment_ids all 0).
    """
    positive_int("sequence_length", sequence_length)
    positive_int("batch_size", batch_size)
    spec = documents.element_spec
    if not isinstance(spec, tf.TensorSpec) or spec.shape.rank != 1 or not spec.dtype.is_integer:
        raise ValueError(
            "`documents` must be a tf.data.Dataset of 1-D integer token id tensors, "
            f"got elements {spec}. Tokenize first, e.g. "
            "`lines.map(tokenizer)` with a keras_hub tokenizer."
        )

    def as_ids(ids):
        ids = tf.cast(ids, tf.int32)
        if separator_id is not None:
            ids = tf.concat([ids, [separator_id]], axis=0)
        return ids

    streams = tuple(
        documents.shard(batch_size, i).map(as_ids).unbatch().batch(
            sequence_length, drop_remainder=True
        )
        for i in range(batch_size)
    )

    def stack(*rows):
        token_ids = tf.stack(rows)
        ones = tf.ones_like(token_ids)
        return {"token_ids": token_ids, "padding_mask": ones,
                "segment_ids": tf.zeros_like(token_ids)}

    return tf.data.Dataset.zip(streams).map(stack)


# data_utils.py's defaults: 85 targets of 512 tokens, spans of n <= 5 tokens
# in a context of n * mask_alpha / mask_beta tokens.
NUM_PREDICT_PER_512 = 85
MASK_ALPHA = 6
MASK_BETA = 1


def default_reuse_len(sequence_length):
    """XLNet's reuse_len: half the sequence (256 of 512)."""
    return sequence_length // 2


def default_num_predict(sequence_length):
    """XLNet's 85 targets per 512 tokens, scaled to `sequence_length`."""
    return max(2, sequence_length * NUM_PREDICT_PER_512 // 512)


def split_a_and_b(data, sentence_ids, begin, total, rng):
    """A from `begin` to a sentence end, then B: (a, b, is_continuation), or None.

    XLNet `_split_a_and_b`: the cut points are the sentence ends before
    `total` tokens; with probability 0.5 (or when there is no cut point) B
    is a random run of whole sentences of the same row, else the sentences
    that follow A. The longer of the two loses tokens at its end until
    len(a) + len(b) == total. None also when A or B then ends the row (its
    `extend_target` check: the row's shard ends there).
    """
    length = len(data)
    if begin + total >= length:
        return None
    boundaries = np.flatnonzero(sentence_ids[begin + 1:] != sentence_ids[begin:-1]) + begin + 1
    far = boundaries[boundaries - begin >= total]
    end = int(far[0]) if len(far) else length
    cuts = boundaries[boundaries < end]
    if len(cuts) == 0 or rng.random() < 0.5:
        continuation = False
        a_end = end if len(cuts) == 0 else int(rng.choice(cuts))
        b_length = max(1, total - (a_end - begin))
        b_begin = int(rng.integers(0, length - b_length))
        b_end = b_begin + b_length
        while b_begin > 0 and sentence_ids[b_begin - 1] == sentence_ids[b_begin]:
            b_begin -= 1
        while b_end < length - 1 and sentence_ids[b_end - 1] == sentence_ids[b_end]:
            b_end += 1
    else:
        continuation = True
        a_end = int(rng.choice(cuts))
        b_begin, b_end = a_end, end
    a_length, b_length = a_end - begin, b_end - b_begin
    while a_length + b_length > total:
        if a_length > b_length:
            a_length -= 1
        else:
            b_length -= 1
    if begin + a_length >= length or b_begin + b_length >= length:
        return None  # data_utils.py (extend_target): the last token needs a next one
    return (data[begin:begin + a_length], data[b_begin:b_begin + b_length], continuation)


def span_mask(ids, goal, rng, word_starts=None, reverse=False, mask_alpha=MASK_ALPHA,
              mask_beta=MASK_BETA, max_span_length=5):
    """XLNet `_sample_mask`: `goal` positions chosen in n-gram spans, left to right.

    n in 1..max_span_length with p(n) proportional to 1/n; each span starts
    at a word start a random l < n * alpha / beta tokens into its context of
    n * alpha / beta tokens and is n tokens long (the released loop counts
    tokens: it tests the span's first piece, not the next one); then random
    single positions fill up to `goal`. `reverse` samples on the reversed
    sequence (XLNet's backward `bi_data` rows are stored reversed).
    """
    sequence = np.asarray(ids)[::-1] if reverse else np.asarray(ids)
    length = len(sequence)
    starts = np.ones(length, bool) if word_starts is None else word_starts[sequence]
    mask = np.zeros(length, bool)
    weights = 1.0 / np.arange(1, max_span_length + 1)
    weights /= weights.sum()
    count, position = 0, 0
    while position < length and count < goal:
        n = min(int(rng.choice(max_span_length, p=weights)) + 1, goal - count)
        context = n * mask_alpha // mask_beta
        left = int(rng.integers(context))
        begin = position + left
        while begin < length and not starts[begin]:
            begin += 1
        if begin + n >= length:
            break
        mask[begin:begin + n] = True
        count += n
        position = begin + n + context - left
    while count < goal:
        i = int(rng.integers(length))
        if not mask[i]:
            mask[i] = True
            count += 1
    return mask[::-1] if reverse else mask


def _rows(data, sentence_ids, batch_size, bi_data, num_replicas):
    """XLNet `batchify` (+ `bi_data`): (batch, steps) rows and which rows are reversed.

    With `bi_data`, each replica's rows are b/2 streams, then the same b/2
    streams reversed (XLNet `create_tfrecords`); the model reads which rows
    are reversed from `is_backward`, so any replica count trains correctly.
    """
    streams = batch_size // 2 if bi_data else batch_size
    steps = len(data) // streams
    data = data[:streams * steps].reshape(streams, steps)
    sentence_ids = sentence_ids[:streams * steps].reshape(streams, steps)
    if not bi_data:
        return data, sentence_ids, np.zeros(batch_size, bool)
    half = batch_size // num_replicas // 2

    def both(x):
        x = x.reshape(num_replicas, 1, half, steps)
        return np.concatenate([x, x[..., ::-1]], axis=1).reshape(batch_size, steps)

    return both(data), both(sentence_ids), np.arange(batch_size) // half % 2 == 1


def shard_batches(data, sentence_ids, settings, rng):
    """The batches of one shard of the stream, as XLNet `create_tfrecords`."""
    s = settings
    data, sentence_ids, reverse = _rows(data, sentence_ids, s["batch_size"], s["bi_data"],
                                        s["num_replicas"])
    length, reuse = s["sequence_length"], s["reuse_len"]
    goal_rest = s["num_predict"] // 2
    goal_reuse = s["num_predict"] - goal_rest
    tail = np.array([s["sep_id"], s["cls_id"]], np.int32)
    i = 0
    while i + length <= data.shape[1]:
        rows = []
        for row in range(data.shape[0]):
            split = split_a_and_b(data[row], sentence_ids[row], i + reuse, length - reuse - 3,
                                  rng)
            if split is None:
                return
            a, b, continuation = split
            tokens = np.concatenate([data[row, i:i + reuse], a, tail[:1], b, tail])
            # XLNet's seg_id: 0 up to A's <sep>, 1 for B and its <sep>, 2 for <cls>.
            segments = np.array([0] * (reuse + len(a) + 1) + [1] * (len(b) + 1) + [2],
                                np.int32)
            masked = np.concatenate([
                span_mask(tokens[:reuse], goal_reuse, rng, s["word_starts"], reverse[row],
                          s["mask_alpha"], s["mask_beta"], s["max_span_length"]),
                span_mask(tokens[reuse:], goal_rest, rng, s["word_starts"], reverse[row],
                          s["mask_alpha"], s["mask_beta"], s["max_span_length"]),
            ])
            rows.append((tokens, segments, masked, continuation))
        yield {
            "token_ids": np.stack([r[0] for r in rows]).astype(np.int32),
            "padding_mask": np.ones((len(rows), length), np.int32),
            "segment_ids": np.stack([r[1] for r in rows]),
            "is_masked": np.stack([r[2] for r in rows]).astype(np.int32),
            "is_continuation": np.array([r[3] for r in rows], np.int32),
            "is_backward": reverse.astype(np.int32),
        }
        i += reuse


def two_segment_stream(documents, sequence_length, batch_size, sep_id, cls_id, reuse_len=None,
                       num_predict=None, bi_data=True, num_replicas=1, eod_id=None,
                       word_starts=None, mask_alpha=MASK_ALPHA, mask_beta=MASK_BETA,
                       max_span_length=5, shard_tokens=1 << 22, seed=0):
    """XLNet's pretraining batches: [reuse part, A, <sep>, B, <sep>, <cls>] per row.

    As zihangdai/xlnet's data_utils.py: the documents (sentences with
    alternating sentence ids, `eod_id` ending each inside its last sentence:
    `document_runs`) form one
    stream, cut into `batch_size` rows (with `bi_data`: half of them, plus
    the same rows reversed). Step s of row r holds the `reuse_len` tokens
    that follow step s - 1's reuse part (what `XLNetPretrainer` keeps in
    its memory), then A (up to a sentence end) and B: the sentences after A,
    or (probability 0.5) a random run of sentences of the row
    (`is_continuation` 1 / 0). Segment ids: 0 up to A's <sep>, 1 for B and
    its <sep>, 2 for <cls>. `is_masked` marks `num_predict` positions chosen
    in spans (`span_mask`): num_predict - num_predict // 2 in the reuse part,
    num_predict // 2 in the rest. The stream is read in shards of about
    `shard_tokens` tokens (the memory starts afresh with each shard, as with
    each of XLNet's files); each pass over `documents` samples anew.

    Args:
        documents: tf.data.Dataset of ragged [sentences, tokens] int token ids
            (`keras_ctx.data.tokenizers.tokenize_documents`).
        sequence_length: T (512 in XLNet).
        batch_size: the global batch (rows of each batch).
        sep_id, cls_id: XLNet's <sep> and <cls>.
        reuse_len: default T / 2 (256 of 512 in XLNet); 0 < reuse_len < T - 3.
        num_predict: targets per row; default `default_num_predict(T)` (85).
        bi_data: half of each replica's rows read backwards (XLNet: True).
        num_replicas: replicas the batch is split over (contiguous rows
            each, as tf.distribute splits it): each replica's rows are a
            forward half then a backward half, as XLNet lays them out per
            core (`is_backward` says which, so the model does not depend on
            it).
        eod_id: appended to every document, in its last sentence (XLNet's <eod>),
            or None.
        word_starts: bool array over ids, True where a piece starts a word
            (spans start there); None: every piece.
        mask_alpha, mask_beta, max_span_length: `span_mask` (6, 1, 5).
        shard_tokens: tokens read before examples are cut from them.
        seed: pass p samples with numpy's generator seeded (seed, p).

    Returns:
        tf.data.Dataset of dicts, int32: `token_ids`, `padding_mask`,
        `segment_ids`, `is_masked` (batch, T), `is_continuation` (batch,)
        (1 where B follows A) and `is_backward` (batch,) (1 for reversed rows);
        feed it to `permutation_masks(..., is_masked given, functional_ids=
        (sep_id, cls_id), reuse_len=...)`.
    """
    for name, value in (("sequence_length", sequence_length), ("batch_size", batch_size),
                        ("num_replicas", num_replicas), ("shard_tokens", shard_tokens)):
        positive_int(name, value)
    reuse_len = default_reuse_len(sequence_length) if reuse_len is None else reuse_len
    integer_in("reuse_len", reuse_len, 1, sequence_length - 4, "the rest holds A, <sep>, B, "
               "<sep>, <cls>; XLNet uses sequence_length / 2")
    num_predict = default_num_predict(sequence_length) if num_predict is None else num_predict
    positive_int("num_predict", num_predict)
    if num_predict - num_predict // 2 > reuse_len or num_predict // 2 > sequence_length - reuse_len:
        raise ValueError(
            f"`num_predict` ({num_predict}) is split in halves between the reuse part "
            f"({reuse_len} tokens) and the rest ({sequence_length - reuse_len}): each half "
            "must fit its part."
        )
    unit = num_replicas * (2 if bi_data else 1)
    if batch_size % unit:
        raise ValueError(
            f"`batch_size` ({batch_size}) must be a multiple of {unit} (num_replicas="
            f"{num_replicas}{', x2 for bi_data forward and backward halves' if bi_data else ''})."
        )
    spec = documents.element_spec
    if not isinstance(spec, tf.RaggedTensorSpec) or spec.shape.rank != 2 or (
            not spec.dtype.is_integer):
        raise ValueError(
            "`documents` must be a tf.data.Dataset of ragged [sentences, tokens] integer "
            f"ids (keras_ctx.data.tokenizers.tokenize_documents), got elements {spec}."
        )
    settings = dict(sequence_length=sequence_length, batch_size=batch_size,
                    reuse_len=reuse_len, num_predict=num_predict, bi_data=bool(bi_data),
                    num_replicas=num_replicas, sep_id=sep_id, cls_id=cls_id,
                    word_starts=None if word_starts is None else np.asarray(word_starts, bool),
                    mask_alpha=mask_alpha, mask_beta=mask_beta,
                    max_span_length=max_span_length)
    flat = documents.map(lambda d: (tf.cast(d.flat_values, tf.int32), d.row_lengths()))
    passes = [0]

    def batches():
        rng = np.random.default_rng([seed, passes[0]])
        passes[0] += 1
        tokens, sentences, size, made = [], [], 0, 0
        docs = (np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []
                for values, lengths in flat.as_numpy_iterator())
        for values, flags in document_runs(docs, eod_id):
            tokens.append(values)
            sentences.append(flags)
            size += len(values)
            if size >= shard_tokens:
                for batch in shard_batches(np.concatenate(tokens), np.concatenate(sentences),
                                            settings, rng):
                    made += 1
                    yield batch
                tokens, sentences, size = [], [], 0
        if tokens:
            for batch in shard_batches(np.concatenate(tokens), np.concatenate(sentences),
                                        settings, rng):
                made += 1
                yield batch
        if not made:  # an empty pass would make `.repeat()` spin forever
            raise ValueError(
                f"The documents make no batch of {batch_size} rows of {sequence_length} "
                "tokens (each row needs more than sequence_length tokens of text): give more "
                "text, or a smaller batch_size or sequence_length."
            )

    matrix = tf.TensorSpec((batch_size, sequence_length), tf.int32)
    return tf.data.Dataset.from_generator(batches, output_signature={
        "token_ids": matrix, "padding_mask": matrix, "segment_ids": matrix,
        "is_masked": matrix, "is_continuation": tf.TensorSpec((batch_size,), tf.int32),
        "is_backward": tf.TensorSpec((batch_size,), tf.int32)})


def xlnet_word_starts(tokenizer):
    """Bool array over ids: True where a piece starts a word (XLNet `_is_start_piece`).

    Pieces that open a word (SentencePiece "▁"), pieces starting with "<", special
    tokens and the punctuation pieces XLNet lists start a span of `span_mask`
    (`tokenizers.xlnet_word_start`); another tokenizer's pieces by its own marker,
    with XLNet's punctuation pieces.
    """
    pieces = vocabulary(tokenizer)
    return (~continuation_table(tokenizer, xlnet_word_start)
            | [p in START_PIECES for p in pieces])


def document_runs(docs, eod_id, flag=False):
    """Per document: its tokens and sentence ids, as XLNet's data_utils.py.

    Sentence ids alternate sentence by sentence across documents (its
    sent_id, starting at `flag`). `eod_id`, if given, ends each document
    with the id of the document's last sentence: data_utils.py flips sent_id
    back for the blank line's <eod>, so no cut point falls before it (A or B
    never starts with <eod>, and <eod> is never a sentence of its own).
    """
    for doc in docs:
        tokens, flags = [], []
        for sentence in doc:
            tokens.append(np.asarray(sentence, np.int32))
            flags.append(np.full(len(sentence), flag))
            flag = not flag
        if eod_id is not None:
            tokens.append(np.array([eod_id], np.int32))
            flags.append(np.array([not flag]))
        if tokens:
            yield np.concatenate(tokens), np.concatenate(flags)


def sentence_stream(docs, eod_id):
    """One token stream of `docs` and its sentence ids (`document_runs` joined)."""
    runs = list(document_runs(docs, eod_id))
    if not runs:
        return np.zeros(0, np.int32), np.zeros(0, bool)
    return (np.concatenate([r[0] for r in runs]).astype(np.int32),
            np.concatenate([r[1] for r in runs]))
