"""keras_ctx's one backend switch (keras_ctx.backend): every backend's module defines its
names, and the implementations agree.

`keras_ops` is keras.ops only, so it also runs here on TensorFlow: its LSTM
recurrence (autodiff of `ops.scan`, what JAX and torch run) must give the values
and gradients of `tf_ops`' hand-written backward pass.
"""

import importlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx import backend
from keras_ctx.backend import keras_ops, tf_ops


@pytest.mark.parametrize("name", sorted(backend.MODULES))
def test_every_backend_module_defines_the_switchs_names(name):
    module = importlib.import_module(backend.MODULES[name])
    missing = [n for n in backend.NAMES if not hasattr(module, n)]
    assert not missing, f"{module.__name__} lacks {missing}"
    # the switch took the module of the backend the tests run on
    assert backend.implementation.__name__ == backend.MODULES[keras.backend.backend()]


def test_no_module_outside_the_backend_package_branches_on_the_backend():
    """One switch: `keras.backend.backend()` is read in keras_ctx/backend/ only (and where
    a command records or checks which backend wrote a file)."""
    import pathlib

    root = pathlib.Path(backend.__file__).parents[1]
    readers = sorted(str(path.relative_to(root)) for path in root.rglob("*.py")
                     if "backend.backend()" in path.read_text(encoding="utf-8")
                     and path.parent.name != "backend")
    assert readers == RECORDERS, readers


# Modules that read the backend's name to record it or to refuse a file another backend
# wrote, not to choose an implementation.
RECORDERS = ["training.py"]  # state.json records the backend; a resume on another refuses


@pytest.mark.tensorflow_only("compares tf_ops' hand-written backward pass with keras_ops' "
                              "autodiff, both on TensorFlow tensors under one GradientTape")
def test_generic_lstm_recurrence_equals_the_hand_written_backward_pass():
    rng = np.random.default_rng(0)
    time, batch, units, projection = 5, 3, 4, 2
    xw = tf.constant(rng.normal(size=(time, batch, 4 * units)), tf.float32)
    mask = np.ones((time, batch, 1), "float32")
    mask[3:, 1] = 0.0  # a padded row keeps its state
    mask = tf.constant(mask)
    h0 = tf.constant(rng.normal(size=(batch, projection)), tf.float32)
    c0 = tf.constant(rng.normal(size=(batch, units)), tf.float32)
    u = tf.Variable(rng.normal(size=(projection, 4 * units)).astype("float32"))
    p = tf.Variable(rng.normal(size=(units, projection)).astype("float32"))
    weights = tf.constant(rng.normal(size=(time, batch, projection)), tf.float32)
    for reverse in (False, True):
        results = []
        for module in (tf_ops, keras_ops):
            with tf.GradientTape() as tape:
                tape.watch([xw, h0, c0])
                hs, cs = module.recurrence(xw, mask, h0, c0, u, p, 0.5, 0.7, reverse)
                loss = tf.reduce_sum(hs * weights) + tf.reduce_sum(cs)
            results.append([hs, cs] + tape.gradient(loss, [xw, h0, c0, u, p]))
        for ours, generic in zip(*results):
            np.testing.assert_allclose(to_numpy(generic), to_numpy(ours), atol=1e-5, rtol=1e-5)


def test_generic_token_id_checks_refuse_ids_outside_the_vocabulary():
    check_token_ids, _ = keras_ops.value_checks(lambda tensor: True)
    ids = np.array([[0, 4], [2, 5]])
    np.testing.assert_array_equal(to_numpy(check_token_ids(ids, 6)), ids)
    for bad in (6, -1):
        with pytest.raises(ValueError, match=r"ids must be in \[0, 6\)"):
            check_token_ids(np.where(ids == 5, bad, ids), 6, "ids")


def test_torch_checks_skip_keras_symbolic_build_and_refuse_real_ids():
    """Keras' torch backend builds a model on "meta" tensors whose values are garbage
    (ids such as 295698432): there is nothing to check then; real tensors are checked."""
    torch = pytest.importorskip("torch")
    from keras_ctx.backend import torch as torch_backend

    placeholder = torch.empty((2, 3), dtype=torch.int32, device="meta")
    assert torch_backend.check_token_ids(placeholder, 6) is placeholder
    assert torch_backend.check_at_most(placeholder, 2, "too long", "result") == "result"
    with pytest.raises(ValueError,
                       match=r"token_ids must be in \[0, 6\) \(the vocabulary size\); id 9 "):
        torch_backend.check_token_ids(torch.tensor([[1, 9]], dtype=torch.int32), 6)
    with pytest.raises(ValueError, match="too long"):
        torch_backend.check_at_most(torch.tensor([3]), 2, "too long", "result")


@pytest.mark.parametrize("name", sorted(backend.MODULES))
def test_every_backends_seeded_draws_follow_the_softmax(name):
    """Generation's `categorical(logits, seed, step)`: 20,000 rows of one distribution
    drawn at its probabilities (within 0.015), the same draws for the same (seed, step),
    others for another step (torch's refused a tensor seed before)."""
    pytest.importorskip(name)
    module = importlib.import_module(backend.MODULES[name])
    probabilities = np.array([0.1, 0.2, 0.3, 0.4])
    logits = np.tile(np.log(probabilities).astype("float32"), (20000, 1))
    if name == "torch":
        import torch

        logits = torch.from_numpy(logits)
    elif name == "jax":
        import jax.numpy as jnp

        logits = jnp.asarray(logits)
    else:
        logits = tf.constant(logits)
    draws = to_numpy(module.categorical(logits, 7, 3))
    assert draws.shape == (20000,) and draws.dtype == np.int32
    np.testing.assert_allclose(np.bincount(draws, minlength=4) / 20000, probabilities,
                               atol=0.015)
    np.testing.assert_array_equal(to_numpy(module.categorical(logits, 7, 3)), draws)
    assert (to_numpy(module.categorical(logits, 7, 4)) != draws).mean() > 0.5
