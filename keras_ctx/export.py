"""SavedModel export for TF Serving: `export_saved_model(model, directory)`.

Writes `directory/<version>/` with three signatures:
  - `serving_default`: the model's integer inputs (token_ids, padding_mask,
    segment_ids, or ELMo's character_ids) -> its named outputs. The graph
    holds core TensorFlow ops only, so stock TF Serving loads it.
  - `serve_text` (when a `preprocessor` is given): a batch of strings, turned
    into the integer inputs inside the graph. A tokenizer built on
    tensorflow-text ops (WordPiece, SentencePiece, BPE) needs a TF Serving
    build with those ops linked in (e.g. the tensorflow/serving image with
    tensorflow-text's custom ops, or `tensorflow_text` imported before
    `tf.saved_model.load` in Python); `serving_default` never does.
  - `serve_examples`: serialized tf.Example protos whose int64 features are
    named as the inputs, each of the fixed `sequence_length`.
Batch size is dynamic everywhere. Sequence length is dynamic in
`serving_default` unless the model fixes it; `serve_text` pads or rejects at
`sequence_length` (the preprocessor decides); `serve_examples` needs it fixed.

XLA (`jit_compile=True`): the model's forward pass in every signature is an
XLA-compiled function (`tf.function(jit_compile=True)`, saved with
`_XlaMustCompile`); the input checks, `parse_example` and the preprocessor
stay outside it (XLA compiles asserts away). The runtime compiles it on the
first call for each input shape (fix `sequence_length` so that there is one).
Which servers run such a SavedModel: see saved_models/README.md.

Outputs: each output tensor under its own name in float32 (mixed-precision
models are cast), batch first like every input. A list output (hidden_states,
XLNet's memory) is stacked into one tensor on axis 1: hidden_states is
(batch, layers, time, hidden), embeddings first. The backbone's own Python
output stays a list.
"""

import os
import shutil
import tempfile

import keras
import tensorflow as tf

from keras_ctx import files


class ExportError(ValueError):
    """The model or the directory cannot be exported as asked."""


def _named_inputs(model):
    """{input name: KerasTensor} of a built model."""
    if not model.built or not getattr(model, "inputs", None):
        raise ExportError(
            f"The model {model.name!r} has not been built: call it on a batch "
            "of inputs (or build it from a preset) before exporting."
        )
    if isinstance(model.input, dict):
        return dict(model.input)
    return {t.name: t for t in model.inputs}


def _input_specs(named, sequence_length):
    specs = {}
    for name, tensor in named.items():
        shape = list(tensor.shape)
        shape[0] = None
        if sequence_length is not None and len(shape) >= 2:
            shape[1] = sequence_length
        dtype = tf.as_dtype(tensor.dtype)
        if dtype.is_integer or dtype == tf.bool:
            dtype = tf.int32
        specs[name] = tf.TensorSpec(shape, dtype, name=name)
    return specs


def _flat_outputs(outputs):
    """Named float32 (or int) tensors; lists stacked after the batch axis."""
    if not isinstance(outputs, dict):
        outputs = {"outputs": outputs}
    flat = {}
    for name, value in outputs.items():
        if isinstance(value, (list, tuple)):
            # Batch first, like every other output: (batch, layers, ...).
            value = tf.stack([tf.convert_to_tensor(v) for v in value], axis=1)
        value = tf.convert_to_tensor(value)
        if value.dtype.is_floating:
            value = tf.cast(value, tf.float32)
        flat[name] = value
    return flat


def _check_vocabulary_is_known(model, named):
    """ExportError when the model takes token ids but their vocabulary size is unknown.

    Exporting anyway would serve an out-of-range id as some other row.
    """
    from keras_ctx.layers.embeddings import vocabulary_size_of

    token_inputs = sorted(name for name in named if name.endswith("token_ids"))
    if token_inputs and vocabulary_size_of(model) is None:
        raise ExportError(
            f"Cannot find the vocabulary size of {model.name!r}, so its {token_inputs[0]} "
            "input could not be checked for out-of-range ids: expose the token table as "
            "the backbone's `token_embedding`, or feed the input into one TokenEmbedding.")


def _checked_inputs(model, inputs):
    """Inputs after the checks serving needs: ids in the vocabulary, length in range.

    Without them an id of -1 serves the last embedding row, and a too-long
    input fails deep in the graph ("Expected size[0] in [0, 32], but got 33").
    """
    from keras_ctx.layers.embeddings import (check_token_ids, max_positions_of,
                                             vocabulary_size_of)

    vocabulary_size = vocabulary_size_of(model)
    max_positions = max_positions_of(model)
    checked = {}
    for name, value in inputs.items():
        checks = []
        if value.dtype == tf.int64:  # serve_examples: no wrap-around when cast to int32
            # Two bounds, not tf.abs: the abs of int64's minimum is itself negative.
            message = f"input {name} holds a value outside int32."
            checks.append(tf.debugging.assert_less_equal(
                value, tf.constant(2**31 - 1, tf.int64), message=message))
            checks.append(tf.debugging.assert_greater_equal(
                value, tf.constant(-(2**31), tf.int64), message=message))
        if max_positions is not None and value.shape.rank >= 2:
            checks.append(tf.debugging.assert_less_equal(
                tf.shape(value)[1], max_positions,
                message=f"input {name} is longer than the {max_positions} "
                        "positions the model has (max_sequence_length); shorten it."))
        with tf.control_dependencies(checks):
            value = tf.identity(value)
        if vocabulary_size is not None and name.endswith("token_ids"):
            value = check_token_ids(value, vocabulary_size, f"input {name}")
        checked[name] = value
    return checked


