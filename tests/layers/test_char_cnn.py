import keras
import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers.char_cnn import CharCNNHighwayEmbedder, Highway
from keras_ctx.testing import run_layer_test
from tests.autodiff import compiled, run_compiled
from tests.references import sigmoid

SMALL = {
    "filters": [[1, 4], [2, 8], [3, 8]],
    "num_highway_layers": 2,
    "projection_dim": 6,
    "max_characters_per_token": 10,
    "character_vocabulary_size": 262,
    "character_embedding_dim": 16,
    "activation": "relu",
}


def char_ids(batch=2, time=5, chars=10, seed=0):
    """Random words of 1..chars characters (ids 1..261), then padding tokens."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch, time, chars), "int32")
    for b in range(batch):
        length = time - b  # sequence b has b padding tokens at the end
        for t in range(length):
            n = rng.integers(1, chars + 1)
            ids[b, t, :n] = rng.integers(1, 262, size=n)
    return ids


def numpy_highway(x, layer):
    """y = t * relu(x W_h + b_h) + (1 - t) * x, t = sigmoid(x W_t + b_t)."""
    for gate, transform in zip(layer.transform_gates, layer.transforms):
        w_t, b_t = (to_numpy(v) for v in gate.weights)
        w_h, b_h = (to_numpy(v) for v in transform.weights)
        t = sigmoid(x @ w_t + b_t)
        h = np.maximum(x @ w_h + b_h, 0.0)
        x = t * h + (1.0 - t) * x
    return x


def numpy_char_cnn(ids, layer):
    table = to_numpy(layer.char_embedding.embeddings)
    batch, time, chars = ids.shape
    tokens = []
    for b in range(batch):
        for t in range(time):
            embedded = table[ids[b, t]]  # (chars, char_dim)
            features = []
            for conv in layer.char_convs:
                kernel, bias = (to_numpy(v) for v in conv.weights)
                width = kernel.shape[0]
                positions = []
                for p in range(chars - width + 1):
                    value = bias.copy()
                    for k in range(width):
                        value = value + embedded[p + k] @ kernel[k]
                    positions.append(value)
                pooled = np.max(np.stack(positions), axis=0)
                features.append(np.maximum(pooled, 0.0))  # relu after the max
            tokens.append(np.concatenate(features))
    x = np.stack(tokens).astype("float64")
    if layer.highway is not None:
        x = numpy_highway(x, layer.highway)
    if layer.projection is not None:
        kernel, bias = (to_numpy(v) for v in layer.projection.weights)
        x = x @ kernel + bias
    return x.reshape(batch, time, -1)


# Highway ---------------------------------------------------------------------


def test_highway_layer_test():
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(
        Highway,
        {"num_layers": 2, "activation": "relu", "transform_gate_bias": -2.0},
        x,
        expected_output_shape=(2, 5, 8),
    )


def test_highway_matches_numpy_and_gate_bias_starts_at_minus_two():
    layer = Highway(num_layers=3)
    x = np.random.default_rng(1).normal(size=(4, 7, 12)).astype("float32")
    got = to_numpy(layer(x))
    for gate in layer.transform_gates:
        np.testing.assert_array_equal(to_numpy(gate.bias), np.full(12, -2.0))
    for transform in layer.transforms:
        np.testing.assert_array_equal(to_numpy(transform.bias), np.zeros(12))
    # Random gate biases, so that the reference checks the gate direction.
    rng = np.random.default_rng(2)
    for gate in layer.transform_gates:
        gate.bias.assign(rng.normal(size=12).astype("float32"))
    got = to_numpy(layer(x))
    want = numpy_highway(x.astype("float64"), layer)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_highway_gate_direction():
    # A gate fully open (t = 1) gives the transform, fully closed the input.
    x = np.random.default_rng(3).normal(size=(3, 6)).astype("float32")
    layer = Highway(num_layers=1, transform_gate_bias=-50.0)
    np.testing.assert_allclose(to_numpy(layer(x)), x, atol=1e-6)
    layer = Highway(num_layers=1, transform_gate_bias=50.0)
    layer.build(x.shape)
    layer.transform_gates[0].kernel.assign(np.zeros((6, 6), "float32"))
    w_h, b_h = (to_numpy(v) for v in layer.transforms[0].weights)
    np.testing.assert_allclose(
        to_numpy(layer(x)), np.maximum(x @ w_h + b_h, 0.0), atol=1e-5
    )


def test_highway_mixed_precision_computes_in_float32_and_returns_bfloat16():
    x = np.random.default_rng(4).normal(size=(2, 3, 8)).astype("float32")
    layer = Highway(num_layers=2, dtype="mixed_bfloat16")
    y = layer(x)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    assert all(w.dtype == "float32" for w in layer.weights)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_layers": 0}, "num_layers"),
        ({"num_layers": 1.5}, "num_layers"),
        ({"num_layers": 1, "activation": "not_an_activation"}, "activation"),
        ({"num_layers": 1, "transform_gate_bias": "big"}, "transform_gate_bias"),
    ],
)
def test_highway_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Highway(**kwargs)


# CharCNNHighwayEmbedder --------------------------------------------------------


def test_char_cnn_layer_test():
    run_layer_test(
        CharCNNHighwayEmbedder,
        SMALL,
        char_ids(),
        expected_output_shape=(2, 5, 6),
    )


def test_char_cnn_matches_numpy():
    ids = char_ids(seed=5)
    layer = CharCNNHighwayEmbedder(**SMALL)
    layer.build(ids.shape)
    # Random gate biases so the highway reference checks the gate direction.
    rng = np.random.default_rng(6)
    for gate in layer.highway.transform_gates:
        gate.bias.assign(rng.normal(size=gate.bias.shape).astype("float32"))
    got = to_numpy(layer(ids))
    want = numpy_char_cnn(ids, layer)
    assert got.shape == (2, 5, 6)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_char_cnn_without_highway_or_projection_matches_numpy():
    ids = char_ids(seed=7)
    config = dict(SMALL, num_highway_layers=0, projection_dim=None)
    layer = CharCNNHighwayEmbedder(**config)
    got = to_numpy(layer(ids))
    assert layer.highway is None and layer.projection is None
    assert got.shape == (2, 5, 4 + 8 + 8)
    np.testing.assert_allclose(got, to_numpy(numpy_char_cnn(ids, layer)), atol=1e-5)


def test_char_cnn_one_hot_lookup_equals_gather():
    ids = char_ids(seed=8)
    gather = CharCNNHighwayEmbedder(**SMALL)
    one_hot = CharCNNHighwayEmbedder(**SMALL, use_one_hot_lookup=True)
    gather.build(ids.shape)
    one_hot.build(ids.shape)
    for s, t in zip(gather.weights, one_hot.weights):
        t.assign(s)
    np.testing.assert_allclose(
        to_numpy(one_hot(ids)), to_numpy(gather(ids)), atol=1e-5
    )


def test_char_cnn_mask_marks_all_zero_tokens_as_padding():
    ids = char_ids()
    layer = CharCNNHighwayEmbedder(**SMALL)
    mask = to_numpy(layer.compute_mask(ids))
    np.testing.assert_array_equal(mask, np.any(ids != 0, axis=-1))
    assert mask.sum() == 5 + 4  # second sequence has one padding token
    # The mask reaches a downstream layer of a functional model.
    inputs = keras.Input((5, 10), dtype="int32")
    outputs = CharCNNHighwayEmbedder(**SMALL)(inputs)
    assert outputs._keras_mask is not None


def test_char_cnn_xla_and_mixed_bfloat16():
    ids = char_ids(seed=9)
    layer = CharCNNHighwayEmbedder(**SMALL)
    mixed = CharCNNHighwayEmbedder(**SMALL, dtype="mixed_bfloat16")
    layer.build(ids.shape)
    mixed.build(ids.shape)
    for s, t in zip(layer.weights, mixed.weights):
        t.assign(s)
    want = to_numpy(layer(ids))
    np.testing.assert_allclose(run_compiled(layer.call, ids), want, atol=1e-5)
    got = compiled(mixed.call)(ids)
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
    assert all(w.dtype == "float32" for w in mixed.weights)
    got = to_numpy(keras.ops.cast(got, "float32"))
    np.testing.assert_allclose(got, want, atol=0.1 * max(1.0, np.abs(want).max()))


def test_char_cnn_elmo_original_parameter_count():
    layer = CharCNNHighwayEmbedder()  # ELMo "original" defaults
    layer.build((1, 1, 50))
    filters = [(1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024)]
    features = sum(count for _, count in filters)
    assert features == 2048
    char_embedding = 262 * 16
    convolutions = sum(width * 16 * count + count for width, count in filters)
    highway = 2 * (2 * 2048 * 2048 + 2 * 2048)
    projection = 2048 * 512 + 512
    expected = char_embedding + convolutions + highway + projection
    assert layer.count_params() == expected
    assert layer.filters == [list(pair) for pair in filters]
    out = layer(np.ones((1, 2, 50), "int32"))
    assert tuple(out.shape) == (1, 2, 512)


def test_char_cnn_wrong_number_of_characters():
    layer = CharCNNHighwayEmbedder(**SMALL)
    with pytest.raises(ValueError, match="max_characters_per_token=10"):
        layer(np.ones((2, 5, 12), "int32"))
    layer(np.ones((2, 5, 10), "int32"))
    with pytest.raises(ValueError, match="max_characters_per_token"):
        layer(np.ones((2, 5, 7), "int32"))


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"filters": []}, "filters"),
        ({"filters": [[1, 4], [0, 8]]}, "filters"),
        ({"filters": [[1, 4], [2, -8]]}, "filters"),
        ({"filters": [[1, 4, 3]]}, "filters"),
        ({"filters": 5}, "filters"),
        ({"filters": [[11, 4]]}, "max_characters_per_token"),
        ({"num_highway_layers": -1}, "num_highway_layers"),
        ({"projection_dim": 0}, "projection_dim"),
        ({"max_characters_per_token": 0}, "max_characters_per_token"),
        ({"character_vocabulary_size": 0}, "character_vocabulary_size"),
        ({"character_embedding_dim": -16}, "character_embedding_dim"),
        ({"activation": "not_an_activation"}, "activation"),
    ],
)
def test_char_cnn_bad_arguments(changes, match):
    with pytest.raises(ValueError, match=match):
        CharCNNHighwayEmbedder(**dict(SMALL, **changes))
