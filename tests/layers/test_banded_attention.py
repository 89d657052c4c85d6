"""Locally banded attention (GPT-3 / GPT-Neo local layers) against dense + band mask."""

import numpy as np
import pytest

from keras import ops
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers import MultiHeadAttention
from keras_ctx.layers.banded_attention import band_mask
from keras_ctx.testing import run_layer_test
from tests.autodiff import value_and_gradients
from tests import references

B, T, D, N, H, W = 2, 11, 12, 3, 4, 4  # T not a multiple of the window: padded blocks


def gpt_neo_band(length, window):
    """Hugging Face gpt_neo's local causal buffer, rebuilt from its definition:
    bias = tril(ones); local: bias XOR tril(bias, -window_size)."""
    bias = np.tril(np.ones((length, length), bool))
    return np.logical_xor(bias, np.tril(bias, -window))


def vectors_and_padding(seed=0, length=T):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, length, D)).astype("float32")
    padding = np.ones((B, length), "int32")
    padding[1, length - 3:] = 0  # right padding in the second row
    return x, padding


def dense_twin(layer):
    """A dense layer (window_size=None) with the same weights."""
    twin = MultiHeadAttention(num_heads=layer.num_heads, head_size=layer.head_size,
                              use_bias=layer.use_bias)
    twin(np.zeros((1, 2, D), "float32"))
    twin.set_weights(layer.get_weights())
    return twin


def test_band_is_gpt_neo_local_attention():
    got = to_numpy(band_mask(np.arange(9), np.arange(9), 3))
    np.testing.assert_array_equal(got, to_numpy(gpt_neo_band(9, 3)))
    # Each row sees itself and the two before it: i - 3 < j <= i.
    assert got[5].nonzero()[0].tolist() == [3, 4, 5]


def test_blocked_forward_matches_numpy_band_reference():
    x, padding = vectors_and_padding()
    layer = MultiHeadAttention(num_heads=N, head_size=H, window_size=W)
    got = to_numpy(layer(x, padding_mask=padding, use_causal_mask=True))
    mask = gpt_neo_band(T, W)[None] & padding[:, None, :].astype(bool)
    want = references.attention(layer, x.astype("float64"), x.astype("float64"), mask=mask)
    real = padding.astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-5)
    # The band really cuts: dense causal attention differs at late positions.
    causal = references.attention(layer, x, x, mask=np.tril(np.ones((B, T, T), bool)))
    assert np.abs(causal[0, W:] - got[0, W:]).max() > 1e-3


def test_blocked_gradient_equals_dense_with_band_mask():
    x, padding = vectors_and_padding(1)
    layer = MultiHeadAttention(num_heads=N, head_size=H, window_size=W)
    layer(x, use_causal_mask=True)
    twin = dense_twin(layer)
    band = gpt_neo_band(T, W)[None].repeat(B, 0)
    weights = np.asarray(padding, "float32")[:, :, None]  # loss on real rows only

    def gradients(call, variables):
        def loss(t):
            return ops.sum(ops.multiply(ops.sin(call(t)), weights))

        _, input_gradients, variable_gradients = value_and_gradients(loss, [x], variables)
        return input_gradients + variable_gradients

    got = gradients(lambda t: layer(t, padding_mask=padding, use_causal_mask=True),
                    layer.trainable_variables)
    want = gradients(lambda t: twin(t, padding_mask=padding, attention_mask=band),
                     twin.trainable_variables)
    for g, w in zip(got, want):
        np.testing.assert_allclose(to_numpy(g), to_numpy(w), atol=1e-5)


