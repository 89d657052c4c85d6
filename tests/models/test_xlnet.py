import os
import tempfile

import keras
import numpy as np
import pytest

from keras import ops
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.data.permutation import sample_permutation
from keras_ctx.layers.relative_attention import two_stream_masks
from keras_ctx.models import XLNetBackbone, from_preset
from keras_ctx.models.presets import preset_config
from keras_ctx.layers.relative_attention import relative_positional_encoding
from tests.backends import slow_on
from keras_ctx.models.xlnet.backbone import XLNetBlock, xlnet_attention_inputs
from keras_ctx.testing import run_layer_test
from tests.autodiff import no_gradient, value_and_gradients
from tests.execution import GRADIENTS

VOCAB, LAYERS, HEADS, HIDDEN, FFN = 40, 2, 2, 16, 32


def _random_xlnet(**overrides):
    config = dict(vocabulary_size=VOCAB, num_layers=LAYERS, num_heads=HEADS,
                  hidden_size=HIDDEN, intermediate_size=FFN, dropout=0.0,
                  attention_dropout=0.0)
    config.update(overrides)
    backbone = XLNetBackbone(**config)
    # Random values everywhere (biases, segment embeddings, mask_emb too), so
    # that any leak shows up numerically.
    rng = np.random.default_rng(0)
    for weight in backbone.weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape).astype("float32"))
    return backbone


def _xlnet_inputs(token_ids, segment_ids=None, padding_mask=None):
    token_ids = np.asarray(token_ids, "int32")
    return {
        "token_ids": token_ids,
        "padding_mask": np.ones_like(token_ids) if padding_mask is None else padding_mask,
        "segment_ids": np.zeros_like(token_ids) if segment_ids is None else segment_ids,
    }


def _perm_mask_of_order(order):
    """Every position a target: i may not attend j iff rank(j) >= rank(i)."""
    rank = np.argsort(order)
    return (rank[None, :] >= rank[:, None]).astype("int32")[None]


def test_paper_order_masks_by_hand():
    # XLNet (Yang et al. 2019), figure 1: order 3 -> 2 -> 4 -> 1 (1-based).
    order = np.array([2, 1, 3, 0])
    content, query, segment = xlnet_attention_inputs(
        np.ones((1, 4), "int32"), np.array([[0, 0, 1, 1]]), _perm_mask_of_order(order)
    )
    want_content = np.array(
        [[1, 1, 1, 1],   # x1 predicted last: sees everything
         [0, 1, 1, 0],   # x2 (step 2): x3 and itself
         [0, 0, 1, 0],   # x3 (step 1): itself only
         [0, 1, 1, 1]],  # x4 (step 3): x3, x2, itself
        bool,
    )
    np.testing.assert_array_equal(to_numpy(content)[0], want_content)
    np.testing.assert_array_equal(to_numpy(query)[0], want_content & ~np.eye(4, dtype=bool))
    # The layer's own helper agrees.
    ref_content, ref_query = two_stream_masks(order[None])
    np.testing.assert_array_equal(to_numpy(content), to_numpy(ref_content))
    np.testing.assert_array_equal(to_numpy(query), to_numpy(ref_query))
    np.testing.assert_array_equal(
        to_numpy(segment)[0], np.array([[0, 0, 1, 1]] * 2 + [[1, 1, 0, 0]] * 2, bool)
    )
    # A memory column (segment 0, as XLNet's mem_pad) is visible to everyone.
    content, query, segment = xlnet_attention_inputs(
        np.ones((1, 4), "int32"), np.array([[0, 0, 1, 1]]), _perm_mask_of_order(order), 1
    )
    assert to_numpy(content)[0, :, 0].all() and to_numpy(query)[0, :, 0].all()
    np.testing.assert_array_equal(to_numpy(segment)[0, :, 0], [False, False, True, True])


