import keras
import numpy as np
import pytest

import keras_ctx.models
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.models.presets import preset_config
from keras_ctx.models.t5.backbone import T5Backbone
from tests.autodiff import value_and_gradients
from tests.execution import GRADIENTS
from tests.models.inputs import feed
from tests.backends import slow_on

PUBLISHED = {"t5-small": 60.5e6, "t5-base": 222.9e6,  # Raffel et al. 2020 / HF T5Model
             "t5-3b": 2.85e9, "t5-11b": 11.3e9}
# HF's num_parameters() of the released checkpoints (google/t5-v1_1-*, t5-large,
# t5-3b, t5-11b; quoted from memory, each agrees with the gin shapes' closed form).
HF_COUNTS = {"t5-large": 737_668_096, "t5-3b": 2_851_598_336, "t5-11b": 11_307_321_344,
             "t5.1.1-small": 76_961_152, "t5.1.1-base": 247_577_856,
             "t5.1.1-large": 783_150_080, "t5.1.1-xl": 2_849_757_184,
             "t5.1.1-xxl": 11_135_332_352, "mt5-small": 300_176_768,
             "mt5-base": 582_401_280}
# mT5 (Xue et al. 2021, Sec. 3): 300M, 580M, 1.2B, 3.7B, 13B, rounded as
# printed: the count must round to them.
MT5_PUBLISHED = {"mt5-small": (300e6, 5e6), "mt5-base": (580e6, 5e6),
                 "mt5-large": (1.2e9, 0.05e9), "mt5-xl": (3.7e9, 0.05e9),
                 "mt5-xxl": (13e9, 0.5e9)}
TINY = dict(vocabulary_size=40, num_layers=2, num_heads=2, hidden_size=16,
            intermediate_size=32, dropout=0.0)
# T5 v1.1-shaped: gated GELU, untied output, heads * head_size (3 * 4) != 16.
TINY_V11 = dict(TINY, num_heads=3, head_size=4, gated_feedforward=True,
                activation="gelu_approximate", tie_embeddings=False)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_counts_match_published_within_one_percent(name):
    _, config = preset_config(name)
    count = T5Backbone.analytic_parameter_count(**config)
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.01, count


@pytest.mark.parametrize("name", sorted(HF_COUNTS))
def test_preset_counts_equal_the_released_checkpoints(name):
    _, config = preset_config(name)
    assert T5Backbone.analytic_parameter_count(**config) == HF_COUNTS[name]


@pytest.mark.parametrize("name", sorted(MT5_PUBLISHED))
def test_mt5_counts_round_to_the_published_ones(name):
    _, config = preset_config(name)
    published, half_unit = MT5_PUBLISHED[name]
    assert config["vocabulary_size"] == 250112 and not config["tie_embeddings"]
    assert abs(T5Backbone.analytic_parameter_count(**config) - published) <= half_unit


def test_v1_1_presets_are_the_released_architecture():
    _, small = preset_config("t5.1.1-small")
    # t5.1.1.small.gin: d_model 512, 6 heads of d_kv 64 (384 != 512), gated GELU, untied,
    # no dropout in pretraining.
    assert (small["hidden_size"], small["num_heads"], small["head_size"]) == (512, 6, 64)
    assert small["gated_feedforward"] and small["dropout"] == 0.0
    _, three = preset_config("t5-3b")
    assert three["num_heads"] * three["head_size"] == 4096 != three["hidden_size"]


def test_v1_1_analytic_count_equals_built_and_logits_use_the_untied_head():
    model = T5Backbone(**TINY_V11, num_decoder_layers=3)
    analytic = T5Backbone.analytic_parameter_count(**TINY_V11, num_decoder_layers=3)
    assert model.count_params() == analytic
    block = model.encoder_blocks[0]
    assert block.feedforward.gated and block.self_attention.head_size == 4
    assert block.self_attention.query_dense.kernel.shape == (16, 3, 4)
    hidden = np.random.default_rng(0).normal(size=(2, 3, 16)).astype("float32")
    np.testing.assert_allclose(to_numpy(model.logits(hidden)), hidden @ to_numpy(model.lm_head.kernel),
                               rtol=1e-5, atol=1e-5)
    tied = T5Backbone(**TINY)
    table = to_numpy(tied.token_embedding.embeddings)
    np.testing.assert_allclose(to_numpy(tied.logits(hidden)), hidden * 16**-0.5 @ table.T,
                               rtol=1e-5, atol=1e-5)


