import math

import keras
import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers import (
    FactorizedEmbedding,
    PositionEmbedding,
    RelativePositionBias,
    SinusoidalPositionEncoding,
    TokenEmbedding,
    relative_position_bucket,
)
from keras_ctx.testing import run_layer_test
from tests.convert.numpy_refs import t5_bucket

TOKENS = np.array([[1, 5, 9, 0], [3, 3, 2, 7]], "int32")


@pytest.mark.parametrize("lookup", ["gather", "one_hot"])
def test_token_embedding_harness_lookup_and_reverse(lookup):
    run_layer_test(TokenEmbedding, {"vocabulary_size": 10, "embedding_size": 6, "lookup": lookup},
                   TOKENS, expected_output_shape=(2, 4, 6))
    layer = TokenEmbedding(10, 6, lookup=lookup)
    out = to_numpy(layer(TOKENS))
    table = to_numpy(layer.embeddings)
    np.testing.assert_allclose(out, table[TOKENS], atol=1e-6)
    np.testing.assert_allclose(to_numpy(layer.reverse(out)), table[TOKENS] @ table.T, atol=1e-5)


def test_factorized_embedding_is_lookup_then_projection_and_ties():
    run_layer_test(FactorizedEmbedding,
                   {"vocabulary_size": 10, "embedding_size": 4, "hidden_size": 8},
                   TOKENS, expected_output_shape=(2, 4, 8))
    layer = FactorizedEmbedding(10, 4, 8)
    out = to_numpy(layer(TOKENS))
    table = to_numpy(layer.embeddings)
    kernel, bias = (to_numpy(v) for v in layer.projection.weights)
    np.testing.assert_allclose(out, table[TOKENS] @ kernel + bias, atol=1e-5)
    hidden_e = np.random.default_rng(0).normal(size=(2, 4, 4)).astype("float32")
    np.testing.assert_allclose(to_numpy(layer.reverse(hidden_e)), hidden_e @ table.T, atol=1e-5)
    # ALBERT-base (Lan et al. 2020): V=30000, E=128, H=768 -> V*E + E*H + H.
    big = FactorizedEmbedding(30000, 128, 768)
    big.build()
    assert big.count_params() == 30000 * 128 + 128 * 768 + 768
    # The tied table is one variable, the one a head would read.
    assert big.embeddings is big.token_embedding.embeddings


def test_position_embedding_slices_the_table_and_checks_length():
    x = np.zeros((2, 4, 6), "float32")
    run_layer_test(PositionEmbedding, {"sequence_length": 8}, x, expected_output_shape=(2, 4, 6))
    layer = PositionEmbedding(8)
    out = to_numpy(layer(x))
    table = to_numpy(layer.position_embeddings)
    np.testing.assert_allclose(out[1], table[:4])
    np.testing.assert_allclose(to_numpy(layer(x[:, :1], start_index=3))[0, 0], table[3])
    with pytest.raises(ValueError, match="sequence_length"):
        layer(np.zeros((1, 9, 6), "float32"))


def test_sinusoidal_encoding_matches_the_formula():
    x = np.zeros((1, 5, 8), "float32")
    run_layer_test(SinusoidalPositionEncoding, {}, x, expected_output_shape=(1, 5, 8))
    out = to_numpy(SinusoidalPositionEncoding()(x))[0]
    for pos in range(5):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert math.isclose(out[pos, i], math.sin(angle), abs_tol=1e-5)
            assert math.isclose(out[pos, 4 + i], math.cos(angle), abs_tol=1e-5)
    shifted = to_numpy(SinusoidalPositionEncoding()(x[:, :1], start_index=3))[0, 0]
    np.testing.assert_allclose(shifted, out[3], atol=1e-5)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_buckets_match_hugging_faces_numpy_reference(bidirectional):
    positions = np.arange(-300, 301)
    got = to_numpy(relative_position_bucket(positions, bidirectional, 32, 128))
    want = t5_bucket(positions, bidirectional, 32, 128)
    np.testing.assert_array_equal(got, want)
    # Hand-checked corners: exact near zero, last bucket far away.
    if bidirectional:
        assert got[300] == 0 and got[301] == 17 and got[299] == 1 and got[0] == 15
        assert got[-1] == 31
    else:
        assert got[301] == 0 and got[299] == 1 and got[0] == 31


