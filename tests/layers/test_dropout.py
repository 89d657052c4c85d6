import keras
import numpy as np
import pytest
import tensorflow as tf

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers import Dropout
from keras_ctx.backend.tf_ops import in_xla_compilation, philox_2x32
from keras_ctx.testing import run_layer_test


@pytest.mark.tensorflow_only("philox_2x32 makes TensorFlow's dropout bits (backend/tf_ops)")
def test_philox_matches_the_random123_known_answers():
    # kat_vectors of Random123 (Salmon et al. 2011) for philox2x32_10: (ctr, key) -> out[0].
    cases = [((0, 0), 0, 0xFF1DAE59),
             ((0xFFFFFFFF, 0xFFFFFFFF), 0xFFFFFFFF, 0x2C3F628B),
             ((0x243F6A88, 0x85A308D3), 0x13198A2E, 0xDD7CE038)]
    for (low, high), key, want in cases:
        got = philox_2x32(tf.constant([low], tf.uint32), tf.constant([high], tf.uint32),
                          tf.constant(key, tf.uint32))
        assert int(got[0]) == want


def _apply(layer, x, jit):
    if keras.backend.backend() != "tensorflow":  # eager: Keras' seed generators keep state
        return [to_numpy(layer(x, training=True)), False]

    @tf.function(jit_compile=jit)
    def run(x):
        return layer(x, training=True), in_xla_compilation()
    return [np.asarray(t) for t in run(x)]


@pytest.mark.parametrize("jit", [False, pytest.param(True, marks=pytest.mark.tensorflow_only(
    "XLA through tf.function(jit_compile=True), with TensorFlow's dropout bits"))])
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_drop_rate_scale_and_fresh_masks(jit, rate):
    layer = Dropout(rate, seed=7)
    x = np.ones((32, 64, 128), "float32")
    y, traced_under_xla = _apply(layer, x, jit)
    assert bool(traced_under_xla) == jit  # each path is the one exercised
    n = y.size
    dropped = (y == 0).mean()
    assert abs(dropped - rate) < 5 * np.sqrt(rate * (1 - rate) / n)  # binomial, 5 sigma
    np.testing.assert_allclose(np.unique(y[y != 0]), [1 / (1 - rate)], rtol=1e-4)
    assert abs(y.mean() - 1) < 0.01
    # Neighbouring elements are independent: P(both dropped) = rate^2.
    both = ((y[..., 1:] == 0) & (y[..., :-1] == 0)).mean()
    assert abs(both - rate**2) < 5 * np.sqrt(rate**2 * (1 - rate**2) / n)
    again, _ = _apply(layer, x, jit)
    # A new, independent mask per call: the two disagree with P = 2 rate (1 - rate).
    assert abs((again != y).mean() - 2 * rate * (1 - rate)) < 0.01


def test_the_mask_is_drawn_from_the_layers_seed_state_alone():
    """A resumed run restores the seed generators' state (training.Checkpointer), not a
    global generator: torch's global one drew Keras' masks for an unseeded layer."""
    layer, x = Dropout(0.5), np.ones((8, 64), "float32")
    state = to_numpy(layer.seed_generator.state)
    first = to_numpy(layer(x, training=True))
    keras.utils.set_random_seed(99)  # every global generator moves elsewhere
    layer.seed_generator.state.assign(state)
    np.testing.assert_array_equal(to_numpy(layer(x, training=True)), first)
    assert 0.3 < (first == 0).mean() < 0.7


def test_inference_and_rate_zero_pass_the_input_through():
    x = np.random.default_rng(0).normal(size=(4, 8)).astype("float32")
    np.testing.assert_array_equal(to_numpy(Dropout(0.3)(x, training=False)), x)
    np.testing.assert_array_equal(to_numpy(Dropout(0.0)(x, training=True)), x)


def test_harness_and_mixed_precision():
    x = np.random.default_rng(0).normal(size=(2, 6, 16)).astype("float32")
    run_layer_test(Dropout, {"rate": 0.2, "seed": 1}, x, expected_output_shape=(2, 6, 16))
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        y = Dropout(0.5)(np.ones((4, 64), "float32"), training=True)
        assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
        assert set(np.unique(to_numpy(y).astype("float32"))) <= {0.0, 2.0}
    finally:
        keras.mixed_precision.set_global_policy("float32")
