"""Every family exports a SavedModel that a TensorFlow-only process serves exactly."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.export import export_saved_model
from keras_ctx.models import from_preset
from tests.isolated import run_isolated

L = 8
pytestmark = pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export (torch refuses it)")
ENCODER = dict(num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32,
               vocabulary_size=50)
DECODER = dict(num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32,
               vocabulary_size=50)
FAMILIES = {
    "bert-tiny": ENCODER,
    "roberta-base": ENCODER,
    "albert-base": dict(ENCODER, embedding_size=8),
    "xlnet-base": ENCODER,
    "elmo-small": dict(projection_dim=8, lstm_units=16, num_layers=1),
    "gpt2": DECODER,
    "t5-small": DECODER,
    "bart-base": DECODER,
    # Layers of different widths: hidden_states cannot be stacked (hidden_states_0, ...).
    "awd-lstm-wt103": dict(vocabulary_size=50, embedding_size=8, hidden_size=16, num_layers=2),
    "cove-base": dict(vocabulary_size=50, embedding_size=8, hidden_size=8, num_layers=1),
}


def example_inputs(model, rng):
    inputs = {}
    for name, tensor in model.input.items():
        shape = (2, L) + tuple(tensor.shape[2:])
        high = 262 if name == "character_ids" else 50
        values = rng.integers(1, high, size=shape).astype("int32")
        if "padding_mask" in name:
            values = np.ones(shape, "int32")
            values[1, L - 3:] = 0
        if name == "segment_ids":
            values = np.zeros(shape, "int32")
        inputs[name] = values
    return inputs


def serialized_examples(inputs):
    return [
        tf.train.Example(features=tf.train.Features(feature={
            name: tf.train.Feature(int64_list=tf.train.Int64List(value=value[i].reshape(-1)))
            for name, value in inputs.items()
        })).SerializeToString()
        for i in range(2)
    ]


def flat(outputs):
    """The Keras outputs as the export names them: lists stacked batch first, float32."""
    result = {}
    for name, value in outputs.items():
        if isinstance(value, (list, tuple)):
            arrays = [keras.ops.convert_to_numpy(v) for v in value]
            if len({a.shape[2:] for a in arrays}) > 1:
                result.update({f"{name}_{i}": np.asarray(a, "float32")
                               for i, a in enumerate(arrays)})
                continue
            value = np.stack(arrays, axis=1)
        result[name] = np.asarray(keras.ops.convert_to_numpy(value), "float32")
    return result


def test_every_family_serves_exactly_from_a_tensorflow_only_process(tmp_path):
    rng = np.random.default_rng(0)
    expected, cases = {}, {}
    for preset, overrides in FAMILIES.items():
        model = from_preset(preset, **overrides)
        inputs = example_inputs(model, rng)
        expected[preset] = flat(model(inputs))
        path = export_saved_model(model, tmp_path / preset, sequence_length=L)
        np.savez(tmp_path / f"{preset}.npz", **inputs)
        np.save(tmp_path / f"{preset}-examples.npy",
                np.array(serialized_examples(inputs), dtype=object), allow_pickle=True)
        cases[preset] = path
    out = run_isolated(f"""
        import json, numpy as np, tensorflow as tf
        results = {{}}
        for preset, path in {cases!r}.items():
            loaded = tf.saved_model.load(path)
            inputs = dict(np.load({str(tmp_path)!r} + "/" + preset + ".npz"))
            plain = loaded.signatures["serving_default"](
                **{{k: tf.constant(v) for k, v in inputs.items()}})
            examples = np.load({str(tmp_path)!r} + "/" + preset + "-examples.npy",
                               allow_pickle=True)
            parsed = loaded.signatures["serve_examples"](examples=tf.constant(list(examples)))
            results[preset] = {{
                "plain": {{k: v.numpy().tolist() for k, v in plain.items()}},
                "examples": {{k: v.numpy().tolist() for k, v in parsed.items()}},
            }}
        print(json.dumps(results))
    """)
    served = json.loads(out.strip().splitlines()[-1])
    for preset, outputs in expected.items():
        for signature in ("plain", "examples"):
            got = served[preset][signature]
            assert set(got) == set(outputs), (preset, set(got), set(outputs))
            for name, want in outputs.items():
                np.testing.assert_allclose(np.array(got[name]), want, atol=1e-5,
                                           err_msg=f"{preset} {signature} {name}")


def test_elmo_text_signature_uses_core_ops_only(tmp_path):
    from keras_ctx.data.characters import ElmoCharacterIds

    model = from_preset("elmo-small", **FAMILIES["elmo-small"])
    preprocessor = ElmoCharacterIds(sequence_length=L)
    text = ["The bank was closed .", "By the river bank ."]
    want = flat(model({"character_ids": preprocessor(tf.constant(text))}))["sequence_output"]
    path = export_saved_model(model, tmp_path / "elmo", sequence_length=L,
                              preprocessor=preprocessor)
    out = run_isolated(f"""
        import json, tensorflow as tf
        loaded = tf.saved_model.load({path!r})  # no tensorflow_text imported
        got = loaded.signatures["serve_text"](text=tf.constant({text!r}))
        print(json.dumps(got["sequence_output"].numpy().tolist()))
    """)
    np.testing.assert_allclose(np.array(json.loads(out.strip().splitlines()[-1])), want,
                               atol=1e-5)


@pytest.mark.parametrize("preset", ["bert-tiny"])
def test_export_cli_writes_a_version_directory(tmp_path, preset):
    from keras_ctx.cli import main

    assert main(["export", preset, str(tmp_path / "out"), "--sequence-length", "16"]) == 0
    assert (tmp_path / "out" / "1" / "saved_model.pb").exists()
    assert main(["export", preset, str(tmp_path / "out")]) == 2  # no overwrite
