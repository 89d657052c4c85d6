"""XLNet's permutation language modelling inputs, as tf.data maps.

XLNet (Yang et al., 2019, section 2.3) samples a factorization order z of the
positions of each sequence and trains on the last 1/K of it (K = 6): tokens
z_{>c} are predicted, each from the tokens before it in the order. The tokens
stay in their place; only the attention masks express the order:

- the context (the first part of the order, never predicted) forms one step:
  its tokens see one another and no target, as in XLNet's `_local_perm`;
- the targets follow in a random order; target z_t sees the context and the
  targets before it (query stream), plus itself (content stream).

Features added to each example (T = sequence length, P = num_predict):

    perm_mask            (T, T) int32, XLNet's convention: 1 where position i
                         may NOT attend position j.
    target_mapping       (P, T) float32, one-hot row k = position of the k-th
                         target (targets in position order); all-zero rows
                         pad a sequence with fewer targets.
    target_ids           (P,) int32, the token at each target position.
    target_weights       (P,) float32, 1 for real targets, 0 for padding rows.
    factorization_order  (T,) int32, the sampled order z (position predicted
                         at each step): padding, then the context, then the
                         targets, last predicted last.

`text_stream(documents, sequence_length, batch_size)` makes the consecutive
batches of a stream of text that Transformer-XL's memory needs (row i of each
batch continues row i of the previous one).
"""

import numpy as np
from keras_ctx.optional import tensorflow as tf


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
    _positive("sequence_length", sequence_length)
    _positive("batch_size", batch_size)
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


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return value


class _Random:
    """Stateful random ops, or stateless ones derived from a (2,) seed."""

    def __init__(self, seed=None):
        self.seed = None if seed is None else tf.cast(seed, tf.int64)
        if self.seed is not None and self.seed.shape.rank == 0:
            self.seed = tf.stack([self.seed, tf.constant(0, tf.int64)])
        self.calls = 0

    def _next(self):
        self.calls += 1
        return tf.random.experimental.stateless_fold_in(self.seed, self.calls)

    def uniform(self, shape):
        if self.seed is None:
            return tf.random.uniform(shape)
        return tf.random.stateless_uniform(shape, self._next())

    def categorical(self, logits, num_samples):
        if self.seed is None:
            return tf.random.categorical(logits, num_samples, dtype=tf.int32)
        return tf.random.stateless_categorical(
            logits, num_samples, self._next(), dtype=tf.int32
        )


def _span_targets(real, num_targets, k, max_span_length, random):
    """Span-based targets as XLNet's `_sample_mask`, exactly `num_targets` per row.

    Blocks of n * K tokens each hold one span of n tokens (n in 1..max_span
    with p(n) proportional to 1/n) at a random offset, left to right; spans
    past `num_targets` are cut, and missing targets are topped up with
    random tokens (as XLNet does).
    """
    batch, length = tf.shape(real)[0], tf.shape(real)[1]
    spans = length  # every block has >= 1 token: never more than T blocks
    logits = tf.math.log(1.0 / tf.range(1, max_span_length + 1, dtype=tf.float32))
    n = random.categorical(tf.tile(logits[None], [batch, 1]), spans) + 1  # (batch, spans)
    block = n * k
    block_start = tf.cumsum(block, axis=1, exclusive=True)
    offset = tf.cast(
        tf.floor(random.uniform(tf.shape(n))
                 * tf.cast(block - n + 1, tf.float32)), tf.int32
    )
    start = block_start + offset
    positions = tf.range(length)[None, :, None]  # (1, T, 1)
    covered = tf.reduce_any(
        (positions >= start[:, None, :]) & (positions < (start + n)[:, None, :]), axis=-1
    ) & real
    # Too many: keep the first num_targets (cuts the last span).
    covered &= tf.cumsum(tf.cast(covered, tf.int32), axis=1) <= num_targets[:, None]
    # Too few: top up with random real positions that are not targets yet.
    missing = num_targets - tf.reduce_sum(tf.cast(covered, tf.int32), axis=1)
    candidate = real & ~covered
    score = tf.where(candidate, random.uniform(tf.shape(real)), 2.0)
    rank = tf.argsort(tf.argsort(score, axis=1, stable=True), axis=1, stable=True)
    return covered | (candidate & (rank < missing[:, None]))


