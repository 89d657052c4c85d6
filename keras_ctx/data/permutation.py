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
"""

from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.common.validation import divisor, integer_in, positive_int


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
        integer_in("reuse_len", reuse_len, 1, length - 1,
                   why="shorter than the sequence: the rest is the part that is not reused")
    parts = [length] if reuse_len is None else [reuse_len, length - reuse_len]
    if perm_size is not None:
        divisor("perm_size", perm_size, parts, why="the reuse part and the rest; XLNet uses "
                "perm_size = reuse_len = sequence_length / 2")
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
            `xlnet_stream.two_segment_stream`); functional tokens among them are not
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
    positive_int("k", k, least=2, why="predict the last 1/k of each order, so that every "
                 "target has context; XLNet uses 6")
    positive_int("max_span_length", max_span_length)
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
            "length first, e.g. with `keras_ctx.data.xlnet_stream.text_stream`), got shape "
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
    integer_in("num_predict", num_predict, 1, length, why="at most one target per position")
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
            (B, T) with a static T, e.g. from `xlnet_stream.text_stream`; or plain token id
            tensors. An `is_masked` entry (from `xlnet_stream.two_segment_stream`) gives
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
