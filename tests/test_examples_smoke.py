"""The example scripts run end to end in a fast mode (few steps), as a reader runs them.

Each takes more than 20 s on 2 CPU cores even at two steps, so they are slow
tests (`pytest -m slow`).
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.parametrize("script, args, expect", [
    ("gpt2_generate.py", ["--steps", "2", "--length", "16", "--repeats", "1"],
     "BeamSampler:"),
])
def test_example_runs_in_fast_mode(script, args, expect, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    process = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), *args],
                             cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
    assert process.returncode == 0, process.stderr[-2000:]
    assert expect in process.stdout
