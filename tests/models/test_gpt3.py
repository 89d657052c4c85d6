"""GPT-3 (Brown et al. 2020): alternating dense / banded layers, Table 2.1 presets."""

import os
import tempfile

import keras
import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.models.gpt.backbone import GPTBackbone, attention_types
from keras_ctx.models.presets import count_parameters, list_presets, preset_config
from tests.autodiff import run_compiled
from tests.execution import DECODE

# Brown et al. 2020, Table 2.1, n_params (rounded in the paper) and the exact
# counts of the configs: embeddings 50257 x d + 2048 x d, per layer
# 4 d a + 3 a + d (attention, a = n_heads * d_head) + 8 d^2 + 5 d (FFN) + 4 d
# (two norms), a final norm 2 d. Computed here by hand from the table's shape.
# name: (n_params as the table rounds it, exact count, (n_layers, d_model, n_heads, d_head)).
TABLE = {
    "gpt3-small": (125e6, 125_226_240, (12, 768, 12, 64)),
    "gpt3-medium": (350e6, 355_871_744, (24, 1024, 16, 64)),
    "gpt3-large": (760e6, 760_300_032, (24, 1536, 16, 96)),
    "gpt3-xl": (1.3e9, 1_517_123_584, (24, 2048, 24, 128)),
    "gpt3-2.7b": (2.7e9, 2_651_553_280, (32, 2560, 32, 80)),
    "gpt3-6.7b": (6.7e9, 6_658_404_352, (32, 4096, 32, 128)),
    "gpt3-13b": (13e9, 12_936_488_380, (40, 5140, 40, 128)),
    "gpt3-175b": (175e9, 174_604_259_328, (96, 12288, 96, 128)),
}
TINY = dict(vocabulary_size=50, num_layers=4, num_heads=2, hidden_size=16,
            intermediate_size=32, max_sequence_length=16, dropout=0.0,
            attention_pattern="alternating", window_size=3)


def _parameters_by_hand(layers, d, heads, head_size, vocabulary=50257, positions=2048):
    a = heads * head_size
    per_layer = (4 * d * a + 3 * a + d) + (8 * d * d + 5 * d) + 4 * d
    return vocabulary * d + positions * d + layers * per_layer + 2 * d


@pytest.mark.parametrize("name", sorted(TABLE))
def test_gpt3_presets_count_what_table_2_1_rounds(name):
    published, exact, shape = TABLE[name]
    assert _parameters_by_hand(*shape) == exact
    backbone_cls, config = preset_config(name)
    assert (config["num_layers"], config["hidden_size"], config["num_heads"],
            config["head_size"]) == shape
    assert config["max_sequence_length"] == 2048 and config["vocabulary_size"] == 50257
    assert config["attention_pattern"] == "alternating"
    assert count_parameters(backbone_cls, config) == exact
    if name != "gpt3-xl":  # the table rounds: 350M computes to ~356M
        assert abs(exact - published) / published < 0.02, (name, exact)


def test_gpt3_xl_row_is_inconsistent_and_taken_literally():
    # 24 heads x 128 = 3072 attention width on a 2048-wide model: 1.52B, not
    # 1.3B; a 2048-wide attention (16 x 128) gives the table's 1.3B.
    assert abs(_parameters_by_hand(24, 2048, 16, 128) - 1.3e9) / 1.3e9 < 0.02
    _, config = preset_config("gpt3-xl")
    assert config["num_heads"] * config["head_size"] == 3072


def test_gpt_neo_presets_count_the_released_models():
    # Hugging Face's EleutherAI/gpt-neo-* checkpoints (no q/k/v biases).
    for name, count in (("gpt-neo-125m", 125_198_592), ("gpt-neo-1.3b", 1_315_575_808),
                        ("gpt-neo-2.7b", 2_651_307_520)):
        backbone_cls, config = preset_config(name)
        assert count_parameters(backbone_cls, config) == count
        assert config["attention_scale"] == 1.0 and config["window_size"] == 256


def test_listing_presets_builds_nothing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a preset listing built a backbone")

    monkeypatch.setattr(GPTBackbone, "__init__", refuse)
    rows = {row[0]: row[2] for row in list_presets("gpt3")}
    assert rows["gpt3-175b"] == TABLE["gpt3-175b"][1]


@pytest.mark.parametrize("use_qkv_bias", [True, False])
def test_analytic_count_equals_built_model_with_head_size(use_qkv_bias):
    config = dict(TINY, num_heads=3, head_size=8, use_qkv_bias=use_qkv_bias)  # 3 * 8 != 16
    model = GPTBackbone(**config)
    assert model.count_params() == GPTBackbone.analytic_parameter_count(**config)


