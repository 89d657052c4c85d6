import os
import tempfile

import keras
import numpy as np
import pytest

import keras_ctx.models as models
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.models import ElectraBackbone, electra_generator
from keras_ctx.models.electra.backbone import (
    ELECTRA_GENERATOR_FRACTIONS,
    ELECTRA_PRESETS,
    generator_config,
)
from keras_ctx.models.presets import count_parameters
from tests.models.inputs import two_segments
from tests.backends import slow_on

# Released discriminators (Clark et al. 2020; Hugging Face ElectraModel of
# google/electra-{small,base,large}-discriminator): embeddings (+ the E -> H
# projection for small) and encoder; no pooler, no RTD head.
PUBLISHED = {"electra-small": 13.5e6, "electra-base": 108.9e6, "electra-large": 334.1e6}

# Released generators (google/electra-{base,large}-generator config.json):
# hidden 256, 4 heads, FFN 1024, i.e. Table 6's 1/3 (base) and 1/4 (large).
RELEASED_GENERATORS = {"electra-base": (256, 4, 1024), "electra-large": (256, 4, 1024)}

TINY = dict(vocabulary_size=50, num_layers=2, num_heads=2, hidden_size=16,
            intermediate_size=32, embedding_size=8, max_sequence_length=12, dropout=0.0)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_parameter_counts_analytic(name):
    count = ElectraBackbone.analytic_parameter_count(**ELECTRA_PRESETS[name].config)
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.005, count


# A released size's count depends on the layers, not the backend: TensorFlow's run builds it
# (seconds there, ~25 s on JAX); the small configurations' build checks run on every backend.
@slow_on("jax", "torch")
@pytest.mark.parametrize("name", ["electra-small", "electra-base"])
def test_built_presets_match_published_counts(name):
    backbone_cls, config = models.presets.preset_config(name)
    assert backbone_cls is ElectraBackbone
    count = count_parameters(backbone_cls, config)
    assert count == ElectraBackbone.analytic_parameter_count(**config)
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.01


@pytest.mark.slow
def test_built_large_preset_matches_published_count():
    count = count_parameters(*models.presets.preset_config("electra-large"))
    assert abs(count - PUBLISHED["electra-large"]) / PUBLISHED["electra-large"] < 0.01


def test_closed_form_count_matches_built_model_with_and_without_projection():
    for overrides in ({}, {"embedding_size": None}, {"embedding_size": 16}):
        config = dict(TINY, **overrides)
        analytic = ElectraBackbone.analytic_parameter_count(**config)
        assert ElectraBackbone(**config).count_params() == analytic


def test_generator_sizes_follow_table_6_and_the_released_generators():
    for name, (hidden, heads, ffn) in RELEASED_GENERATORS.items():
        config = generator_config(ELECTRA_PRESETS[name].config, ELECTRA_GENERATOR_FRACTIONS[name])
        got = (config["hidden_size"], config["num_heads"], config["intermediate_size"])
        assert got == (hidden, heads, ffn)
        assert config["num_layers"] == ELECTRA_PRESETS[name].config["num_layers"]
    small = generator_config(ELECTRA_PRESETS["electra-small"].config, 0.25)
    assert (small["hidden_size"], small["num_heads"], small["intermediate_size"],
            small["embedding_size"]) == (64, 1, 256, 128)
    with pytest.raises(ValueError, match="hidden_fraction"):
        generator_config(ELECTRA_PRESETS["electra-small"].config, 1.5)


def test_outputs_and_projected_embeddings_match_numpy():
    backbone = ElectraBackbone(**TINY)
    x = two_segments()
    out = backbone(x)
    assert set(out) == {"sequence_output", "hidden_states"}  # no pooler in ELECTRA
    assert out["sequence_output"].shape == (2, 7, 16)
    assert len(out["hidden_states"]) == TINY["num_layers"] + 1
    token = to_numpy(backbone.token_embedding.embeddings)[x["token_ids"]]
    assert token.shape[-1] == 8
    pos = to_numpy(backbone.get_layer("position_embedding").weights[0])[:7][None]
    seg = to_numpy(backbone.get_layer("segment_embedding").weights[0])[x["segment_ids"]]
    s = token + pos + seg
    gamma, beta = (to_numpy(w) for w in backbone.get_layer("embeddings_norm").weights)
    e = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-12)
    kernel, bias = (to_numpy(w) for w in backbone.get_layer("embeddings_projection").weights)
    np.testing.assert_allclose(to_numpy(out["hidden_states"][0]), (e * gamma + beta) @ kernel + bias,
                               atol=1e-4)


def test_generator_shares_the_embedding_block_but_not_the_projection():
    discriminator = ElectraBackbone(**dict(TINY, hidden_size=32, intermediate_size=64))
    generator = electra_generator(discriminator, hidden_fraction=0.5)
    assert generator.hidden_size == 16 and generator.embedding_size == 8
    for name in ("token_embedding", "position_embedding", "segment_embedding",
                 "embeddings_norm"):
        mine, theirs = generator.get_layer(name), discriminator.get_layer(name)
        assert mine is theirs
        assert all(a is b for a, b in zip(mine.weights, theirs.weights))
    assert generator.token_embedding.embeddings is discriminator.token_embedding.embeddings
    assert (generator.get_layer("embeddings_projection").kernel.shape == (8, 16)
            and discriminator.get_layer("embeddings_projection").kernel.shape == (8, 32))
    # A change to the shared table shows in both networks' embeddings.
    x = two_segments()
    table = discriminator.token_embedding.embeddings
    table.assign(to_numpy(table) + 1.0)
    g0 = to_numpy(generator(x)["hidden_states"][0])
    table.assign(np.zeros(table.shape, "float32"))
    assert not np.allclose(g0, to_numpy(generator(x)["hidden_states"][0]))


def test_bad_configs_fail_clearly():
    discriminator = ElectraBackbone(**TINY)
    with pytest.raises(ValueError, match="vocabulary_size"):
        ElectraBackbone(**dict(TINY, vocabulary_size=60), shared_embeddings=discriminator)
    with pytest.raises(ValueError, match="embedding_size"):
        ElectraBackbone(**dict(TINY, embedding_size=4), shared_embeddings=discriminator)
    with pytest.raises(ValueError, match="ElectraBackbone"):
        ElectraBackbone(**TINY, shared_embeddings=object())
    with pytest.raises(ValueError, match="num_heads"):
        ElectraBackbone(**dict(TINY, num_heads=3))


def test_config_round_trip_keras_file_and_preset():
    backbone = ElectraBackbone(**TINY)
    x = two_segments()
    want = to_numpy(backbone(x)["sequence_output"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "electra.keras")
        backbone.save(path)
        loaded = keras.saving.load_model(path)
    assert loaded.get_config() == backbone.get_config()
    np.testing.assert_allclose(to_numpy(loaded(x)["sequence_output"]), want, atol=1e-6)
    small = ElectraBackbone.from_preset("electra-small", vocabulary_size=100, num_layers=1,
                                        max_sequence_length=16)
    assert small.embedding_size == 128 and small.hidden_size == 256
    assert {"electra-small", "electra-base", "electra-large"} <= set(
        models.presets.preset_names())