def test_xlnet_block_layer_harness():
    rng = np.random.default_rng(6)
    batch, length = 2, 5
    order = np.stack([rng.permutation(length) for _ in range(batch)])
    content_mask, query_mask = two_stream_masks(order)
    segments = np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]])
    inputs = {
        "content_stream": rng.normal(size=(batch, length, HIDDEN)).astype("float32"),
        "position_encoding": np.repeat(
            to_numpy(relative_positional_encoding(length, length, HIDDEN)), batch, 0
        ),
        "content_attention_mask": to_numpy(content_mask),
        "query_stream": rng.normal(size=(batch, length, HIDDEN)).astype("float32"),
        "query_attention_mask": to_numpy(query_mask),
        "segment_matrix": segments[:, :, None] != segments[:, None, :],
    }
    content, query = run_layer_test(
        XLNetBlock,
        {"num_heads": HEADS, "intermediate_size": FFN, "dropout": 0.1,
         "attention_dropout": 0.1, "activation": "gelu", "layer_norm_epsilon": 1e-12,
         "initializer_range": 0.02},
        inputs,
        expected_output_shape=(batch, length, HIDDEN),
    )
    assert tuple(query.shape) == (batch, length, HIDDEN)
    # Post-LN: each output position is layer-normalized (unit scale, zero bias at init).
    np.testing.assert_allclose(to_numpy(content).mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(to_numpy(query).std(-1), 1.0, atol=1e-3)


def test_content_stream_matches_keras_hub_xlnet():
    """keras_hub's XLNetBackbone (content stream only) is an independent reference."""
    keras_hub = pytest.importorskip("keras_hub")
    reference = keras_hub.models.XLNetBackbone(
        vocabulary_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, hidden_dim=HIDDEN,
        intermediate_dim=FFN,
    )
    rng = np.random.default_rng(7)
    for weight in reference.weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape).astype("float32"))
    ref = {w.path: to_numpy(w) for w in reference.weights}
    backbone = _random_xlnet()
    backbone.token_embedding.embeddings.assign(
        ref["content_query_embedding/word_embedding/embeddings"])
    for i, block in enumerate(backbone.blocks):
        p, attention, ffn = f"xlnet_encoder_{i}/", block.attention, block.feed_forward
        pairs = [
            (attention.r_w_bias, "content_attention_bias"),
            (attention.r_r_bias, "positional_attention_bias"),
            (attention.r_s_bias, "segment_attention_bias"),
            (attention.seg_embed, "segment_encoding"),
            (attention.query_dense.kernel, "rel_attn/query/kernel"),
            (attention.key_dense.kernel, "rel_attn/key/kernel"),
            (attention.value_dense.kernel, "rel_attn/value/kernel"),
            (attention.position_dense.kernel, "rel_attn/encoding/kernel"),
            (block.attention_norm.gamma, "layer_norm_rel_attn/gamma"),
            (block.attention_norm.beta, "layer_norm_rel_attn/beta"),
            (block.feed_forward_norm.gamma, "layer_norm_ff/gamma"),
            (block.feed_forward_norm.beta, "layer_norm_ff/beta"),
            (ffn.intermediate_dense.kernel, "feedforward_intermediate_dense/kernel"),
            (ffn.intermediate_dense.bias, "feedforward_intermediate_dense/bias"),
            (ffn.output_dense.kernel, "feedforward_output_dense/kernel"),
            (ffn.output_dense.bias, "feedforward_output_dense/bias"),
        ]
        for variable, name in pairs:
            variable.assign(ref[p + name])
        attention.output_dense.kernel.assign(
            np.transpose(ref[p + "rel_attn/attention_output/kernel"], (1, 2, 0)))
    inputs = _xlnet_inputs(rng.integers(0, VOCAB, (2, 7)),
                           np.array([[0, 0, 0, 1, 1, 1, 2], [0, 0, 1, 1, 1, 0, 0]], "int32"),
                           np.array([[1] * 7, [1] * 5 + [0] * 2], "int32"))
    ours = to_numpy(backbone(inputs)["sequence_output"])
    # One sequence at a time: keras_hub 0.32 reshapes (instead of transposing)
    # its (positions, batch, hidden) encoding, which mixes rows for batch > 1.
    for row in range(2):
        single = {name: value[row:row + 1] for name, value in inputs.items()}
        np.testing.assert_allclose(ours[row:row + 1], to_numpy(reference(single)), atol=1e-4)


def _changes(a, b):
    return np.abs(to_numpy(a) - to_numpy(b)).max(axis=-1)[0] > 1e-4


