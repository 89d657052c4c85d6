import math
import os
import tempfile

import keras
import numpy as np
import pytest

import keras_ctx.models
from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.models.gpt.backbone import GPT_PRESETS, GPTBackbone
from keras_ctx.models.presets import preset_config
from tests.backends import slow_on

# Published sizes (Radford et al. 2018/2019; the Hugging Face checkpoints' counts).
PUBLISHED = {
    "gpt": 116.5e6,
    "gpt2": 124.4e6,
    "gpt2-medium": 354.8e6,
    "gpt2-large": 774e6,
    "gpt2-xl": 1.56e9,
}
TINY = dict(vocabulary_size=50, num_layers=2, num_heads=2, hidden_size=16,
            intermediate_size=32, max_sequence_length=12, dropout=0.0)


def token_inputs(ids):
    ids = np.asarray(ids, "int32")
    return {"token_ids": ids, "padding_mask": np.ones_like(ids)}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_parameter_counts_match_published_within_one_percent(name):
    _, config = preset_config(name)
    count = GPTBackbone.analytic_parameter_count(**config)
    assert abs(count - PUBLISHED[name]) / PUBLISHED[name] < 0.01, (name, count)


@pytest.mark.parametrize("normalize_first", [True, False])
def test_analytic_count_equals_built_model(normalize_first):
    model = GPTBackbone(**TINY, normalize_first=normalize_first)
    analytic = GPTBackbone.analytic_parameter_count(**TINY, normalize_first=normalize_first)
    assert model.count_params() == analytic
    # GPT-2 adds a final layer norm; GPT (post-LN) has none.
    assert (model.final_norm is not None) == normalize_first


# A released size's count depends on the layers, not the backend: TensorFlow's run builds it
# (seconds there, ~25 s on JAX); the small configurations' build checks run on every backend.
@slow_on("jax", "torch")
def test_gpt2_preset_builds_with_published_count():
    model = keras_ctx.models.from_preset("gpt2")
    assert model.count_params() == 124_439_808
    assert isinstance(model, GPTBackbone)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt", "gpt2-medium", "gpt2-large", "gpt2-xl"])
def test_big_presets_build_with_analytic_count(name):
    _, config = preset_config(name)
    analytic = GPTBackbone.analytic_parameter_count(**config)
    assert GPTBackbone.from_preset(name).count_params() == analytic


@pytest.mark.parametrize("normalize_first", [True, False])
def test_causal_mask_leaks_nothing_through_the_backbone(normalize_first):
    model = GPTBackbone(**TINY, normalize_first=normalize_first)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=(2, 12))
    base = model(token_inputs(ids))
    for position in (3, 11):
        changed = ids.copy()
        changed[:, position] = (changed[:, position] + 7) % 50
        out = model(token_inputs(changed))
        for before, after in zip(base["hidden_states"] + [base["sequence_output"]],
                                 out["hidden_states"] + [out["sequence_output"]]):
            before, after = to_numpy(before), to_numpy(after)
            np.testing.assert_array_equal(before[:, :position], after[:, :position])
            assert np.abs(before[:, position:] - after[:, position:]).max() > 1e-4


def test_outputs_and_embeddings_tied_logits():
    model = GPTBackbone(**TINY)
    out = model(token_inputs(np.ones((2, 12))))
    assert out["sequence_output"].shape == (2, 12, 16)
    assert len(out["hidden_states"]) == 3
    logits = to_numpy(model.logits(out["sequence_output"]))
    expected = to_numpy(out["sequence_output"]) @ to_numpy(model.token_embedding.embeddings).T
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_gpt2_residual_projections_are_initialised_scaled():
    """GPT-2: residual-layer weights ~ N(0, 0.02 / sqrt(N)), N = 2 * layers."""
    keras.utils.set_random_seed(0)
    config = dict(TINY, num_layers=8, hidden_size=64, intermediate_size=256, num_heads=4)
    gpt2 = GPTBackbone(**config, normalize_first=True)
    block = gpt2.blocks[0]
    residual = [block.self_attention.output_dense.kernel, block.feedforward.output_dense.kernel]
    other = [block.self_attention.query_dense.kernel, block.feedforward.intermediate_dense.kernel]
    for kernel in residual:
        np.testing.assert_allclose(np.std(kernel), 0.02 / math.sqrt(16), rtol=0.1)
    for kernel in other:
        np.testing.assert_allclose(np.std(kernel), 0.02, rtol=0.1)
    gpt = GPTBackbone(**config, normalize_first=False)
    np.testing.assert_allclose(
        np.std(gpt.blocks[0].self_attention.output_dense.kernel), 0.02, rtol=0.1)


def test_cached_steps_equal_full_pass():
    model = GPTBackbone(**TINY)
    ids = np.random.default_rng(0).integers(0, 50, size=(2, 12)).astype("int32")
    full = to_numpy(model(token_inputs(ids))["sequence_output"])
    cache = model.build_cache(2, 12)
    steps = []
    for i in range(12):
        hidden, cache = model.call_with_cache(ids[:, i:i + 1], cache, i)
        steps.append(to_numpy(hidden))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
    with pytest.raises(ValueError, match="max_sequence_length"):
        model.build_cache(2, 13)


def test_config_round_trip_and_keras_file():
    model = GPTBackbone(**TINY, normalize_first=False)
    ids = token_inputs(np.arange(24).reshape(2, 12) % 50)
    revived = GPTBackbone.from_config(model.get_config())
    assert revived.get_config() == model.get_config()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gpt.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(ids)["sequence_output"]), to_numpy(model(ids)["sequence_output"]),
                               atol=1e-6)


def test_presets_registered():
    from keras_ctx.models.presets import preset_names

    assert set(GPT_PRESETS) <= set(preset_names())
    with pytest.raises(ValueError, match="not a GPTBackbone"):
        GPTBackbone.from_preset("t5-small")


def test_analytic_count_classmethod_for_preset_listing():
    # Hugging Face's gpt2-xl checkpoint: 1,557,611,200 parameters.
    _, config = preset_config("gpt2-xl")
    assert GPTBackbone.analytic_parameter_count(**config) == 1_557_611_200
