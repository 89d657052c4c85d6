import os
import tempfile

import keras
import numpy as np
import pytest

import keras_ctx.models as models
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.models import BertBackbone
from keras_ctx.models.bert.backbone import BERT_PRESETS
from keras_ctx.models.presets import preset_config
from keras_ctx.models.presets import count_parameters
from tests.models.inputs import two_segments
from tests.backends import slow_on

# Published sizes (Devlin et al. 2019; Liu et al. 2019; the numbers,
# counted with the pooler and without pretraining heads).
PUBLISHED = {
    "bert-base": 109.5e6,
    "bert-large": 335.1e6,
    "roberta-base": 124.6e6,
    "roberta-large": 355.4e6,
    # Turc et al. 2019 (google-research/bert README) miniatures.
    "bert-tiny": 4.4e6,
    "bert-mini": 11.2e6,
    "bert-small": 28.8e6,
    "bert-medium": 41.4e6,
    # BERT shapes with the cased 28996 vocabulary (Joshi et al. 2020).
    "spanbert-base": 108.3e6,
    "spanbert-large": 333.6e6,
}

TINY = dict(vocabulary_size=50, num_layers=2, num_heads=2, hidden_size=16,
            intermediate_size=32, max_sequence_length=12, dropout=0.0)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_parameter_counts_analytic(name):
    count = BertBackbone.analytic_parameter_count(**preset_config(name)[1])
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.01, count


# A released size's count depends on the layers, not the backend: TensorFlow's run builds it
# (seconds there, ~25 s on JAX); the small configurations' build checks run on every backend.
@slow_on("jax", "torch")
@pytest.mark.parametrize("name", ["bert-base", "roberta-base"])
def test_built_base_presets_match_published_counts(name):
    backbone_cls, config = models.presets.preset_config(name)
    count = count_parameters(backbone_cls, config)
    assert count == BertBackbone.analytic_parameter_count(**config)
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.01


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert-large", "roberta-large", "spanbert-large"])
def test_built_large_presets_match_published_counts(name):
    backbone_cls, config = models.presets.preset_config(name)
    count = count_parameters(backbone_cls, config)
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.01


def test_closed_form_count_matches_built_model_on_small_configs():
    for overrides in ({}, {"type_vocab_size": 1, "max_sequence_length": 14}):
        config = dict(TINY, **overrides)
        analytic = BertBackbone.analytic_parameter_count(**config)
        assert BertBackbone(**config).count_params() == analytic


def test_outputs_structure_and_pooler_matches_numpy():
    backbone = BertBackbone(**TINY)
    out = backbone(two_segments())
    assert out["sequence_output"].shape == (2, 7, 16)
    assert len(out["hidden_states"]) == TINY["num_layers"] + 1
    np.testing.assert_allclose(to_numpy(out["hidden_states"][-1]), to_numpy(out["sequence_output"]))
    kernel, bias = (to_numpy(w) for w in backbone.get_layer("pooler").weights)
    want = np.tanh(to_numpy(out["sequence_output"])[:, 0] @ kernel + bias)
    np.testing.assert_allclose(to_numpy(out["pooled_output"]), want, atol=1e-5)


def test_embeddings_are_layer_norm_of_token_position_segment_sum():
    backbone = BertBackbone(**TINY)
    x = two_segments()
    emb = to_numpy(backbone(x)["hidden_states"][0])
    token = to_numpy(backbone.token_embedding.embeddings)[x["token_ids"]]
    pos = to_numpy(backbone.get_layer("position_embedding").weights[0])[:7][None]
    seg = to_numpy(backbone.get_layer("segment_embedding").weights[0])[x["segment_ids"]]
    s = token + pos + seg
    gamma, beta = (to_numpy(w) for w in backbone.get_layer("embeddings_norm").weights)
    want = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(emb, want * gamma + beta, atol=1e-4)


def test_padding_does_not_change_real_positions():
    backbone = BertBackbone(**TINY)
    x = two_segments(length=8)
    x["padding_mask"][:, 5:] = 0
    y = dict(x, token_ids=x["token_ids"].copy())
    y["token_ids"][:, 5:] = 7
    a = to_numpy(backbone(x)["sequence_output"])[:, :5]
    b = to_numpy(backbone(y)["sequence_output"])[:, :5]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_config_round_trip_and_keras_file():
    backbone = BertBackbone(**TINY)
    x = two_segments()
    want = to_numpy(backbone(x)["sequence_output"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bert.keras")
        backbone.save(path)
        loaded = keras.saving.load_model(path)
    assert loaded.get_config() == backbone.get_config()
    np.testing.assert_allclose(to_numpy(loaded(x)["sequence_output"]), want, atol=1e-6)
    assert loaded.token_embedding.embeddings is loaded.get_layer("token_embedding").embeddings


def test_from_preset_and_overrides_and_errors():
    backbone = BertBackbone.from_preset("bert-tiny", vocabulary_size=100, max_sequence_length=32)
    assert backbone.token_embedding.vocabulary_size == 100
    roberta = models.from_preset("roberta-base", num_layers=1)
    assert roberta.type_vocab_size == 1 and roberta.max_sequence_length == 514
    with pytest.raises(ValueError, match="Unknown model handle"):
        models.from_preset("bert-gigantic")
    with pytest.raises(ValueError, match="divisible"):
        BertBackbone(**dict(TINY, num_heads=3))
    with pytest.raises(ValueError, match="sequence_length"):
        BertBackbone(**TINY)(two_segments(length=13))


def test_presets_are_registered():
    # (list_presets() builds every family's presets; the names are enough here.)
    assert set(BERT_PRESETS) <= set(models.presets.preset_names())