def test_query_stream_never_sees_later_tokens_through_the_backbone():
    backbone = _random_xlnet(mem_len=1)
    order = np.array([2, 1, 3, 0])
    rank = np.argsort(order)
    tokens = np.array([[5, 9, 14, 21]])
    extra = {"perm_mask": _perm_mask_of_order(order),
             "target_mapping": np.eye(4, dtype="float32")[None]}
    # One memory slot, as XLNet always has context: the query stream of z_1
    # then attends the memory only. (A query row that may see no key at all
    # gets a uniform softmax over every key, as in XLNet's code; the
    # permutation pipeline never produces one, see tests/data.)
    memory = [np.random.default_rng(5).normal(size=(1, 1, HIDDEN)).astype("float32")
              for _ in range(LAYERS)]
    base = backbone.forward_pass(dict(_xlnet_inputs(tokens), **extra), memory=memory)
    for step, position in enumerate(order):
        changed = tokens.copy()
        changed[0, position] = (changed[0, position] + 7) % VOCAB
        out = backbone.forward_pass(dict(_xlnet_inputs(changed), **extra), memory=memory)
        g_changed = _changes(out["query_output"], base["query_output"])
        h_changed = _changes(out["sequence_output"], base["sequence_output"])
        # g_{z_t} depends on x_{z_<t} only; h_{z_t} on x_{z_<=t}.
        np.testing.assert_array_equal(g_changed, rank > step)
        np.testing.assert_array_equal(h_changed, rank >= step)


def test_pipeline_masks_through_the_backbone_with_memory():
    backbone = _random_xlnet(mem_len=3)
    length = 12
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, VOCAB, (1, length))
    features = {k: to_numpy(v) for k, v in sample_permutation(tokens, seed=3).items()}
    inputs = dict(_xlnet_inputs(tokens), perm_mask=features["perm_mask"],
                  target_mapping=features["target_mapping"])
    targets = features["target_mapping"][0].argmax(-1)  # positions, 2 targets
    rank = np.argsort(features["factorization_order"][0])
    memory = [rng.normal(size=(1, 3, HIDDEN)).astype("float32") for _ in range(LAYERS)]
    base = backbone.forward_pass(inputs, memory=memory)["query_output"]
    for position in range(length):
        changed = tokens.copy()
        changed[0, position] = (changed[0, position] + 1) % VOCAB
        out = backbone.forward_pass(dict(inputs, token_ids=changed), memory=memory)
        got = _changes(out["query_output"], base)
        # A context token is seen by every target; a target only by later targets.
        want = rank[targets] > rank[position] if position in targets else [True, True]
        np.testing.assert_array_equal(got, want)


def test_memory_is_used_and_gets_no_gradient():
    backbone = _random_xlnet(mem_len=4)
    rng = np.random.default_rng(2)
    first = _xlnet_inputs(rng.integers(0, VOCAB, (2, 6)))
    second = _xlnet_inputs(rng.integers(0, VOCAB, (2, 5)))
    out1 = backbone.forward_pass(first)
    memory = out1["memory"]
    assert len(memory) == LAYERS
    # The memory of layer l is its input on the last mem_len positions.
    for layer, state in enumerate(memory):
        np.testing.assert_allclose(
            to_numpy(state), to_numpy(out1["hidden_states"][layer])[:, -4:], atol=1e-6
        )

    out2 = backbone.forward_pass(second, memory=memory)["sequence_output"]
    other_first = dict(first, token_ids=(first["token_ids"] + 1) % VOCAB)
    other_memory = backbone.forward_pass(other_first)["memory"]
    out2_other = backbone.forward_pass(second, memory=other_memory)["sequence_output"]
    alone = backbone.forward_pass(second)["sequence_output"]
    assert np.abs(to_numpy(out2) - to_numpy(out2_other)).max() > 1e-3  # depends on segment 1
    assert np.abs(to_numpy(out2) - to_numpy(alone)).max() > 1e-3

    # Memory longer than the segment: [old memory; h] keeps the last 4 states.
    out3 = backbone.forward_pass(_xlnet_inputs(rng.integers(0, VOCAB, (2, 2))), memory=memory)
    np.testing.assert_allclose(to_numpy(out3["memory"][0])[:, :2], to_numpy(memory[0])[:, 2:],
                               atol=1e-6)

    memory_arrays = [to_numpy(m) for m in memory]

    def loss(*memory_tensors):
        out = backbone.forward_pass(second, memory=list(memory_tensors), training=True)
        return ops.sum(out["sequence_output"] ** 2)

    _, memory_grads, weight_grads = value_and_gradients(loss, memory_arrays,
                                                        backbone.trainable_variables,
                                                        compiled=GRADIENTS)
    for grad in memory_grads:
        assert grad is None or not np.any(to_numpy(grad))
    assert sum(g is not None and np.any(to_numpy(g)) for g in weight_grads) > 10

    # The returned memory is stop-gradient too.
    def memory_loss():
        new_memory = backbone.forward_pass(first, training=True)["memory"]
        return ops.sum(new_memory[1] ** 2)

    _, _, grads = value_and_gradients(memory_loss, (), backbone.trainable_variables,
                                      compiled=GRADIENTS)
    assert all(no_gradient(g) for g in grads)


