"""ONNX export for ONNX Runtime: `export_onnx(model, path)`.

The same forward pass as `export_saved_model`'s `serving_default`: the
model's integer inputs, by name, int32, batch and sequence dynamic (unless
`sequence_length` fixes it) -> its outputs by name, float32, a list output
(`hidden_states`) stacked on axis 1. Converted by tf2onnx (the `[onnx]`
extra of setup.py pins the versions it was checked with).

Two conversions need help (seen with tf2onnx 1.17.0): tf2onnx names outputs
after tensor names, so the traced function returns a flat dict (tf2onnx then
names each output by its key); and TensorFlow writes exact GELU with `Erfc`,
which tf2onnx cannot convert, so it is converted as `1 - Erf(x)` (the same
function: GELU(x) = x/2 (1 + erf(x / sqrt 2))).

Refused in one line, with nothing written: a model on Keras' JAX or PyTorch backend
(tf2onnx converts TensorFlow graphs), and a model with an op tf2onnx has no ONNX form
for (it would leave the op in the file under its TensorFlow name).

ONNX has no assert: an out-of-range token id becomes an index that fails a
small guard `Gather` in ONNX Runtime (the error names `token_ids_out_of_range`)
instead of reading another row (ONNX's Gather reads -1 as the last one).
"""

import os

import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.export.saved_model import (ExportError, flat_outputs, forward_function,
                                          input_specs, named_inputs)
from keras_ctx.common.files import replacing

OPSET = 17


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


def _onnx_function(model, sequence_length):
    from keras_ctx.layers.embeddings import vocabulary_size_of

    named = named_inputs(model)
    specs = input_specs(named, sequence_length)
    dtypes = {name: tensor.dtype for name, tensor in named.items()}
    vocabulary_size = vocabulary_size_of(model)
    forward = forward_function(model, jit_compile=False)

    def serve(inputs):
        checked = {}
        for name, value in inputs.items():
            if vocabulary_size is not None and name.endswith("token_ids"):
                value = _guarded(value, vocabulary_size)
            checked[name] = tf.cast(value, dtypes[name])
        return flat_outputs(forward(checked))

    return tf.function(serve), [specs]


def export_onnx(model, path, sequence_length=None, opset=OPSET, overwrite=False):
    """Writes `model`'s forward pass to the ONNX file `path`; returns the path.

    Needs `pip install keras-ctx[onnx]` (tf2onnx; onnxruntime to run it).

    Args:
        model: a built keras.Model with named integer inputs (a keras_ctx
            backbone or task model).
        path: the `.onnx` file to write. It is written beside and renamed
            into place, so a failed export leaves nothing behind.
        sequence_length: fixes the sequence axis (dynamic by default).
        opset: the ONNX opset (17 was checked with ONNX Runtime 1.32).
        overwrite: replace an existing file at `path`.

    Returns:
        `path`.

    Example:
    >>> keras_ctx.export.export_onnx(backbone, "bert.onnx")
    >>> session = onnxruntime.InferenceSession("bert.onnx")
    >>> session.run(["sequence_output"], {"token_ids": ids, "padding_mask": mask,
    ...                                   "segment_ids": segments})
    """
    path = os.fspath(path)
    if not path.endswith(".onnx"):
        raise ExportError(f"An ONNX file's name ends in .onnx; got {path!r}.")
    _check_tensorflow_weights(model)
    try:
        import onnx
        import tf2onnx
    except ImportError as error:
        raise ExportError(f"ONNX export needs {error.name}: pip install "
                          "'keras-ctx[onnx]'.") from None
    function, signature = _onnx_function(model, sequence_length)
    with replacing(path, overwrite=overwrite, flag="overwrite=True") as partial:
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
    return path


def _check_tensorflow_weights(model):
    """ExportError when `model` runs on another Keras backend: tf2onnx converts TensorFlow
    graphs, and this model's forward pass is JAX or PyTorch code."""
    weights = getattr(model, "weights", None) or []
    module = type(weights[0].value).__module__.split(".")[0] if weights else "tensorflow"
    if module != "tensorflow":
        running = {"jaxlib": "jax"}.get(module, module)
        raise ExportError(
            f"ONNX export converts a TensorFlow graph (tf2onnx), and {model.name!r} runs on "
            f"Keras' {running} backend: save its weights, then call export_onnx in a process "
            "with KERAS_BACKEND=tensorflow (keras_ctx.export.export_saved_model also "
            "exports from JAX).")