def _forward(model, jit_compile):
    """inputs (cast to the model's dtypes) -> named outputs; XLA-compiled if asked."""

    def forward(cast):
        if not isinstance(model.input, dict):
            cast = [cast[t.name] for t in model.inputs]
            cast = cast[0] if len(cast) == 1 else cast
        outputs = model(cast, training=False)
        # Task models name their serving outputs (logits, probabilities, ...).
        if hasattr(model, "serving_outputs"):
            outputs = model.serving_outputs(outputs)
        return _flat_outputs(outputs)

    return tf.function(forward, jit_compile=True) if jit_compile else forward


def _call_model(model, inputs, input_dtypes, forward):
    # The checks run outside `forward`: XLA would compile them away.
    inputs = _checked_inputs(model, inputs)
    return forward({name: tf.cast(value, input_dtypes[name]) for name, value in inputs.items()})


def check_export_target(directory, version=1, overwrite=False):
    """The version directory an export would write; ExportError if it exists and not `overwrite`.

    Call it before any long work (training) whose result is to be exported.
    """
    target = os.path.join(os.fspath(directory), str(version))
    if os.path.exists(target) and os.listdir(target) and not overwrite:
        raise ExportError(
            f"{target} already holds an export. Pass --overwrite (overwrite=True) to "
            f"replace it, or export another version (version={int(version) + 1})."
        )
    return target


def export_saved_model(
    model,
    directory,
    version=1,
    overwrite=False,
    preprocessor=None,
    sequence_length=None,
    jit_compile=False,
):
    """Exports `model` to `directory/version` for TF Serving; returns that path.

    Args:
        model: a built keras.Model with named integer inputs (a keras_ctx
            backbone or task model).
        directory: the model's base directory (TF Serving watches it).
        version: the version subdirectory, a positive integer.
        overwrite: replace an existing non-empty version directory. The new
            export is written to a temporary directory first and moved into
            place only when complete, so a failed export loses nothing.
        preprocessor: optional callable (a keras_ctx / keras-hub preprocessor
            layer, or a function) mapping a 1-D tf.string batch to the
            model's input dict (or to its only input); adds `serve_text`.
        sequence_length: fixes the sequence axis of the integer signatures;
            required for `serve_examples` (skipped when the length is free).
        jit_compile: XLA-compile the model's forward pass in every signature
            (see the module docstring: the server must run XLA, e.g. TF
            Serving with `--xla_cpu_compilation_enabled` on CPU).

    Returns:
        The path of the written version directory.
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ExportError(f"`version` must be a positive integer, got {version!r}.")
    target = check_export_target(directory, version, overwrite)
    named = _named_inputs(model)
    _check_vocabulary_is_known(model, named)
    specs = _input_specs(named, sequence_length)
    input_dtypes = {name: tensor.dtype for name, tensor in named.items()}
    forward = _forward(model, bool(jit_compile))

    archive = keras.export.ExportArchive()
    archive.track(model)

    def serve(inputs):
        return _call_model(model, inputs, input_dtypes, forward)

    archive.add_endpoint("serving_default", serve, input_signature=[specs])

    fixed_length = all(s.shape[1] is not None for s in specs.values() if s.shape.rank >= 2)
    if fixed_length:
        features = {
            name: tf.io.FixedLenFeature(spec.shape[1:], tf.int64)
            for name, spec in specs.items()
        }

        def serve_examples(examples):
            parsed = tf.io.parse_example(examples, features)
            return _call_model(model, parsed, input_dtypes, forward)

        archive.add_endpoint(
            "serve_examples",
            serve_examples,
            input_signature=[tf.TensorSpec([None], tf.string, name="examples")],
        )

    if preprocessor is not None:
        if isinstance(preprocessor, (keras.layers.Layer, tf.Module)):
            archive.track(preprocessor)  # its vocabulary tables travel with it
        if not callable(preprocessor):
            raise ExportError("`preprocessor` must map a batch of strings to the inputs.")

        def serve_text(text):
            features = preprocessor(text)
            if not isinstance(features, dict):
                if len(named) != 1:
                    raise ExportError(
                        f"The preprocessor returned one tensor but the model takes "
                        f"{sorted(named)}; return a dict keyed by input name.")
                features = {next(iter(named)): features}
            return _call_model(model, features, input_dtypes, forward)

        archive.add_endpoint(
            "serve_text",
            serve_text,
            input_signature=[tf.TensorSpec([None], tf.string, name="text")],
        )

    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    # The pid in the name lets the next export remove what a killed one left.
    files.remove_dead_staging(parent, ".export-")
    staging = tempfile.mkdtemp(prefix=f".export-{os.getpid()}-", dir=parent)
    try:
        archive.write_out(os.path.join(staging, "model"), verbose=False)
        if os.path.exists(target):
            backup = target + ".replaced"
            os.replace(target, backup)
            os.replace(os.path.join(staging, "model"), target)
            shutil.rmtree(backup)
        else:
            os.replace(os.path.join(staging, "model"), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


from keras_ctx.export_onnx import export_onnx  # noqa: E402,F401  (needs the helpers above)
