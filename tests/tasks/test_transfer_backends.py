"""Transfer recipes give TensorFlow's weights on JAX and PyTorch from the same start.

Gradual unfreezing (Howard & Ruder 2018, Sec. 3.3), epoch by epoch: Keras' JAX step
needs the weights the optimizer was built with, and unfreezing changes which are
trainable (the JAX fit failed at its first epoch). Layer-wise learning rates with
AdamW's decoupled decay: the decay went through tf.distribute (failed on JAX)."""

import keras
import numpy as np
import pytest

from tests.backends import run_on_backend
from tests.session_once import arrays_once, listed
from tests.tasks import transfer_cases


@pytest.fixture(scope="module")
def tensorflow_weights(tmp_path_factory):
    """TensorFlow's weights (before, after each epoch, the layer-rate changes): computed
    once per session for both backends' tests (tests/session_once.py)."""
    def compute():
        keras.utils.set_random_seed(1234)  # as each test starts (tests/conftest.py)
        before, after, groups = transfer_cases.snapshots()
        _, changes = transfer_cases.layer_rate_updates(before)
        return {"groups": np.array(groups), "epochs": np.array(len(after)),
                **{f"before/{i}": w for i, w in enumerate(before)},
                **{f"after/{e}/{i}": w for e, ws in enumerate(after) for i, w in enumerate(ws)},
                **{f"changes/{i}": c for i, c in enumerate(changes)}}

    arrays = arrays_once(tmp_path_factory, "transfer_tensorflow", compute)
    after = [listed(arrays, f"after/{e}") for e in range(int(arrays["epochs"]))]
    return listed(arrays, "before"), after, int(arrays["groups"]), listed(arrays, "changes")


@pytest.mark.tensorflow_only("TensorFlow's weights, computed in this process, are the "
                             "reference; the other backend runs in a subprocess")
@pytest.mark.parametrize("backend", ("jax", "torch"))
def test_gradual_unfreezing_and_layer_rates_equal_tensorflow(backend, tmp_path,
                                                             tensorflow_weights):
    before, after, groups, changes = tensorflow_weights
    assert groups >= 3 and len(after) == groups
    np.savez(tmp_path / "start.npz", **{str(i): w for i, w in enumerate(before)})
    run_on_backend(backend, "transfer_outputs", {"weights": str(tmp_path / "start.npz"),
                                                 "out": str(tmp_path / "other.npz")})
    jax = np.load(tmp_path / "other.npz")
    # The first epoch trains the top group only: the embeddings stay where they were.
    embeddings = [i for i, w in enumerate(before) if w.shape[0] == 50]
    assert embeddings and all(np.array_equal(after[0][i], before[i]) for i in embeddings)
    assert any(not np.array_equal(after[-1][i], before[i]) for i in embeddings)
    # Adam divides by sqrt(v): where a gradient is near 0, float32 reorderings of it move
    # the update most (torch: one of 512 values off by 4.5e-6 after three epochs).
    atol = 1e-6 if backend == "jax" else 1e-5
    for epoch, weights in enumerate(after):
        for i, want in enumerate(weights):
            np.testing.assert_allclose(jax[f"{epoch}/{i}"], want, rtol=1e-4, atol=atol,
                                       err_msg=f"epoch {epoch}, weight {i}")

    # Keras' own JAX step cannot follow it: a plain Keras model is refused in one line
    # (on TensorFlow and torch, whose optimizers apply to any subset, it fits).
    if backend == "jax":
        assert "GradualUnfreezing on JAX needs a keras_ctx task or pretrainer" in str(
            jax["refusal"])
    else:
        assert str(jax["refusal"]) == ""
    assert transfer_cases.plain_keras_refusal() == ""

    # Layer-wise rates with weight decay: TensorFlow's change of every weight.
    for i, want in enumerate(changes):
        np.testing.assert_allclose(jax[f"layer_rates/{i}"], want, rtol=1e-4, atol=1e-7,
                                   err_msg=f"weight {i}")
    assert max(float(np.abs(c).max()) for c in changes) > 1e-3
