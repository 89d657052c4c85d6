"""Every private upstream API keras_ctx relies on, in one place, each behind a wrapper.

TensorFlow, Keras and keras-hub may move or drop anything private in any
release. Each symbol is resolved on first use; a missing one raises an
`UpstreamAPIError` naming the symbol, the version it was written for (the
pins in setup.py) and the version installed, so that an upgrade fails with
one clear line instead of an AttributeError deep in a training step.
tests/test_compat.py resolves them all.
"""

import functools
import importlib
import importlib.metadata

# The releases these wrappers were written for: setup.py's pins.
WRITTEN_FOR = {"tensorflow": "2.21.0", "keras": "3.15.1", "keras-hub": "0.32.0"}

# (distribution, module, attribute path): every private symbol used, and why.
SYMBOLS = {
    # Whether the graph being traced is compiled by XLA (layers/_xla.py).
    "xla_context": ("tensorflow", "tensorflow.python.ops.control_flow_util",
                    "GraphOrParentsInXlaContext"),
    # XLA's optimization barrier: keeps a transpose XLA:CPU would fold (layers/dense.py).
    "optimization_barrier": ("tensorflow", "tensorflow.compiler.tf2xla.python.xla",
                             "optimization_barrier"),
    # GPT-2's byte <-> character table of byte-level BPE (preprocessing.py).
    "bytes_to_unicode": ("keras-hub", "keras_hub.src.tokenizers.byte_pair_tokenizer",
                         "bytes_to_unicode"),
    # Every sublayer of a model, nested ones included (adapters.py, embeddings.py, models/).
    "flatten_layers": ("keras", "keras", "Layer._flatten_layers"),
    # Overridden by pretraining/base.py: the model built from the data's spec.
    "maybe_symbolic_build": ("keras", "keras", "Model._maybe_symbolic_build"),
    # The cuDNN LSTM kernel (layers/lstm.py).
    "cudnn_lstm": ("keras", "keras.src.backend.tensorflow.rnn", "lstm"),
}


class UpstreamAPIError(ImportError):
    """A private upstream symbol keras_ctx uses is missing from the installed release."""


def _installed(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@functools.lru_cache(maxsize=None)
def resolve(key):
    """The upstream object behind `SYMBOLS[key]`; raises `UpstreamAPIError` if it is gone.

    Args:
        key: a key of `SYMBOLS`.

    Returns:
        The module attribute (function or class attribute) it names.
    """
    distribution, module, attribute = SYMBOLS[key]
    try:
        value = importlib.import_module(module)
        for name in attribute.split("."):
            value = getattr(value, name)
    except (ImportError, AttributeError) as error:
        raise UpstreamAPIError(
            f"keras_ctx uses {distribution}'s private `{module}.{attribute}`, written for "
            f"{distribution} {WRITTEN_FOR[distribution]}, but the installed "
            f"{distribution} {_installed(distribution)} lacks it ({error}). Install "
            f"{distribution}=={WRITTEN_FOR[distribution]} (setup.py's pin) or update "
            "keras_ctx/compat.py.") from error
    return value


def in_xla_context(graph):
    """True if `graph` (or a graph it is nested in) is traced for XLA compilation."""
    return bool(resolve("xla_context")(graph))


def optimization_barrier(tensor):
    """`tensor` through XLA's optimization barrier (XLA fuses nothing across it)."""
    (result,) = resolve("optimization_barrier")(tensor)
    return result


def bytes_to_unicode():
    """GPT-2's byte-level BPE table: (list of bytes, list of the characters standing for them)."""
    return resolve("bytes_to_unicode")()


def flatten_layers(layer, include_self=True, recursive=True):
    """The layers inside `layer` (itself first if `include_self`), nested ones if `recursive`."""
    return list(resolve("flatten_layers")(layer, include_self=include_self,
                                          recursive=recursive))


def cudnn_lstm():
    """Keras' TensorFlow-backend `lstm` function (cuDNN where it applies)."""
    return resolve("cudnn_lstm")
