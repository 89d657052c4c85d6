"""SavedModel export: loaded in a fresh process that imports only TensorFlow."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.export import ExportError, export_saved_model
from tests.tiny import VOCAB, tiny_encoder
from tests.isolated import run_isolated

L = 8
# SavedModel export is TensorFlow's and JAX's (torch refuses it: the last test).
pytestmark = pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export")
# JAX's export serves one sequence length (jax2tf traces the model at it).
FREE_LENGTH = pytest.mark.tensorflow_only("a free sequence length: JAX's export fixes it")


def batch():
    ids = np.array([[2, 4, 5, 8, 4, 6, 3, 0], [2, 9, 5, 3, 0, 0, 0, 0]], "int32")
    return {"token_ids": ids, "padding_mask": (ids > 0).astype("int32")}


def test_serving_default_and_examples_match_keras_in_a_tensorflow_only_process(tmp_path):
    model = tiny_encoder()
    inputs = batch()
    expected = model(inputs)
    path = export_saved_model(model, tmp_path / "bert", sequence_length=L)
    assert path.endswith(os.path.join("bert", "1"))
    np.savez(tmp_path / "inputs.npz", **inputs)
    examples = [
        tf.train.Example(features=tf.train.Features(feature={
            name: tf.train.Feature(int64_list=tf.train.Int64List(value=inputs[name][i]))
            for name in inputs
        })).SerializeToString()
        for i in range(2)
    ]
    np.save(tmp_path / "examples.npy", np.array(examples, dtype=object), allow_pickle=True)
    out = run_isolated(f"""
        import json, numpy as np, tensorflow as tf
        loaded = tf.saved_model.load({path!r})
        inputs = dict(np.load({str(tmp_path / 'inputs.npz')!r}))
        plain = loaded.signatures["serving_default"](
            **{{k: tf.constant(v) for k, v in inputs.items()}})
        examples = np.load({str(tmp_path / 'examples.npy')!r}, allow_pickle=True)
        parsed = loaded.signatures["serve_examples"](examples=tf.constant(list(examples)))
        print(json.dumps({{"plain": {{k: v.numpy().tolist() for k, v in plain.items()}},
                          "examples": {{k: v.numpy().tolist() for k, v in parsed.items()}}}}))
    """)
    served = json.loads(out.strip().splitlines()[-1])
    for signature in ("plain", "examples"):
        got = served[signature]
        assert set(got) == {"sequence_output", "pooled_output", "hidden_states"}
        np.testing.assert_allclose(got["sequence_output"], expected["sequence_output"], atol=1e-5)
        np.testing.assert_allclose(got["pooled_output"], expected["pooled_output"], atol=1e-5)
        # Batch first like every other output: (batch, layers, time, hidden).
        layers = expected["hidden_states"]
        assert np.shape(got["hidden_states"]) == (
            len(inputs["token_ids"]), len(layers), L, layers[0].shape[-1])
        for i, layer in enumerate(layers):
            np.testing.assert_allclose(np.asarray(got["hidden_states"])[:, i],
                                       keras.ops.convert_to_numpy(layer), atol=1e-5)


@FREE_LENGTH
def test_saved_model_cli_lists_signatures_names_dtypes_and_shapes(tmp_path):
    path = export_saved_model(tiny_encoder(), tmp_path / "m", sequence_length=L)
    cli = shutil.which("saved_model_cli") or os.path.join(os.path.dirname(sys.executable),
                                                          "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True,
                           text=True, timeout=300).stdout
    for text in ("signature_def['serving_default']", "signature_def['serve_examples']",
                 "inputs['token_ids'] tensor_info", "dtype: DT_INT32", "shape: (-1, -1)",
                 "outputs['pooled_output'] tensor_info", "dtype: DT_FLOAT"):
        assert text in shown, text


@FREE_LENGTH
def test_free_sequence_length_serves_any_length_and_skips_examples(tmp_path):
    model = tiny_encoder()
    path = export_saved_model(model, tmp_path / "m")
    loaded = tf.saved_model.load(path)
    assert "serve_examples" not in loaded.signatures
    short = {k: tf.constant(v[:, :5]) for k, v in batch().items()}
    got = loaded.signatures["serving_default"](**short)
    np.testing.assert_allclose(got["sequence_output"], model(short)["sequence_output"],
                               atol=1e-5)


@FREE_LENGTH
def test_a_classifiers_signatures_name_its_classes_and_take_any_length_up_to_the_models(
        tmp_path):
    """serving_default took exactly the export's length (another failed deep inside the
    model: 'Incompatible shapes ... embeddings_add/Add') and answered logits only."""
    from keras_ctx.tasks import SequenceClassifier

    model = SequenceClassifier(tiny_encoder(), num_classes=3, dropout=0.0)
    names = ["neg", "neutral", "pos"]
    loaded = tf.saved_model.load(export_saved_model(model, tmp_path / "m", sequence_length=L,
                                                    class_names=names))
    for length in (3, L, 32):  # 32: the tiny encoder's positions
        ids = np.resize(batch()["token_ids"], (2, length))
        inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
        got = loaded.signatures["serving_default"](**{k: tf.constant(v)
                                                      for k, v in inputs.items()})
        want = keras.ops.convert_to_numpy(keras.ops.softmax(model(inputs)))
        np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)
        assert [n.decode() for n in got["label"].numpy()] == [names[i] for i in want.argmax(-1)]
        assert got["classes"].numpy().tolist() == [[n.encode() for n in names]] * 2
    too_long = {"token_ids": tf.ones((1, 33), tf.int32), "padding_mask": tf.ones((1, 33), tf.int32)}
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than the 32 positions"):
        loaded.signatures["serving_default"](**too_long)
    with pytest.raises(ExportError, match="names 2 classes but .* gives 3 logits"):
        export_saved_model(model, tmp_path / "n", class_names=names[:2])


def test_text_signature_tokenizes_inside_the_graph(tmp_path):
    """On JAX too: Keras' call of a user's layer made the strings JAX arrays ('string arrays
    can only be made from NumPy arrays'); serve_text runs the layer's `call` there."""
    import keras_hub

    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    packer = keras_hub.layers.StartEndPacker(sequence_length=L, start_value=2, end_value=3,
                                             pad_value=0)

    class Preprocessor(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.tokenizer, self.packer = tokenizer, packer
            self.built = True  # no weights of its own (Keras' export takes built layers)

        def call(self, text):
            ids = self.packer(self.tokenizer(text))
            return {"token_ids": ids, "padding_mask": tf.cast(ids > 0, "int32")}

    model = tiny_encoder()
    preprocessor = Preprocessor()
    text = ["the bank on the river", "a bank"]
    # Its call, as numpy (a Keras call would make the strings JAX or torch tensors, and
    # keras-hub's packer answers in the backend's tensors, the mask in TensorFlow's).
    ids = {k: np.asarray(v) for k, v in preprocessor.call(tf.constant(text)).items()}
    expected = keras.ops.convert_to_numpy(model(ids)["pooled_output"])
    path = export_saved_model(model, tmp_path / "m", preprocessor=preprocessor,
                              sequence_length=L)
    out = run_isolated(f"""
        import json, tensorflow as tf
        import tensorflow_text  # registers the WordPiece ops serve_text uses
        loaded = tf.saved_model.load({path!r})
        got = loaded.signatures["serve_text"](text=tf.constant({text!r}))
        print(json.dumps(got["pooled_output"].numpy().tolist()))
    """)
    np.testing.assert_allclose(json.loads(out.strip().splitlines()[-1]), expected, atol=1e-5)


def test_unbuilt_models_and_existing_versions_fail_without_losing_anything(tmp_path):
    class Unbuilt(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(ExportError, match="not been built"):
        export_saved_model(Unbuilt(), tmp_path / "x")
    model = tiny_encoder()
    path = export_saved_model(model, tmp_path / "m", sequence_length=L)
    before = sorted(os.listdir(path))
    with pytest.raises(ExportError, match="overwrite=True"):
        export_saved_model(model, tmp_path / "m", sequence_length=L)
    assert sorted(os.listdir(path)) == before
    tf.saved_model.load(path)  # still a whole export
    assert export_saved_model(model, tmp_path / "m", sequence_length=L,
                              version=2).endswith("2")
    export_saved_model(model, tmp_path / "m", sequence_length=L, overwrite=True)
    assert sorted(os.listdir(tmp_path / "m")) == ["1", "2"]
    with pytest.raises(ExportError, match="version"):
        export_saved_model(model, tmp_path / "m", sequence_length=L, version=0)


def test_every_model_in_a_process_refuses_out_of_range_ids(tmp_path):
    # Keras names the second unnamed table "token_embedding_1": the check must not
    # depend on the name (it was silently left out of the second export). Under XLA
    # the export's check is the only one (the layer's own assert is compiled away).
    first, second = tiny_encoder(), tiny_encoder()
    assert "token_embedding" not in [layer.name for layer in second.layers]
    bad = dict(batch(), token_ids=np.full((2, L), len(VOCAB), "int32"))
    for i, model in enumerate((first, second)):
        path = export_saved_model(model, tmp_path / str(i), sequence_length=L,
                                  jit_compile=True)
        serve = tf.saved_model.load(path).signatures["serving_default"]
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=f"input token_ids must be in \\[0, {len(VOCAB)}\\)"):
            serve(**{k: tf.constant(v) for k, v in bad.items()})


def test_token_ids_of_unknown_vocabulary_size_refuse_to_export(tmp_path):
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    clamped = keras.ops.minimum(token_ids, 9)  # the table is not read by the input itself
    model = keras.Model({"token_ids": token_ids},
                        {"sequence_output": keras.layers.Embedding(10, 4)(clamped)})
    with pytest.raises(ExportError, match="vocabulary size of .* token_ids input could not be"):
        export_saved_model(model, tmp_path / "m")
    assert not os.path.exists(tmp_path / "m" / "1")


@pytest.mark.tensorflow_only("TensorFlow's forward pass marked for XLA (_XlaMustCompile); "
                             "JAX's export is XLA's (jax2tf) either way")
def test_xla_export_loads_alone_matches_the_plain_export_and_keeps_its_checks(tmp_path):
    model = tiny_encoder()
    plain = export_saved_model(model, tmp_path / "plain", sequence_length=L)
    xla = export_saved_model(model, tmp_path / "xla", sequence_length=L, jit_compile=True)
    np.savez(tmp_path / "inputs.npz", **batch())
    code = f"""
        import json, numpy as np, tensorflow as tf
        from tensorflow.core.protobuf import saved_model_pb2
        inputs = {{k: tf.constant(v) for k, v in
                   np.load({str(tmp_path / 'inputs.npz')!r}).items()}}
        result = {{}}
        for name, path in (("plain", {plain!r}), ("xla", {xla!r})):
            proto = saved_model_pb2.SavedModel()
            with open(path + "/saved_model.pb", "rb") as handle:
                proto.ParseFromString(handle.read())
            compiled = [f.signature.name for f in proto.meta_graphs[0].graph_def.library.function
                        if f.attr["_XlaMustCompile"].b]
            serve = tf.saved_model.load(path).signatures["serving_default"]
            served = serve(**inputs)
            bad = dict(inputs, token_ids=tf.constant(np.full((2, {L}), {len(VOCAB)}, "int32")))
            try:
                serve(**bad)
                error = ""
            except tf.errors.InvalidArgumentError as e:
                error = e.message
            short = {{k: v[:, :5] for k, v in inputs.items()}}
            try:
                serve(**short)
                length = "served"
            except tf.errors.InvalidArgumentError as e:
                length = e.message
            result[name] = {{"compiled": len(compiled), "error": error, "length": length,
                             "outputs": {{k: v.numpy().tolist() for k, v in served.items()}}}}
        print(json.dumps(result))
    """
    served = json.loads(run_isolated(code).strip().splitlines()[-1])
    assert served["plain"]["compiled"] == 0
    assert served["xla"]["compiled"] >= 1  # the forward pass is marked for XLA
    assert set(served["xla"]["outputs"]) == set(served["plain"]["outputs"])
    for name, value in served["plain"]["outputs"].items():
        np.testing.assert_allclose(served["xla"]["outputs"][name], value, atol=1e-5)
    # The id check runs outside the compiled function (XLA drops asserts).
    for name in ("plain", "xla"):
        assert "must be in [0," in served[name]["error"], (name, served[name]["error"])
    # Plain, any length up to the model's; XLA-compiled, the export's one, said by name
    # (it was 'Incompatible shapes' from inside the model).
    assert served["plain"]["length"] == "served"
    assert "input token_ids must hold exactly 8 positions" in served["xla"]["length"], served


@pytest.mark.tensorflow_only("TensorFlow's forward pass marked for XLA (_XlaMustCompile); "
                             "JAX's export is XLA's (jax2tf) either way")
def test_cli_export_xla_serving_flag_marks_the_forward_pass_for_xla(tmp_path, capsys):
    from tensorflow.core.protobuf import saved_model_pb2

    from keras_ctx import cli

    cli.main(["export", "bert-tiny", str(tmp_path / "m"), "--sequence-length", "8",
              "--xla-serving"])
    assert "XLA-compiled" in capsys.readouterr().out
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((tmp_path / "m" / "1" / "saved_model.pb").read_bytes())
    assert any(f.attr["_XlaMustCompile"].b
               for f in proto.meta_graphs[0].graph_def.library.function)


@pytest.mark.runs_on("torch", reason="torch's refusal (TensorFlow and JAX export above)")
def test_torch_refuses_a_saved_model_in_one_line_naming_the_backends_that_export(
        tmp_path, tiny_run, capsys):
    from keras_ctx.cli import main

    said = ("SavedModel export runs on the TensorFlow or JAX backend, not torch: save the "
            "weights, then export with KERAS_BACKEND=tensorflow (or jax).")
    with pytest.raises(ExportError) as refused:
        export_saved_model(tiny_encoder(), tmp_path / "bert", sequence_length=L)
    assert str(refused.value) == said
    assert main(["export", str(tiny_run), str(tmp_path / "cli")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"keras-ctx export: error: ExportError: {said}"]
    assert not os.path.exists(tmp_path / "bert") and not os.path.exists(tmp_path / "cli")
