"""Every objective through one harness (keras_ctx.testing.run_pretrainer_test).

One SGD step's weight update must equal the float32 one-device update
  - under MirroredStrategy over two logical CPUs (same global batch), measured
    for all objectives in ONE subprocess (logical devices must be configured
    before TensorFlow starts);
  - under mixed_float16 and mixed_bfloat16 (within their precision), and with
    jit_compile=True;
and NaN weights must show in the `loss` metric (what fit_resumable's
divergence guard reads). On the code before the Pretrainer base, causal LM,
seq2seq, biLM and translation moved 2.0x as far under two replicas and
3e-5 as far under mixed_float16.
"""

import json
import os
import subprocess
import sys

import pytest

from keras_ctx import testing
from tests.pretraining.matrix_cases import CASES, FAST, NOT_CHECKED, OPTIONS
from tests.session_once import once_per_session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# FAST runs by default; the variants, bfloat16 and XLA with -m slow.
SLOW = tuple(name for name in CASES if name not in FAST)


# Keras' distribution API on JAX: tests/pretraining/test_backends.py's data-parallel check.
mirrored_only = pytest.mark.tensorflow_only("tf.distribute.MirroredStrategy over logical CPUs")


def _mirrored(names):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-m", "tests.pretraining.matrix_cases", *names],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    """The two-replica run (~80 s), once per test session (tests/session_once.py)."""
    def make(directory):
        (directory / "measures.json").write_text(json.dumps(_mirrored(FAST)))

    done = once_per_session(tmp_path_factory, "matrix_mirrored", make)
    return json.loads((done / "measures.json").read_text())


def _assert_mirrored(measures):
    testing.assert_pretrainer_measures(measures)
    assert abs(measures["mirrored"]["ratio"] - 1) < 1e-4, measures


@mirrored_only
@pytest.mark.parametrize("name", FAST)
def test_one_step_under_two_replicas_equals_one_device(name, mirrored):
    _assert_mirrored(mirrored[name])


@mirrored_only
@pytest.mark.slow
def test_variants_under_two_replicas_equal_one_device():
    measures = _mirrored(SLOW)
    for name in SLOW:
        _assert_mirrored(measures[name])
    # AWD-LSTM's carried LSTM states: each replica keeps its own rows.
    difference, size = measures["awd_lstm_state"]
    assert size > 0.01 and difference < 1e-5 * size, measures["awd_lstm_state"]


@mirrored_only
def test_xlnet_memory_is_carried_per_replica(mirrored):
    """Two replicas carry the memory of their own rows: as one device per half-batch."""
    difference, size = mirrored["xlnet_memory"]
    assert size > 0.1 and difference < 1e-5 * size, mirrored["xlnet_memory"]


@mirrored_only
def test_xla_under_two_cpu_replicas_fails_in_tensorflow_and_we_say_so(mirrored):
    """TensorFlow alone (no Keras) cannot run a jit-compiled replica step on logical CPUs.

    If this starts passing, TensorFlow fixed it: drop keras_ctx.backend.tensorflow.check_xla.
    """
    tensorflow_error, ours = mirrored["xla"]
    assert tensorflow_error and "from device" in " ".join(tensorflow_error), mirrored["xla"]
    assert ours and "jit_compile=False" in ours and "CPU devices" in ours, ours


def _marked(names):
    return [name if name in FAST else pytest.param(name, marks=pytest.mark.slow)
            for name in names]


@pytest.mark.parametrize("name", _marked(CASES))
def test_one_step_under_mixed_float16_and_nan_is_visible(name):
    """Both steps as Keras compiles them by default on this backend ("auto"): on JAX one
    jitted step, not ~750 op-by-op XLA compiles (the nine: 645 -> 315 s, loaded); the
    slow test below checks the non-XLA path against XLA."""
    measures = testing.run_pretrainer_test(*CASES[name], checks=("mixed_float16", "nan"),
                                           jit_compile="auto", **OPTIONS.get(name, {}))
    # The bug this guards against: an unscaled float16 loss leaves ~2^-15 of the update.
    assert measures["mixed_float16"]["ratio"] > 0.9, measures


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_one_step_under_mixed_bfloat16_and_xla(name):
    checks = tuple(c for c in ("mixed_bfloat16", "xla") if c not in NOT_CHECKED.get(name, ()))
    testing.run_pretrainer_test(*CASES[name], checks=checks)
