"""The layers' TensorFlow implementations: keras_ctx.backend's names on TensorFlow (the
serving graph's id checks use them on every backend).

What TensorFlow needs and other backends do not:
- Cheaper dropout bits (`layers/dropout.py`): elementwise Philox-2x32 under
  XLA, 16 stateless-Philox bits per element elsewhere.
- Summed duplicate rows of a gather's `tf.IndexedSlices` gradient
  (`layers/lookup.py`: Keras' optimizers square each occurrence).
- Id and length checks that hold inside tf.function and SavedModel graphs.
- Cache writes as core ops outside XLA (stock TF Serving has no
  `XlaDynamicUpdateSlice` kernel).
"""

import tensorflow as tf
from keras import ops

from keras_ctx.backend.tf_lstm import recurrence  # noqa: F401  (the backend's name)
from keras_ctx.common import compat


def in_xla_compilation():
    """True while tracing a function that XLA compiles (`jit_compile=True`)."""
    return compat.in_xla_context(tf.compat.v1.get_default_graph())


def fused_attention(dtype):
    """False at every `dtype`: plain einsums, as fast on TensorFlow as
    `keras.ops.dot_product_attention`, which lowers to the same ops (benchmarks/attention.py)."""
    return False


# -- row lookups (layers/lookup.py) -----------------------------------------


def _dense(gradient):
    """The IndexedSlices as a dense tensor, duplicates summed (static shape under XLA)."""
    rows = gradient.dense_shape[0]
    return tf.math.unsorted_segment_sum(gradient.values, gradient.indices, rows)


def summed_rows(gradient):
    """`gradient` with each row index at most once, in a form Keras' optimizers apply right.

    Args:
        gradient: a tensor, a `tf.IndexedSlices` (a gather's gradient), or None.

    Returns:
        A dense tensor or None unchanged. An IndexedSlices becomes dense under XLA
        (static shapes), in a replica of a multi-replica strategy (whose all-reduce
        concatenates the replicas' slices, repeating rows again) and where the
        table has no more rows than the slices; otherwise an IndexedSlices with
        unique indices whose values are the sums of the duplicates'.
    """
    if not isinstance(gradient, tf.IndexedSlices):
        return gradient
    rows = tf.get_static_value(gradient.dense_shape)
    lookups = gradient.values.shape[0]
    small = rows is not None and lookups is not None and rows[0] <= lookups
    if small or in_xla_compilation() or tf.distribute.get_strategy().num_replicas_in_sync > 1:
        return _dense(gradient)
    unique, position = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(gradient.values, position, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, gradient.dense_shape)


def take_rows(table, indices):
    """`table[indices]` (rows of a 2-D table), with its gradient in `summed_rows`' form."""
    indices = tf.cast(indices, "int32")

    @tf.custom_gradient
    def lookup(table):
        def gradient(upstream):
            width = tf.shape(table)[1]
            slices = tf.IndexedSlices(tf.reshape(upstream, [-1, width]),
                                      tf.reshape(indices, [-1]), tf.shape(table))
            return summed_rows(slices)

        return tf.gather(table, indices), gradient

    return lookup(table)


# -- dropout bits (layers/dropout.py) ----------------------------------------

# Philox-2x32 constants (Salmon et al. 2011, Random123): round multiplier and
# Weyl key increment; 10 rounds, Random123's default.
PHILOX_M = 0xD256D193
PHILOX_W = 0x9E3779B9
PHILOX_ROUNDS = 10


def philox_2x32(counter_low, counter_high, key, rounds=PHILOX_ROUNDS):
    """First output word of Philox-2x32-`rounds` for uint32 counters under uint32 `key`."""
    c0, c1 = counter_low, counter_high
    for _ in range(rounds):
        product = tf.cast(c0, tf.uint64) * tf.constant(PHILOX_M, tf.uint64)
        high = tf.cast(tf.bitwise.right_shift(product, tf.constant(32, tf.uint64)), tf.uint32)
        low = tf.cast(product, tf.uint32)
        c0, c1 = tf.bitwise.bitwise_xor(tf.bitwise.bitwise_xor(high, key), c1), low
        key = key + tf.constant(PHILOX_W, tf.uint32)
    return c0


def _elementwise_philox_keep(shape, seed, rate):
    """Keep mask from per-element Philox bits: P(keep) = 1 - rate at 2^-32 resolution."""
    size = tf.reduce_prod(shape)
    index = tf.cast(tf.range(size), tf.uint32)
    bits = philox_2x32(index, tf.fill([size], seed[1]), seed[0])
    threshold = min(int(round(rate * 2**32)), 2**32 - 1)
    return tf.reshape(bits >= tf.constant(threshold, tf.uint32), shape), threshold / 2**32


