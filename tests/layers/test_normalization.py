"""keras_ctx's blocks normalize with Keras' own LayerNormalization and RMSNormalization;
these check Keras' layers are the math the converted checkpoints expect, on every backend."""

import keras
import numpy as np
import pytest

from keras_ctx.layers import TransformerEncoderBlock
from tests.autodiff import run_compiled, value_and_gradients


def t5_layer_norm(x, scale, epsilon):
    """T5's T5LayerNorm (HF transformers' modeling_t5.py; Mesh TF's rms layer_norm): the mean
    square in float32, epsilon inside the root, no mean subtraction, no bias."""
    x = x.astype("float32")
    variance = np.mean(np.square(x), axis=-1, keepdims=True)
    return scale * (x / np.sqrt(variance + epsilon))


@pytest.mark.parametrize("jit", [False, True])
def test_keras_rms_normalization_is_t5s(jit):
    # Mean 3 (a mean subtraction would show) and, in the second row, values so small that
    # the epsilon's place matters (inside the root: 1e-3 / sqrt(1e-6 + 1e-6), not 1e-3 / 1e-3).
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(2, 5, 16)).astype("float32")
    x[1] = rng.choice([-1e-3, 1e-3], size=(5, 16))
    layer = keras.layers.RMSNormalization(epsilon=1e-6)
    layer.build(x.shape)
    scale = np.linspace(0.5, 1.5, 16).astype("float32")
    layer.scale.assign(scale)
    got = run_compiled(layer, x) if jit else keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(got, t5_layer_norm(x, scale, 1e-6), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.abs(got[1]), np.tile(scale * 1e-3 / np.sqrt(2e-6), (5, 1)),
                               rtol=1e-4)


def test_keras_rms_normalization_under_mixed_precision_keeps_float32_statistics():
    keras.config.set_dtype_policy("mixed_bfloat16")
    # A wide row (T5-small's 512) of large values: bfloat16 statistics would be ~1% off.
    x = np.random.default_rng(1).normal(0.0, 30.0, size=(4, 512)).astype("float32")
    layer = keras.layers.RMSNormalization(epsilon=1e-6)
    y = layer(x)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    x16 = keras.ops.convert_to_numpy(keras.ops.cast(keras.ops.cast(x, "bfloat16"), "float32"))
    want = t5_layer_norm(x16, 1.0, 1e-6)
    got = keras.ops.convert_to_numpy(keras.ops.cast(y, "float32"))
    np.testing.assert_allclose(got, want, rtol=2**-8, atol=1e-6)  # one bfloat16 rounding


@pytest.mark.parametrize("jit", [False, True])
def test_keras_layer_normalization_values_and_gamma_gradient_match_numpy(jit):
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(2, 5, 16)).astype("float32")
    layer = keras.layers.LayerNormalization(epsilon=1e-6)
    layer.build(x.shape)
    gamma, beta = np.linspace(0.5, 1.5, 16), np.linspace(-1, 1, 16)
    layer.gamma.assign(gamma)
    layer.beta.assign(beta)
    normalized = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    upstream = np.random.default_rng(1).normal(size=x.shape).astype("float32")

    def loss(x):
        y = layer(x)
        return keras.ops.sum(keras.ops.multiply(y, upstream)), [y]

    _, _, (d_gamma, d_beta), (y,) = value_and_gradients(
        loss, [x], [layer.gamma, layer.beta], compiled=jit, with_outputs=True)
    np.testing.assert_allclose(y, normalized * gamma + beta, atol=1e-5)
    np.testing.assert_allclose(d_gamma, (upstream * normalized).sum((0, 1)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d_beta, upstream.sum((0, 1)), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kind,cls", [("layer_norm", keras.layers.LayerNormalization),
                                      ("rms_norm", keras.layers.RMSNormalization)])
def test_blocks_use_keras_own_layers(kind, cls):
    block = TransformerEncoderBlock(num_heads=2, intermediate_size=8, normalization=kind)
    block.build((None, 3, 4))
    assert type(block.self_attention_norm) is cls and type(block.feedforward_norm) is cls
    assert type(block.feedforward.intermediate_dense) is keras.layers.Dense
    assert type(block.self_attention.query_dense) is keras.layers.EinsumDense
