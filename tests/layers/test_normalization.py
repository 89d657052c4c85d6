import keras
import numpy as np
import pytest

from keras_ctx.layers import normalization
from tests.autodiff import run_compiled
from tests.layers.test_dense import _compare


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("kwargs", [{"epsilon": 1e-12}, {"epsilon": 1e-5, "center": False}])
def test_layer_norm_equals_keras_values_and_gradients(jit, kwargs):
    _compare(normalization.LayerNormalization(**kwargs),
             keras.layers.LayerNormalization(**kwargs), (4, 6, 32), jit)


@pytest.mark.parametrize("jit", [False, True])
def test_rms_norm_equals_keras_values_and_gradients(jit):
    _compare(normalization.RMSNormalization(epsilon=1e-6),
             keras.layers.RMSNormalization(epsilon=1e-6), (4, 6, 32), jit)


def test_layer_norm_matches_numpy_under_xla():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(2, 5, 16)).astype("float32")
    layer = normalization.LayerNormalization(epsilon=1e-6)
    layer.build(x.shape)
    layer.gamma.assign(np.linspace(0.5, 1.5, 16))
    layer.beta.assign(np.linspace(-1, 1, 16))
    got = run_compiled(layer, x)
    want = ((x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
            * np.linspace(0.5, 1.5, 16) + np.linspace(-1, 1, 16))
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.xfail(keras.backend.backend() == "torch", strict=True, raises=RuntimeError,
                   reason="Keras 3.15.1's own keras.layers.LayerNormalization(axis=1) fails on "
                          "torch (torch's layer_norm is given normalized_shape [5] for a "
                          "(2, 5, 16) input): a Keras bug, not ours")
def test_other_axes_defer_to_keras():
    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    ours = normalization.LayerNormalization(axis=1)
    theirs = keras.layers.LayerNormalization(axis=1)
    ours.build(x.shape)
    theirs.build(x.shape)
    np.testing.assert_allclose(run_compiled(ours, x), run_compiled(theirs, x), atol=1e-5)
