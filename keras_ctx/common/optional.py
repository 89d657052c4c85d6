"""TensorFlow imported when used: the model side runs without it (Keras' JAX backend).

`from keras_ctx.common.optional import tensorflow as tf` gives a module that imports
TensorFlow at its first attribute read; without TensorFlow installed that read
raises one line naming what to install. What needs TensorFlow (tf.data corpora
and `prepare`, tensorflow-text and keras-hub tokenizers, SavedModel export,
TF-checkpoint converters, string-in tasks) reads it only when it runs.
"""

import importlib
import types

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


def require_tensorflow(feature="this"):
    """The `tensorflow` module; ImportError in one line naming what to install if absent."""
    try:
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
