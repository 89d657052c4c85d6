"""The suite's backend switch (tests/conftest.py): the caller's KERAS_BACKEND runs the tests
on that backend, and a `tensorflow_only` test is skipped there with its reason."""

import os
import pathlib
import subprocess
import sys

import keras
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_suite_runs_on_the_backend_the_caller_gives():
    assert keras.backend.backend() == os.environ["KERAS_BACKEND"]


@pytest.mark.tensorflow_only("checks the switch from TensorFlow's run: one subprocess is enough")
def test_a_tensorflow_only_module_is_skipped_on_torch_saying_why():
    env = dict(os.environ, KERAS_BACKEND="torch", PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests/layers/test_jax_layers.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 skipped" in result.stdout and "passed" not in result.stdout, result.stdout[-2000:]
    assert ("TensorFlow only: compares a JAX subprocess with TensorFlow's numbers computed in "
            "this process") in result.stdout


def test_ci_runs_the_whole_default_suite_on_jax_and_torch():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "for backend in jax torch; do" in lines
    # The whole default suite, as README's command runs it on TensorFlow: no list of folders.
    assert "KERAS_BACKEND=$backend pytest -n 2 -q" in lines
    assert not any(line.startswith("BACKEND_TESTS=") for line in lines)
