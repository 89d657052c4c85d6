"""Every private upstream API keras_ctx relies on, in one place, each behind a wrapper.

TensorFlow, Keras and keras-hub may move or drop anything private in any
release. Each symbol is resolved on first use; a missing one raises an
`UpstreamAPIError` naming the symbol, the version it was written for (the
pins in constraints.txt) and the version installed, so that an upgrade fails with
one clear line instead of an AttributeError deep in a training step.
tests/common/test_compat.py resolves them all.

The training steps (keras_ctx/backend/) and what remains private in them: JAX's and
PyTorch's use none (an unbuilt model is built from a tf.data input's spec by a
symbolic call, the optimizer applies through `apply` in a `keras.StatelessScope`,
and which weights a minibatch trains is declared by its objective). TensorFlow's
overrides `_maybe_symbolic_build`: under a tf.distribute strategy Keras' fit and evaluate
read a batch off a pass of their own before the epoch, to build the model, even when it is
built (Keras 3.15.1 reads before it checks), which starts a pass over the data (the run
would train on the data's second pass, another shuffle or a generator's next epoch; one
device trains on its first), and merge it with strategy.reduce, which fails on a dict batch
under MultiWorkerMirroredStrategy. No public API avoids the read: a model and optimizer
built beforehand (a symbolic call, `optimizer.build`) are read for all the same (one fit and
one evaluate made 4 passes of a generator, not 2: tests/common/test_compat.py).
"""

import contextlib
import functools
import importlib
import importlib.metadata

# The releases these wrappers were written for: constraints.txt's pins.
WRITTEN_FOR = {"tensorflow": "2.21.0", "keras": "3.15.1", "keras-hub": "0.32.0"}

# (distribution, module, attribute path): every private symbol used, and why.
SYMBOLS = {
    # Whether the graph being traced is compiled by XLA (backend/tf_ops.py).
    "xla_context": ("tensorflow", "tensorflow.python.ops.control_flow_util",
                    "GraphOrParentsInXlaContext"),
    # GPT-2's byte <-> character table of byte-level BPE (preprocessing.py).
    "bytes_to_unicode": ("keras-hub", "keras_hub.src.tokenizers.byte_pair_tokenizer",
                         "bytes_to_unicode"),
    # Every sublayer of a model, nested ones included (adapters.py, embeddings.py, models/).
    "flatten_layers": ("keras", "keras", "Layer._flatten_layers"),
    # Overridden by backend/tensorflow.py's step: the model built from the data's spec, not
    # from a batch read off a pass of its own (see the module docstring).
    "maybe_symbolic_build": ("keras", "keras", "Model._maybe_symbolic_build"),
    # Whether a JAX value is being traced (no value to check; backend/jax.py).
    "jax_tracing": ("keras", "keras.src.utils.jax_utils", "is_in_jax_tracing_scope"),
    # Whether Keras is inferring shapes (`compute_output_spec`): on PyTorch a layer it
    # cannot run on the "meta" device is run again on uninitialised CPU tensors, whose
    # values are garbage, not ids to check (backend/torch.py).
    "symbolic_scope": ("keras", "keras.src.backend.common.symbolic_scope",
                       "in_symbolic_scope"),
    # The cuDNN LSTM kernel (layers/lstm.py).
    "cudnn_lstm": ("keras", "keras.src.backend.tensorflow.rnn", "lstm"),
    # Builds a model from a batch or its spec, as fit would (testing.py builds before
    # probing a step).
    "symbolic_build": ("keras", "keras", "Model._symbolic_build"),
    # The key an optimizer files a variable's slots under (tasks/transfer.py).
    "var_key": ("keras", "keras", "optimizers.Optimizer._var_key"),
    # The index of a variable's slots, from the variable an update step is given (on
    # TensorFlow its own tf.Variable; pretraining/cvt.py's CvtSGD).
    "variable_index": ("keras", "keras", "optimizers.Optimizer._get_variable_index"),
    # Decoupled weight decay: overridden by tasks/transfer.py to scale it per layer group,
    # with the two it calls.
    "apply_weight_decay": ("keras", "keras", "optimizers.Optimizer._apply_weight_decay"),
    "use_weight_decay": ("keras", "keras", "optimizers.Optimizer._use_weight_decay"),
    "maybe_merge_call": ("tensorflow", "tensorflow",
                         "__internal__.distribute.interim.maybe_merge_call"),
    # How Keras' JAX fit places a batch under a keras.distribution (sharded over the
    # batch axis; each process's rows in a multi-process run): benchmarks/accelerator_mlm.py
    # steps outside fit.
    "jax_distribute_data": ("keras", "keras.src.backend.jax.trainer", "_distribute_data"),
    # The adapter that feeds fit from a tf.data.Dataset (pretraining/base.py).
    "tf_dataset_adapter": ("keras", "keras.src.trainers.data_adapters.tf_dataset_adapter",
                           "TFDatasetAdapter"),
}

