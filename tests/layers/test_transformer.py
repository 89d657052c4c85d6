import keras
import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers import (
    FeedForward,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    TransformerEncoderStack,
)
from keras_ctx.models.albert.backbone import AlbertEncoderStack
from keras_ctx.testing import run_layer_test
from tests import references
from tests.autodiff import compiled

B, T, S, D = 2, 6, 4, 16
BLOCK = {"num_heads": 4, "intermediate_size": 32, "dropout": 0.0}


def random_vectors(seed=0, length=T):
    return np.random.default_rng(seed).normal(size=(B, length, D)).astype("float32")


def numpy_ffn(layer, x):
    w = references.weights_by_name(layer)
    h = references.gelu(x @ w["intermediate/kernel"] + w["intermediate/bias"])
    return h @ w["output/kernel"] + w["output/bias"]


def numpy_norm(layer, x):
    w = {v.path.split("/")[-1]: to_numpy(v) for v in layer.weights}
    return references.layer_norm(x, w["gamma"], w["beta"], layer.epsilon)


def numpy_encoder_block(block, x, mask=None):
    attend = lambda y: references.attention(block.self_attention, y, y, mask=mask)  # noqa: E731
    ffn = lambda y: numpy_ffn(block.feedforward, y)  # noqa: E731
    n1 = lambda y: numpy_norm(block.self_attention_norm, y)  # noqa: E731
    n2 = lambda y: numpy_norm(block.feedforward_norm, y)  # noqa: E731
    if block.normalize_first:
        x = x + attend(n1(x))
        return x + ffn(n2(x))
    x = n1(x + attend(x))
    return n2(x + ffn(x))


def test_feedforward_harness_and_numpy():
    x = random_vectors()
    run_layer_test(FeedForward, {"intermediate_size": 8, "activation": "gelu"}, x,
                   expected_output_shape=(B, T, D))
    layer = FeedForward(8)
    np.testing.assert_allclose(to_numpy(layer(x)), to_numpy(numpy_ffn(layer, x)), atol=1e-5)


def test_gated_feedforward_matches_numpy():
    x = random_vectors()
    layer = FeedForward(8, activation="relu", gated=True, use_bias=False)
    w = references.weights_by_name(layer) if layer.built else None
    out = to_numpy(layer(x))
    w = references.weights_by_name(layer)
    want = (np.maximum(x @ w["intermediate/kernel"], 0) * (x @ w["gate/kernel"])) @ w["output/kernel"]
    np.testing.assert_allclose(out, want, atol=1e-5)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_block_harness_and_numpy(normalize_first):
    x = random_vectors()
    padding = np.ones((B, T), "int32")
    padding[1, 4:] = 0
    config = dict(BLOCK, normalize_first=normalize_first)
    run_layer_test(TransformerEncoderBlock, config,
                   {"inputs": x, "padding_mask": padding},
                   expected_output_shape=(B, T, D))
    block = TransformerEncoderBlock(**config)
    got = to_numpy(block(x, padding_mask=padding))
    want = numpy_encoder_block(block, x, mask=padding[:, None, :].astype(bool))
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_rms_norm_block_without_biases_has_no_bias_weights():
    block = TransformerEncoderBlock(**BLOCK, normalization="rms_norm", use_bias=False,
                                    normalize_first=True, attention_scale=1.0)
    block(random_vectors())
    names = [v.path for v in block.weights]
    assert not any(n.endswith("bias") or n.endswith("beta") for n in names), names
    # T5 RMS norm: x / sqrt(mean(x^2) + eps) * scale, no centring.
    x = random_vectors()
    norm = block.self_attention_norm
    want = x / np.sqrt((x**2).mean(-1, keepdims=True) + norm.epsilon)
    np.testing.assert_allclose(to_numpy(norm(x)), want, atol=1e-5)


def test_decoder_block_harness_with_cross_attention():
    run_layer_test(
        TransformerDecoderBlock,
        dict(BLOCK, normalize_first=True, use_cross_attention=True),
        {"inputs": random_vectors(), "encoder_sequence": random_vectors(1, S)},
        expected_output_shape=(B, T, D),
    )


def test_decoder_block_is_causal_and_reads_the_encoder():
    block = TransformerDecoderBlock(**BLOCK, use_cross_attention=True)
    x, enc = random_vectors(), random_vectors(1, S)
    out = to_numpy(block(x, encoder_sequence=enc))
    changed = x.copy()
    changed[:, -1] += 5
    out2 = to_numpy(block(changed, encoder_sequence=enc))
    np.testing.assert_allclose(out2[:, :-1], out[:, :-1], atol=1e-5)
    out3 = to_numpy(block(x, encoder_sequence=enc + 1))
    assert not np.allclose(out3, out)


