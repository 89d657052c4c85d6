import math

import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers import FactorizedEmbedding, TokenEmbedding
from keras_ctx.layers.heads import MaskedLMHead, SentencePairHead, SpanBoundaryHead
from keras_ctx.testing import run_layer_test

RNG = np.random.default_rng(0)
HIDDEN = RNG.normal(size=(2, 6, 8)).astype("float32")
POSITIONS = np.array([[1, 4, 0], [5, 2, 3]], "int32")


def _gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def _layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def test_masked_lm_head_harness():
    run_layer_test(MaskedLMHead, {"vocabulary_size": 11},
                   {"inputs": HIDDEN, "mask_positions": POSITIONS},
                   expected_output_shape=(2, 3, 11))


def test_masked_lm_head_tied_matches_numpy_and_shares_the_variable():
    embedding = TokenEmbedding(11, 8)
    embedding.build()
    head = MaskedLMHead(token_embedding=embedding, layer_norm_epsilon=1e-12)
    logits = to_numpy(head(HIDDEN, mask_positions=POSITIONS))
    # Tied: the head owns no output kernel and reads the very same variable.
    assert not any("output_kernel" in w.path for w in head.weights)
    assert head.token_embedding.embeddings is embedding.embeddings
    kernel, bias = (to_numpy(w) for w in head.dense.weights)
    gamma, beta = (to_numpy(w) for w in head.layer_norm.weights)
    gathered = np.take_along_axis(HIDDEN, POSITIONS[:, :, None], axis=1)
    want = _layer_norm(_gelu(gathered @ kernel + bias), gamma, beta, 1e-12)
    want = want @ to_numpy(embedding.embeddings).T + to_numpy(head.output_bias)
    np.testing.assert_allclose(logits, want, atol=1e-4)


def test_masked_lm_head_ties_to_factorized_embedding_width():
    embedding = FactorizedEmbedding(13, 4, 8)
    embedding.build()
    head = MaskedLMHead(token_embedding=embedding)
    assert head(HIDDEN, mask_positions=POSITIONS).shape == (2, 3, 13)
    # ALBERT: the transform maps H=8 down to E=4 before the V x E table.
    assert head.dense.kernel.shape == (8, 4)


def test_masked_lm_head_without_transform_is_xlm_pred_layer():
    # XLM's PredLayer: logits = x E^T + b, no dense, no LayerNorm.
    embedding = TokenEmbedding(11, 8)
    embedding.build()
    head = MaskedLMHead(token_embedding=embedding, transform=False)
    head.build(HIDDEN.shape)
    head.output_bias.assign(RNG.normal(size=11).astype("float32"))
    logits = to_numpy(head(HIDDEN, mask_positions=POSITIONS))
    # Its only weights: the bias and the tied table itself.
    assert sorted(w.path.split("/")[-1] for w in head.weights) == ["embeddings", "output_bias"]
    assert not hasattr(head, "dense")
    gathered = np.take_along_axis(HIDDEN, POSITIONS[:, :, None], axis=1)
    want = gathered @ to_numpy(embedding.embeddings).T + to_numpy(head.output_bias)
    np.testing.assert_allclose(logits, want, atol=1e-5)
    assert MaskedLMHead.from_config(
        MaskedLMHead(vocabulary_size=11, transform=False).get_config()).transform is False
    run_layer_test(MaskedLMHead, {"vocabulary_size": 11, "transform": False},
                   {"inputs": HIDDEN, "mask_positions": POSITIONS},
                   expected_output_shape=(2, 3, 11))


def test_masked_lm_head_without_transform_needs_hidden_wide_table():
    with pytest.raises(ValueError, match="embedding_size"):
        MaskedLMHead(vocabulary_size=11, embedding_size=4, transform=False)
    embedding = FactorizedEmbedding(13, 4, 8)  # a V x 4 table under hidden size 8
    embedding.build()
    with pytest.raises(ValueError, match="as wide"):
        MaskedLMHead(token_embedding=embedding, transform=False)(HIDDEN)


def test_masked_lm_head_rejects_bad_arguments():
    embedding = TokenEmbedding(11, 8)
    with pytest.raises(ValueError, match="differs from the tied"):
        MaskedLMHead(vocabulary_size=12, token_embedding=embedding)
    with pytest.raises(ValueError, match="vocabulary_size"):
        MaskedLMHead()
    with pytest.raises(ValueError, match="reverse"):
        MaskedLMHead(token_embedding=object())


def test_span_boundary_head_harness_and_numpy():
    inputs = {"inputs": HIDDEN, "left_positions": np.array([[0, 0, 2], [1, 1, 1]], "int32"),
              "right_positions": np.array([[3, 3, 5], [4, 4, 4]], "int32"),
              "span_offsets": np.array([[0, 1, 0], [0, 1, 2]], "int32")}
    run_layer_test(SpanBoundaryHead, {"vocabulary_size": 11, "max_span_length": 4}, inputs,
                   expected_output_shape=(2, 3, 11))
    embedding = TokenEmbedding(11, 8)
    embedding.build()
    head = SpanBoundaryHead(token_embedding=embedding, max_span_length=4)
    got = to_numpy(head(HIDDEN, inputs["left_positions"], inputs["right_positions"],
               inputs["span_offsets"]))
    # Joshi et al. 2020: y = LN(GeLU(W2 LN(GeLU(W1 [x_{s-1}; x_{e+1}; p_{i-s+1}])))).
    left = np.take_along_axis(HIDDEN, inputs["left_positions"][:, :, None], axis=1)
    right = np.take_along_axis(HIDDEN, inputs["right_positions"][:, :, None], axis=1)
    pos = to_numpy(head.position_embeddings)[inputs["span_offsets"]]
    h0 = np.concatenate([left, right, pos], -1)
    w1, b1 = (to_numpy(w) for w in head.dense_1.weights)
    g1, be1 = (to_numpy(w) for w in head.norm_1.weights)
    w2, b2 = (to_numpy(w) for w in head.dense_2.weights)
    g2, be2 = (to_numpy(w) for w in head.norm_2.weights)
    h1 = _layer_norm(_gelu(h0 @ w1 + b1), g1, be1, 1e-12)
    y = _layer_norm(_gelu(h1 @ w2 + b2), g2, be2, 1e-12)
    want = y @ to_numpy(embedding.embeddings).T + to_numpy(head.output_bias)
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_sentence_pair_head_harness():
    pooled = RNG.normal(size=(4, 8)).astype("float32")
    out = run_layer_test(SentencePairHead, {"num_classes": 2}, pooled,
                         expected_output_shape=(4, 2))
    assert out.shape == (4, 2)
