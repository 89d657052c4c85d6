import keras
import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers import MultiHeadAttention
from keras_ctx.testing import run_layer_test
from tests import references
from tests.autodiff import compiled

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
    np.testing.assert_allclose(to_numpy(got), want, atol=1e-5)


def test_causal_mask_matches_numpy_and_leaks_nothing():
    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    got = to_numpy(layer(query, use_causal_mask=True))
    causal = np.tril(np.ones((T, T), bool))[None].repeat(B, 0)
    np.testing.assert_allclose(got, to_numpy(numpy_attention(layer, query, query, causal)), atol=1e-5)
    # Changing the last token changes no earlier output.
    changed = query.copy()
    changed[:, -1] += 10.0
    got2 = to_numpy(layer(changed, use_causal_mask=True))
    np.testing.assert_allclose(got2[:, :-1], got[:, :-1], atol=1e-6)
    assert not np.allclose(got2[:, -1], got[:, -1])


def test_padding_keys_are_ignored():
    query, value = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    padding = np.ones((B, S), "int32")
    padding[:, 3:] = 0
    out = to_numpy(layer(query, value, padding_mask=padding))
    garbage = value.copy()
    garbage[:, 3:] = 1e3
    out2 = to_numpy(layer(query, garbage, padding_mask=padding))
    np.testing.assert_allclose(out, out2, atol=1e-5)


def test_attention_scores_are_probabilities_in_float32_under_mixed_precision():
    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H, dtype="mixed_bfloat16")
    out, scores = layer(query * 100, use_causal_mask=True, return_attention_scores=True)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert keras.backend.standardize_dtype(scores.dtype) == "float32"
    np.testing.assert_allclose(to_numpy(scores).sum(-1), 1.0, atol=1e-6)
    assert np.all(np.triu(to_numpy(scores)[0, 0], k=1) == 0)


def test_cached_decoding_equals_full_causal_attention():
    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    full = to_numpy(layer(query, use_causal_mask=True))
    cache = np.zeros((B, 2, T, N, H), "float32")
    steps = []
    for i in range(T):
        out, cache = layer(query[:, i:i + 1], use_causal_mask=True, cache=cache,
                           cache_update_index=i)
        steps.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_cached_decoding_compiles_under_xla():
    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    full = to_numpy(layer(query, use_causal_mask=True))

    @compiled
    def step(x, cache, index):
        return layer(x, use_causal_mask=True, cache=cache, cache_update_index=index)

    cache = keras.ops.zeros((B, 2, T, N, H))
    for i in range(T):
        out, cache = step(query[:, i:i + 1], cache, keras.ops.convert_to_tensor(i))
    np.testing.assert_allclose(to_numpy(out)[:, 0], full[:, -1], atol=1e-5)


def test_precomputed_cross_attention_cache_is_used_as_is():
    query, value = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H)
    direct = to_numpy(layer(query, value))
    cache = layer.compute_key_value_cache(value)
    out, same_cache = layer(query, value, cache=cache)
    np.testing.assert_allclose(to_numpy(out), direct, atol=1e-5)
    assert same_cache is cache


def test_dropout_only_in_training():
    query, _ = make_inputs()
    layer = MultiHeadAttention(num_heads=N, head_size=H, dropout=0.5)
    a = to_numpy(layer(query, training=False))
    b = to_numpy(layer(query, training=False))
    c = to_numpy(layer(query, training=True))
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
