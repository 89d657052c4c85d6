import os
import tempfile

import keras
import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.data.characters import ElmoCharacterIds
from keras_ctx.models.elmo.backbone import ELMO_PRESETS, Elmo, ElmoBackbone
from keras_ctx.models.presets import preset_config
from tests.backends import slow_on

TINY = dict(projection_dim=6, lstm_units=10, filters=[[1, 4], [2, 4]], num_highway_layers=1)


def tiny_elmo(**overrides):
    return ElmoBackbone(**dict(TINY, **overrides))


def random_ids(batch=2, time=7, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 262, size=(batch, time, 50)).astype("int32")
    if batch > 1:
        ids[1, 5:] = 0  # right padding
    return ids


# Published sizes without the softmax (allennlp ELMo page / Peters et al., 2018).
@pytest.mark.parametrize(
    "name,published", [("elmo-small", 13.6e6), ("elmo-medium", 28.0e6), ("elmo-original", 93.6e6)]
)
def test_preset_parameter_counts_analytic(name, published):
    count = ElmoBackbone.analytic_parameter_count(**ELMO_PRESETS[name].config)
    assert abs(count - published) / published < 0.01, count
    _, config = preset_config(name)
    assert config["lstm_units"] == {"elmo-small": 1024, "elmo-medium": 2048,
                                    "elmo-original": 4096}[name]


# A released size's count depends on the layers, not the backend: TensorFlow's run builds it
# (seconds there, ~25 s on JAX); the small configurations' build checks run on every backend.
@slow_on("jax", "torch")
def test_small_preset_built_count_matches_analytic():
    model = ElmoBackbone.from_preset("elmo-small")
    analytic = ElmoBackbone.analytic_parameter_count(**ELMO_PRESETS["elmo-small"].config)
    assert model.count_params() == analytic


@pytest.mark.slow
def test_original_preset_built_count():
    model = ElmoBackbone.from_preset("elmo-original")
    assert abs(model.count_params() - 93.6e6) / 93.6e6 < 0.01


def test_outputs_shapes_hidden_states_and_token_layer_duplication():
    backbone = tiny_elmo()
    out = backbone({"character_ids": random_ids()})
    assert out["sequence_output"].shape == (2, 7, 12)
    hidden = [to_numpy(h) for h in out["hidden_states"]]
    assert len(hidden) == 3  # 2L + 1 representations as L + 1 [fwd; bwd] tensors
    np.testing.assert_array_equal(hidden[0][..., :6], hidden[0][..., 6:])
    np.testing.assert_array_equal(hidden[-1], to_numpy(out["sequence_output"]))
    # Padding positions have zero LSTM outputs.
    assert np.abs(hidden[1][1, 5:]).max() == 0.0
    revived = ElmoBackbone.from_config(backbone.get_config())
    assert revived.count_params() == backbone.count_params()


def test_forward_never_sees_later_tokens_backward_never_earlier():
    backbone = tiny_elmo()
    ids = random_ids(batch=1, time=8)
    base = [to_numpy(h) for h in backbone({"character_ids": ids})["hidden_states"][1:]]
    k = 4
    changed = ids.copy()
    changed[0, k] = np.random.default_rng(9).integers(1, 262, size=50)
    new = [to_numpy(h) for h in backbone({"character_ids": changed})["hidden_states"][1:]]
    for a, b in zip(base, new):
        diff = np.abs(a - b).max(-1)[0]  # per position
        fwd = np.abs(a[..., :6] - b[..., :6]).max(-1)[0]
        bwd = np.abs(a[..., 6:] - b[..., 6:]).max(-1)[0]
        assert fwd[:k].max() == 0.0 and fwd[k:].min() > 0.0, fwd
        assert bwd[k + 1 :].max() == 0.0 and bwd[: k + 1].min() > 0.0, bwd
        assert diff.max() > 0


def test_frozen_elmo_in_functional_model_learns_per_task_scalar_mix():
    backbone = tiny_elmo()
    frozen = [to_numpy(w).copy() for w in backbone.weights]
    ids = random_ids(batch=8, time=7, seed=1)
    ids[:, 5:] = 0
    rng = np.random.default_rng(2)
    models, mixes = [], []
    for task in range(2):
        inputs = keras.Input((None, 50), dtype="int32")
        elmo = Elmo(backbone, do_layer_norm=task == 1, name=f"elmo_task{task}")
        features = elmo(inputs)
        pooled = keras.layers.GlobalAveragePooling1D()(features)
        model = keras.Model(inputs, keras.layers.Dense(1)(pooled))
        assert {w.path for w in model.trainable_weights} >= {
            w.path for w in elmo.scalar_mix.weights}
        assert len(model.trainable_weights) == 4  # scalars, gamma, dense kernel + bias
        # Keras' "auto", the cheapest here: a TF graph on a CPU (XLA is covered by the biLM
        # test), jax.jit on JAX (eagerly, each op would compile on its own), eager on torch.
        model.compile(keras.optimizers.Adam(0.1), "mse")
        model.fit(ids, rng.normal(size=(8, 1)) * 3, epochs=3, verbose=0)
        models.append(model)
        mixes.append(to_numpy(elmo.scalar_mix.scalar_parameters))
    for w, w0 in zip(backbone.weights, frozen):
        np.testing.assert_array_equal(to_numpy(w), w0)  # the biLM stayed frozen
    assert all(np.abs(m).max() > 1e-3 for m in mixes)  # initialised at 0: learned
    assert np.abs(mixes[0] - mixes[1]).max() > 1e-3  # per task
    # .keras round trip inside the user's model.
    before = models[1].predict(ids, verbose=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.keras")
        models[1].save(path)
        loaded = keras.saving.load_model(path)
        after = loaded.predict(ids, verbose=0)
    assert len(loaded.trainable_weights) == 4  # still frozen after loading
    np.testing.assert_allclose(after, before, atol=1e-5)


@pytest.mark.tensorflow_only("string tensors: ElmoCharacterIds runs TensorFlow's string ops")
def test_elmo_from_strings():
    import tensorflow as tf

    backbone = tiny_elmo()
    text = keras.Input((), dtype="string")
    features = Elmo(backbone)(ElmoCharacterIds(sequence_length=6)(text))
    model = keras.Model(text, features)
    out = to_numpy(model(tf.constant(["a small test", "hi"])))
    assert out.shape == (2, 6, 12) and np.isfinite(out).all()
    with pytest.raises(ValueError, match="ElmoBackbone"):
        Elmo(keras.layers.Dense(3))


def test_mixed_bfloat16_close_to_float32():
    backbone = tiny_elmo()
    mixed = tiny_elmo(dtype="mixed_bfloat16")
    for a, b in zip(backbone.weights, mixed.weights):
        b.assign(a)
        assert b.dtype == "float32"
    ids = random_ids()
    want = to_numpy(backbone({"character_ids": ids})["sequence_output"])
    got = mixed({"character_ids": ids})["sequence_output"]
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
    np.testing.assert_allclose(to_numpy(keras.ops.cast(got, "float32")), want, atol=0.1)