def _half_bits_keep(shape, seed, rate):
    """Keep mask from 16 stateless-Philox bits per element (two elements per draw)."""
    size = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(tf.stack([(size + 1) // 2]), seed, minval=None,
                                        maxval=None, dtype=tf.uint32)
    halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
    threshold = min(int(round(rate * 2**16)), 2**16 - 1)
    keep = tf.reshape(halves >= tf.constant(threshold, tf.uint16), shape)
    return keep, threshold / 2**16


def dropout(inputs, rate, seed_generator):
    """`inputs` with each element zeroed with probability ~`rate`, the rest scaled to keep
    the expectation (layers/dropout.py: Philox bits under XLA, half bits elsewhere)."""
    # As Keras' TensorFlow backend: the generator's int64 state as int32 seeds.
    seed = tf.cast(tf.math.floormod(tf.cast(seed_generator.next(), tf.int64),
                                    2**31 - 1), tf.int32)
    shape = tf.shape(inputs)
    if in_xla_compilation():
        keep, dropped = _elementwise_philox_keep(shape, tf.bitcast(seed, tf.uint32), rate)
    else:
        keep, dropped = _half_bits_keep(shape, seed, rate)
    factor = tf.cast(1.0 / (1.0 - dropped), inputs.dtype)
    return tf.where(keep, inputs * factor, tf.zeros_like(inputs))


# -- checks that hold inside graphs (layers/embeddings.py) --------------------


def check_token_ids(token_ids, vocabulary_size, name="token_ids"):
    """`token_ids`, after checking every id is in [0, vocabulary_size) (raises otherwise).

    The check holds in eager, tf.function and SavedModel graphs
    (`tf.errors.InvalidArgumentError`); XLA compiles asserts away.
    """
    token_ids = tf.convert_to_tensor(token_ids)
    message = (f"{name} must be in [0, {vocabulary_size}) (the vocabulary size); an id "
               "outside it was given. Check the tokenizer matches the model.")
    checks = [tf.debugging.assert_non_negative(token_ids, message=message),
              tf.debugging.assert_less(token_ids, tf.cast(vocabulary_size, token_ids.dtype),
                                       message=message)]
    with tf.control_dependencies(checks):
        return tf.identity(token_ids)


def check_at_most(value, limit, message, result):
    """`result`, after checking `value <= limit` (int scalars) in eager and graphs."""
    check = tf.debugging.assert_less_equal(tf.cast(value, "int32"), limit, message=message)
    with tf.control_dependencies([check]):
        return tf.identity(result)


# -- cache writes (layers/attention.py, generation) ---------------------------


def update_positions(tensor, index, updates):
    """`tensor` with `updates` written at [:, index:index + updates.shape[1]].

    Under XLA: `ops.slice_update` (XLA's DynamicUpdateSlice, in place). In a
    TF graph: two slices and a concat, core ops only, because that op lowers
    to `XlaDynamicUpdateSlice`, which stock TF Serving has no kernel for
    (a generation signature runs the decode loop, cache writes included, in
    the served graph).
    """
    updates = ops.cast(updates, tensor.dtype)
    if in_xla_compilation():
        start = [0, index] + [0] * (len(tensor.shape) - 2)
        return ops.slice_update(tensor, start, updates)
    width = tf.shape(updates)[1]
    out = tf.concat([tensor[:, :index], updates, tensor[:, index + width:]], axis=1)
    out.set_shape(tensor.shape)
    return out


# -- loops over time (layers/lstm.py, CoVe's decoder) -------------------------


def scan_states(step, init, xs):
    """Every state of `state = step(state, x_t)` over the leading axis of `xs`, stacked.

    `tf.scan`: it compiles under XLA with gradients, where Keras 3.15's
    TensorFlow `ops.scan` does not (its gradient's TensorList has no size).
    """
    return tf.scan(step, xs, initializer=init)


# -- the LSTM (layers/lstm.py) -----------------------------------------------


def gpu_available():
    """Whether TensorFlow sees a GPU (the cuDNN LSTM kernel's condition)."""
    return bool(tf.config.list_logical_devices("GPU"))


def cudnn_lstm():
    """Keras' TensorFlow-backend `lstm` function (cuDNN where it applies)."""
    return compat.cudnn_lstm()
