"""TensorFlow's load-time lines stay hidden where the process asked for quiet."""

import os
import subprocess
import sys


def test_tensorflow_load_lines_are_hidden_when_tf_cpp_min_log_level_is_set():
    """TensorFlow prints its oneDNN / cuda-driver INFO lines while loading, before
    absl::InitializeLog, whatever TF_CPP_MIN_LOG_LEVEL says (tests/conftest.py sets 2)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", "import keras_ctx"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
