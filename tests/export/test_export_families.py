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


def _elmo_characters():
    from keras_ctx.data.characters import ElmoCharacterIds

    return ElmoCharacterIds(sequence_length=L)


# A text signature served with core TensorFlow ops only (no tensorflow_text imported):
# ELMo's character ids (its own test once, a second export and serving process).
TEXT_PREPROCESSORS = {"elmo-small": _elmo_characters}
TEXT = ["The bank was closed .", "By the river bank ."]


# On JAX each family's export is a jax2tf conversion (5-8 s each on 2 cores): the families
# whose serving graph shares another's path run there with -m slow (BERT: test_export.py's
# first test on JAX; RoBERTa: BERT's encoder; BART: T5's encoder-decoder inputs; CoVe:
# AWD-LSTM's LSTMs and split hidden_states). TensorFlow's run serves every family by default.
SHARED_PATHS = ("bert-tiny", "roberta-base", "bart-base", "cove-base")
OWN_PATHS = tuple(preset for preset in FAMILIES if preset not in SHARED_PATHS)
ON_JAX = "jax2tf's conversion of each family's serving graph"


@pytest.mark.parametrize("presets", [
    pytest.param(tuple(FAMILIES), id="every",
                 marks=pytest.mark.runs_on("tensorflow", reason="every family at once: on JAX, "
                                           "the two halves below")),
    pytest.param(OWN_PATHS, id="own-paths", marks=pytest.mark.runs_on("jax", reason=ON_JAX)),
    pytest.param(SHARED_PATHS, id="shared-paths",
                 marks=[pytest.mark.runs_on("jax", reason=ON_JAX), pytest.mark.slow]),
])
def test_every_family_serves_exactly_from_a_tensorflow_only_process(tmp_path, presets):
    """serving_default and serve_examples of every family, and serve_text where the family
    has a preprocessor in TEXT_PREPROCESSORS, give the Keras model's outputs."""
    rng = np.random.default_rng(0)
    expected, cases, texts = {}, {}, {}
    for preset in presets:
        model = from_preset(preset, **FAMILIES[preset])
        inputs = example_inputs(model, rng)
        expected[preset] = flat(model(inputs))
        preprocessor = TEXT_PREPROCESSORS.get(preset, lambda: None)()
        if preprocessor is not None:  # one tensor: the model's only input
            (name,) = model.input
            texts[preset] = flat(model({name: preprocessor(tf.constant(TEXT))}))[
                "sequence_output"]
        path = export_saved_model(model, tmp_path / preset, sequence_length=L,
                                  preprocessor=preprocessor)
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
            if preset in {sorted(texts)!r}:
                text = loaded.signatures["serve_text"](text=tf.constant({TEXT!r}))
                results[preset]["text"] = text["sequence_output"].numpy().tolist()
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
    for preset, want in texts.items():
        np.testing.assert_allclose(np.array(served[preset]["text"]), want, atol=1e-5,
                                   err_msg=f"{preset} serve_text")


@pytest.mark.parametrize("preset", ["bert-tiny"])
def test_export_cli_writes_a_version_directory(tmp_path, preset):
    from keras_ctx.cli import main

    assert main(["export", preset, str(tmp_path / "out"), "--sequence-length", "16"]) == 0
    assert (tmp_path / "out" / "1" / "saved_model.pb").exists()
    assert main(["export", preset, str(tmp_path / "out")]) == 2  # no overwrite
