"""`export_saved_model` from the JAX backend (Keras' jax2tf path): the SavedModel's
`serving_default` gives the TensorFlow export's outputs on the same weights, served by
`tf.saved_model.load` in a process that never imports keras_ctx (`import tensorflow`
itself loads the installed keras, and keras JAX, so neither is checked)."""

import json

import numpy as np
import pytest

from keras_ctx.export import export_saved_model
from tests.backends import (TASK_IDS, _task_inputs, peft_task_models, peft_task_outputs,
                            run_on_backend)
from tests.isolated import run_isolated


@pytest.mark.slow  # ~2 min: a JAX subprocess converting the model; tests/export/test_export.py covers
# the TensorFlow export and tests/peft/test_backends_tasks.py this classifier's outputs on JAX
def test_a_jax_export_serves_the_tensorflow_exports_outputs_without_keras_ctx(
        tmp_path):
    # Writes weights.npz beside it.
    peft_task_outputs(str(tmp_path / "tensorflow.npz"), modes=())
    model = peft_task_models(modes=())["adapters"]
    stored = np.load(tmp_path / "weights.npz")
    model.set_weights([stored[f"adapters/{i}"] for i in range(len(model.weights))])
    export_saved_model(model, tmp_path / "tensorflow", sequence_length=TASK_IDS.shape[1])
    run_on_backend("jax", "export_classifier", {"weights": str(tmp_path / "weights.npz"),
                                                "out": str(tmp_path)})
    refusals = json.loads((tmp_path / "refusals.json").read_text())
    assert len(refusals) == 2 and "sequence_length=N" in refusals[0], refusals
    assert "KERAS_BACKEND=tensorflow" in refusals[1] and "\n" not in "".join(refusals)
    np.savez(tmp_path / "inputs.npz", **_task_inputs())
    bad = dict(_task_inputs(), token_ids=np.where(TASK_IDS == 5, 50, TASK_IDS))
    np.savez(tmp_path / "bad.npz", **bad)
    out = run_isolated(f"""
        import json, numpy as np, tensorflow as tf
        inputs = {{k: tf.constant(v) for k, v in np.load({str(tmp_path / "inputs.npz")!r}).items()}}
        bad = {{k: tf.constant(v) for k, v in np.load({str(tmp_path / "bad.npz")!r}).items()}}
        got = {{}}
        for name in ("tensorflow", "jax"):
            served = tf.saved_model.load({str(tmp_path)!r} + "/" + name + "/1")
            outputs = served.signatures["serving_default"](**inputs)
            got[name] = {{k: v.numpy().tolist() for k, v in outputs.items()}}
            try:  # an id past the table (50 rows) is refused, not clamped by XLA
                served.signatures["serving_default"](**bad)
                got[name]["refused"] = False
            except tf.errors.InvalidArgumentError:
                got[name]["refused"] = True
        print(json.dumps(got))
    """)
    got = json.loads(out.strip().splitlines()[-1])
    assert got["jax"]["refused"] and got["tensorflow"]["refused"]
    assert sorted(got["jax"]) == sorted(got["tensorflow"]) == ["logits", "probabilities",
                                                              "refused"]
    for name in ("logits", "probabilities"):
        np.testing.assert_allclose(got["jax"][name], got["tensorflow"][name], atol=1e-5,
                                   rtol=0, err_msg=name)
    # And both are the Keras model's own outputs here (not two equal wrong graphs).
    np.testing.assert_allclose(got["tensorflow"]["logits"], np.load(
        tmp_path / "tensorflow.npz")["adapters"], atol=1e-5, rtol=0)
