"""Pretraining on Keras' JAX and PyTorch backends where a process of their own is needed
(the jobs: tests/pretraining/jax_jobs.py): objectives learn from numpy arrays and Python
iterators under every precision with TensorFlow absent; an interrupted run resumes to the
weights of one that never stopped; `--strategy` maps to keras.distribution over two
virtual devices. What one process of the running backend can check (carried states
reset, torch's `--strategy` refusal) runs in it."""

import keras
import numpy as np
import pytest

from tests.backends import run_on_backend
from tests.pretraining.jax_jobs import LEARNING
from tests.pretraining.matrix_cases import CASES

STEPS = 30
# Each starts another backend in a subprocess: once per CI run, from TensorFlow's suite.
from_tensorflow_suite = pytest.mark.tensorflow_only(
    "starts the other backend in a subprocess, once, from TensorFlow's run")


@from_tensorflow_suite
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


@pytest.mark.slow  # 58 s; CI runs tests/training/test_training.py's resume tests on JAX in-process
@from_tensorflow_suite
def test_an_interrupted_jax_run_resumes_to_the_weights_of_one_that_never_stopped(tmp_path):
    """`fit_resumable` on tf.data, and `keras-ctx pretrain --data` on prepared shards."""
    from tests.cli_helpers import write_corpus

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


@from_tensorflow_suite
def test_pretrain_strategy_mirrored_on_jax_is_data_parallel_and_equals_one_device(tmp_path):
    """`--strategy mirrored` on JAX spans every device (two virtual CPUs here) through
    keras.distribution.DataParallel; before, the tf.distribute scope did nothing there
    and the run trained on one device without a word."""
    import json

    from tests.cli_helpers import final_weights, write_corpus

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


def test_carried_state_resets():
    """ULMFiT's StateReset callback and XLNet's reset_memory zero their variables (they
    failed on JAX: `ops.zeros_like` of a Keras variable)."""
    from keras_ctx.pretraining.awd_lstm import StateReset

    make, make_batch = CASES["awd_lstm_lm_carried"]
    keras.utils.set_random_seed(0)
    model = make()  # one model, one compiled step (on JAX the compile is most of the test)
    model.compile(optimizer=keras.optimizers.SGD(0.0))
    states = []
    for epochs in (1, 2):  # the second fit starts from the state the first left
        model.fit(make_batch(), batch_size=4, epochs=epochs, shuffle=False, verbose=0,
                  callbacks=[StateReset()])
        states.append(keras.ops.convert_to_numpy(model.state))
    one, two = states
    assert np.abs(one).max() > 0.01  # the stream's state moved on
    # Learning rate 0: each epoch starts from zeros again and ends where the first did.
    np.testing.assert_allclose(two, one, rtol=1e-6, atol=1e-7)
    make, make_batch = CASES["xlnet"]
    model = make()
    model.compile(optimizer=keras.optimizers.SGD(0.0))
    model.fit(make_batch(), batch_size=4, epochs=1, verbose=0)
    assert np.abs(keras.ops.convert_to_numpy(model.memory)).max() > 0.01
    model.reset_memory()
    assert not keras.ops.convert_to_numpy(model.memory).any()


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the torch backend's refusal")
def test_pretrain_strategy_on_torch_says_in_one_line_that_it_is_not_supported(tmp_path):
    from tests.cli_helpers import TINY, write_corpus
    from tests.cli_helpers import cli_output, one_line_error

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=4)
    code, printed = cli_output(["pretrain", "bert-tiny", "--corpus", str(corpus), "--steps",
                                "1", *TINY, "--strategy", "mirrored", "--out",
                                str(tmp_path / "run")])
    assert code == 2
    assert "--strategy mirrored is not available on the torch backend" in one_line_error(
        printed)
    assert not (tmp_path / "run").exists()
