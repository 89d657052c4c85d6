"""The layers' backend switch: both implementations define its names and agree.

`_generic` is keras.ops only, so it also runs here on TensorFlow: its LSTM
recurrence (autodiff of `ops.scan`, what JAX runs) must give the values and
gradients of `_tensorflow`'s hand-written backward pass.
"""

import numpy as np
import tensorflow as tf

from keras_ctx.generation import _eager, _jax
from keras_ctx.generation import _tensorflow as generation_tensorflow
from keras_ctx.layers import _backend, _generic, _tensorflow


def test_every_implementation_defines_the_switchs_names():
    for module in (_tensorflow, _generic):
        missing = [name for name in _backend.NAMES if not callable(getattr(module, name, None))]
        assert not missing, f"{module.__name__} lacks {missing}"
    assert _backend.BACKEND_MODULE == _tensorflow.__name__  # the tests run TensorFlow
    for module in (generation_tensorflow, _jax, _eager):
        for name in ("auto_jit_compile", "categorical", "compile_function", "keep_shapes"):
            assert callable(getattr(module, name, None)), f"{module.__name__} lacks {name}"


def test_generic_lstm_recurrence_equals_the_hand_written_backward_pass():
    rng = np.random.default_rng(0)
    time, batch, units, projection = 5, 3, 4, 2
    xw = tf.constant(rng.normal(size=(time, batch, 4 * units)), tf.float32)
    mask = np.ones((time, batch, 1), "float32")
    mask[3:, 1] = 0.0  # a padded row keeps its state
    mask = tf.constant(mask)
    h0 = tf.constant(rng.normal(size=(batch, projection)), tf.float32)
    c0 = tf.constant(rng.normal(size=(batch, units)), tf.float32)
    u = tf.Variable(rng.normal(size=(projection, 4 * units)).astype("float32"))
    p = tf.Variable(rng.normal(size=(units, projection)).astype("float32"))
    weights = tf.constant(rng.normal(size=(time, batch, projection)), tf.float32)
    for reverse in (False, True):
        results = []
        for module in (_tensorflow, _generic):
            with tf.GradientTape() as tape:
                tape.watch([xw, h0, c0])
                hs, cs = module.recurrence(xw, mask, h0, c0, u, p, 0.5, 0.7, reverse)
                loss = tf.reduce_sum(hs * weights) + tf.reduce_sum(cs)
            results.append([hs, cs] + tape.gradient(loss, [xw, h0, c0, u, p]))
        for ours, generic in zip(*results):
            np.testing.assert_allclose(generic.numpy(), ours.numpy(), atol=1e-5, rtol=1e-5)


def test_generic_sums_and_checks_equal_tensorflows():
    x = np.random.default_rng(1).normal(size=(2, 3, 5)).astype("float32")
    np.testing.assert_allclose(_generic.column_sum(x), x.sum(axis=(0, 1)), rtol=1e-6)
    np.testing.assert_allclose(_generic.row_mean(x), x.mean(-1, keepdims=True), rtol=1e-6)
    ids = np.array([[0, 4], [2, 5]])
    np.testing.assert_array_equal(_generic.check_token_ids(ids, 6), ids)
    for bad in (6, -1):
        try:
            _generic.check_token_ids(np.where(ids == 5, bad, ids), 6, "ids")
        except ValueError as error:
            assert "ids must be in [0, 6)" in str(error)
        else:
            raise AssertionError(f"id {bad} was not refused")
