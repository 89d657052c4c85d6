import numpy as np
import pytest

import keras_ctx.models
from keras_ctx.models.presets import preset_config
from keras_ctx.models.t5 import T5Backbone, t5_parameter_count

PUBLISHED = {"t5-small": 60.5e6, "t5-base": 222.9e6}  # Raffel et al. 2020 / HF T5Model
TINY = dict(vocabulary_size=40, num_layers=2, num_heads=2, hidden_size=16,
            intermediate_size=32, dropout=0.0)


def feed(encoder_ids, decoder_ids):
    encoder_ids = np.asarray(encoder_ids, "int32")
    decoder_ids = np.asarray(decoder_ids, "int32")
    return {
        "encoder_token_ids": encoder_ids,
        "encoder_padding_mask": np.ones_like(encoder_ids),
        "decoder_token_ids": decoder_ids,
        "decoder_padding_mask": np.ones_like(decoder_ids),
    }


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_counts_match_published_within_one_percent(name):
    _, config = preset_config(name)
    count = t5_parameter_count(**config)
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.01, count


def test_t5_small_builds_with_exact_published_count():
    assert keras_ctx.models.from_preset("t5-small").count_params() == 60_506_624


@pytest.mark.slow
def test_t5_base_builds_with_exact_published_count():
    assert T5Backbone.from_preset("t5-base").count_params() == 222_903_552


def test_analytic_count_equals_built_and_architecture_is_t5s():
    model = T5Backbone(**TINY, num_decoder_layers=3)
    assert model.count_params() == t5_parameter_count(**TINY, num_decoder_layers=3)
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
        np.testing.assert_array_equal(np.asarray(before)[:, :4], np.asarray(after)[:, :4])
        assert np.abs(np.asarray(before)[:, 4:] - np.asarray(after)[:, 4:]).max() > 1e-4
    changed = enc.copy()
    changed[:, -1] = (changed[:, -1] + 5) % 40
    out = model(feed(changed, dec))
    assert np.abs(np.asarray(base["encoder_sequence_output"])[:, 0]
                  - np.asarray(out["encoder_sequence_output"])[:, 0]).max() > 1e-4


def test_encoder_padding_is_ignored():
    model = T5Backbone(**TINY)
    inputs = feed([[5, 6, 7, 0, 0]], [[1, 2, 3]])
    inputs["encoder_padding_mask"] = np.array([[1, 1, 1, 0, 0]], "int32")
    other = dict(inputs, encoder_token_ids=np.array([[5, 6, 7, 9, 12]], "int32"))
    a, b = model(inputs), model(other)
    np.testing.assert_allclose(a["decoder_sequence_output"], b["decoder_sequence_output"],
                               atol=1e-6)


def test_cached_decoding_equals_full_pass():
    model = T5Backbone(**TINY)
    rng = np.random.default_rng(1)
    enc = rng.integers(1, 40, size=(2, 9)).astype("int32")
    dec = rng.integers(1, 40, size=(2, 6)).astype("int32")
    full = np.asarray(model(feed(enc, dec))["decoder_sequence_output"])
    mask = np.ones_like(enc)
    cache = model.build_decoder_cache(model.encode(enc, mask), 6)
    steps = []
    for i in range(6):
        hidden, cache = model.decode_with_cache(dec[:, i:i + 1], cache, i, mask)
        steps.append(np.asarray(hidden))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
    logits = model.logits(full)
    assert logits.shape == (2, 6, 40)


def test_config_round_trip():
    model = T5Backbone(**TINY)
    assert T5Backbone.from_config(model.get_config()).get_config() == model.get_config()
