"""XLMBackbone: inputs, parameter counts, causal attention, presets."""

import numpy as np
import keras
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.models import XLMBackbone, from_preset, list_presets

SMALL = dict(vocabulary_size=60, num_layers=2, hidden_size=32, num_heads=2,
             intermediate_size=128, max_sequence_length=24)


def _random_xlm_inputs(batch=2, time=8, seed=0):
    rng = np.random.default_rng(seed)
    return {"token_ids": rng.integers(0, 60, (batch, time)).astype("int32"),
            "padding_mask": np.ones((batch, time), "int32"),
            "position_ids": np.tile(np.arange(time, dtype="int32"), (batch, 1)),
            "language_ids": np.zeros((batch, time), "int32")}


@pytest.mark.parametrize("languages,use", [(1, True), (3, True), (17, False)])
def test_parameter_count_matches_build(languages, use):
    model = XLMBackbone(**SMALL, num_languages=languages, use_language_embeddings=use)
    assert model.count_params() == XLMBackbone.analytic_parameter_count(**model.get_config())
    # By hand: (V + P + langs) H + 2H + L (4(H^2 + H) + 4H + 2HF + F + H).
    h, f = 32, 128
    langs = languages if use and languages > 1 else 0
    assert model.count_params() == (60 + 24 + langs) * h + 2 * h + 2 * (
        4 * (h * h + h) + 4 * h + 2 * h * f + f + h)


def test_released_sizes():
    rows = {name: count for name, _, count, _ in list_presets("xlm")}
    # XLM-17 / XLM-100: 16 layers, 1280 hidden, 200k BPE, about 570M parameters
    # (facebookresearch/XLM README); no language embeddings in these checkpoints.
    assert abs(rows["xlm-mlm-100-1280"] - 570e6) / 570e6 < 0.01
    assert rows["xlm-mlm-100-1280"] == rows["xlm-mlm-17-1280"]
    h = 1024
    layer = 4 * (h * h + h) + 4 * h + 8 * h * h + 4 * h + h
    assert rows["xlm-mlm-enfr-1024"] == (64139 + 512 + 2) * h + 2 * h + 6 * layer


def test_positions_and_languages_are_inputs():
    keras.utils.set_random_seed(0)
    model = XLMBackbone(**SMALL, num_languages=2, dropout=0.0, attention_dropout=0.0)
    x = _random_xlm_inputs()
    base = to_numpy(model(x)["sequence_output"])
    restarted = dict(x, position_ids=np.array([[0, 1, 2, 3, 0, 1, 2, 3]] * 2, "int32"))
    assert not np.allclose(to_numpy(model(restarted)["sequence_output"]), base)
    other_language = dict(x, language_ids=np.ones((2, 8), "int32"))
    assert not np.allclose(to_numpy(model(other_language)["sequence_output"]), base)
    assert len(model(x)["hidden_states"]) == 3
    again = XLMBackbone.from_config(model.get_config())
    assert again.count_params() == model.count_params()


def test_causal_model_does_not_look_ahead():
    keras.utils.set_random_seed(0)
    model = from_preset("xlm-clm-enfr-1024", **SMALL, dropout=0.0, attention_dropout=0.0)
    x = _random_xlm_inputs()
    changed = dict(x, token_ids=x["token_ids"].copy())
    changed["token_ids"][:, 5:] = (changed["token_ids"][:, 5:] + 1) % 60
    a = to_numpy(model(x)["sequence_output"])
    b = to_numpy(model(changed)["sequence_output"])
    np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert not np.allclose(a[:, 5:], b[:, 5:])
