import keras
import numpy as np
import tensorflow as tf

from keras_ctx.pretraining.losses import (
    TokenAccuracy,
    sparse_cross_entropy,
    top_one_correct,
    weighted_cross_entropy,
)
from tests.autodiff import value_and_gradients
from tests.references import log_softmax

_numpy = keras.ops.convert_to_numpy


def test_cross_entropy_and_its_gradient_match_numpy_even_for_huge_logits():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 11)).astype("float32") * np.float32(30)
    logits[0, 0] += 1e4  # overflows a naive exp
    labels = rng.integers(0, 11, (3, 5))
    want = -np.take_along_axis(log_softmax(logits.astype("float64")), labels[..., None],
                               -1)[..., 0]
    got, (gradient,), _ = value_and_gradients(
        lambda z: keras.ops.sum(sparse_cross_entropy(labels, z)), [logits])
    np.testing.assert_allclose(got, want.sum(), rtol=1e-5)
    got = keras.ops.convert_to_numpy(sparse_cross_entropy(labels, logits))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    softmax = np.exp(log_softmax(logits.astype("float64")))
    np.testing.assert_allclose(gradient, softmax - np.eye(11)[labels], atol=1e-6)

    # TensorFlow's own loss on the same numbers.
    builtin = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    np.testing.assert_allclose(got, builtin, rtol=1e-5, atol=1e-4)


def test_weighted_mean_ignores_zero_weights_and_reads_bfloat16():
    logits = np.array([[[2.0, 0.0], [0.0, 50.0]]], "float32")
    labels = np.array([[0, 0]])
    first = np.log1p(np.exp(-2.0))
    np.testing.assert_allclose(
        _numpy(weighted_cross_entropy(labels, logits, np.array([[1.0, 0.0]], "float32"))),
        first, rtol=1e-6)
    np.testing.assert_allclose(_numpy(weighted_cross_entropy(labels, logits)),
                               (first + 50.0) / 2, rtol=1e-5)
    halves = keras.ops.cast(logits, "bfloat16")
    assert keras.backend.standardize_dtype(weighted_cross_entropy(labels, halves).dtype) == (
        "float32")


def test_accuracy_equals_argmax_accuracy_and_counts_ties_as_correct():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(64, 20, 50)).astype("float32")
    labels = rng.integers(0, 50, (64, 20))
    labels[:, :5] = logits[:, :5].argmax(-1)  # some correct
    weights = (rng.random((64, 20)) > 0.3).astype("float32")
    argmax_correct = (logits.argmax(-1) == labels).astype("float32")
    np.testing.assert_array_equal(_numpy(top_one_correct(labels, logits)), argmax_correct)
    metric = TokenAccuracy()
    metric.update_state(labels, logits, sample_weight=weights)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(metric.result()), (argmax_correct * weights).sum() / weights.sum(),
                               rtol=1e-6)
    tied = np.array([[1.0, 3.0, 3.0]], "float32")
    np.testing.assert_array_equal(
        _numpy(top_one_correct(np.array([1, 2, 0]), np.repeat(tied, 3, 0))), [1, 1, 0])
