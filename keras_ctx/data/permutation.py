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

import tensorflow as tf


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


def sample_permutation(token_ids, padding_mask=None, num_predict=None, k=6,
                       span_based=False, max_span_length=5, seed=None):
    """Samples the factorization order and builds XLNet's PLM features.

    Args:
        token_ids: int (T,) or (batch, T).
        padding_mask: same shape, 1 for real tokens (default: all real).
        num_predict: P, the static number of target rows; default T // K.
        k: K, predict the last 1/K of each order: floor(n / K) targets for n
            real tokens (at most P). 6 in XLNet (section 3.1).
        span_based: choose the targets as spans of up to `max_span_length`
            tokens (XLNet's `_sample_mask`); the order among targets is random.
        max_span_length: longest span (5 in XLNet's code).
        seed: None (stateful random ops), or an int or (2,) int tensor:
            stateless sampling, the same for the same seed.

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
    if num_predict is None:
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
    token_ids = tf.cast(token_ids, tf.int32)
    real = tf.cast(padding_mask, tf.bool)

    random = _Random(seed)
    num_real = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
    num_targets = tf.minimum(num_real // k, num_predict)  # the last 1/K of z

    shape = tf.shape(token_ids)
    noise = random.uniform(shape)
    if span_based:
        is_target = _span_targets(real, num_targets, k, max_span_length, random)
    else:
        # A uniformly random order of the real tokens; its last num_targets
        # steps are the targets.
        key = tf.where(real, noise, -1.0)
        rank = tf.argsort(tf.argsort(key, axis=1, stable=True), axis=1, stable=True)
        is_target = rank >= length - num_targets[:, None]
    # z: padding, then the context, then the targets (each group in a random
    # order; with span_based=False this is the order sampled above).
    key = noise + 2.0 * tf.cast(is_target, tf.float32) - 4.0 * tf.cast(~real, tf.float32)
    order = tf.argsort(key, axis=1, stable=True)
    rank = tf.argsort(order, axis=1, stable=True)
    # step: 0 for the context (one step), 1, 2, ... for the targets in order.
    step = tf.where(is_target, rank - (length - num_targets[:, None]) + 1, 0)
    # XLNet `_local_perm`: i may not attend j iff j is a target not before i.
    perm_mask = is_target[:, None, :] & (step[:, None, :] >= step[:, :, None])

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
                      max_span_length=5, seed=None):
    """Adds XLNet's PLM features to every element of a tf.data.Dataset.

    Args:
        dataset: elements are dicts with `token_ids` (and optionally
            `padding_mask`, `segment_ids`), unbatched (T,) or batched
            (B, T) with a static T, e.g. from `text_stream`; or plain token id
            tensors.
        num_predict, k, span_based, max_span_length: see `sample_permutation`.
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
        ))
        return element

    return dataset.enumerate().map(
        add, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )

