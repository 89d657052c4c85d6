"""The `keras-ctx` command and the benchmarks start TensorFlow with the caching allocator."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.backend_neutral(
    "TensorFlow's allocator setting at its import, in subprocesses")

ROOT = Path(__file__).parents[2]

# Records TF_CPU_ALLOCATOR_USE_BFC at the moment TensorFlow is first imported,
# then stops: what TensorFlow's allocator will see, without loading it.
_PROBE = """
import importlib.abc, os, sys

class Probe(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "tensorflow":
            print("AT_TENSORFLOW_IMPORT", os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"), flush=True)
            os._exit(0)

sys.meta_path.insert(0, Probe())
{argv}
import {module}
import tensorflow  # what the script does next, if importing it did not
"""


def _allocator_at_tensorflow_start(module, as_command, user_value=None):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    env["PYTHONPATH"] = str(ROOT)
    if user_value is not None:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = user_value
    argv = "sys.argv[0] = '/usr/bin/keras-ctx'" if as_command else ""
    result = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv, module=module)],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stdout.splitlines() if "TENSORFLOW_IMPORT" in line]
    assert lines and lines[0].startswith("AT_TENSORFLOW_IMPORT"), result.stdout + result.stderr
    return lines[0].split()[1]


@pytest.mark.parametrize("module,as_command", [("keras_ctx", True),
                                               ("benchmarks.backbone", False)])
def test_command_and_benchmarks_start_tensorflow_with_the_bfc_allocator(module, as_command):
    assert _allocator_at_tensorflow_start(module, as_command) == "true"
    # A value the user set is theirs (false measures glibc's malloc).
    assert _allocator_at_tensorflow_start(module, as_command, user_value="false") == "false"


def test_a_python_user_importing_keras_ctx_keeps_their_process_settings():
    assert _allocator_at_tensorflow_start("keras_ctx", as_command=False) == "None"
