"""TensorFlow imported when used: the model side runs without it (Keras' JAX backend).

`from keras_ctx.common.optional import tensorflow as tf` gives a module that imports
TensorFlow at its first attribute read; without TensorFlow installed that read
raises one line naming what to install. What needs TensorFlow (tf.data corpora
and `prepare`, tensorflow-text and keras-hub tokenizers, SavedModel export,
TF-checkpoint converters, string-in tasks) reads it only when it runs.
"""

import importlib
import types

from keras_ctx.common.startup import quiet_startup

# setup.py's range of the default dependency.
TENSORFLOW_REQUIREMENT = "tensorflow>=2.21,<2.22"

# PyTorch's CPU wheels (PyPI's Linux wheels are CUDA builds).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def install_command(extra=None):
    """The line that installs keras_ctx (with setup.py's `extra`) from its clone's root, at
    the versions the tests ran against; `torch` brings the CPU build."""
    target = f'".[{extra}]"' if extra else "."
    line = f"pip install -e {target} -c constraints.txt"
    return f"{line} --extra-index-url {TORCH_CPU_INDEX}" if extra == "torch" else line


# Top-level modules keras_ctx imports that an install may lack -> setup.py's extra that
# brings them (None: a requirement of keras_ctx itself).
EXTRAS = {"tensorflow": None, "tensorflow_text": None, "keras_hub": None, "keras": None,
          "jax": "jax", "jaxlib": "jax", "torch": "torch", "tf2onnx": "onnx",
          "onnxruntime": "onnx", "onnx": "onnx"}


def install_hint(module):
    """The line that installs top-level `module` (one keras_ctx needs), or None."""
    if module not in EXTRAS:
        return None
    if module == "tensorflow":
        return f'pip install "{TENSORFLOW_REQUIREMENT}" (or, in the keras_ctx clone, {install_command()})'
    return f"{install_command(EXTRAS[module])} (from the root of the keras_ctx clone)"


def require_tensorflow(feature="this"):
    """The `tensorflow` module; ImportError in one line naming what to install if absent.

    Loaded inside `quiet_startup` (its start-up lines hidden where the process asked for
    quiet: the `keras-ctx` command, TF_CPP_MIN_LOG_LEVEL set)."""
    try:
        with quiet_startup():
            return importlib.import_module("tensorflow")
    except ModuleNotFoundError as error:
        if error.name != "tensorflow":
            raise
        raise ImportError(
            f"{feature} needs TensorFlow, which is not installed: pip install "
            f'"{TENSORFLOW_REQUIREMENT}" (or, in the keras_ctx clone, {install_command()}).'
        ) from None


class _LazyTensorFlow(types.ModuleType):
    """`tensorflow`, imported at the first attribute read (then read directly)."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # introspection (copy, pickle, doctest) imports nothing
        module = require_tensorflow(f"keras_ctx's use of `tf.{name}`")
        value = getattr(module, name)
        setattr(self, name, value)  # later reads skip __getattr__
        return value


tensorflow = _LazyTensorFlow("tensorflow")


def preload_tensorflow():
    """TensorFlow loaded now (quietly, as `require_tensorflow`) where it is installed: the
    command's text path reads it on every backend, and modules that import it at their
    top would otherwise print its start-up lines (twice under --backend jax or torch)."""
    try:
        require_tensorflow()
    except ImportError:
        pass  # not installed: what needs it says so when it runs
