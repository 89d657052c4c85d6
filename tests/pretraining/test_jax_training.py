"""Pretraining on Keras' JAX and PyTorch backends (the jobs: tests/pretraining/jax_jobs.py):
objectives learn from numpy arrays and Python iterators under every precision with
TensorFlow absent; an interrupted run resumes to the weights of one that never stopped;
`--strategy` maps to keras.distribution; carried states reset."""

import numpy as np
import pytest

from tests.backends import run_on_backend
from tests.pretraining.jax_jobs import LEARNING

STEPS = 30


@pytest.mark.parametrize("backend", ("jax", "torch"))
def test_objectives_learn_from_numpy_without_tensorflow_under_each_precision(backend, tmp_path):
    out = tmp_path / "losses.npz"
    run_on_backend(backend, "pretraining_learning", {"out": str(out), "steps": STEPS},
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
    """`fit_resumable` on tf.data, and `keras-ctx pretrain --data` on prepared shards."""
    from tests.test_cli import write_corpus

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    out = tmp_path / "weights.npz"
    run_on_backend("jax", "pretraining_resume", {"out": str(out), "corpus": str(corpus),
                                                 "directory": str(tmp_path / "runs")})
    weights = np.load(out)
    for prefix in ("", "prepared_"):
        count = sum(key.startswith(f"{prefix}straight/") for key in weights.files)
        assert count > 10
        for i in range(count):
            np.testing.assert_array_equal(weights[f"{prefix}resumed/{i}"],
                                          weights[f"{prefix}straight/{i}"])
        # Steps 3 and 4 moved the weights on from where the run stopped.
        assert max(float(np.abs(weights[f"{prefix}straight/{i}"]
                                - weights[f"{prefix}stopped/{i}"]).max())
                   for i in range(count)) > 1e-4, prefix


def test_pretrain_strategy_mirrored_on_jax_is_data_parallel_and_equals_one_device(tmp_path):
    """`--strategy mirrored` on JAX spans every device (two virtual CPUs here) through
    keras.distribution.DataParallel; before, the tf.distribute scope did nothing there
    and the run trained on one device without a word."""
    import json

    from tests.test_cli import final_weights, write_corpus

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    out = tmp_path / "strategies.json"
    run_on_backend("jax", "pretraining_strategies", {
        "out": str(out), "corpus": str(corpus), "directory": str(tmp_path)}, devices=2)
    record = json.loads(out.read_text())
    assert record["distribution"] == "DataParallel" and record["devices"] == 2
    code, printed = record["refusals"]["tpu"]
    assert code == 2 and "--strategy tpu found no TPU: JAX sees cpu devices only" in printed
    code, printed = record["refusals"]["multi_worker"]
    assert code == 2 and "jax.distributed.initialize()" in printed
    code, printed = record["refusals"]["odd_batch"]
    assert code == 2 and ("--batch-size 5 does not split evenly over the 2 devices of "
                          "--strategy mirrored") in printed
    assert not (tmp_path / "odd_batch").exists()  # refused before the run was started
    for one, two in zip(final_weights(tmp_path / "default"), final_weights(tmp_path / "mirrored")):
        np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ("jax", "torch"))
def test_carried_state_resets(backend, tmp_path):
    """ULMFiT's StateReset callback and XLNet's reset_memory zero their variables on JAX
    and torch (they failed on JAX: `ops.zeros_like` of a Keras variable)."""
    out = tmp_path / "states.npz"
    run_on_backend(backend, "pretraining_carried_resets", {"out": str(out)})
    states = np.load(out)
    one, two = states["awd_lstm/1"], states["awd_lstm/2"]
    assert np.abs(one).max() > 0.01  # the stream's state moved on
    # Learning rate 0: the second epoch starts from zeros again and ends where the first did.
    np.testing.assert_allclose(two, one, rtol=1e-6, atol=1e-7)
    assert np.abs(states["xlnet/before"]).max() > 0.01
    assert not states["xlnet/after"].any()