def test_relative_position_bias_layer_reads_its_table():
    q, k = np.zeros((2, 4, 5), "float32"), np.zeros((2, 6, 5), "float32")
    run_layer_test(RelativePositionBias, {"num_heads": 3, "num_buckets": 8, "max_distance": 16},
                   {"query": q, "key": k}, expected_output_shape=(1, 3, 4, 6),
                   run_mixed_precision=False)
    layer = RelativePositionBias(num_heads=3, num_buckets=8, max_distance=16)
    bias = to_numpy(layer(q, k))
    assert bias.shape == (1, 3, 4, 6)
    table = to_numpy(layer.bias_table)
    for i in range(4):
        for j in range(6):
            want = table[t5_bucket(np.array(j - i), True, 8, 16)]
            np.testing.assert_allclose(bias[0, :, i, j], want)
    # Query offset (decoding step 2 of a causal decoder) sees rows as if at position 2.
    causal = RelativePositionBias(num_heads=3, num_buckets=8, max_distance=16, bidirectional=False)
    full = to_numpy(causal(q))
    step = to_numpy(causal(q[:, :1], q, query_offset=2))
    np.testing.assert_allclose(step[0, :, 0], full[0, :, 2])


@pytest.mark.parametrize(
    "factory, argument",
    [
        (lambda: TokenEmbedding(0, 4), "vocabulary_size"),
        (lambda: TokenEmbedding(10, 4, lookup="hash"), "lookup"),
        (lambda: FactorizedEmbedding(10, 0, 8), "embedding_size"),
        (lambda: PositionEmbedding(-1), "sequence_length"),
        (lambda: RelativePositionBias(2, num_buckets=2), "num_buckets"),
    ],
)
def test_bad_arguments_fail_at_construction(factory, argument):
    with pytest.raises(ValueError, match=argument):
        factory()


def test_embeddings_keep_float32_variables_under_mixed_precision():
    layer = TokenEmbedding(10, 4, dtype="mixed_bfloat16")
    out = layer(TOKENS)
    assert layer.embeddings.dtype == "float32"
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"


def test_token_embedding_int8_quantization_matches_a_numpy_reference():
    """Keras' model.quantize("int8") path: one abs-max scale per row (table / 127),
    lookups dequantized, `reverse` as an int8 x int8 product with the hidden
    vector quantized per row, as keras.layers.Dense's int8 mode."""
    layer = TokenEmbedding(40, 8)
    layer.build()
    table = np.random.default_rng(0).normal(size=(40, 8)).astype("float32")
    layer.embeddings.assign(table)
    hidden = np.random.default_rng(1).normal(size=(2, 3, 8)).astype("float32")
    ids = np.array([[0, 5, 39]])
    layer.quantize("int8")
    assert layer.embeddings.dtype == "int8" and layer.quantization_mode == "int8"
    scale = 127 / np.abs(table).max(-1)
    quantized = np.round(table * scale[:, None])
    np.testing.assert_allclose(to_numpy(layer(ids)), quantized[ids] / scale[ids][..., None], atol=1e-6)
    hidden_scale = 127 / np.abs(hidden).max(-1, keepdims=True)
    logits = np.round(hidden * hidden_scale) @ quantized.T / (hidden_scale * scale)
    np.testing.assert_allclose(to_numpy(layer.reverse(hidden)), logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy(layer.reverse(hidden)), hidden @ table.T, atol=0.1)
    other = TokenEmbedding(4, 2)
    other.build()
    with pytest.raises(NotImplementedError, match="not 'float8'"):  # as keras' Embedding
        other.quantize("float8")


@pytest.mark.parametrize("jit", [False, True])
def test_position_embedding_gradient_sums_over_the_batch(jit):
    from keras import ops

    from tests.autodiff import value_and_gradients

    layer = PositionEmbedding(12)
    x = np.zeros((3, 5, 4), "float32")
    layer.build(x.shape)
    upstream = np.random.default_rng(0).normal(size=(3, 5, 4)).astype("float32")

    def loss(x):
        return ops.sum(ops.multiply(layer(x), upstream))

    _, _, (got,) = value_and_gradients(loss, [x], [layer.position_embeddings], compiled=jit)
    want = np.zeros((12, 4), "float32")
    want[:5] = upstream.sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
