"""Lookups whose repeated rows Adam updates as the dense gradient says (keras_ctx/layers/lookup.py).

Reference: Adam (Kingma & Ba, 2015, Algorithm 1) on the dense gradient, in numpy, which is
what PyTorch's `torch.optim.Adam` does with an embedding's (dense) gradient. On the code
before the fix, a row read 4 times moved 2x as far in Adam's first step.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_ctx
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers.lookup import summed_rows, take_rows

LR, B1, B2, EPS = 0.1, 0.9, 0.999, 1e-7
# tf.IndexedSlices, the sparse gradient of a gather, is TensorFlow's: JAX and torch give a
# lookup's gradient dense, rows already summed (the plain `fit` test covers them).
SPARSE = pytest.mark.tensorflow_only("tf.IndexedSlices (TensorFlow's sparse lookup gradients)")


def numpy_adam(weights, gradients):
    """Weights after one dense Adam step per gradient (Keras' epsilon placement)."""
    m, v, w = np.zeros_like(weights), np.zeros_like(weights), weights.astype("float64")
    for t, g in enumerate(gradients, start=1):
        m = B1 * m + (1 - B1) * g
        v = B2 * v + (1 - B2) * g * g
        w = w - LR * np.sqrt(1 - B2 ** t) / (1 - B1 ** t) * m / (np.sqrt(v) + EPS)
    return w


def dense_gradient(table, ids, upstream):
    """d sum(upstream * table[ids]) / d table, duplicates summed."""
    gradient = np.zeros_like(table, dtype="float64")
    np.add.at(gradient, ids.reshape(-1), upstream.reshape(-1, table.shape[1]))
    return gradient


def _embedding_model(rows=6, width=3):
    ids = keras.Input((None,), dtype="int32")
    model = keras.Model(ids, keras_ctx.layers.TokenEmbedding(rows, width)(ids))
    return model


# Row 0 read 5 times, row 2 twice, row 4 once; rows 1, 3, 5 absent.
IDS = np.array([[0, 0, 2, 0], [4, 0, 2, 0]], "int32")


@pytest.mark.parametrize("jit_compile", [False, True])
def test_one_adam_step_of_plain_fit_on_repeated_ids_equals_the_dense_update(jit_compile):
    model = _embedding_model()
    table = model.get_weights()[0]
    target = np.random.default_rng(0).normal(size=IDS.shape + (3,)).astype("float32")
    model.compile(keras.optimizers.Adam(LR, epsilon=EPS), loss="mse", jit_compile=jit_compile)
    model.fit(IDS, target, batch_size=2, epochs=1, shuffle=False, verbose=0)
    upstream = 2 * (table[IDS] - target) / target.size   # d mse / d outputs
    expected = numpy_adam(table, [dense_gradient(table, IDS, upstream)])
    np.testing.assert_allclose(model.get_weights()[0], expected, atol=2e-6)
    # Row 0 moves by about lr, not 2x or 5x lr as when Adam squared each read apart.
    assert 0.05 < np.abs(model.get_weights()[0][0] - table[0]).max() < 0.11


@SPARSE
def test_rows_absent_from_a_batch_follow_dense_adam_not_lazy_adam():
    """Keras' Adam (and PyTorch's on a dense gradient) decays every row's moments each step:
    a row absent from step 2 still moves by its momentum. A lazy Adam would leave it."""
    model = _embedding_model()
    layer = model.layers[-1]
    table = model.get_weights()[0]
    optimizer = keras.optimizers.Adam(LR, epsilon=EPS)
    batches = [np.array([[0, 0, 1]], "int32"), np.array([[1, 1, 2]], "int32")]
    gradients = []
    for ids in batches:
        before = to_numpy(layer.embeddings)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids) ** 2)
        optimizer.apply([summed_rows(tape.gradient(loss, layer.embeddings))],
                        [layer.embeddings])
        gradients.append(dense_gradient(before, ids, 2 * before[ids]))
    np.testing.assert_allclose(to_numpy(layer.embeddings), numpy_adam(table, gradients),
                               atol=2e-6)
    lazy_row_0 = numpy_adam(table, gradients[:1])[0]   # row 0 untouched by step 2
    assert np.abs(to_numpy(layer.embeddings)[0] - lazy_row_0).min() > 1e-3


def _is_summed(gradient):
    if not isinstance(gradient, tf.IndexedSlices):
        return True
    indices = to_numpy(gradient.indices)
    return len(np.unique(indices)) == len(indices)


@SPARSE
def test_every_lookup_layer_gives_each_row_once():
    """The gradient of each lookup of a trainable table reaches optimizers with rows summed."""
    ids = tf.constant(IDS)
    hidden = tf.random.normal((2, 4, 8))
    span_head = keras_ctx.layers.SpanBoundaryHead(vocabulary_size=7, max_span_length=32)
    cases = {
        "token": (keras_ctx.layers.TokenEmbedding(6, 3), lambda layer: layer(ids)),
        "factorized": (keras_ctx.layers.FactorizedEmbedding(6, 3, 4), lambda layer: layer(ids)),
        "relative_bias": (keras_ctx.layers.RelativePositionBias(2, num_buckets=8,
                                                                max_distance=16),
                          lambda layer: layer(tf.zeros((1, 6, 4)))),
        "span_positions": (span_head, lambda layer: layer(
            hidden, tf.zeros((2, 3), "int32"), tf.ones((2, 3), "int32"),
            tf.constant([[0, 0, 1], [0, 2, 0]]))),
    }
    for name, (layer, call) in cases.items():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(call(layer) ** 2)
        gradients = tape.gradient(loss, layer.trainable_variables)
        assert all(_is_summed(g) for g in gradients), name


@SPARSE
def test_summed_rows_keeps_large_tables_sparse_and_sums_duplicates():
    slices = tf.IndexedSlices(tf.constant([[1.0], [2.0], [4.0]]), tf.constant([5, 2, 5]),
                              tf.constant([100, 1]))
    summed = summed_rows(slices)
    assert isinstance(summed, tf.IndexedSlices)
    np.testing.assert_array_equal(to_numpy(summed.indices), [5, 2])
    np.testing.assert_array_equal(to_numpy(summed.values), [[5.0], [2.0]])
    # A table no larger than the slices comes back dense.
    small = summed_rows(tf.IndexedSlices(slices.values, tf.constant([2, 0, 2]),
                                         tf.constant([3, 1])))
    assert not isinstance(small, tf.IndexedSlices)
    np.testing.assert_array_equal(to_numpy(small)[:, 0], [2, 0, 5])


@SPARSE
def test_take_rows_reads_rows_and_its_gradient_under_xla_is_dense():
    table = tf.Variable(np.arange(12, dtype="float32").reshape(6, 2))

    @tf.function(jit_compile=True)
    def step(ids):
        with tf.GradientTape() as tape:
            rows = take_rows(table, ids)
            loss = tf.reduce_sum(rows)
        return rows, tape.gradient(loss, table)

    rows, gradient = step(tf.constant([[3, 3, 1]]))
    np.testing.assert_array_equal(to_numpy(rows)[0], to_numpy(table)[[3, 3, 1]])
    assert not isinstance(gradient, tf.IndexedSlices)
    np.testing.assert_array_equal(to_numpy(gradient)[:, 0], [0, 1, 0, 2, 0, 0])
