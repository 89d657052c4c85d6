import numpy as np
import pytest

import keras_ctx.models
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.models.bart.backbone import BartBackbone
from keras_ctx.models.presets import preset_config
from tests.models.inputs import feed
from tests.backends import slow_on

PUBLISHED = {"bart-base": 139.4e6, "bart-large": 406.3e6}  # Lewis et al. 2020 / HF
TINY = dict(vocabulary_size=40, num_layers=2, num_heads=2, hidden_size=16,
            intermediate_size=32, max_sequence_length=16, dropout=0.0)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_counts_match_published_within_one_percent(name):
    _, config = preset_config(name)
    count = BartBackbone.analytic_parameter_count(**config)
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.01, count


# A released size's count depends on the layers, not the backend: TensorFlow's run builds it
# (seconds there, ~25 s on JAX); the small configurations' build checks run on every backend.
@slow_on("jax", "torch")
def test_bart_base_builds_with_analytic_count():
    _, config = preset_config("bart-base")
    model = keras_ctx.models.from_preset("bart-base")
    assert model.count_params() == BartBackbone.analytic_parameter_count(**config)


@pytest.mark.slow
def test_bart_large_builds_with_analytic_count():
    _, config = preset_config("bart-large")
    analytic = BartBackbone.analytic_parameter_count(**config)
    assert BartBackbone.from_preset("bart-large").count_params() == analytic


def test_analytic_count_equals_built_and_embedding_is_shared():
    model = BartBackbone(**TINY, num_decoder_layers=3)
    analytic = BartBackbone.analytic_parameter_count(**TINY, num_decoder_layers=3)
    assert model.count_params() == analytic
    tables = [w for w in model.weights if w.path.endswith("token_embedding/embeddings")]
    assert len(tables) == 1
    for block in model.encoder_blocks + model.decoder_blocks:
        assert not block.normalize_first and block.activation == "gelu"


def test_decoder_is_causal_and_encoder_is_bidirectional():
    model = BartBackbone(**TINY)
    rng = np.random.default_rng(0)
    enc = rng.integers(1, 40, size=(2, 9))
    dec = rng.integers(1, 40, size=(2, 7))
    base = model(feed(enc, dec))
    changed = dec.copy()
    changed[:, 4] = (changed[:, 4] + 5) % 40
    out = model(feed(enc, changed))
    for before, after in zip(base["decoder_hidden_states"], out["decoder_hidden_states"]):
        np.testing.assert_array_equal(to_numpy(before)[:, :4], to_numpy(after)[:, :4])
        assert np.abs(to_numpy(before)[:, 4:] - to_numpy(after)[:, 4:]).max() > 1e-4
    changed = enc.copy()
    changed[:, -1] = (changed[:, -1] + 5) % 40
    out = model(feed(changed, dec))
    assert np.abs(to_numpy(base["encoder_sequence_output"])[:, 0]
                  - to_numpy(out["encoder_sequence_output"])[:, 0]).max() > 1e-4


def test_cached_decoding_equals_full_pass():
    model = BartBackbone(**TINY)
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
    with pytest.raises(ValueError, match="max_sequence_length"):
        model.build_decoder_cache(model.encode(enc, mask), 17)


def test_config_round_trip():
    model = BartBackbone(**TINY)
    assert BartBackbone.from_config(model.get_config()).get_config() == model.get_config()


def test_classifier_reads_the_last_real_decoder_state_through_dense_tanh():
    from keras_ctx.tasks import SequenceClassifier

    model = SequenceClassifier(BartBackbone(**TINY), num_classes=3)  # pooling from the family
    transform = model.get_layer("transform")
    assert transform.activation.__name__ == "tanh" and transform.units == TINY["hidden_size"]
    ids = np.array([[0, 5, 9, 2, 1, 1]], "int32")
    mask = np.array([[1, 1, 1, 1, 0, 0]], "int32")
    inputs = {"encoder_token_ids": ids, "encoder_padding_mask": mask,
              "decoder_token_ids": np.array([[2, 0, 5, 9, 2, 1]], "int32"),
              "decoder_padding_mask": mask}
    backbone_out = to_numpy(model.backbone(inputs)["decoder_sequence_output"])[:, 3]
    dense, logits = transform, model.get_layer("logits")
    want = np.tanh(backbone_out @ to_numpy(dense.kernel) + to_numpy(dense.bias))
    want = want @ to_numpy(logits.kernel) + to_numpy(logits.bias)
    np.testing.assert_allclose(to_numpy(model(inputs)), want, atol=1e-5)


def test_final_logits_bias_is_added_to_the_logits_and_not_trained(tmp_path):
    import keras

    model = BartBackbone(**TINY)
    bias = np.arange(40, dtype="float32") / 10
    model.final_logits_bias.assign(bias)
    hidden = np.random.default_rng(0).normal(size=(1, 2, 16)).astype("float32")
    table = to_numpy(model.token_embedding.embeddings)
    np.testing.assert_allclose(to_numpy(model.logits(hidden)), hidden @ table.T + bias, atol=1e-5)
    # A buffer in HF's BartForConditionalGeneration: optimizers never see it.
    assert not any(v is model.final_logits_bias for v in model.trainable_variables)
    assert any(v is model.final_logits_bias for v in model.non_trainable_variables)
    model.save(tmp_path / "bart.keras")
    again = keras.saving.load_model(tmp_path / "bart.keras")
    np.testing.assert_array_equal(to_numpy(again.final_logits_bias), bias)