def test_v1_1_saves_and_loads_its_lm_head(tmp_path):
    import keras

    model = T5Backbone(**TINY_V11)
    path = str(tmp_path / "t5.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_numpy(again.lm_head.kernel), to_numpy(model.lm_head.kernel))
    assert again.get_config() == model.get_config()


def test_heads_that_do_not_split_d_model_need_head_size():
    with pytest.raises(ValueError, match="not divisible by num_heads.*head_size"):
        T5Backbone(**dict(TINY, num_heads=3))


# A released size's count depends on the layers, not the backend: TensorFlow's run builds it
# (seconds there, ~25 s on JAX); the small configurations' build checks run on every backend.
@slow_on("jax", "torch")
def test_t5_small_builds_with_exact_published_count():
    assert keras_ctx.models.from_preset("t5-small").count_params() == 60_506_624


@pytest.mark.slow
def test_t5_base_builds_with_exact_published_count():
    assert T5Backbone.from_preset("t5-base").count_params() == 222_903_552


def test_analytic_count_equals_built_and_architecture_is_t5s():
    model = T5Backbone(**TINY, num_decoder_layers=3)
    analytic = T5Backbone.analytic_parameter_count(**TINY, num_decoder_layers=3)
    assert model.count_params() == analytic
    # One relative position table per stack, computed once and shared by all layers.
    tables = [w for w in model.weights if "relative_attention_bias" in w.path]
    assert len(tables) == 2
    # RMS norm (scale only), no biases anywhere, unscaled attention scores.
    assert not [w for w in model.weights if w.path.endswith("bias") and "relative" not in w.path]
    for block in model.encoder_blocks + model.decoder_blocks:
        assert block.normalization == "rms_norm" and not block.use_bias
        assert block.attention_scale == 1.0 and block.normalize_first


def test_decoder_is_causal_and_encoder_is_bidirectional():
    model = T5Backbone(**TINY)
    rng = np.random.default_rng(0)
    enc = rng.integers(1, 40, size=(2, 9))
    dec = rng.integers(1, 40, size=(2, 7))
    base = model(feed(enc, dec))
    changed = dec.copy()
    changed[:, 4] = (changed[:, 4] + 5) % 40
    out = model(feed(enc, changed))
    for before, after in zip(base["decoder_hidden_states"] + [base["decoder_sequence_output"]],
                             out["decoder_hidden_states"] + [out["decoder_sequence_output"]]):
        np.testing.assert_array_equal(to_numpy(before)[:, :4], to_numpy(after)[:, :4])
        assert np.abs(to_numpy(before)[:, 4:] - to_numpy(after)[:, 4:]).max() > 1e-4
    changed = enc.copy()
    changed[:, -1] = (changed[:, -1] + 5) % 40
    out = model(feed(changed, dec))
    assert np.abs(to_numpy(base["encoder_sequence_output"])[:, 0]
                  - to_numpy(out["encoder_sequence_output"])[:, 0]).max() > 1e-4


def test_encoder_padding_is_ignored():
    model = T5Backbone(**TINY)
    inputs = feed([[5, 6, 7, 0, 0]], [[1, 2, 3]])
    inputs["encoder_padding_mask"] = np.array([[1, 1, 1, 0, 0]], "int32")
    other = dict(inputs, encoder_token_ids=np.array([[5, 6, 7, 9, 12]], "int32"))
    a, b = model(inputs), model(other)
    np.testing.assert_allclose(to_numpy(a["decoder_sequence_output"]), to_numpy(b["decoder_sequence_output"]),
                               atol=1e-6)


@pytest.mark.parametrize("config", [TINY, TINY_V11], ids=["v1.0", "v1.1"])
def test_cached_decoding_equals_full_pass(config):
    model = T5Backbone(**config)
    rng = np.random.default_rng(1)
    enc = rng.integers(1, 40, size=(2, 9)).astype("int32")
    dec = rng.integers(1, 40, size=(2, 6)).astype("int32")
    full = to_numpy(model(feed(enc, dec))["decoder_sequence_output"])
    mask = np.ones_like(enc)
    cache = model.build_decoder_cache(model.encode(enc, mask), 6)
    steps = []
    for i in range(6):
        hidden, cache = model.decode_with_cache(dec[:, i:i + 1], cache, i, mask)
        steps.append(to_numpy(hidden))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
    logits = model.logits(full)
    assert logits.shape == (2, 6, 40)


@pytest.mark.parametrize("config", [TINY, TINY_V11], ids=["v1.0", "v1.1"])
def test_config_round_trip(config):
    model = T5Backbone(**config)
    assert T5Backbone.from_config(model.get_config()).get_config() == model.get_config()


def test_the_untied_lm_head_is_trained():
    model = T5Backbone(**TINY_V11)
    assert any(v is model.lm_head.kernel for v in model.trainable_variables)

    def loss():
        hidden = model(feed([[5, 6, 7, 1]], [[0, 8, 9]]))["decoder_sequence_output"]
        return keras.ops.sum(model.logits(hidden)[..., 8])

    _, _, (gradient,) = value_and_gradients(loss, (), [model.lm_head.kernel], compiled=GRADIENTS)
    assert np.abs(gradient).max() > 0
