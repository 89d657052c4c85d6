import keras
import numpy as np
import pytest
import tensorflow as tf

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers.lstm import LSTMP
from keras_ctx.testing import run_layer_test
from tests.autodiff import run_compiled
from tests.references import sigmoid


def numpy_lstmp(x, mask, kernel, recurrent, bias, projection, cell_clip, proj_clip, reverse):
    """bilm-tf's LSTMCell(num_proj, cell_clip, proj_clip) by hand, gates [i, f, g, o]."""
    batch, time, _ = x.shape
    units = kernel.shape[1] // 4
    out_dim = projection.shape[1] if projection is not None else units
    outputs = np.zeros((batch, time, out_dim))
    for b in range(batch):
        h, c = np.zeros(out_dim), np.zeros(units)
        steps = [t for t in range(time) if mask[b, t]]
        for t in reversed(steps) if reverse else steps:
            z = x[b, t] @ kernel + h @ recurrent + bias
            i, f, g, o = np.split(z, 4)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            if cell_clip is not None:
                c = np.clip(c, -cell_clip, cell_clip)
            h = sigmoid(o) * np.tanh(c)
            if projection is not None:
                h = h @ projection
                if proj_clip is not None:
                    h = np.clip(h, -proj_clip, proj_clip)
            outputs[b, t] = h
    return outputs


def random_sequences(seed=0, batch=2, time=5, features=3):
    return np.random.default_rng(seed).normal(size=(batch, time, features)).astype("float32") * 2


def test_lstmp_layer_test():
    run_layer_test(
        LSTMP,
        {"units": 8, "projection_dim": 4, "cell_clip": 3.0, "projection_clip": 3.0},
        random_sequences(),
        expected_output_shape=(2, 5, 4),
    )


def test_plain_reverse_last_output_layer_test():
    run_layer_test(
        LSTMP,
        {"units": 6, "reverse": True, "return_sequences": False, "implementation": "loop"},
        random_sequences(1),
        expected_output_shape=(2, 6),
        run_mixed_precision=False,
    )


@pytest.mark.parametrize("reverse", [False, True])
def test_matches_numpy_reference_with_clipping_and_mask(reverse):
    x = random_sequences(2, time=6) * 3
    mask = np.ones((2, 6), bool)
    mask[1, 4:] = False  # right padding
    layer = LSTMP(16, projection_dim=5, cell_clip=0.5, projection_clip=0.3, reverse=reverse)
    layer(x)
    # Large weights so that both clips are active.
    rng = np.random.default_rng(3)
    for w in layer.weights:
        w.assign(rng.normal(size=w.shape).astype("float32"))
    got = to_numpy(layer(x, mask=mask))
    k, u, b, p = (np.asarray(to_numpy(w), "float64") for w in layer.weights)
    want = numpy_lstmp(x.astype("float64"), mask, k, u, b, p, 0.5, 0.3, reverse)
    assert np.abs(want).max() == pytest.approx(0.3)  # projection clip reached
    np.testing.assert_allclose(got, want, atol=1e-5)
    # Without the clips the outputs differ: the clips are really applied.
    free = numpy_lstmp(x.astype("float64"), mask, k, u, b, p, None, None, reverse)
    assert np.abs(free - want).max() > 0.1


def test_unit_forget_bias_and_plain_lstm_matches_keras_lstm():
    x = random_sequences(4)
    ours = LSTMP(7, implementation="loop")
    ours(x)
    np.testing.assert_array_equal(to_numpy(ours.bias)[7:14], 1.0)
    theirs = keras.layers.LSTM(7, return_sequences=True, use_cudnn=False)
    theirs(x)
    for a, b in zip(ours.weights, theirs.weights):
        b.assign(a)
    np.testing.assert_allclose(
        to_numpy(ours(x)), to_numpy(theirs(x)), atol=1e-5
    )


def test_compiles_under_xla():
    layer = LSTMP(8, projection_dim=4, cell_clip=3.0, projection_clip=3.0, reverse=True)
    x = random_sequences(5)
    eager = to_numpy(layer(x))
    np.testing.assert_allclose(run_compiled(layer, x), eager, atol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="projection_clip"):
        LSTMP(4, projection_clip=3.0)
    with pytest.raises(ValueError, match="cudnn"):
        LSTMP(4, projection_dim=2, implementation="cudnn")
    with pytest.raises(ValueError, match="cell_clip"):
        LSTMP(4, cell_clip=-1)


