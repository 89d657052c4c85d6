import math

import keras
import numpy as np
import pytest

from keras import ops
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers.relative_attention import (
    TwoStreamRelativeAttention,
    rel_shift,
    relative_positional_encoding,
    two_stream_masks,
)
from keras_ctx.testing import run_layer_test
from tests.autodiff import value_and_gradients

HIDDEN = 8
HEADS = 2
HEAD_SIZE = 4


def _random_permutations(rng, batch, length):
    return np.stack([rng.permutation(length) for _ in range(batch)])


def _randomize(layer, seed=0, scale=0.5):
    """Random values for every weight, biases and segment embedding included."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(0.0, scale, weight.shape).astype("float32"))


def _numpy_two_stream(layer, h, pos, content_mask, g=None, query_mask=None,
                      segment_matrix=None, memory=None):
    """Two-stream relative attention by explicit loops, in float64.

    The positional term picks the encoding row of distance d = (i + M) - j
    directly: row p encodes pos_seq[p] = K - p, so the row is K - d.
    """
    w = lambda v: to_numpy(v).astype("float64")  # noqa: E731
    w_q, w_k, w_v, w_r = (w(layer.query_dense.kernel), w(layer.key_dense.kernel),
                          w(layer.value_dense.kernel), w(layer.position_dense.kernel))
    w_o = w(layer.output_dense.kernel)
    r_w, r_r, r_s, seg = (w(layer.r_w_bias), w(layer.r_r_bias),
                          w(layer.r_s_bias), w(layer.seg_embed))
    h = h.astype("float64")
    cat = h if memory is None else np.concatenate([memory, h], axis=1)
    batch, length, _ = h.shape
    key_length = cat.shape[1]
    mem_length = key_length - length
    pos = np.broadcast_to(pos, (batch,) + pos.shape[1:]).astype("float64")
    k = np.einsum("bjd,dnh->bjnh", cat, w_k)
    v = np.einsum("bjd,dnh->bjnh", cat, w_v)
    k_r = np.einsum("bpd,dnh->bpnh", pos, w_r)

    def stream(x, mask):
        q = np.einsum("bid,dnh->binh", x.astype("float64"), w_q)
        context = np.zeros(q.shape)
        for b in range(batch):
            for n in range(HEADS):
                for i in range(length):
                    scores = np.zeros(key_length)
                    for j in range(key_length):
                        if mask is not None and not mask[b, i, j]:
                            scores[j] = -1e9
                            continue
                        distance = (i + mem_length) - j
                        row = key_length - distance
                        ac = (q[b, i, n] + r_w[n]) @ k[b, j, n]
                        bd = (q[b, i, n] + r_r[n]) @ k_r[b, row, n]
                        ef = 0.0
                        if segment_matrix is not None:
                            s = int(segment_matrix[b, i, j])
                            ef = (q[b, i, n] + r_s[n]) @ seg[s, n]
                        scores[j] = (ac + bd + ef) / math.sqrt(HEAD_SIZE)
                    p = np.exp(scores - scores.max())
                    p /= p.sum()
                    context[b, i, n] = p @ v[b, :, n]
        return np.einsum("binh,nhd->bid", context, w_o)

    content = stream(h, content_mask)
    query = None if g is None else stream(g, query_mask)
    return content, query


def test_run_layer_test():
    rng = np.random.default_rng(0)
    batch, length = 2, 4
    content_mask, query_mask = two_stream_masks(
        _random_permutations(rng, batch, length)
    )
    segment_ids = np.array([[0, 0, 1, 1], [0, 1, 1, 1]])
    inputs = {
        "content_stream": rng.normal(size=(batch, length, HIDDEN)).astype("float32"),
        "position_encoding": np.repeat(
            to_numpy(relative_positional_encoding(length, length, HIDDEN)), batch, 0
        ),
        "content_attention_mask": to_numpy(content_mask),
        "query_stream": rng.normal(size=(batch, length, HIDDEN)).astype("float32"),
        "query_attention_mask": to_numpy(query_mask),
        "segment_matrix": segment_ids[:, :, None] != segment_ids[:, None, :],
    }
    content, query = run_layer_test(
        TwoStreamRelativeAttention,
        {
            "num_heads": HEADS,
            "head_size": HEAD_SIZE,
            "dropout": 0.1,
            "kernel_initializer": keras.initializers.RandomNormal(stddev=0.3),
            "bias_initializer": keras.initializers.RandomNormal(stddev=0.3),
        },
        inputs,
        expected_output_shape=(batch, length, HIDDEN),
    )
    assert tuple(query.shape) == (batch, length, HIDDEN)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_matches_numpy_reference(bidirectional):
    rng = np.random.default_rng(1)
    batch, length, mem_length = 2, 3, 2
    key_length = mem_length + length
    h = rng.normal(size=(batch, length, HIDDEN)).astype("float32")
    g = rng.normal(size=(batch, length, HIDDEN)).astype("float32")
    memory = rng.normal(size=(batch, mem_length, HIDDEN)).astype("float32")
    segment_matrix = rng.random((batch, length, key_length)) < 0.5
    content_mask = rng.random((batch, length, key_length)) < 0.7
    query_mask = rng.random((batch, length, key_length)) < 0.6
    pos = to_numpy(relative_positional_encoding(
        length, key_length, HIDDEN, bidirectional=bidirectional
    ))
    if not bidirectional:
        # key_length + 1 rows: keys after the query have no row, mask them,
        # and give the layer a per-example (batch, ...) encoding.
        causal = np.arange(key_length)[None, :] <= (
            np.arange(length)[:, None] + mem_length
        )
        content_mask &= causal
        query_mask &= causal
        pos = np.repeat(pos, batch, 0)
        assert pos.shape == (batch, key_length + 1, HIDDEN)

    layer = TwoStreamRelativeAttention(num_heads=HEADS, head_size=HEAD_SIZE)
    layer(h, pos, content_mask, query_stream=g, query_attention_mask=query_mask,
          segment_matrix=segment_matrix, memory=memory)
    _randomize(layer)
    content, query = layer(
        h, pos, content_mask, query_stream=g, query_attention_mask=query_mask,
        segment_matrix=segment_matrix, memory=memory,
    )
    want_content, want_query = _numpy_two_stream(
        layer, h, pos, content_mask, g, query_mask, segment_matrix, memory
    )
    np.testing.assert_allclose(to_numpy(content), want_content, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(to_numpy(query), want_query, atol=1e-5, rtol=1e-5)

    # Without a query stream: the content output alone, the same values.
    alone = layer(h, pos, content_mask, segment_matrix=segment_matrix,
                  memory=memory)
    np.testing.assert_allclose(to_numpy(alone), want_content, atol=1e-5, rtol=1e-5)


def test_rel_shift_picks_distance_rows():
    batch, heads, length, key_length = 1, 1, 3, 5
    rows = key_length + length
    i = np.arange(length)[:, None]
    p = np.arange(rows)[None, :]
    x = np.broadcast_to(100 * i + p, (batch, heads, length, rows)).astype("float32")
    got = to_numpy(rel_shift(x, key_length))[0, 0]
    j = np.arange(key_length)[None, :]
    np.testing.assert_array_equal(got, 100 * i + (length - i + j))


def test_relative_positional_encoding_hand_computed():
    # query_length 2, key_length 3: pos_seq = 3, 2, 1, 0, -1; hidden 4 gives
    # inv_freq = 1 / 10000^(0/4), 1 / 10000^(2/4) = 1, 1/100.
    def row(pos):
        return [math.sin(pos), math.sin(pos / 100), math.cos(pos), math.cos(pos / 100)]

    got = to_numpy(relative_positional_encoding(2, 3, 4))
    np.testing.assert_allclose(got, [[row(p) for p in (3, 2, 1, 0, -1)]], atol=1e-6)

    got = to_numpy(relative_positional_encoding(2, 3, 4, bidirectional=False))
    np.testing.assert_allclose(got, [[row(p) for p in (3, 2, 1, 0)]], atol=1e-6)

    got = to_numpy(relative_positional_encoding(2, 3, 4, clamp_length=1))
    np.testing.assert_allclose(got, [[row(p) for p in (1, 1, 1, 0, -1)]], atol=1e-6)

    got = relative_positional_encoding(2, 3, 4, dtype="bfloat16")
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"


def test_xlnet_paper_order():
    # XLNet, figure 1: factorization order 3 -> 2 -> 4 -> 1 (1-based), i.e.
    # positions [2, 1, 3, 0] 0-based.
    order = np.array([[2, 1, 3, 0]])
    content_mask, query_mask = two_stream_masks(order)
    expected_content = np.array(
        [
            [1, 1, 1, 1],  # x1 is predicted last: sees everything
            [0, 1, 1, 0],  # x2 (second): x3 and itself
            [0, 0, 1, 0],  # x3 (first): itself only
            [0, 1, 1, 1],  # x4 (third): x3, x2 and itself
        ],
        bool,
    )
    expected_query = expected_content & ~np.eye(4, dtype=bool)
    np.testing.assert_array_equal(to_numpy(content_mask)[0], expected_content)
    np.testing.assert_array_equal(to_numpy(query_mask)[0], expected_query)
    assert to_numpy(query_mask)[0, 2].sum() == 0  # x3's query sees no token

    # With one memory slot (visible to every position) in front, as XLNet has
    # mems: x3's query stream then attends the memory only.
    mem_content, mem_query = two_stream_masks(order, memory_length=1)
    np.testing.assert_array_equal(
        to_numpy(mem_content)[0], np.concatenate([np.ones((4, 1), bool), expected_content], 1)
    )
    np.testing.assert_array_equal(
        to_numpy(mem_query)[0], np.concatenate([np.ones((4, 1), bool), expected_query], 1)
    )

    rng = np.random.default_rng(2)
    length = 4
    x = rng.normal(size=(1, length, HIDDEN)).astype("float32")
    g = rng.normal(size=(1, length, HIDDEN)).astype("float32")
    memory = rng.normal(size=(1, 1, HIDDEN)).astype("float32")
    pos = relative_positional_encoding(length, length + 1, HIDDEN)
    layer = TwoStreamRelativeAttention(num_heads=HEADS, head_size=HEAD_SIZE)

    def run(content):
        h_out, g_out = layer(content, pos, mem_content, query_stream=g,
                             query_attention_mask=mem_query, memory=memory)
        return to_numpy(h_out)[0], to_numpy(g_out)[0]

    run(x)
    _randomize(layer, seed=3)
    base_h, base_g = run(x)
    for step, position in enumerate(order[0]):
        perturbed = x.copy()
        perturbed[0, position] += rng.normal(size=HIDDEN).astype("float32")
        new_h, new_g = run(perturbed)
        for other_step, other in enumerate(order[0]):
            g_changed = np.abs(new_g[other] - base_g[other]).max() > 1e-4
            h_changed = np.abs(new_h[other] - base_h[other]).max() > 1e-4
            # g_z<=t never sees x_{z_t} (its own content included); every
            # later query stream does.
            assert g_changed == (other_step > step), (step, other_step)
            # h_z<t never sees x_{z_t}; h_{z_t} itself and later ones do.
            assert h_changed == (other_step >= step), (step, other_step)


def test_memory_is_used_without_gradient():
    rng = np.random.default_rng(4)
    batch, length, mem_length = 2, 3, 2
    h = rng.normal(size=(batch, length, HIDDEN)).astype("float32")
    memory = rng.normal(size=(batch, mem_length, HIDDEN)).astype("float32")
    pos = relative_positional_encoding(length, mem_length + length, HIDDEN)
    layer = TwoStreamRelativeAttention(num_heads=HEADS, head_size=HEAD_SIZE)

    def loss(h, memory):
        out = layer(h, pos, memory=memory)
        return ops.sum(out**2), [out]

    _, (h_grad, memory_grad), _, (out,) = value_and_gradients(loss, [h, memory],
                                                              with_outputs=True)
    assert memory_grad is None or not np.any(to_numpy(memory_grad))
    assert np.any(to_numpy(h_grad))  # the autodiff did see the layer

    other = layer(h, pos, memory=memory + 1.0)
    assert np.abs(to_numpy(other) - to_numpy(out)).max() > 1e-3


def test_target_mapping_equals_gathering_full_query_stream():
    rng = np.random.default_rng(5)
    batch, length = 2, 5
    targets = np.array([[3, 1], [0, 4]])  # (batch, num_predict) positions
    h = rng.normal(size=(batch, length, HIDDEN)).astype("float32")
    g_full = rng.normal(size=(batch, length, HIDDEN)).astype("float32")
    g_sub = np.take_along_axis(g_full, targets[:, :, None], axis=1)
    target_mapping = np.eye(length, dtype="float32")[targets]  # (batch, 2, length)
    content_mask, query_mask = two_stream_masks(
        _random_permutations(rng, batch, length)
    )
    segment_ids = np.array([[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]])
    segment_matrix = segment_ids[:, :, None] != segment_ids[:, None, :]
    pos = relative_positional_encoding(length, length, HIDDEN)
    layer = TwoStreamRelativeAttention(num_heads=HEADS, head_size=HEAD_SIZE)
    common = dict(content_attention_mask=content_mask,
                  query_attention_mask=query_mask, segment_matrix=segment_matrix)
    layer(h, pos, query_stream=g_full, **common)
    _randomize(layer, seed=6)

    h_full, out_full = layer(h, pos, query_stream=g_full, **common)
    h_sub, out_sub = layer(h, pos, query_stream=g_sub,
                           target_mapping=target_mapping, **common)
    assert tuple(out_sub.shape) == (batch, 2, HIDDEN)
    want = np.take_along_axis(to_numpy(out_full), targets[:, :, None], axis=1)
    np.testing.assert_allclose(to_numpy(out_sub), want, atol=1e-5)
    np.testing.assert_allclose(to_numpy(h_sub), to_numpy(h_full), atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"num_heads": 0, "head_size": 4}, "num_heads"),
        ({"num_heads": 2.0, "head_size": 4}, "num_heads"),
        ({"num_heads": 2, "head_size": -1}, "head_size"),
        ({"num_heads": 2, "head_size": 4, "dropout": 1.0}, "dropout"),
        ({"num_heads": 2, "head_size": 4, "dropout": -0.1}, "dropout"),
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TwoStreamRelativeAttention(**kwargs)


def test_bad_shapes_fail_at_call():
    h = np.zeros((2, 4, HIDDEN), "float32")
    memory = np.zeros((2, 2, HIDDEN), "float32")
    layer = TwoStreamRelativeAttention(num_heads=HEADS, head_size=HEAD_SIZE)
    # Memory makes K = 6: the encoding must have 6 + 4 rows, not 8.
    with pytest.raises(
        ValueError, match=r"position_encoding.*relative_positional_encoding\(4, 6, 8\)"
    ):
        layer(h, relative_positional_encoding(4, 4, HIDDEN), memory=memory)
    pos = relative_positional_encoding(4, 4, HIDDEN)
    with pytest.raises(ValueError, match="content_attention_mask"):
        layer(h, pos, np.ones((2, 4, 5), bool))
    with pytest.raises(ValueError, match="target_mapping"):
        layer(h, pos, query_stream=np.zeros((2, 2, HIDDEN), "float32"))
    # Symbolic calls check too, when the functional model is built.
    with pytest.raises(ValueError, match="position_encoding"):
        layer(keras.Input((4, HIDDEN)), keras.Input((9, HIDDEN)))
    with pytest.raises(ValueError, match="hidden_size"):
        relative_positional_encoding(4, 4, 7)