def _check_parts(length, reuse_len, perm_size):
    """The lengths of the reuse and non-reuse parts, each a whole number of perm_size blocks."""
    if reuse_len is not None:
        _positive("reuse_len", reuse_len)
        if reuse_len >= length:
            raise ValueError(
                f"`reuse_len` ({reuse_len}) must be shorter than the sequence ({length}): "
                "the rest is the part that is not reused."
            )
    parts = [length] if reuse_len is None else [reuse_len, length - reuse_len]
    if perm_size is not None:
        _positive("perm_size", perm_size)
        if any(part % perm_size for part in parts):
            raise ValueError(
                f"`perm_size` ({perm_size}) must divide the length of every part of the "
                f"sequence ({parts}: reuse_len and sequence_length - reuse_len); XLNet "
                "uses perm_size = reuse_len = sequence_length / 2."
            )
    return parts


def _block_ranks(parts, perm_size, random, batch):
    """XLNet `_local_perm`'s order: position b * P + p of a part gets rank b * P + sigma(p).

    One random permutation sigma of P = perm_size (default: the part's length)
    slots per part, the same for every block of P positions of that part.
    """
    ranks = []
    for part in parts:
        size = perm_size or part
        sigma = tf.argsort(tf.argsort(random.uniform((batch, size)), axis=1), axis=1)
        block = tf.range(part) // size * size
        ranks.append(block[None, :] + tf.tile(sigma, [1, part // size]))
    return tf.concat(ranks, axis=1)


def sample_permutation(token_ids, padding_mask=None, num_predict=None, k=6,
                       span_based=False, max_span_length=5, seed=None, is_masked=None,
                       functional_ids=(), reuse_len=None, perm_size=None):
    """Samples the factorization order and builds XLNet's PLM features.

    The masks follow XLNet's `_local_perm`: every non-target token (the
    context) is one first step that sees the context only; targets and the
    functional tokens ([SEP], [CLS]) follow in the sampled order, each seeing
    the context and what comes before it (a target never itself in the
    query stream). With `reuse_len` the first `reuse_len` positions (the part
    the next batch continues) are ordered on their own and come first: they
    never see the rest, which sees all of them (XLNet's `get_dataset`).

    Args:
        token_ids: int (T,) or (batch, T).
        padding_mask: same shape, 1 for real tokens (default: all real).
        num_predict: P, the static number of target rows; default T // K.
        k: K, predict the last 1/K of each order: floor(n / K) targets for n
            real tokens (at most P). 6 in XLNet (section 3.1). Unused with
            `is_masked`.
        span_based: choose the targets as spans of up to `max_span_length`
            tokens (XLNet's `_sample_mask`); the order among targets is random.
        max_span_length: longest span (5 in XLNet's code).
        seed: None (stateful random ops), or an int or (2,) int tensor:
            stateless sampling, the same for the same seed.
        is_masked: bool, same shape as `token_ids`, or None: the positions
            chosen for prediction (XLNet's `is_masked`, from
            `two_segment_stream`); functional tokens among them are not
            predicted. At most `num_predict` targets per row.
        functional_ids: ids never predicted but ordered like targets (XLNet's
            [SEP] and [CLS]).
        reuse_len: see above; None: one part.
        perm_size: XLNet's `perm_size`: the order is sampled in blocks of
            that many positions (must divide each part); None: one block
            per part.

    Returns:
        dict of `perm_mask`, `target_mapping`, `target_ids`, `target_weights`,
        `factorization_order` (see the module docstring), batched like
        `token_ids`.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(
            f"`k` must be an integer >= 2 (predict the last 1/k of each order, "
            f"so that every target has context), got {k!r}. XLNet uses 6."
        )
    _positive("max_span_length", max_span_length)
    token_ids = tf.convert_to_tensor(token_ids)
    unbatched = token_ids.shape.rank == 1
    if token_ids.shape.rank not in (1, 2):
        raise ValueError(
            f"`token_ids` must be (T,) or (batch, T), got shape {token_ids.shape}."
        )
    length = token_ids.shape[-1]
    if length is None:
        raise ValueError(
            "`token_ids` needs a static length (pad or pack sequences to a fixed "
            "length first, e.g. with `text_stream`), got shape "
            f"{token_ids.shape}."
        )
    parts = _check_parts(length, reuse_len, perm_size)
    if num_predict is None:
        if is_masked is not None:
            raise ValueError("With `is_masked`, give the static `num_predict` (XLNet: 85).")
        num_predict = length // k
        if num_predict == 0:
            raise ValueError(
                f"Sequences of length {length} have no last 1/{k} to predict: use "
                f"sequences of at least {k} tokens or a smaller `k`."
            )
    _positive("num_predict", num_predict)
    if num_predict > length:
        raise ValueError(
            f"`num_predict` ({num_predict}) is larger than the sequence length ({length})."
        )
    if padding_mask is None:
        padding_mask = tf.ones_like(token_ids)
    if unbatched:
        token_ids, padding_mask = token_ids[None], padding_mask[None]
        if is_masked is not None:
            is_masked = tf.convert_to_tensor(is_masked)[None]
    token_ids = tf.cast(token_ids, tf.int32)
    real = tf.cast(padding_mask, tf.bool)
    functional = tf.zeros_like(real)
    for functional_id in functional_ids:
        functional |= tf.equal(token_ids, functional_id)
    functional &= real

    random = _Random(seed)
    shape = tf.shape(token_ids)
    if is_masked is not None:
        is_target = tf.cast(is_masked, tf.bool) & real & ~functional
        num_targets = tf.reduce_sum(tf.cast(is_target, tf.int32), axis=1)
        check = tf.debugging.assert_less_equal(
            num_targets, num_predict,
            message=f"more positions are masked than num_predict={num_predict}")
        with tf.control_dependencies([check]):
            is_target = tf.identity(is_target)
    else:
        num_real = tf.reduce_sum(tf.cast(real & ~functional, tf.int32), axis=1)
        num_targets = tf.minimum(num_real // k, num_predict)  # the last 1/K of z
        if span_based:
            is_target = _span_targets(real & ~functional, num_targets, k, max_span_length,
                                      random)
        else:
            # A uniformly random subset of num_targets real tokens.
            key = tf.where(real & ~functional, random.uniform(shape), -1.0)
            rank = tf.argsort(tf.argsort(key, axis=1, stable=True), axis=1, stable=True)
            is_target = rank >= length - num_targets[:, None]

    # XLNet `_local_perm`: the context gets rank -1 (seen by all, sees no
    # target); targets and functional tokens their rank in the sampled order.
    ordered = is_target | functional
    rank = tf.where(ordered, _block_ranks(parts, perm_size, random, shape[0]), -1)
    own = tf.where(is_target, rank, rank + 1)  # a target does not see itself
    hidden = ordered[:, None, :] & (own[:, :, None] <= rank[:, None, :])
    if reuse_len is not None:
        # The reuse part never sees the rest; the rest sees all of the reuse part.
        part = tf.range(length) >= reuse_len
        part_i, part_j = part[:, None], part[None, :]
        hidden = tf.where(tf.equal(part_i, part_j)[None], hidden, (part_j & ~part_i)[None])
        rank += tf.cast(part, tf.int32)[None] * (length + 1)
    perm_mask = hidden
    # z: padding, then each part's context and its ordered tokens.
    key = tf.cast(rank, tf.float32) + 0.5 * random.uniform(shape)
    order = tf.argsort(tf.where(real, key, -2.0), axis=1, stable=True)

    # target_mapping: the k-th target (in position order) -> its position.
    slot = tf.cumsum(tf.cast(is_target, tf.int32), axis=1) - 1
    slot = tf.where(is_target, slot, -1)
    target_mapping = tf.cast(
        tf.equal(slot[:, None, :], tf.range(num_predict)[None, :, None]), tf.float32
    )  # (batch, P, T)
    target_ids = tf.cast(
        tf.reduce_sum(target_mapping * tf.cast(token_ids, tf.float32)[:, None, :], axis=2),
        tf.int32,
    )
    target_weights = tf.cast(
        tf.range(num_predict)[None, :] < num_targets[:, None], tf.float32
    )
    features = {
        "perm_mask": tf.cast(perm_mask, tf.int32),
        "target_mapping": target_mapping,
        "target_ids": target_ids,
        "target_weights": target_weights,
        "factorization_order": tf.cast(order, tf.int32),
    }
    if unbatched:
        features = {name: value[0] for name, value in features.items()}
    return features


def permutation_masks(dataset, num_predict=None, k=6, span_based=False,
                      max_span_length=5, seed=None, functional_ids=(), reuse_len=None,
                      perm_size=None):
    """Adds XLNet's PLM features to every element of a tf.data.Dataset.

    Args:
        dataset: elements are dicts with `token_ids` (and optionally
            `padding_mask`, `segment_ids`), unbatched (T,) or batched
            (B, T) with a static T, e.g. from `text_stream`; or plain token id
            tensors. An `is_masked` entry (from `two_segment_stream`) gives
            the targets; without it they are sampled here.
        num_predict, k, span_based: see `sample_permutation`.
        max_span_length, functional_ids, reuse_len, perm_size: see
            `sample_permutation`.
        seed: None, or an int: element i is then sampled with the stateless
            seed (seed, i), so the result is reproducible whatever the
            parallelism.

    Returns:
        The dataset with `perm_mask`, `target_mapping`, `target_ids`,
        `target_weights` and `factorization_order` added (plus `padding_mask`
        / `segment_ids` defaults when missing), ready for `XLNetPretrainer`.
    """

    def add(index, element):
        if not isinstance(element, dict):
            element = {"token_ids": element}
        element = dict(element)
        if "token_ids" not in element:
            raise ValueError(
                f"Elements need a `token_ids` entry, got keys {sorted(element)}."
            )
        token_ids = element["token_ids"]
        element.setdefault("padding_mask", tf.ones_like(token_ids, tf.int32))
        element.setdefault("segment_ids", tf.zeros_like(token_ids, tf.int32))
        element.update(sample_permutation(
            token_ids, element["padding_mask"], num_predict=num_predict, k=k,
            span_based=span_based, max_span_length=max_span_length,
            seed=None if seed is None else tf.stack([tf.constant(seed, tf.int64), index]),
            is_masked=element.get("is_masked"), functional_ids=functional_ids,
            reuse_len=reuse_len, perm_size=perm_size,
        ))
        return element

    return dataset.enumerate().map(
        add, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )



# ---------------------------------------------------------------- two-segment examples
# XLNet's released pretraining data (zihangdai/xlnet data_utils.py): each example
# is [reuse part, A, <sep>, B, <sep>, <cls>], B the text after A or a random
# segment with probability 0.5 each, so that the relative segment encoding of
# "different segments" is trained. Built in numpy, as XLNet builds its
# tfrecords; `permutation_masks` adds the order online, as XLNet's input_fn does.

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
    len(a) + len(b) == total.
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


def _shard_batches(data, sentence_ids, settings, rng):
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
    alternating sentence ids, then `eod_id` as its own sentence) form one
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
        eod_id: appended to every document (XLNet's <eod>), or None.
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
        _positive(name, value)
    reuse_len = default_reuse_len(sequence_length) if reuse_len is None else reuse_len
    if isinstance(reuse_len, bool) or not isinstance(reuse_len, int) or not (
            0 < reuse_len < sequence_length - 3):
        raise ValueError(
            f"`reuse_len` must be an integer in 1..{sequence_length - 4} (the rest holds "
            f"A, <sep>, B, <sep>, <cls>), got {reuse_len!r}; XLNet uses sequence_length / 2."
        )
    num_predict = default_num_predict(sequence_length) if num_predict is None else num_predict
    _positive("num_predict", num_predict)
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
        tokens, sentences, size, flag, made = [], [], 0, False, 0
        for values, lengths in flat.as_numpy_iterator():
            # Sentence ids alternate sentence by sentence (XLNet's sent_id).
            flags = (np.arange(len(lengths)) + flag) % 2 == 1
            tokens.append(values)
            sentences.append(np.repeat(flags, lengths))
            flag ^= len(lengths) % 2 == 1
            if eod_id is not None:
                tokens.append(np.array([eod_id], np.int32))
                sentences.append(np.array([flag]))
                flag = not flag
            size += len(values)
            if size >= shard_tokens:
                for batch in _shard_batches(np.concatenate(tokens), np.concatenate(sentences),
                                            settings, rng):
                    made += 1
                    yield batch
                tokens, sentences, size = [], [], 0
        if tokens:
            for batch in _shard_batches(np.concatenate(tokens), np.concatenate(sentences),
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