@pytest.mark.skipif(not tf.config.list_logical_devices("GPU"), reason="cuDNN needs a GPU")
@pytest.mark.parametrize("reverse", [False, True])
def test_cudnn_path_matches_loop(reverse):
    x = random_sequences(6, time=7)
    mask = np.ones((2, 7), bool)
    mask[0, 5:] = False
    loop = LSTMP(8, reverse=reverse, implementation="loop")
    cudnn = LSTMP(8, reverse=reverse, implementation="cudnn")
    assert not cudnn.supports_jit and loop.supports_jit
    loop(x)
    cudnn(x)
    for a, b in zip(loop.weights, cudnn.weights):
        b.assign(a)
    np.testing.assert_allclose(
        to_numpy(cudnn(x, mask=mask)),
        to_numpy(loop(x, mask=mask)), atol=1e-4,
    )


def unrolled_lstmp(x, mask, kernel, recurrent, bias, projection, cell_clip, proj_clip,
                   reverse, h0, c0):
    """The same cell as `numpy_lstmp`, in TensorFlow ops unrolled in Python (autodiff
    reference for the hand-written backward pass); returns outputs and final (h, c)."""
    m = tf.cast(mask, "float32")[..., None]
    h, c = h0, c0
    outputs = [None] * x.shape[1]
    for t in (reversed(range(x.shape[1])) if reverse else range(x.shape[1])):
        z = x[:, t] @ kernel + h @ recurrent + bias
        i, f, g, o = tf.split(z, 4, axis=-1)
        new_c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        if cell_clip is not None:
            new_c = tf.clip_by_value(new_c, -cell_clip, cell_clip)
        new_h = tf.sigmoid(o) * tf.tanh(new_c)
        if projection is not None:
            new_h = new_h @ projection
            if proj_clip is not None:
                new_h = tf.clip_by_value(new_h, -proj_clip, proj_clip)
        h = m[:, t] * new_h + (1 - m[:, t]) * h
        c = m[:, t] * new_c + (1 - m[:, t]) * c
        outputs[t] = h * m[:, t]
    return tf.stack(outputs, axis=1), h, c


@pytest.mark.tensorflow_only("the hand-written backward pass is TensorFlow's (backend/tf_lstm.py); "
                              "JAX and torch differentiate the scan itself")
@pytest.mark.parametrize("reverse,projection", [(False, 5), (True, 5), (True, None)])
def test_gradients_match_autodiff_of_the_unrolled_cell(reverse, projection):
    # Clips active, right padding, an initial state and a loss on the outputs and
    # the final state: every path of the hand-written backward pass is used.
    x = tf.constant(random_sequences(7, time=6) * 3)
    mask = np.ones((2, 6), bool)
    mask[1, 4:] = False
    layer = LSTMP(16, projection_dim=projection, cell_clip=0.5,
                  projection_clip=0.3 if projection else None, reverse=reverse,
                  implementation="loop")
    layer(x)
    rng = np.random.default_rng(8)
    for w in layer.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") * 0.7)
    out_dim = projection or 16
    h0 = tf.constant(rng.normal(size=(2, out_dim)).astype("float32") * 0.2)
    c0 = tf.constant(rng.normal(size=(2, 16)).astype("float32") * 0.2)
    weights = [tf.constant(rng.normal(size=(2, 6, out_dim)).astype("float32")),
               tf.constant(rng.normal(size=(2, out_dim)).astype("float32")),
               tf.constant(rng.normal(size=(2, 16)).astype("float32"))]

    def loss(outputs, h, c):
        return sum(tf.reduce_sum(w * v) for w, v in zip(weights, (outputs, h, c)))

    def ours():
        with tf.GradientTape() as tape:
            tape.watch([x, h0, c0])
            outputs, (h, c) = layer(x, mask=mask, initial_state=(h0, c0), return_state=True)
            value = loss(outputs, h, c)
        return value, tape.gradient(value, [x, h0, c0] + layer.trainable_weights)

    with tf.GradientTape() as tape:
        tape.watch([x, h0, c0])
        p = layer.projection_kernel if projection else None
        value = loss(*unrolled_lstmp(x, mask, layer.kernel, layer.recurrent_kernel,
                                     layer.bias, p, 0.5, 0.3 if projection else None,
                                     reverse, h0, c0))
    want = tape.gradient(value, [x, h0, c0] + layer.trainable_weights)
    for got_value, got in (ours(), tf.function(ours, jit_compile=True)()):
        np.testing.assert_allclose(got_value, value, rtol=1e-5)
        for a, b in zip(got, want):
            assert np.abs(to_numpy(b)).max() > 1e-3  # every gradient is really non-zero
            np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
