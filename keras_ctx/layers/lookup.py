"""Row lookups whose gradients every Keras optimizer applies correctly.

The gradient of a gather (`ops.take`) is a `tf.IndexedSlices` with one row per
lookup: a row read k times appears k times. Keras 3 (seen with 3.15.1 on
TensorFlow 2.21) applies such a gradient wrongly in every optimizer that
squares it (Adam, AdamW, Adamax, Nadam, RMSprop, Adagrad, ...): it squares each
occurrence before the duplicates are summed, so Adam's second moment becomes a
sum of squares instead of the square of the sum. The bug, as reported upstream:

    Adam squares IndexedSlices occurrences separately: wrong update for
    embedding rows repeated in a batch.

        import numpy as np, tensorflow as tf, keras
        variable = keras.Variable(np.zeros((3, 1), "float32"))
        gradient = tf.IndexedSlices(tf.fill([4, 1], 0.25),    # row 0 read 4 times,
                                    tf.constant([0, 0, 0, 0]), # total gradient 1.0
                                    tf.constant([3, 1]))
        keras.optimizers.Adam(0.1).apply([gradient], [variable])
        print(variable.numpy()[0])   # [-0.2]; the dense gradient [[1], [0], [0]]
                                     # gives [-0.1], as PyTorch's Adam does

    Adam.update_step computes `ops.square(gradient)` on the IndexedSlices
    (squaring each slice's values) and only then densifies (summing slices):
    v = (1-b2) * sum_i g_i^2 instead of (1-b2) * (sum_i g_i)^2. Summing
    duplicate indices first (tf.unique + unsorted_segment_sum) fixes it.

Every lookup of a trainable table in keras_ctx goes through `take_rows`, whose
gradient is `summed_rows`' form; the Pretrainer step passes every gradient
through `summed_rows` as well, which also covers tables read by layers that are
not ours (keras.layers.Embedding) and duplicates that MirroredStrategy's
all-reduce creates by concatenating the replicas' slices.

Rows absent from a batch: Keras' Adam updates its moments densely (a row not
looked up still decays m and v and moves by its momentum), which is PyTorch's
`torch.optim.Adam` on a dense gradient, the reference we follow; a lazy Adam
(PyTorch's SparseAdam, TF1's LazyAdam) would leave such rows untouched.
"""

import tensorflow as tf

from keras_ctx.layers._xla import in_xla_compilation


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
    """`table[indices]` (rows of a 2-D table), with its gradient in `summed_rows`' form.

    Args:
        table: (rows, width) tensor, e.g. an embedding table cast to the compute dtype.
        indices: int tensor of any shape, every value in [0, rows).

    Returns:
        `indices.shape + (width,)`.
    """
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