def test_alternating_pattern_and_validation():
    assert attention_types("alternating", 4) == ["dense", "local", "dense", "local"]
    model = GPTBackbone(**TINY)
    assert [b.self_attention.window_size for b in model.blocks] == [None, 3, None, 3]
    with pytest.raises(ValueError, match="one of"):
        GPTBackbone(**dict(TINY, attention_pattern=["dense", "sparse", "dense", "local"]))
    with pytest.raises(ValueError, match="per layer"):
        GPTBackbone(**dict(TINY, attention_pattern=["dense"]))
    with pytest.raises(ValueError, match="alternating"):
        GPTBackbone(**dict(TINY, attention_pattern="banded"))


def test_local_layers_see_only_their_band():
    """Changing token 0 changes position 5's output only through the dense layers:
    with every layer local (w = 3), positions >= 1 + L(w-1) = 9 are untouched."""
    model = GPTBackbone(**dict(TINY, attention_pattern=["local"] * 4))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=(1, 16)).astype("int32")
    changed = ids.copy()
    changed[0, 0] = (ids[0, 0] + 1) % 50
    ones = np.ones_like(ids)
    a = to_numpy(model({"token_ids": ids, "padding_mask": ones})["sequence_output"])
    b = to_numpy(model({"token_ids": changed, "padding_mask": ones})["sequence_output"])
    moved = np.abs(a - b).max(-1)[0] > 1e-6
    assert moved[:9].all() and not moved[9:].any()


def test_cached_decoding_equals_full_pass_with_bands():
    model = GPTBackbone(**TINY)
    ids = np.random.default_rng(1).integers(0, 50, size=(2, 16)).astype("int32")
    full = model({"token_ids": ids, "padding_mask": np.ones_like(ids)})["sequence_output"]
    cache = model.build_cache(2, 16)
    hidden, cache = model.call_with_cache(ids[:, :5], cache, 0)
    steps = [to_numpy(hidden)]
    for i in range(5, 16):
        hidden, cache = model.call_with_cache(ids[:, i:i + 1], cache, i)
        steps.append(to_numpy(hidden))
    np.testing.assert_allclose(np.concatenate(steps, 1), to_numpy(full), atol=1e-5)


def test_forward_compiles_under_xla_and_config_round_trips():
    model = GPTBackbone(**dict(TINY, num_heads=3, head_size=8, use_qkv_bias=False,
                               attention_scale=1.0))
    ids = np.random.default_rng(2).integers(0, 50, size=(2, 16)).astype("int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    eager = to_numpy(model(inputs)["sequence_output"])
    compiled = run_compiled(lambda x: model(x)["sequence_output"], inputs)
    np.testing.assert_allclose(compiled, eager, atol=1e-5)
    revived = GPTBackbone.from_config(model.get_config())
    assert revived.get_config() == model.get_config()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gpt3.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(inputs)["sequence_output"]), eager, atol=1e-6)


def test_generation_with_banded_cache_equals_recomputing():
    from keras_ctx.generation import generate

    model = GPTBackbone(**TINY)
    prompt = np.array([[4, 9, 2, 7, 1], [3, 3, 8, 0, 0]], "int32")
    mask = np.array([[1] * 5, [1] * 3 + [0] * 2], bool)
    # The cheapest loop here (a TF graph on TensorFlow); the band's XLA path is tested above.
    cached = generate(model, prompt, mask, max_length=16, use_cache=True, jit_compile=DECODE)
    recomputed = generate(model, prompt, mask, max_length=16, use_cache=False,
                          jit_compile=DECODE)
    np.testing.assert_array_equal(to_numpy(cached["token_ids"]), to_numpy(recomputed["token_ids"]))


@pytest.mark.tensorflow_only("a tf.function input_signature of (None, None), as a SavedModel "
                              "serving signature has")
def test_unknown_time_dimension_traces_the_blocked_path():
    """A serving signature has (None, None) inputs: the band is padded at run time."""
    import tensorflow as tf

    model = GPTBackbone(**TINY)
    spec = tf.TensorSpec((None, None), tf.int32)
    run = tf.function(lambda ids, mask: model({"token_ids": ids, "padding_mask": mask})
                      ["sequence_output"], input_signature=[spec, spec])
    for length in (5, 11):
        ids = np.random.default_rng(length).integers(0, 50, size=(2, length)).astype("int32")
        eager = model({"token_ids": ids, "padding_mask": np.ones_like(ids)})["sequence_output"]
        np.testing.assert_allclose(to_numpy(run(ids, np.ones_like(ids))), to_numpy(eager),
                                   atol=1e-5)