def test_functional_call_is_the_content_stream():
    backbone = _random_xlnet()
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, VOCAB, (2, 7))
    padding = np.array([[1] * 7, [1] * 4 + [0] * 3], "int32")
    segments = np.array([[0, 0, 0, 1, 1, 1, 1]] * 2, "int32")
    inputs = _xlnet_inputs(tokens, segments, padding)
    outputs = backbone(inputs)
    assert set(outputs) == {"sequence_output", "hidden_states"}
    assert len(outputs["hidden_states"]) == LAYERS + 1
    np.testing.assert_allclose(to_numpy(outputs["hidden_states"][0]),
                               to_numpy(backbone.token_embedding(tokens)), atol=1e-6)
    np.testing.assert_allclose(to_numpy(outputs["sequence_output"]),
                               to_numpy(backbone.forward_pass(inputs)["sequence_output"]), atol=1e-5)
    # Padding is invisible to real tokens; segments matter (relative encoding).
    changed = dict(inputs, token_ids=tokens.copy())
    changed["token_ids"][1, 5] = (tokens[1, 5] + 1) % VOCAB
    np.testing.assert_allclose(to_numpy(backbone(changed)["sequence_output"])[1, :4],
                               to_numpy(outputs["sequence_output"])[1, :4], atol=1e-5)
    other_segments = dict(inputs, segment_ids=np.zeros_like(segments))
    assert np.abs(to_numpy(backbone(other_segments)["sequence_output"])
                  - to_numpy(outputs["sequence_output"])).max() > 1e-3


