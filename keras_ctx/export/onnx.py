"""ONNX export for ONNX Runtime: `export_onnx(model, path)`.

The same forward pass as `export_saved_model`'s `serving_default`: the
model's integer inputs, by name, int32 -> its outputs by name, float32, a list
output (`hidden_states`) stacked on axis 1. The `[onnx]` extra of setup.py pins
the versions it was checked with. What writes the file is the backend's
(`keras_ctx.backend.ONNX_CONVERTER`):
  - TensorFlow: tf2onnx converts the serving graph; batch and sequence stay
    dynamic unless `batch_size` / `sequence_length` fix them.
  - torch: Keras' `model.export(format="onnx")` (torch.onnx's exporter, which
    needs onnxscript) at the fixed `batch_size` and `sequence_length`
    (keras_ctx/export/onnx_keras.py: Keras' export of a free axis fails on torch).
  - JAX: refused in one line naming the backends that export ONNX.

Two conversions need help (seen with tf2onnx 1.17.0): tf2onnx names outputs
after tensor names, so the traced function returns a flat dict (tf2onnx then
names each output by its key); and TensorFlow writes exact GELU with `Erfc`,
which tf2onnx cannot convert, so it is converted as `1 - Erf(x)` (the same
function: GELU(x) = x/2 (1 + erf(x / sqrt 2))).

Refused in one line, with nothing written: a model on Keras' JAX backend, a free
batch or length or a mixed-precision model on torch, weights over one ONNX file's
2 GiB, and a model with an op tf2onnx has no ONNX form for (it
would leave the op in the file under its TensorFlow name).

ONNX has no assert: an out-of-range token id becomes an index that fails a
small guard `Gather` in ONNX Runtime (the error names `token_ids_out_of_range`)
instead of reading another row (ONNX's Gather reads -1 as the last one), on
both converters.
"""

import os

import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx import backend
from keras_ctx.export.saved_model import (ExportError, flat_outputs, forward_function,
                                          input_specs, named_inputs)
from keras_ctx.common.files import replacing
from keras_ctx.common.validation import optional_positive_int

OPSET = 17
# An ONNX file is one protobuf message, which holds at most 2 GiB (weights included).
MAX_BYTES = 2**31 - 1


def _erfc_as_one_minus_erf(ctx, node, name, args):
    """tf2onnx handler: Erfc(x) -> 1 - Erf(x)."""
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
    node.type = "Erf"
    one = ctx.make_const(utils.make_name(f"{name}_one"), np.array(1, dtype))
    ctx.insert_new_node_on_output("Sub", node.output[0], name=utils.make_name(f"{name}_erfc"),
                                  inputs=[one.output[0], node.output[0]])
    return node


def _guarded(ids, vocabulary_size):
    """`ids`, through a Gather that fails in ONNX Runtime where an id is outside [0, V)."""
    invalid = tf.logical_or(ids < 0, ids >= vocabulary_size)
    index = tf.where(invalid, tf.constant(2**31 - 1, ids.dtype), tf.zeros_like(ids))
    return ids + tf.gather(tf.zeros([1], ids.dtype), index, name="token_ids_out_of_range")


def _onnx_function(model, batch_size, sequence_length, vocabulary_size):
    named = named_inputs(model)
    specs = {name: tf.TensorSpec([batch_size] + list(spec.shape[1:]), spec.dtype, name=name)
             for name, spec in input_specs(named, sequence_length).items()}
    dtypes = {name: tensor.dtype for name, tensor in named.items()}
    forward = forward_function(model, jit_compile=False)

    def serve(inputs):
        checked = {}
        for name, value in inputs.items():
            if vocabulary_size is not None and name.endswith("token_ids"):
                value = _guarded(value, vocabulary_size)
            checked[name] = tf.cast(value, dtypes[name])
        return flat_outputs(forward(checked))

    return tf.function(serve), [specs]


