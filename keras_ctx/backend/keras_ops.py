"""The layers' keras.ops implementations, for every backend but TensorFlow (JAX, PyTorch).

The same names as `tf_ops`, written as their definitions: their gradients are
dense arrays (no `IndexedSlices` for Keras' optimizers to square per
occurrence), and Keras' own dropout draws the bits. Checks run on concrete
(eager) values; inside a traced function (`jax.jit`) there are no values to
check, so compiled steps are guarded where their data enters.
"""

import functools

import keras
import numpy as np
from keras import ops

from keras_ctx.backend.lstm_cell import cell
from keras_ctx.common import compat

def fused_attention(dtype):
    """Whether `keras.ops.dot_product_attention` runs plain attention's core at compute
    `dtype` (on JAX it picks cuDNN's flash attention on a GPU under bf16/fp16, else
    XLA's fused einsums). Not float16 on XLA:CPU: JAX's products there accumulate
    float16 in float32, which XLA:CPU cannot lower ("The precision 'F16_F16_F32' is
    not supported by dot_general on CPU"); the einsums keep float16 throughout."""
    return keras.backend.standardize_dtype(dtype) != "float16" or not _xla_cpu()


@functools.cache
def _xla_cpu():
    # Keras' distribution API lists JAX's devices (PyTorch has none: not XLA).
    return keras.backend.backend() == "jax" and all(
        device.startswith("cpu") for device in keras.distribution.list_devices())


def summed_rows(gradient):
    """Dense gradients already hold each row once."""
    return gradient


def take_rows(table, indices):
    return ops.take(table, ops.cast(indices, "int32"), axis=0)


def dropout(inputs, rate, seed_generator):
    from keras import random

    return random.dropout(inputs, rate, seed=seed_generator)


def value_checks(has_values):
    """`check_token_ids` and `check_at_most` for a backend whose `has_values(tensor)` is
    False while a tensor is traced (a JAX tracer; a torch tensor of Keras' symbolic
    build, whose values are garbage): there is nothing to check then, and compiled
    steps are guarded where their data enters (keras_ctx.models.checked_input)."""

    def concrete(tensor):
        return ops.convert_to_numpy(tensor) if has_values(tensor) else None

    def check_token_ids(token_ids, vocabulary_size, name="token_ids"):
        """`token_ids`, after checking every id is in [0, vocabulary_size) (ValueError
        otherwise)."""
        values = concrete(token_ids)
        if values is not None and values.size and (
                values.min() < 0 or values.max() >= vocabulary_size):
            bad = int(values[(values < 0) | (values >= vocabulary_size)].flat[0])
            raise ValueError(f"{name} must be in [0, {vocabulary_size}) (the vocabulary "
                             f"size); id {bad} was given. Check the tokenizer matches the "
                             "model.")
        return token_ids

    def check_at_most(value, limit, message, result):
        """`result`, after checking `value <= limit` where it is concrete (ValueError
        otherwise)."""
        values = concrete(value)
        if values is not None and int(np.max(values)) > limit:
            raise ValueError(message)
        return result

    return check_token_ids, check_at_most


def update_positions(tensor, index, updates):
    """`tensor` with `updates` written at [:, index:index + updates.shape[1]]."""
    updates = ops.cast(updates, tensor.dtype)
    start = [0, index] + [0] * (len(tensor.shape) - 2)
    return ops.slice_update(tensor, start, updates)


def scan_states(step, init, xs):
    """Every state of `state = step(state, x_t)` over the leading axis of `xs`, stacked."""

    def both(state, x):
        state = step(state, x)
        return state, state

    return ops.scan(both, init, xs)[1]


def recurrence(xw, m, h0, c0, u, p, cell_clip, projection_clip, reverse):
    """The LSTMP recurrence over time-major `xw` (see `tf_lstm.recurrence`):
    one `ops.scan` of the shared step, differentiated by the backend."""

    def step(state, inputs):
        h, c, *_ = cell(state[0], state[1], inputs[0], inputs[1], u, p, cell_clip,
                        projection_clip)
        return (h, c), (h, c)

    _, (hs, cs) = ops.scan(step, (h0, c0), (xw, m), reverse=reverse)
    return hs, cs


def gpu_available():
    """False: the cuDNN LSTM kernel is TensorFlow's (Keras' JAX LSTM has none)."""
    return False


def cudnn_lstm():
    raise ValueError("implementation='cudnn' needs Keras' TensorFlow backend; use "
                     "implementation='loop' (or 'auto') on this backend.")


def decay_weights(optimizer, variables, factor_of):
    """AdamW's decoupled decay, w -= w * wd * lr * factor_of(w), as Keras' base optimizer
    writes it (inside JAX's stateless step the assignments become the new state)."""
    use_weight_decay = compat.bound(optimizer, "use_weight_decay")
    for variable in variables:
        if use_weight_decay(variable):
            lr = ops.cast(optimizer.learning_rate, variable.dtype) * factor_of(variable)
            variable.assign(variable - variable * ops.cast(optimizer.weight_decay,
                                                           variable.dtype) * lr)


def flat_cross_entropy(logits, labels):
    """(N, V) float32 logits, (N,) int32 labels -> (N,) losses: logsumexp(z) - z_y.

    Autodiff gives softmax(z) - onehot(y) with the label part a scatter of one value
    per row, what TensorFlow's version (backend/tensorflow.py) writes by hand."""
    shifted = logits - ops.stop_gradient(ops.max(logits, axis=-1, keepdims=True))
    label_logits = ops.take_along_axis(shifted, ops.cast(labels, "int32")[:, None],
                                       axis=-1)[:, 0]
    return ops.log(ops.sum(ops.exp(shifted), axis=-1)) - label_logits


class BuiltFromSpec:
    """`fit`/`evaluate` build an unbuilt model from a tf.data input's `element_spec`
    (a symbolic call, as Keras' own build makes it) before Keras sees the data.

    Keras' JAX and PyTorch trainers otherwise build it from a batch they read off
    the data, which starts a pass over it: a dataset's reshuffled next iteration,
    other masks, or a generator's next epoch would then train. Only shapes and
    dtypes matter, and a tf.data input has them without a read.
    """

    def fit(self, x=None, *args, **kwargs):
        self._build_from_spec(x)
        return super().fit(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        self._build_from_spec(x)
        return super().evaluate(x, *args, **kwargs)

    def _build_from_spec(self, data):
        spec = getattr(data, "element_spec", None)
        if spec is not None and not self.built:
            build_from_spec(self, spec)


def build_from_spec(model, spec):
    """Builds `model` by a symbolic call on the inputs of one batch of `spec` (a tf.data
    `element_spec`: inputs, or (inputs, labels[, weights])), reading no data: what
    `BuiltFromSpec` and `training.fit_resumable` (before restoring a checkpoint) do."""
    inputs, _, _ = keras.utils.unpack_x_y_sample_weight(spec)
    model(keras.tree.map_structure(
        lambda s: keras.KerasTensor(tuple(s.shape), dtype=s.dtype.name), inputs),
        training=False)