def test_config_save_load_and_finetune_under_xla():
    backbone = _random_xlnet(mem_len=2, clamp_length=3)
    config = backbone.get_config()
    assert XLNetBackbone.from_config(config).get_config() == config
    rng = np.random.default_rng(4)
    inputs = _xlnet_inputs(rng.integers(0, VOCAB, (4, 6)))
    before = to_numpy(backbone(inputs)["sequence_output"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "xlnet.keras")
        backbone.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(inputs)["sequence_output"]), before, atol=1e-5)
    np.testing.assert_allclose(to_numpy(loaded.mask_embedding.mask_emb),
                               to_numpy(backbone.mask_embedding.mask_emb))

    # Fine-tuning: content stream only, standard three inputs, XLA.
    summary = backbone(backbone.input)["sequence_output"][:, -1]  # XLNet summarizes last
    classifier = keras.Model(backbone.input, keras.layers.Dense(2)(summary))
    classifier.compile(keras.optimizers.Adam(1e-3), jit_compile=True,
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    kernel = to_numpy(backbone.blocks[0].attention.query_dense.kernel)
    history = classifier.fit(inputs, np.array([0, 1, 0, 1]), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert not np.allclose(to_numpy(backbone.blocks[0].attention.query_dense.kernel), kernel)


def test_mixed_precision_two_streams():
    backbone = XLNetBackbone(VOCAB, 1, HEADS, HIDDEN, FFN, mem_len=2, dtype="mixed_bfloat16")
    tokens = np.arange(6)[None] % VOCAB
    features = {k: to_numpy(v) for k, v in sample_permutation(tokens, seed=0).items()}
    out = backbone.forward_pass(dict(_xlnet_inputs(tokens), perm_mask=features["perm_mask"],
                                target_mapping=features["target_mapping"]))
    assert keras.backend.standardize_dtype(out["query_output"].dtype) == "bfloat16"
    assert all(w.dtype == "float32" for w in backbone.weights)
    assert np.all(np.isfinite(to_numpy(keras.ops.cast(out["query_output"], "float32"))))


def test_bad_arguments():
    with pytest.raises(ValueError, match="mem_len"):
        XLNetBackbone(VOCAB, 1, 2, 16, 32, mem_len=-1)
    with pytest.raises(ValueError, match="hidden_size"):
        XLNetBackbone(VOCAB, 1, 3, 15, 32)
    backbone = XLNetBackbone(VOCAB, 2, 2, 16, 32)
    inputs = _xlnet_inputs(np.zeros((1, 4)))
    with pytest.raises(ValueError, match="perm_mask"):
        backbone.forward_pass(dict(inputs, target_mapping=np.ones((1, 1, 4), "float32")))
    with pytest.raises(ValueError, match="memory"):
        backbone.forward_pass(inputs, memory=[np.zeros((1, 2, 16), "float32")])


# Yang et al. (2019): XLNet-Base 116.7M, XLNet-Large 360.3M parameters (the
# released checkpoints: 116,718,336 and 360,268,800 without the LM bias).
PUBLISHED = {"xlnet-base": 116.7e6, "xlnet-large": 360.3e6}


def test_preset_parameter_counts_analytic():
    for name, published in PUBLISHED.items():
        _, config = preset_config(name)
        count = XLNetBackbone.analytic_parameter_count(**config)
        assert abs(count - published) / published < 0.01, (name, count)
    assert XLNetBackbone.analytic_parameter_count(**preset_config("xlnet-base")[1]) == 116_718_336
    assert XLNetBackbone.analytic_parameter_count(**preset_config("xlnet-large")[1]) == 360_268_800


# A released size's count depends on the layers, not the backend: TensorFlow's run builds it
# (seconds there, ~25 s on JAX); the small configurations' build checks run on every backend.
@slow_on("jax", "torch")
def test_xlnet_base_built_count():
    backbone = from_preset("xlnet-base")
    assert backbone.count_params() == 116_718_336
    assert abs(backbone.count_params() - PUBLISHED["xlnet-base"]) / PUBLISHED["xlnet-base"] < 0.01


@pytest.mark.slow
def test_xlnet_large_built_count():
    assert XLNetBackbone.from_preset("xlnet-large").count_params() == 360_268_800


# ---------------------------------------------------------------- released run settings
from keras_ctx.models.xlnet.backbone import causal_attention_mask, xlnet_position_encoding  # noqa: E402


def _released_causal_blocked(length, memory_length, same_length):
    """XLNet modeling._create_mask in numpy: 1 = may NOT attend."""
    ones = np.ones((length, length))
    blocked = np.concatenate([np.zeros((length, memory_length)), np.triu(ones, 1)], axis=1)
    if same_length:
        blocked[:, :length] += np.tril(ones, -1)
    return blocked > 0


def test_causal_and_same_length_masks_by_hand():
    # 3 queries after 2 memory slots: causal, then every query sees 3 keys.
    np.testing.assert_array_equal(to_numpy(causal_attention_mask(3, 2)),
                                  [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(to_numpy(causal_attention_mask(3, 2, same_length=True)),
                                  [[1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1]])
    for length, memory in ((4, 0), (3, 5), (5, 2)):
        for same in (False, True):
            np.testing.assert_array_equal(
                to_numpy(causal_attention_mask(length, memory, same)),
                ~_released_causal_blocked(length, memory, same))


def test_uni_attention_and_same_length_through_the_backbone():
    backbone = _random_xlnet(num_layers=1, attention_type="uni", mem_len=3)
    rng = np.random.default_rng(8)
    tokens = rng.integers(0, VOCAB, (1, 4))
    base = backbone(_xlnet_inputs(tokens))["sequence_output"]
    changed = tokens.copy()
    changed[0, 2] = (changed[0, 2] + 1) % VOCAB
    np.testing.assert_array_equal(  # causal: position 2 is seen from 2 on
        to_numpy(_changes(backbone(_xlnet_inputs(changed))["sequence_output"], base)), [0, 0, 1, 1])
    memory = [rng.normal(size=(1, 3, HIDDEN)).astype("float32")]
    same = _random_xlnet(num_layers=1, attention_type="uni", same_length=True, mem_len=3)
    for model, want in ((backbone, [[1, 1, 1, 1]] * 3),
                        (same, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])):
        out = model.forward_pass(_xlnet_inputs(tokens), memory=memory)["sequence_output"]
        for slot in range(3):
            other = [memory[0].copy()]
            other[0][0, slot] += 1.0
            got = _changes(model.forward_pass(_xlnet_inputs(tokens), memory=other)["sequence_output"], out)
            # same_length: query i sees the memory slots from i on (M + 1 keys each).
            np.testing.assert_array_equal(got, want[slot], err_msg=f"slot {slot}")
    with pytest.raises(ValueError, match="same_length"):
        XLNetBackbone(VOCAB, 1, 2, 16, 32, same_length=True)
    with pytest.raises(ValueError, match="attention_type"):
        XLNetBackbone(VOCAB, 1, 2, 16, 32, attention_type="causal")


def _released_position_encoding(qlen, klen, d_model, clamp_len, bi_data):
    """XLNet modeling.relative_positional_encoding (attn_type 'bi') in numpy."""
    inv_freq = 1 / (10000 ** (np.arange(0, d_model, 2.0) / d_model))
    forward = np.arange(klen, -qlen, -1.0)
    sequences = [forward, np.arange(-klen, qlen, 1.0)] if bi_data else [forward]
    out = []
    for pos_seq in sequences:
        if clamp_len > 0:
            pos_seq = np.clip(pos_seq, -clamp_len, clamp_len)
        sinusoid = pos_seq[:, None] * inv_freq[None]
        out.append(np.concatenate([np.sin(sinusoid), np.cos(sinusoid)], -1))
    return np.stack(out)


def test_bi_data_position_encodings_match_the_released_formula():
    for clamp in (-1, 2):
        got = to_numpy(xlnet_position_encoding(3, 5, 8, clamp_length=clamp, bi_data=True))
        np.testing.assert_allclose(got, to_numpy(_released_position_encoding(3, 5, 8, clamp, True)),
                                   atol=1e-6)
        got = to_numpy(xlnet_position_encoding(3, 5, 8, clamp_length=clamp))
        np.testing.assert_allclose(got, to_numpy(_released_position_encoding(3, 5, 8, clamp, False)),
                                   atol=1e-6)


def test_is_backward_rows_read_the_negated_distances():
    from keras_ctx.layers import TwoStreamRelativeAttention

    rng = np.random.default_rng(9)
    layer = TwoStreamRelativeAttention(2, 8, bias_initializer="random_normal")
    h = rng.normal(size=(3, 4, HIDDEN)).astype("float32")
    both = to_numpy(xlnet_position_encoding(4, 4, HIDDEN, bi_data=True))  # (2, R, hidden)
    rows = np.array([1, 0, 1])
    picked = layer(h, both, position_index=rows)
    per_row = layer(h, both[rows])  # one encoding per row, the batch path
    np.testing.assert_allclose(to_numpy(picked), to_numpy(per_row), atol=1e-5)
    # Through the backbone: forward rows as without bi_data, backward rows differ.
    backbone = _random_xlnet(mem_len=2)
    tokens = np.tile(rng.integers(0, VOCAB, (1, 5)), (2, 1))
    plain = backbone.forward_pass(_xlnet_inputs(tokens))["sequence_output"]
    bi = backbone.forward_pass(dict(_xlnet_inputs(tokens), is_backward=np.array([0, 1])))["sequence_output"]
    np.testing.assert_allclose(to_numpy(bi)[0], to_numpy(plain)[0], atol=1e-5)
    assert np.abs(to_numpy(bi)[1] - to_numpy(plain)[1]).max() > 1e-3


def test_reuse_len_caches_the_reused_part_only():
    backbone = _random_xlnet(mem_len=3)
    rng = np.random.default_rng(10)
    memory = [rng.normal(size=(2, 3, HIDDEN)).astype("float32") for _ in range(LAYERS)]
    out = backbone.forward_pass(_xlnet_inputs(rng.integers(0, VOCAB, (2, 6))), memory=memory, reuse_len=2)
    for layer in range(LAYERS):
        # XLNet _cache_mem: [mems; h[:reuse_len]][-mem_len:].
        want = np.concatenate([memory[layer], to_numpy(out["hidden_states"][layer])[:, :2]], 1)[:, -3:]
        np.testing.assert_allclose(to_numpy(out["memory"][layer]), want, atol=1e-6)
    with pytest.raises(ValueError, match="reuse_len"):
        backbone.forward_pass(_xlnet_inputs(np.zeros((1, 4))), reuse_len=5)


def test_huggingface_attention_type_and_same_length():
    from keras_ctx.models.xlnet.convert import xlnet_config_from_huggingface

    config = {"vocab_size": 32, "n_layer": 1, "n_head": 2, "d_model": 16, "d_inner": 32}
    uni = xlnet_config_from_huggingface(dict(config, attn_type="uni", same_length=True))
    assert uni["attention_type"] == "uni" and uni["same_length"]
    # HF (like XLNet) applies same_length to 'uni' attention only.
    bi = xlnet_config_from_huggingface(dict(config, attn_type="bi", same_length=True))
    assert bi["attention_type"] == "bi" and not bi["same_length"]
    XLNetBackbone(**bi)
