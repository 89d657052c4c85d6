"""Pretraining on Keras' JAX backend: objectives learn from numpy arrays and Python
iterators under every precision with TensorFlow absent, and an interrupted run resumes
to the weights of one that never stopped (tests/pretraining/jax_jobs.py)."""

import numpy as np

from tests.backends import run_on_backend
from tests.pretraining.jax_jobs import LEARNING

STEPS = 30


def test_objectives_learn_on_jax_from_numpy_without_tensorflow_under_each_precision(tmp_path):
    out = tmp_path / "losses.npz"
    run_on_backend("jax", "pretraining_learning", {"out": str(out), "steps": STEPS},
                   without_tensorflow=True)
    losses = np.load(out)
    for name, policy, feed in LEARNING:
        key = f"{name}/{policy}/{feed}"
        trained, frozen = losses[f"{key}/trained"], losses[f"{key}/frozen"]
        assert len(trained) == STEPS and np.isfinite(trained).all(), key
        # The same model and batch at learning rate 0 keep their loss: the fall is learning.
        assert np.ptp(frozen) < 0.01 * frozen[0], (key, frozen)
        assert trained[-1] < 0.5 * frozen[0], (key, trained[[0, -1]], frozen[0])


def test_an_interrupted_jax_run_resumes_to_the_weights_of_one_that_never_stopped(tmp_path):
    out = tmp_path / "weights.npz"
    run_on_backend("jax", "pretraining_resume", {"out": str(out),
                                                 "directory": str(tmp_path / "runs")})
    weights = np.load(out)
    count = sum(key.startswith("straight/") for key in weights.files)
    assert count > 10
    for i in range(count):
        np.testing.assert_array_equal(weights[f"resumed/{i}"], weights[f"straight/{i}"])
    # Steps 3 and 4 moved the weights on from where the run stopped.
    assert max(float(np.abs(weights[f"straight/{i}"] - weights[f"stopped/{i}"]).max())
               for i in range(count)) > 1e-3