# Private attributes set on instances (no class attribute to resolve up front):
# {key: (distribution, what carries it, attribute)}; `attribute()` reads them.
ATTRIBUTES = {
    # Guards a built layer's attributes; unlocked to add a sublayer (layers/adapters.py).
    "tracker": ("keras", "keras.layers.Layer", "_tracker"),
    # A layer's own variables, not its sublayers' (peft.py names them one by one).
    "own_trainable_variables": ("keras", "keras.layers.Layer", "_trainable_variables"),
    "own_non_trainable_variables": ("keras", "keras.layers.Layer", "_non_trainable_variables"),
    # The variables a built optimizer holds slots for (tasks/transfer.py, pretraining/cvt.py).
    "optimizer_variables": ("keras", "keras.optimizers.Optimizer", "_trainable_variables"),
    # The rate as given (a schedule or a variable), not its current value (schedules.py).
    "learning_rate": ("keras", "keras.optimizers.Optimizer", "_learning_rate"),
    # The strategy an optimizer was built under (tasks/transfer.py's weight decay).
    "distribution_strategy": ("keras", "keras.optimizers.Optimizer", "_distribution_strategy"),
    # What fit reads batches through, and the strategy a model was compiled under
    # (pretraining/base.py builds from the data's spec).
    "data_adapter": ("keras", "keras.src.trainers.epoch_iterator.EpochIterator",
                     "data_adapter"),
    "model_strategy": ("keras", "keras.Model", "_distribute_strategy"),
    # The calls of a layer in functional graphs (layers/embeddings.py finds the table an
    # input named *token_ids feeds).
    "inbound_nodes": ("keras", "keras.layers.Layer", "_inbound_nodes"),
    # (layer, node index, tensor index) that made a symbolic tensor (tasks/transfer.py,
    # layers/embeddings.py).
    "keras_history": ("keras", "keras.KerasTensor", "_keras_history"),
    # A variable's own value, bound to a traced one while the JAX step applies the
    # optimizer (backend/jax.py).
    "variable_value": ("keras", "keras.Variable", "_value"),
}


class UpstreamAPIError(ImportError):
    """A private upstream symbol keras_ctx uses is missing from the installed release."""


def _missing(distribution, where, error):
    return UpstreamAPIError(
        f"keras_ctx uses {distribution}'s private `{where}`, written for "
        f"{distribution} {WRITTEN_FOR[distribution]}, but the installed "
        f"{distribution} {_installed(distribution)} lacks it ({error}). Install "
        f"{distribution}=={WRITTEN_FOR[distribution]} (constraints.txt's pin) or update "
        "keras_ctx/common/compat.py.")


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
        raise _missing(distribution, f"{module}.{attribute}", error) from error
    return value


def attribute(instance, key):
    """The private attribute `ATTRIBUTES[key]` of `instance`; `UpstreamAPIError` if absent."""
    distribution, owner, name = ATTRIBUTES[key]
    try:
        return getattr(instance, name)
    except AttributeError as error:
        raise _missing(distribution, f"{owner}.{name}", error) from error


@contextlib.contextmanager
def unlocked(layer):
    """Lets the block add or remove sublayers of a built `layer` (as Keras' enable_lora does)."""
    tracker = attribute(layer, "tracker")
    tracker.unlock()
    try:
        yield layer
    finally:
        tracker.lock()


def own_variables(layer):
    """`layer`'s own variables (trainable first), without those of its sublayers."""
    return (list(attribute(layer, "own_trainable_variables"))
            + list(attribute(layer, "own_non_trainable_variables")))


def producer(tensor):
    """The layer that made the symbolic `tensor` (a functional model's node)."""
    return attribute(tensor, "keras_history")[0]


def bound(instance, key):
    """`instance`'s own (possibly overridden) method of the private `SYMBOLS[key]`.

    Resolving the upstream symbol first makes an upgrade that drops it fail
    with compat's message; the method is then taken from the instance, so a
    subclass's override (a user's optimizer) is the one called.
    """
    resolve(key)
    return getattr(instance, SYMBOLS[key][2].rpartition(".")[2])


def variable_key(optimizer, variable):
    """The key `optimizer` files `variable`'s slots under."""
    return bound(optimizer, "var_key")(variable)


def variable_index(optimizer, variable):
    """The index of `variable`'s slots in `optimizer` (its Keras variable: that index of
    `attribute(optimizer, "optimizer_variables")`)."""
    return bound(optimizer, "variable_index")(variable)


def tf_dataset_of(data_adapter):
    """The tf.data.Dataset `fit` reads through `data_adapter`, or None for other inputs."""
    if isinstance(data_adapter, resolve("tf_dataset_adapter")):
        return data_adapter.get_tf_dataset()
    return None


def in_xla_context(graph):
    """True if `graph` (or a graph it is nested in) is traced for XLA compilation."""
    return bool(resolve("xla_context")(graph))


def bytes_to_unicode():
    """GPT-2's byte-level BPE table: (list of bytes, list of the characters standing for them)."""
    return resolve("bytes_to_unicode")()


def flatten_layers(layer, include_self=True, recursive=True):
    """The layers inside `layer` (itself first if `include_self`), nested ones if `recursive`."""
    return list(resolve("flatten_layers")(layer, include_self=include_self,
                                          recursive=recursive))


def is_traced(tensor):
    """Whether `tensor` is a JAX tracer (inside `jax.jit`/`grad`): it has no value yet."""
    return bool(resolve("jax_tracing")(tensor))


def in_symbolic_scope():
    """Whether Keras is inferring output shapes: tensors then carry no values."""
    return bool(resolve("symbolic_scope")())


def cudnn_lstm():
    """Keras' TensorFlow-backend `lstm` function (cuDNN where it applies)."""
    return resolve("cudnn_lstm")
