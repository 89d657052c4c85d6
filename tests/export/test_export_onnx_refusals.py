"""What ONNX export refuses, each in one line with nothing written: a model on Keras' JAX
backend (TensorFlow converts with tf2onnx, torch through Keras' model.export; a free
batch or length on torch: tests/export/test_export_onnx.py) and a model whose ops tf2onnx cannot
convert (it wrote them into the file unconverted, which ONNX Runtime refuses to load)."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = str(pathlib.Path(__file__).resolve().parents[2])

_ON_BACKEND = """
import keras_ctx
from keras_ctx.export import ExportError, export_onnx
model = keras_ctx.models.from_preset("bert-tiny", num_layers=1, hidden_size=8, num_heads=2,
                                     intermediate_size=16, vocabulary_size=30)
try:
    export_onnx(model, {path!r})
except ExportError as error:
    print("REFUSED", error)
"""


@pytest.mark.tensorflow_only("a subprocess on its own backend: the same run on every "
                             "backend's suite, so once, from TensorFlow's")
def test_export_onnx_on_jax_is_one_line_naming_the_backends_that_export(tmp_path):
    backend = "jax"
    pytest.importorskip(backend)
    path = tmp_path / "model.onnx"
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
               TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", _ON_BACKEND.format(path=str(path))],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("REFUSED")]
    assert line == ("REFUSED ONNX export runs on Keras' TensorFlow backend (tf2onnx) or torch "
                    "(Keras' model.export), and 'bert_backbone' runs on jax: save its weights, "
                    "then call export_onnx with KERAS_BACKEND=tensorflow (or torch); "
                    "keras_ctx.export.export_saved_model also exports from JAX.")
    assert os.listdir(tmp_path) == []


@pytest.mark.runs_on("tensorflow", reason="tf2onnx converts TensorFlow graphs")
def test_a_model_with_an_op_tf2onnx_cannot_convert_is_refused_naming_it(tmp_path):
    pytest.importorskip("tf2onnx", reason="ONNX export needs the [onnx] extra (tf2onnx)")
    import keras
    import tensorflow as tf

    from keras_ctx.export import ExportError, export_onnx

    class Singular(keras.layers.Layer):
        def call(self, x):
            return tf.linalg.svd(x, compute_uv=False)

    inputs = keras.Input((3, 3), name="matrices")
    model = keras.Model({"matrices": inputs}, {"values": Singular()(inputs)})
    with pytest.raises(ExportError) as caught:
        export_onnx(model, tmp_path / "model.onnx")
    assert str(caught.value).startswith("Functional cannot be exported to ONNX: tf2onnx has "
                                        "no ONNX form for its TensorFlow op(s) Svd")
    assert os.listdir(tmp_path) == []