def export_onnx(model, path, sequence_length=None, opset=None, overwrite=False,
                batch_size=None):
    """Writes `model`'s forward pass to the ONNX file `path`; returns the path.

    Needs `pip install keras-ctx[onnx]` (tf2onnx on TensorFlow, onnxscript on torch;
    onnxruntime to run it).

    Args:
        model: a built keras.Model with named integer inputs (a keras_ctx
            backbone or task model).
        path: the `.onnx` file to write. It is written beside and renamed
            into place, so a failed export leaves nothing behind.
        sequence_length: fixes the sequence axis (dynamic by default on
            TensorFlow; required on torch).
        opset: the ONNX opset; None: the one checked with ONNX Runtime 1.32 (17 through
            tf2onnx, 18 on torch, the lowest torch.onnx's exporter writes itself).
        overwrite: replace an existing file at `path`.
        batch_size: fixes the batch axis (dynamic by default on TensorFlow;
            required on torch).

    Returns:
        `path`.

    Example:
    >>> keras_ctx.export.export_onnx(backbone, "bert.onnx")
    >>> session = onnxruntime.InferenceSession("bert.onnx")
    >>> session.run(["sequence_output"], {"token_ids": ids, "padding_mask": mask,
    ...                                   "segment_ids": segments})
    """
    from keras_ctx.layers.embeddings import vocabulary_size_of

    path = os.fspath(path)
    if not path.endswith(".onnx"):
        raise ExportError(f"An ONNX file's name ends in .onnx; got {path!r}.")
    optional_positive_int("sequence_length", sequence_length, error=ExportError)
    optional_positive_int("batch_size", batch_size, error=ExportError)
    refusal = backend.onnx_refusal(model, batch_size, sequence_length)
    if refusal:
        raise ExportError(refusal)
    named_inputs(model)  # built, before anything is imported or written
    _check_size(model)
    write, checked_opset = _WRITERS[backend.ONNX_CONVERTER]
    vocabulary_size = vocabulary_size_of(model)
    with replacing(path, overwrite=overwrite, flag="overwrite=True") as partial:
        write(model, partial, batch_size, sequence_length, opset or checked_opset,
              vocabulary_size)
    return path


def _check_size(model):
    """ExportError when `model`'s weights alone are over one ONNX file's size."""
    size = sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in model.weights)
    if size > MAX_BYTES:
        raise ExportError(
            f"{model.name!r} holds {size / 2**30:.1f} GiB of weights, and an ONNX file (one "
            "protobuf message) holds at most 2 GiB: export a SavedModel instead "
            "(keras_ctx.export.export_saved_model).")


def _imported(*names):
    """The modules `names`; ExportError naming the extra that brings a missing one."""
    import importlib

    try:
        return [importlib.import_module(name) for name in names]
    except ImportError as error:
        raise ExportError(f"ONNX export needs {error.name}: pip install "
                          "'keras-ctx[onnx]'.") from None


def _through_tf2onnx(model, partial, batch_size, sequence_length, opset, vocabulary_size):
    onnx, tf2onnx = _imported("onnx", "tf2onnx")
    function, signature = _onnx_function(model, batch_size, sequence_length, vocabulary_size)
    proto, _ = tf2onnx.convert.from_function(
        function, input_signature=signature, opset=opset, output_path=partial,
        custom_op_handlers={"Erfc": (_erfc_as_one_minus_erf, [])})
    # tf2onnx leaves an op it cannot convert in the graph under its TensorFlow name
    # (and logs it): ONNX Runtime would refuse the file when it loads it.
    unconverted = sorted({node.op_type for node in proto.graph.node
                          if not onnx.defs.has(node.op_type, node.domain)})
    if unconverted:
        raise ExportError(
            f"{type(model).__name__} cannot be exported to ONNX: tf2onnx has no ONNX "
            f"form for its TensorFlow op(s) {', '.join(unconverted)} (opset {opset}); "
            "export a SavedModel instead (keras_ctx.export.export_saved_model).")


def _through_keras(model, partial, batch_size, sequence_length, opset, vocabulary_size):
    from keras_ctx.export import onnx_keras

    _imported("onnx", "onnxscript")  # torch.onnx's exporter needs both
    onnx_keras.write(model, partial, batch_size, sequence_length, opset, vocabulary_size)


# backend.ONNX_CONVERTER -> (the writer, the opset checked with it).
_WRITERS = {"tf2onnx": (_through_tf2onnx, OPSET), "model.export": (_through_keras, 18)}
