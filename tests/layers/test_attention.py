import numpy as np
import pytest

from keras_ctx.layers import MultiHeadAttention
from keras_ctx.testing import run_layer_test
from tests import references

B, T, S, D, N, H = 2, 5, 7, 12, 3, 4


def numpy_attention(layer, query, value, mask=None, bias=None):
    return references.attention(layer, query, value, mask=mask, bias=bias)


def make_inputs(seed=0):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(B, T, D)).astype("float32")
    value = rng.normal(size=(B, S, D)).astype("float32")
    return query, value


def test_layer_harness_cross_attention_with_masks():
    query, value = make_inputs()
    padding = np.ones((B, S), "int32")
    padding[1, 4:] = 0
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": N, "head_size": H, "dropout": 0.1},
        {"query": query, "value": value, "padding_mask": padding},
        expected_output_shape=(B, T, D),
    )


def test_layer_harness_causal_self_attention():
    query, _ = make_inputs()
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": N, "head_size": H, "hidden_size": 6, "use_bias": False},
        query,
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(B, T, 6),
    )


def test_matches_numpy_with_padding_attention_mask_and_bias():
    query, value = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    rng = np.random.default_rng(1)
    padding = np.ones((B, S), bool)
    padding[0, 5:] = False
    attention_mask = rng.random((B, T, S)) > 0.3
    attention_mask[:, :, 0] = True  # no fully masked rows
    bias = rng.normal(size=(1, N, T, S)).astype("float32")
    got = layer(query, value, padding_mask=padding, attention_mask=attention_mask,
                attention_bias=bias)
    mask = padding[:, None, :] & attention_mask
    want = numpy_attention(layer, query, value, mask=mask, bias=bias)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


def test_causal_mask_matches_numpy_and_leaks_nothing():
    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    got = layer(query, use_causal_mask=True).numpy()
    causal = np.tril(np.ones((T, T), bool))[None].repeat(B, 0)
    np.testing.assert_allclose(got, numpy_attention(layer, query, query, causal), atol=1e-5)
    # Changing the last token changes no earlier output.
    changed = query.copy()
    changed[:, -1] += 10.0
    got2 = layer(changed, use_causal_mask=True).numpy()
    np.testing.assert_allclose(got2[:, :-1], got[:, :-1], atol=1e-6)
    assert not np.allclose(got2[:, -1], got[:, -1])


def test_padding_keys_are_ignored():
    query, value = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    padding = np.ones((B, S), "int32")
    padding[:, 3:] = 0
    out = layer(query, value, padding_mask=padding).numpy()
    garbage = value.copy()
    garbage[:, 3:] = 1e3
    out2 = layer(query, garbage, padding_mask=padding).numpy()
    np.testing.assert_allclose(out, out2, atol=1e-5)


def test_attention_scores_are_probabilities_in_float32_under_mixed_precision():
    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H, dtype="mixed_bfloat16")
    out, scores = layer(query * 100, use_causal_mask=True, return_attention_scores=True)
    assert out.dtype == "bfloat16"
    assert scores.dtype == "float32"
    np.testing.assert_allclose(scores.numpy().sum(-1), 1.0, atol=1e-6)
    assert np.all(np.triu(scores.numpy()[0, 0], k=1) == 0)


def test_cached_decoding_equals_full_causal_attention():
    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    full = layer(query, use_causal_mask=True).numpy()
    cache = np.zeros((B, 2, T, N, H), "float32")
    steps = []
    for i in range(T):
        out, cache = layer(query[:, i:i + 1], use_causal_mask=True, cache=cache,
                           cache_update_index=i)
        steps.append(out.numpy())
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_cached_decoding_compiles_under_xla():
    import tensorflow as tf

    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    full = layer(query, use_causal_mask=True).numpy()

    @tf.function(jit_compile=True)
    def step(x, cache, index):
        return layer(x, use_causal_mask=True, cache=cache, cache_update_index=index)

    cache = tf.zeros((B, 2, T, N, H))
    for i in range(T):
        out, cache = step(query[:, i:i + 1], cache, tf.constant(i))
    np.testing.assert_allclose(out.numpy()[:, 0], full[:, -1], atol=1e-5)


def test_precomputed_cross_attention_cache_is_used_as_is():
    query, value = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    direct = layer(query, value).numpy()
    cache = layer.compute_key_value_cache(value)
    out, same_cache = layer(query, value, cache=cache)
    np.testing.assert_allclose(out.numpy(), direct, atol=1e-5)
    assert same_cache is cache


def test_dropout_only_in_training():
    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H, dropout=0.5)
    a = layer(query, training=False).numpy()
    b = layer(query, training=False).numpy()
    c = layer(query, training=True).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"num_heads": 0, "head_size": 4}, "num_heads"),
        ({"num_heads": 2, "head_size": -1}, "head_size"),
        ({"num_heads": 2, "head_size": 4, "dropout": 1.5}, "dropout"),
        ({"num_heads": 2, "head_size": 4, "value_head_size": 0}, "value_head_size"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        MultiHeadAttention(**kwargs)