def test_cached_band_decoding_equals_full_pass():
    """A prompt of 3 positions, then one token per step; the cache (T) is longer
    than w + 1, so each step reads a w-long slice of it."""
    x, _ = vectors_and_padding(2)
    layer = MultiHeadAttention(num_heads=N, head_size=H, window_size=W)
    full = to_numpy(layer(x, use_causal_mask=True))
    cache = np.zeros((B, 2, T, N, H), "float32")
    out, cache = layer(x[:, :3], use_causal_mask=True, cache=cache, cache_update_index=0)
    steps = [to_numpy(out)]
    for i in range(3, T):
        out, cache = layer(x[:, i:i + 1], use_causal_mask=True, cache=cache,
                           cache_update_index=i)
        steps.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_cached_band_gradient_equals_dense_with_band_mask():
    """One decoding step at position 7 (keys 4..7 in band) against the dense layer
    with the band mask. The cache write (XLA's dynamic update slice) has no
    gradient in TensorFlow, so the gradient is taken along the query and output
    path: the query/output projections, through scores over the sliced keys."""
    x, _ = vectors_and_padding(3)
    layer = MultiHeadAttention(num_heads=N, head_size=H, window_size=W)
    layer(x, use_causal_mask=True)
    twin = dense_twin(layer)
    index = 7
    band = gpt_neo_band(T, W)[index:index + 1][None].repeat(B, 0)
    cache = np.random.default_rng(4).normal(size=(B, 2, T, N, H)).astype("float32")
    step_input = x[:, index:index + 1]

    def step(ours, **kwargs):
        variables = [ours.query_dense.kernel, ours.query_dense.bias,
                     ours.output_dense.kernel, ours.output_dense.bias]

        def loss():
            out, _ = ours(step_input, cache=cache, cache_update_index=index, **kwargs)
            return ops.sum(ops.sin(out)), [out]

        _, _, gradients, (out,) = value_and_gradients(loss, (), variables, with_outputs=True)
        return out, gradients

    out, got = step(layer, use_causal_mask=True)
    twin_out, want = step(twin, attention_mask=band)
    np.testing.assert_allclose(to_numpy(out), to_numpy(twin_out), atol=1e-5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(to_numpy(g), to_numpy(w), atol=1e-5)
    # Keys outside the band do not move the output.
    changed = cache.copy()
    changed[:, :, :index - W + 1] += 5.0
    moved, _ = layer(step_input, cache=changed, cache_update_index=index,
                     use_causal_mask=True)
    np.testing.assert_allclose(to_numpy(moved), to_numpy(out), atol=1e-6)


@pytest.mark.tensorflow_only("reads the sizes of the tensors in the tf.function graph XLA compiles")
def test_blocked_path_compiles_under_xla_without_a_t_by_t_tensor():
    import tensorflow as tf

    length, window = 64, 4
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(1, length, 8)), "float32")
    layer = MultiHeadAttention(num_heads=2, head_size=4, window_size=window)
    eager = to_numpy(layer(x, use_causal_mask=True))

    @tf.function(jit_compile=True)
    def forward_and_gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, use_causal_mask=True)
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, x)

    compiled, gradient = forward_and_gradient(x)
    np.testing.assert_allclose(to_numpy(compiled), eager, atol=1e-5)
    assert np.all(np.isfinite(to_numpy(gradient)))
    # No tensor of the step is as large as one (T, T) score matrix: O(T * w).
    graph = forward_and_gradient.get_concrete_function(x).graph
    sizes = [int(np.prod(t.shape)) for op in graph.get_operations() for t in op.outputs
             if t.shape.rank and t.shape.is_fully_defined()]
    assert max(sizes) < length * length, max(sizes)


def test_layer_harness_and_config():
    x, padding = vectors_and_padding()
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": N, "head_size": H, "window_size": W, "use_qkv_bias": False,
         "dropout": 0.1},
        x,
        call_kwargs={"use_causal_mask": True, "padding_mask": padding},
        expected_output_shape=(B, T, D),
    )
    layer = MultiHeadAttention(num_heads=N, head_size=H, use_qkv_bias=False)
    layer(x)
    names = sorted(v.path.split("/", 1)[1] for v in layer.weights)
    assert names == ["attention_output/bias", "attention_output/kernel", "key/kernel",
                     "query/kernel", "value/kernel"]


def test_band_needs_the_causal_mask():
    x, _ = vectors_and_padding()
    layer = MultiHeadAttention(num_heads=N, head_size=H, window_size=W)
    with pytest.raises(ValueError, match="use_causal_mask=True"):
        layer(x)
    with pytest.raises(ValueError, match="window_size"):
        MultiHeadAttention(num_heads=N, head_size=H, window_size=0)
