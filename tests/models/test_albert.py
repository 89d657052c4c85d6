import os
import tempfile

import keras
import numpy as np
import pytest

import keras_ctx.models as models
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers import FactorizedEmbedding
from keras_ctx.models import AlbertBackbone
from keras_ctx.models.presets import count_parameters
from tests.models.inputs import one_segment

# Lan et al. 2020, Table 1 (12M / 18M / 60M / 235M rounded); the released
# configurations count 11.7M / 17.7M / 58.7M / 222.6M with the pooler.
PUBLISHED = {
    "albert-base": 11.7e6,
    "albert-large": 17.7e6,
    "albert-xlarge": 58.7e6,
    "albert-xxlarge": 222.6e6,
}

TINY = dict(vocabulary_size=40, num_layers=3, num_heads=2, hidden_size=16,
            intermediate_size=32, embedding_size=8, max_sequence_length=12, dropout=0.0)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_presets_match_published_counts(name):
    backbone_cls, config = models.presets.preset_config(name)
    assert config["embedding_size"] == 128 and config["sharing"] == "all"
    analytic = AlbertBackbone.analytic_parameter_count(**config)
    assert abs(analytic - PUBLISHED[name]) / PUBLISHED[name] < 0.01, analytic
    if name != "albert-xxlarge":  # building xxlarge takes a few seconds; see the slow test
        assert count_parameters(backbone_cls, config) == analytic


@pytest.mark.slow
def test_xxlarge_built_count():
    backbone_cls, config = models.presets.preset_config("albert-xxlarge")
    assert abs(count_parameters(backbone_cls, config) - 222.6e6) / 222.6e6 < 0.01


@pytest.mark.parametrize("sharing", ["none", "all", "attention", "ffn"])
def test_sharing_modes_count_and_share(sharing):
    backbone = AlbertBackbone(**dict(TINY, sharing=sharing))
    analytic = AlbertBackbone.analytic_parameter_count(**dict(TINY, sharing=sharing))
    assert backbone.count_params() == analytic
    blocks = backbone.get_layer("encoder").blocks
    attention_shared = blocks[0].self_attention is blocks[2].self_attention
    ffn_shared = blocks[0].feedforward is blocks[2].feedforward
    assert attention_shared == (sharing in ("all", "attention"))
    assert ffn_shared == (sharing in ("all", "ffn"))


def test_factorized_embedding_path_matches_numpy():
    backbone = AlbertBackbone(**TINY)
    x = one_segment(length=6, vocabulary=40)
    out = backbone(x)
    assert isinstance(backbone.token_embedding, FactorizedEmbedding)
    assert out["sequence_output"].shape == (2, 6, 16)
    assert len(out["hidden_states"]) == TINY["num_layers"] + 1
    table = to_numpy(backbone.token_embedding.embeddings)
    assert table.shape == (40, 8)  # V x E
    pos = to_numpy(backbone.get_layer("position_embedding").weights[0])[:6][None]
    seg = to_numpy(backbone.get_layer("segment_embedding").weights[0])[x["segment_ids"]]
    s = table[x["token_ids"]] + pos + seg
    gamma, beta = (to_numpy(w) for w in backbone.get_layer("embeddings_norm").weights)
    e = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-12) * gamma + beta
    kernel, bias = (to_numpy(w) for w in backbone.token_embedding.projection.weights)
    np.testing.assert_allclose(to_numpy(out["hidden_states"][0]), e @ kernel + bias, atol=1e-4)


def test_keras_file_round_trip_keeps_sharing():
    backbone = AlbertBackbone(**TINY)
    x = one_segment(length=6, vocabulary=40)
    want = to_numpy(backbone(x)["sequence_output"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "albert.keras")
        backbone.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(x)["sequence_output"]), want, atol=1e-6)
    assert loaded.count_params() == backbone.count_params()


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="sharing"):
        AlbertBackbone(**dict(TINY, sharing="some"))
    with pytest.raises(ValueError, match="Unknown model handle 'albert-huge'"):
        models.from_preset("albert-huge")
