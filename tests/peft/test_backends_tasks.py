"""Adapters, LoRA, quantization and the token-id tasks on JAX and PyTorch: TensorFlow's
outputs on the same weights, and `fit` of only the adapter / LoRA weights on numpy batches.

The models (`tests.backends.peft_task_models`) are built here on TensorFlow with
every weight written to an .npz; one JAX (or torch) subprocess loads them into the
same models, quantizes the float copies, fine-tunes, and writes back its arrays.
"""

import numpy as np
import pytest

from tests.backends import (QUANTIZATION_MODES, peft_task_outputs, run_on_backend,
                            string_task_refusal)
from tests.session_once import once_per_session

# float32 on both backends, summed in other orders (tests/models/test_backends.py's bound); the
# quantized products are the same integers, rescaled in float32.
ATOL = 1e-5


OTHER_BACKENDS = ("jax", "torch")
# TensorFlow's run compares; on JAX and torch this process would compare two other backends.
pytestmark = pytest.mark.tensorflow_only(
    "compares with TensorFlow's numbers computed in this process: the other backend runs "
    "in a subprocess (tests/backends.py)")


def _compare_peft_tasks_with(backend, tmp_path_factory, tmp_path, modes, fit):
    """TensorFlow's outputs here (once per session for the JAX and the torch test:
    tests/session_once.py), `backend`'s from the same weights; its arrays."""
    shared = once_per_session(tmp_path_factory, "peft_tensorflow_" + "_".join(modes),
                              lambda out: peft_task_outputs(str(out / "tensorflow.npz"),
                                                            modes=modes))
    expected = np.load(shared / "tensorflow.npz")
    run_on_backend(backend, "peft_task_outputs", {"out": str(tmp_path / "other.npz"),
                                                  "weights": str(shared / "weights.npz"),
                                                  "fit": fit, "modes": list(modes)})
    got = np.load(tmp_path / "other.npz")
    assert sorted(expected.files) == sorted(["adapters", "lora", "span", *modes])
    for name in expected.files:
        # Relative to the largest value: the span answerer's padding logits are -1e9.
        scale = max(1.0, float(np.max(np.abs(expected[name][np.abs(expected[name]) < 1e8]))))
        np.testing.assert_allclose(got[name], expected[name], atol=ATOL * scale, rtol=0,
                                   err_msg=name)
    return expected, got


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_adapters_lora_int8_and_tasks_give_tensorflows_outputs_and_train(backend, tmp_path,
                                                                        tmp_path_factory):
    expected, got = _compare_peft_tasks_with(backend, tmp_path_factory, tmp_path, ["int8"],
                                             fit=True)
    for name in ("adapters", "lora"):
        losses = got[f"{name}/losses"]
        assert losses[-1] < 0.9 * losses[0], (name, losses)  # it learns
        assert float(got[f"{name}/frozen_change"]) == 0.0, name  # frozen weights bit-identical
    # Trainable: MAD-X's task adapter in the one block (16 -> 16 / 16 -> 16: 16 + 1 + 16
    # + 16) and the classifier (16 * 3 + 3); nothing of the language adapter or backbone.
    assert int(got["adapters/trainable"]) == 49 + 51
    # String-in tasks run there too (they were refused; tests/tasks/test_text_tasks.py
    # checks TensorFlow's outputs on the same weights).
    assert str(got["strings/refusal"]) == "" and string_task_refusal() == ""


@pytest.mark.slow  # ~70 s: int4 and float8 quantize and compile per shape on JAX; int8 by default
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_every_quantization_mode_gives_tensorflows_outputs(backend, tmp_path, tmp_path_factory):
    expected, _ = _compare_peft_tasks_with(backend, tmp_path_factory, tmp_path,
                                           list(QUANTIZATION_MODES), fit=False)
    # Quantizing changed the outputs (the comparison is not of float copies).
    assert not np.allclose(expected["int8"], expected["int4"], atol=1e-3)


@pytest.mark.parametrize("backend", ("tensorflow",) + OTHER_BACKENDS)
def test_a_token_id_past_the_vocabulary_is_refused_wherever_data_enters(backend, tmp_path):
    """Compiled on JAX a gather past the table gives NaN rows, silently (before: predict
    returned NaN logits and fit trained on them), XLA's clamp it; the data is checked
    where it enters: every fit/evaluate/predict door, their *_on_batch twins, a
    PyDataset, float ids (NaN, 2.5, 50.0) and generation's prompts."""
    import json

    from tests.backends import token_id_refusals

    if backend == "tensorflow":  # this process (TensorFlow is installed here)
        token_id_refusals(str(tmp_path / "said.json"))
    else:
        run_on_backend(backend, "token_id_refusals", {"out": str(tmp_path / "said.json")},
                       without_tensorflow=True)
    said = json.loads((tmp_path / "said.json").read_text())
    assert len(said) == 20, sorted(said)
    assert said.pop("in_range") == "(2, 2)"
    assert said.pop("intact_after_predict") == said.pop("intact_after_evaluate") == "True"
    for name, message in said.items():
        assert "token_ids must be in [0, 50)" in message, (name, message)