def test_decoder_block_cached_steps_equal_full_pass_under_xla():
    block = TransformerDecoderBlock(**BLOCK, normalize_first=True, use_cross_attention=True)
    x, enc = random_vectors(), random_vectors(1, S)
    full = to_numpy(block(x, encoder_sequence=enc))
    cross_cache = block.compute_cross_attention_cache(enc)

    @compiled
    def step(token, cache, index):
        return block(token, self_attention_cache=cache, cache_update_index=index,
                     cross_attention_cache=cross_cache)

    cache = keras.ops.zeros((B, 2, T, 4, D // 4))
    outputs = []
    for i in range(T):
        out, cache, _ = step(x[:, i:i + 1], cache, keras.ops.convert_to_tensor(i))
        outputs.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, atol=1e-4)


def test_decoder_without_encoder_sequence_fails_clearly():
    block = TransformerDecoderBlock(**BLOCK, use_cross_attention=True)
    with pytest.raises(ValueError, match="encoder_sequence"):
        block(random_vectors())


def test_stack_harness():
    run_layer_test(TransformerEncoderStack, {"num_layers": 2, "block_config": BLOCK},
                   random_vectors(), expected_output_shape=(B, T, D))


def test_albert_stack_harness():
    run_layer_test(AlbertEncoderStack, {"num_layers": 2, "block_config": BLOCK,
                                        "sharing": "attention"}, random_vectors(),
                   expected_output_shape=(B, T, D))


def test_stack_sharing_counts_and_numpy():
    x = random_vectors()
    counts = {}
    for sharing in ("none", "all", "attention", "ffn"):
        stack = AlbertEncoderStack(3, BLOCK, sharing=sharing)
        outputs = stack(x)
        assert len(outputs) == 3
        counts[sharing] = stack.count_params()
    one_block = TransformerEncoderBlock(**BLOCK)
    one_block(x)
    per_block = one_block.count_params()
    attention = one_block.self_attention.count_params() + 2 * D  # + its layer norm
    ffn = one_block.feedforward.count_params() + 2 * D
    assert counts["none"] == 3 * per_block
    assert counts["all"] == per_block
    assert counts["attention"] == 3 * per_block - 2 * attention
    assert counts["ffn"] == 3 * per_block - 2 * ffn
    # All-shared = the same block applied three times.
    stack = AlbertEncoderStack(3, BLOCK, sharing="all")
    outputs = stack(x)
    y = x
    for _ in range(3):
        y = numpy_encoder_block(stack.blocks[0], y)
    np.testing.assert_allclose(to_numpy(outputs[-1]), y, atol=1e-4)


def test_bad_block_arguments_fail_at_construction():
    with pytest.raises(ValueError, match="hidden_size"):
        TransformerEncoderBlock(num_heads=5, intermediate_size=8, hidden_size=16)
    with pytest.raises(ValueError, match="normalization"):
        TransformerEncoderBlock(num_heads=2, intermediate_size=8, normalization="batch")
    with pytest.raises((TypeError, ValueError), match="sharing"):
        TransformerEncoderStack(2, BLOCK, sharing="all")  # ALBERT's: AlbertEncoderStack
    with pytest.raises(ValueError, match="intermediate_size"):
        TransformerEncoderStack(2, {"num_heads": 2, "intermediate_size": 0})
    with pytest.raises(ValueError, match="num_heads"):
        TransformerEncoderBlock(num_heads=5, intermediate_size=8)(random_vectors())


def test_tanh_gelu_feedforward_matches_the_formula_and_saves():
    x = random_vectors()
    run_layer_test(FeedForward, {"intermediate_size": 8, "activation": "gelu_approximate"}, x)
    layer = FeedForward(8, activation="gelu_approximate")
    out = to_numpy(layer(x))
    w = references.weights_by_name(layer)
    h = x @ w["intermediate/kernel"] + w["intermediate/bias"]
    # Hendrycks & Gimpel 2016, tanh form (GPT, GPT-2, ALBERT).
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    np.testing.assert_allclose(out, h @ w["output/kernel"] + w["output/bias"], atol=1e-5)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_query_positions_equal_the_gathered_full_output(normalize_first):
    x = random_vectors(3)
    padding = np.ones((B, T), "int32")
    padding[1, 4:] = 0
    allowed = np.random.default_rng(1).random((B, T, T)) > 0.3
    allowed[:, np.arange(T), np.arange(T)] = True
    positions = np.array([[0, 5, 2], [3, 1, 1]])  # any order, repeats allowed
    block = TransformerEncoderBlock(**dict(BLOCK, normalize_first=normalize_first))
    full = to_numpy(block(x, padding_mask=padding, attention_mask=allowed))
    rows = to_numpy(block(x, padding_mask=padding, attention_mask=allowed,
                 query_positions=positions))
    assert rows.shape == (B, 3, D)
    np.testing.assert_allclose(rows, np.take_along_axis(full, positions[:, :, None], 1),
                               atol=1e-5)


def test_stack_last_layer_positions_only_change_the_last_output():
    x = random_vectors(4)
    positions = np.array([[1, 4], [0, 5]])
    stack = AlbertEncoderStack(3, BLOCK, sharing="all")
    full = [to_numpy(o) for o in stack(x)]
    sparse = [to_numpy(o) for o in stack(x, last_layer_positions=positions)]
    for f, s in zip(full[:-1], sparse[:-1]):
        np.testing.assert_array_equal(f, s)
    np.testing.assert_allclose(sparse[-1], np.take_along_axis(full[-1], positions[:, :, None], 1),
                               atol=1e-5)
    symbolic = stack(keras.Input((None, D)), last_layer_positions=keras.Input((2,), dtype="int32"))
    assert tuple(symbolic[-1].shape) == (None, 2, D)


def test_query_positions_refuse_an_attention_bias():
    block = TransformerEncoderBlock(**BLOCK)
    with pytest.raises(ValueError, match="attention_bias"):
        block(random_vectors(), attention_bias=np.zeros((1, 4, T, T), "float32"),
              query_positions=np.zeros((B, 1), "int32"))
