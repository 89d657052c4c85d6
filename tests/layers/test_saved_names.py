"""Files saved while keras_ctx had its own Dense, EinsumDense, LayerNormalization and
RMSNormalization (before issue 51) load as Keras' layers, to the same outputs."""

import json
import zipfile

import keras
import numpy as np
import pytest

import keras_ctx

# What those layers wrote in a config (keras_ctx at c538128, model.to_json()): Keras' own
# config under these module and registered names; nothing else differed.
FORMER = {
    "Dense": ("keras_ctx.layers.dense", "keras_ctx>Dense"),
    "EinsumDense": ("keras_ctx.layers.dense", "keras_ctx>EinsumDense"),
    "LayerNormalization": ("keras_ctx.layers.normalization", "keras_ctx>LayerNormalization"),
    "RMSNormalization": ("keras_ctx.layers.normalization", "keras_ctx>RMSNormalization"),
}


def _model():
    x = keras.Input((3, 8))
    y = keras.layers.Dense(6, name="d")(x)
    y = keras.layers.EinsumDense("btd,dnh->btnh", (None, 2, 3), bias_axes="nh", name="e")(y)
    y = keras.layers.Reshape((3, 6), name="r")(y)
    y = keras.layers.LayerNormalization(epsilon=1e-6, name="ln")(y)
    y = keras.layers.RMSNormalization(epsilon=1e-6, name="rms")(y)
    model = keras.Model(x, y)
    for weight in model.weights:  # away from the initial ones and zeros
        weight.assign(np.random.default_rng(len(weight.path)).normal(size=weight.shape))
    return model


def _with_former_names(path, former_path):
    """A copy of the .keras file at `path` whose config names the former classes."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(former_path, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                renamed = 0
                for layer in config["config"]["layers"]:
                    if layer["class_name"] in FORMER:
                        layer["module"], layer["registered_name"] = FORMER[layer["class_name"]]
                        renamed += 1
                assert renamed == len(FORMER)
                data = json.dumps(config)
            target.writestr(item, data)


def test_a_file_with_the_former_layer_names_loads_as_keras_layers(tmp_path):
    model = _model()
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    want = keras.ops.convert_to_numpy(model(x))
    model.save(tmp_path / "now.keras")
    _with_former_names(tmp_path / "now.keras", tmp_path / "before.keras")
    assert b"keras_ctx>RMSNormalization" in zipfile.ZipFile(tmp_path / "before.keras").read(
        "config.json")
    loaded = keras.saving.load_model(tmp_path / "before.keras")
    assert [type(layer).__name__ for layer in loaded.layers[1:]] == [
        "Dense", "EinsumDense", "Reshape", "LayerNormalization", "RMSNormalization"]
    assert all(type(layer).__module__.startswith("keras.") for layer in loaded.layers)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)), want)
    # Saved again, it names Keras' layers: the aliases only read.
    loaded.save(tmp_path / "again.keras")
    assert b"keras_ctx>" not in zipfile.ZipFile(tmp_path / "again.keras").read("config.json")


@pytest.mark.parametrize("name", ["Dense", "LayerNormalization", "compiled_for"])
def test_the_removed_names_say_what_to_use(name):
    with pytest.raises(AttributeError, match="is gone: "):
        getattr(keras_ctx.layers, name)
