"""The layers' TensorFlow implementations: keras_ctx.backend's names on TensorFlow (the
serving graph's id checks use them on every backend).

What TensorFlow needs and other backends do not:
- XLA:CPU rewrites (`layers/dense.py`, `normalization.py` and `embeddings.py`
  say why): 2-D products with a weight gradient in the orientation XLA:CPU
  runs fast, column sums as products with ones. They apply only while XLA
  compiles for a CPU (`xla.cpu_rewrites`).
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
from keras_ctx.backend.xla import (  # noqa: F401  (the backend's names)
    compiled_for,
    cpu_rewrites,
    in_xla_compilation,
    optimization_barrier,
)


def fused_attention(dtype):
    """False at every `dtype`: plain einsums, as fast on TensorFlow as
    `keras.ops.dot_product_attention`, which lowers to the same ops (benchmarks/attention.py)."""
    return False


# -- dense products (layers/dense.py) ----------------------------------------


def _weight_gradient(inputs, upstream):
    """x^T dy for x (rows, in), dy (rows, out), in the orientation XLA:CPU runs fast."""
    if inputs.shape[-1] is None or upstream.shape[-1] is None or (
        inputs.shape[-1] <= upstream.shape[-1]
    ):
        return tf.matmul(inputs, upstream, transpose_a=True)
    product = tf.matmul(upstream, inputs, transpose_a=True)  # (out, in)
    if in_xla_compilation():
        product = optimization_barrier(product)  # else XLA folds the transpose back
    return tf.transpose(product)


def column_sum(tensor):
    """Sum over all axes but the last: (..., width) -> (width,).

    Under XLA for a CPU, as the product of the rows with a block of ones;
    elsewhere TensorFlow's (or XLA:GPU/TPU's) own reduction, which is fast.
    """
    tensor = tf.convert_to_tensor(tensor)
    if not cpu_rewrites() or tensor.shape.rank is None or tensor.shape.rank < 2:
        return tf.reduce_sum(tensor, axis=tf.range(tf.rank(tensor) - 1))
    rows = tf.reshape(tensor, [-1, tf.shape(tensor)[-1]])
    # Eight columns of ones, not one: XLA:CPU runs a one-column product as a
    # slow matrix-vector loop (0.7 vs 0.2 ms for 2048 x 256).
    ones = tf.ones([tf.shape(rows)[0], 8], rows.dtype)
    return tf.matmul(ones, rows, transpose_a=True)[0]


@tf.custom_gradient
def bias_add(tensor, bias):
    """`tensor (..., *bias.shape) + bias`, whose bias gradient is a `column_sum`."""

    def gradient(upstream):
        flat = tf.reshape(upstream, [-1, bias.shape.num_elements()])
        return upstream, tf.reshape(column_sum(flat), tf.shape(bias))

    return tensor + bias, gradient


@tf.custom_gradient
def _matmul_2d(inputs, kernel):
    def gradient(upstream):
        return (tf.matmul(upstream, kernel, transpose_b=True),
                _weight_gradient(inputs, upstream))

    return tf.matmul(inputs, kernel), gradient


def matmul(inputs, kernel):
    """`inputs (..., in) @ kernel (in, out)` as one 2-D product over all leading rows."""
    inputs = tf.convert_to_tensor(inputs)
    kernel = tf.convert_to_tensor(kernel)
    if inputs.shape.rank == 2:
        return _matmul_2d(inputs, kernel)
    rows = tf.reshape(inputs, [-1, tf.shape(inputs)[-1]])
    outputs = _matmul_2d(rows, kernel)
    return reshape_like(outputs, inputs, [kernel.shape[-1]], drop=1)


def reshape_like(tensor, like, trailing, drop):
    """`tensor` reshaped to `like`'s leading dims (all but `drop` last) + `trailing`."""
    leading = tf.shape(like)[:-drop]
    dynamic = [tf.shape(tensor)[-1]] if trailing[-1] is None else trailing
    result = tf.reshape(tensor, tf.concat([leading, dynamic], 0))
    result.set_shape(like.shape[:-drop].concatenate(trailing))
    return result


# -- normalization statistics (layers/normalization.py) ----------------------


@tf.custom_gradient
def _row_mean(tensor):
    """Mean over the last axis, keepdims, as a (rows, width) x (width, 1) product."""
    width = tensor.shape[-1]
    rows = tf.reshape(tensor, [-1, width])
    mean = tf.matmul(rows, tf.fill([width, 1], tf.constant(1.0 / width, tensor.dtype)))
    mean = tf.reshape(mean, tf.concat([tf.shape(tensor)[:-1], [1]], 0))

    def gradient(upstream):  # d mean / d x = 1 / width everywhere
        return tf.broadcast_to(upstream / width, tf.shape(tensor))

    return mean, gradient


def row_mean(tensor):
    """`reduce_mean(tensor, -1, keepdims=True)`; under XLA:CPU, a product with ones."""
    if cpu_rewrites() and tensor.shape[-1] is not None:
        return _row_mean(tensor)
    return tf.reduce_mean(tensor, axis=-1, keepdims=True)


@tf.custom_gradient
def scale(normalized, gamma):
    """`normalized * gamma`, whose gamma gradient is a `column_sum`."""

    def gradient(upstream):
        return upstream * gamma, column_sum(upstream * normalized)

    return normalized * gamma, gradient


def broadcast_over_batch(positions, shape):
    """`positions` (T, H) repeated over the batch of `shape` (B, T, H).

    Its gradient sums over the batch with `column_sum`: XLA:CPU's own reduction
    over the leading axis took 10.9 of GPT-2-mini's 340 ms step (benchmarks/RESULTS.md).
    """
    if not cpu_rewrites():
        return tf.broadcast_to(positions[None], shape)

    @tf.custom_gradient
    def broadcast(positions):
        def gradient(upstream):
            rows = tf.reshape(upstream, [tf.shape(upstream)[0], -1])
            return tf.reshape(column_sum(rows), tf.shape(positions))

        return tf.broadcast_to(positions[None], shape), gradient

    return broadcast(positions)


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
    from keras_ctx.common import compat

    return compat.cudnn_lstm()
