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
  - `serve_generate` (when `generation` is given, for a decoder-only or an
    encoder-decoder language model): prompt ids -> generated ids. The whole
    decode loop (prefill, key/value cache, sampler, stop tokens) runs
    inside the graph, with core TensorFlow ops only (XLA-compiled with
    `jit_compile=True`), so stock TF Serving generates.
  - `serve_generate_text` (when `generation` has a `text` codec, which
    `CausalLM.export` / `Seq2SeqLM.export` attach): strings -> generated
    strings, tokenized and detokenized inside the graph (the tokenizer's
    ops, as `serve_text`).
Batch size is dynamic everywhere. `serving_default` takes any sequence length up
to the model's positions on TensorFlow (on JAX, or XLA-compiled, exactly
`sequence_length`; another length is refused naming the one it takes);
`serve_text` pads or rejects at `sequence_length` (the preprocessor decides);
`serve_examples` needs it fixed. With `class_names` (a classifier's), every
signature also returns `label` and `classes`: the names beside `probabilities`.

XLA (`jit_compile=True`): the model's forward pass in every signature is an
XLA-compiled function (`tf.function(jit_compile=True)`, saved with
`_XlaMustCompile`); the input checks, `parse_example` and the preprocessor
stay outside it (XLA compiles asserts away). The runtime compiles it on the
first call for each input shape (fix `sequence_length` so that there is one).
Which servers run such a SavedModel: see saved_models/README.md.

JAX: Keras' ExportArchive converts the model's forward pass with jax2tf (one
XLA module in the graph; the SavedModel also carries it as the `forward`
signature, without the checks). The checks, `parse_example` and the
preprocessor stay TensorFlow ops (a Keras preprocessing layer's `call` runs on the
strings: Keras' call of it would make them JAX arrays); the sequence length must be fixed and
`serve_generate` is exported from TensorFlow only (keras_ctx.backend).

Outputs: each output tensor under its own name in float32 (mixed-precision
models are cast), batch first like every input. A list output (hidden_states,
XLNet's memory) is stacked into one tensor on axis 1: hidden_states is
(batch, layers, time, hidden), embeddings first. A list whose tensors differ in
width (AWD-LSTM's and CoVe's layers) cannot be stacked: each entry is its own output,
`hidden_states_0`, `hidden_states_1`, ... The backbone's own Python output stays a list.
"""

import errno
import os
import shutil
import tempfile

import keras
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.common import files
from keras_ctx.common.validation import optional_positive_int, positive_int
from keras_ctx import backend


class ExportError(ValueError):
    """The model or the directory cannot be exported as asked."""


def named_inputs(model):
    """{input name: KerasTensor} of a built model; ExportError if it is not built.

    Args:
        model: a keras.Model.

    Returns:
        A dict from input name to the model's symbolic input.
    """
    if not model.built or not getattr(model, "inputs", None):
        raise ExportError(
            f"The model {model.name!r} has not been built: call it on a batch "
            "of inputs (or build it from a preset) before exporting."
        )
    if isinstance(model.input, dict):
        return dict(model.input)
    return {t.name: t for t in model.inputs}


def input_specs(named, sequence_length):
    """tf.TensorSpecs of the served inputs: batch free, integers as int32.

    Args:
        named: `named_inputs(model)`.
        sequence_length: fixes axis 1 of every input of rank >= 2 (None: free).

    Returns:
        {input name: tf.TensorSpec}.
    """
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


def flat_outputs(outputs):
    """Named float32 (or int) tensors; lists stacked after the batch axis.

    Args:
        outputs: a model's outputs: a dict, or one tensor (named "outputs").

    Returns:
        {name: tensor}, floating tensors cast to float32, a list output
        stacked into one tensor on axis 1; a list whose tensors differ in width
        (AWD-LSTM's and CoVe's layers) as one output per entry, `name_0`,
        `name_1`, ...
    """
    if not isinstance(outputs, dict):
        outputs = {"outputs": outputs}
    flat = {}
    for name, value in outputs.items():  # keras.ops: the backend's tensors (jax2tf on JAX)
        if isinstance(value, (list, tuple)):
            value = [keras.ops.convert_to_tensor(v) for v in value]
            if len({tuple(v.shape[2:]) for v in value}) > 1:  # cannot stack: one each
                flat.update(flat_outputs({f"{name}_{i}": v for i, v in enumerate(value)}))
                continue
            # Batch first, like every other output: (batch, layers, ...).
            value = keras.ops.stack(value, axis=1)
        value = keras.ops.convert_to_tensor(value)
        if "float" in keras.backend.standardize_dtype(value.dtype):
            value = keras.ops.cast(value, "float32")
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


def id_table_sizes(model):
    """{input name: rows of the smallest table it indexes} for every input of `model`
    (or of the backbones inside it) that a functional graph feeds straight into a table
    (a layer with `vocabulary_size` or keras' `input_dim`): token_ids, segment_ids, ...

    What the served inputs are checked against outside an XLA-compiled function,
    which compiles the tables' own checks away and clamps an id past the end.
    """
    from keras_ctx.common import compat

    sizes = {}
    for layer in compat.flatten_layers(model, include_self=True):
        size = next((s for s in (getattr(layer, a, None) for a in ("vocabulary_size",
                                                                     "input_dim"))
                     if isinstance(s, int) and not isinstance(s, bool)), None)
        if size is None:
            continue
        for node in compat.attribute(layer, "inbound_nodes"):
            for tensor in node.input_tensors:
                source = compat.attribute(tensor, "keras_history").operation
                if isinstance(source, keras.layers.InputLayer):
                    sizes[source.name] = min(size, sizes.get(source.name, size))
    return sizes


def _checked_inputs(model, inputs, lengths=None):
    """Inputs after the checks serving needs: ids in their tables, length in range.

    Without them an id of -1 serves the last embedding row (a segment id of 2
    another segment's), and a too-long input fails deep in the graph
    ("Expected size[0] in [0, 32], but got 33"). `lengths`: {input name: the one
    length a fixed-shape signature takes}; another length failed inside the model
    ("Incompatible shapes ... embeddings_add/Add").
    """
    from keras_ctx.backend import tf_ops  # the serving graph's checks: TF ops on every backend
    from keras_ctx.layers.embeddings import max_positions_of, vocabulary_size_of

    vocabulary_size = vocabulary_size_of(model)
    tables = id_table_sizes(model)
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
        fixed = (lengths or {}).get(name)
        if fixed is not None:
            checks.append(tf.debugging.assert_equal(
                tf.shape(value)[1], fixed,
                message=f"input {name} must hold exactly {fixed} positions (this signature's "
                        "fixed length): pad or cut it to that, or call serve_text."))
        if max_positions is not None and value.shape.rank >= 2:
            checks.append(tf.debugging.assert_less_equal(
                tf.shape(value)[1], max_positions,
                message=f"input {name} is longer than the {max_positions} "
                        "positions the model has (max_sequence_length); shorten it."))
        with tf.control_dependencies(checks):
            value = tf.identity(value)
        size = vocabulary_size if name.endswith("token_ids") else None
        size = size if size is not None else tables.get(name)
        if size is not None:
            value = tf_ops.check_token_ids(value, size, f"input {name}")
        checked[name] = value
    return checked


def forward_function(model, jit_compile):
    """A function: inputs (cast to the model's dtypes) -> `flat_outputs`; XLA if asked.

    Args:
        model: a built keras.Model (task models may name their serving
            outputs with a `serving_outputs(outputs)` method).
        jit_compile: wrap it in `tf.function(jit_compile=True)`.

    Returns:
        The function (a dict of input tensors -> a dict of output tensors).
    """

    def forward(cast):
        if not isinstance(model.input, dict):
            cast = [cast[t.name] for t in model.inputs]
            cast = cast[0] if len(cast) == 1 else cast
        return served_outputs(model, cast)

    return backend.compiled_forward(forward, jit_compile)


def served_outputs(model, inputs):
    """`flat_outputs` of `model` on `inputs`; task models name their serving outputs
    (logits, probabilities, ...) with `serving_outputs`."""
    outputs = model(inputs, training=False)
    if hasattr(model, "serving_outputs"):
        outputs = model.serving_outputs(outputs)
    return flat_outputs(outputs)


def _call_model(model, inputs, input_dtypes, forward, lengths=None, class_names=None):
    # The checks run outside `forward`: XLA would compile them away.
    inputs = _checked_inputs(model, inputs, lengths)
    outputs = forward({name: tf.cast(value, input_dtypes[name])
                       for name, value in inputs.items()})
    return outputs if class_names is None else _with_class_names(outputs, class_names)


def _with_class_names(outputs, class_names):
    """A classifier's outputs plus `label` (batch,), its most probable class's name, and
    `classes` (batch, classes), the names in the order of `probabilities` (batch first,
    as TF Serving's row format needs)."""
    if "probabilities" not in outputs:
        raise ExportError(f"`class_names` name a classifier's classes, but the model's "
                          f"outputs are {sorted(outputs)} (no probabilities).")
    names = tf.constant(class_names, tf.string)
    probabilities = outputs["probabilities"]
    return dict(outputs, label=tf.gather(names, tf.argmax(probabilities, axis=-1)),
                classes=tf.tile(names[None], [tf.shape(probabilities)[0], 1]))


class Generation:
    """What `serve_generate` decodes: `export_saved_model(..., generation=Generation(...))`.

    Args:
        max_length: the static length of the generated rows (decoder-only:
            prompt included; encoder-decoder: the decoder's output, start
            token first).
        sampler: a `keras_ctx.generation` sampler or its name ("greedy",
            "top_k", "top_p", "random", "beam"). The random ones add a
            `seed` input (int32 scalar); the same seed gives Python
            `generate`'s tokens.
        end_token_id: a stop token id or a list of them (None: none).
        pad_token_id: the id after a row's stop token, and the prompts' padding.
        decoder_start_token_id: an encoder-decoder's decoder start token.
        text: optional codec for `serve_generate_text`: an object with
            `encode(strings) -> dict of prompt inputs` and
            `decode(token_ids, padding_mask) -> strings` (tracked with the
            export, so a layer's tables travel with it).
        use_cache: decode one token per step with the key/value cache.
        decoder: what decodes the exported backbone, where its family's decoder does
            (`keras_ctx.generation.causal_decoder`: XLM's CLM with its PredLayer and the
            language its rows are written in); None: `causal_decoder(backbone)` (the
            backbone itself where it decodes by itself, as GPT's).
    """

    def __init__(self, max_length, sampler="greedy", end_token_id=None, pad_token_id=0,
                 decoder_start_token_id=None, text=None, use_cache=True, decoder=None):
        from keras_ctx import generation

        self.max_length = positive_int("max_length", max_length, least=2, error=ExportError)
        self.sampler = generation.get_sampler(sampler)
        self.end_token_id = end_token_id
        self.pad_token_id = int(pad_token_id)
        self.decoder_start_token_id = decoder_start_token_id
        self.text = text
        self.use_cache = bool(use_cache)
        self.decoder = decoder

    @property
    def seeded(self):
        """True when the sampler draws at random (the signatures take a `seed`)."""
        from keras_ctx.generation import BeamSampler, GreedySampler

        return not isinstance(self.sampler, (GreedySampler, BeamSampler))


def _generation_functions(model, generation, jit_compile):
    """(serve_generate, its input signature, serve_generate_text or None) for `model`."""
    from keras_ctx import generation as decoding
    from keras_ctx.layers.embeddings import (check_token_ids, max_positions_of,
                                             vocabulary_size_of)

    backbone = getattr(model, "backbone", model)
    seq2seq = hasattr(backbone, "decode_with_cache")
    decoder = backbone if seq2seq else _decoder_of(backbone, generation.decoder)
    if seq2seq and generation.decoder_start_token_id is None:
        raise ExportError("An encoder-decoder generates from a decoder start token: pass "
                          "Generation(..., decoder_start_token_id=ID) (T5: 0, BART: 2).")
    max_positions = max_positions_of(backbone)
    if max_positions is not None and generation.max_length > max_positions:
        raise ExportError(f"max_length {generation.max_length} is more than the "
                          f"{max_positions} positions of {backbone.name!r}; lower it.")
    end_tokens = decoding.end_tokens_of(generation.end_token_id, backbone)
    vocabulary_size = vocabulary_size_of(backbone)
    length, pad = generation.max_length, generation.pad_token_id
    prompt_names = (("encoder_token_ids", "encoder_padding_mask") if seq2seq
                    else ("token_ids", "padding_mask"))

    def loop(token_ids, prompt_mask, seed, encoder_ids, encoder_mask):
        return decoding.decode(decoder, token_ids, prompt_mask, generation.sampler, seed,
                               end_tokens, pad, use_cache=generation.use_cache,
                               encoder_token_ids=encoder_ids,
                               encoder_padding_mask=encoder_mask)

    loop = tf.function(loop, jit_compile=True) if jit_compile else loop

    def checked(ids, name):
        ids = tf.cast(ids, tf.int32)
        if vocabulary_size is not None:
            ids = check_token_ids(ids, vocabulary_size, f"input {name}")
        return ids

    def run(inputs, seed):
        # The checks run outside `loop`: XLA would compile them away.
        ids = checked(inputs[prompt_names[0]], prompt_names[0])
        mask = tf.cast(inputs[prompt_names[1]], tf.bool)
        if seq2seq:
            if max_positions is not None:
                with tf.control_dependencies([tf.debugging.assert_less_equal(
                        tf.shape(ids)[1], max_positions,
                        message=f"a source is longer than the {max_positions} positions "
                                "of the encoder; shorten it.")]):
                    ids = tf.identity(ids)
            encoder = (ids, tf.cast(mask, tf.int32))
            ids = tf.fill([tf.shape(ids)[0], 1], generation.decoder_start_token_id)
            mask = tf.ones_like(ids, tf.bool)
        else:
            encoder = (None, None)
        width = tf.shape(ids)[1]
        checks = [
            tf.debugging.assert_less_equal(
                width, length, message=f"a prompt is longer than max_length={length}; "
                                       "shorten it or export a larger max_length."),
            tf.debugging.assert_greater(
                width, 0, message="a prompt is empty: generation needs a token."),
        ]
        if not seq2seq:
            checks.append(tf.debugging.assert_equal(
                tf.reduce_all(mask[:, 0]), True,
                message="every prompt needs a token at position 0 (right-padded)."))
        with tf.control_dependencies(checks):
            padding = [[0, 0], [0, length - width]]
            ids = tf.pad(ids, padding, constant_values=pad)
            mask = tf.pad(mask, padding, constant_values=False)
        ids.set_shape([None, length])
        mask.set_shape([None, length])
        out = loop(ids, mask, seed, *encoder)
        out = dict(out)
        for name in ("padding_mask", "beam_padding_mask"):
            if name in out:
                out[name] = tf.cast(out[name], tf.int32)
        return out

    seed_spec = [tf.TensorSpec([], tf.int32, name="seed")] if generation.seeded else []
    id_specs = {name: tf.TensorSpec([None, None], tf.int32, name=name)
                for name in prompt_names}

    def serve_generate(inputs, *seed):
        return run(inputs, seed[0] if seed else tf.constant(0, tf.int32))

    serve_text = None
    if generation.text is not None:
        def serve_text(text, *seed):
            out = serve_generate(generation.text.encode(text), *seed)
            out["text"] = generation.text.decode(out["token_ids"], out["padding_mask"])
            return out

    return serve_generate, [id_specs] + seed_spec, serve_text, seed_spec


def _decoder_of(backbone, decoder):
    """What decodes a decoder-only `backbone` (`Generation.decoder`), or an ExportError."""
    from keras_ctx import generation as decoding

    if decoder is None:
        try:
            return decoding.causal_decoder(backbone)
        except ValueError:
            raise ExportError(f"{backbone.name!r} is not a language model: `generation` needs "
                              "a decoder-only (GPT, XLM's CLM) or encoder-decoder (T5, BART) "
                              "backbone.") from None
    if getattr(decoder, "backbone", decoder) is not backbone:
        raise ExportError("Generation(decoder=...) decodes another backbone than the one "
                          "exported: pass the decoder made with it (causal_decoder(backbone, "
                          "...)).")
    return decoder


def _checked_class_names(model, class_names):
    """`class_names` as a list of strings, one per logit; ExportError otherwise."""
    if class_names is None:
        return None
    if isinstance(class_names, (str, bytes)) or not all(
            isinstance(name, str) for name in class_names):
        raise ExportError(f"`class_names` must be a list of strings, got {class_names!r}.")
    class_names = list(class_names)
    width = model.outputs[0].shape[-1] if len(model.outputs) == 1 else None
    if width != len(class_names):
        raise ExportError(f"`class_names` names {len(class_names)} classes but {model.name!r} "
                          f"gives {width if width is not None else 'no single row of'} "
                          "logits; pass one name per logit, in the logits' order.")
    return class_names


def check_export_target(directory, version=1, overwrite=False):
    """The version directory an export would write; ExportError if it exists and not `overwrite`.

    Call it before any long work (training) whose result is to be exported. The export
    package's one check of `version`; a command checks its --version where it checks
    its other arguments (`keras_ctx.common.validation.FLAGS`), before it loads anything.
    """
    positive_int("version", version, error=ExportError)
    target = os.path.join(os.fspath(directory), str(version))
    if os.path.isdir(directory):
        _recover_killed_exports(os.path.abspath(directory))
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
    generation=None,
    class_names=None,
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
        sequence_length: the length of `serve_examples`' features (required for
            it: skipped when None) and the preprocessor's. `serving_default`
            takes any length up to the model's positions on TensorFlow without
            `jit_compile`; on JAX or with `jit_compile` exactly this length (another
            is refused naming it).
        jit_compile: XLA-compile the model's forward pass in every signature
            (see the module docstring: the server must run XLA, e.g. TF
            Serving with `--xla_cpu_compilation_enabled` on CPU); with
            `generation`, the whole decode loop is compiled.
        generation: a `Generation` (max_length, sampler, stop tokens, ...)
            adds `serve_generate` (and `serve_generate_text` when it has a
            text codec) for a language model or its backbone.
        class_names: a classifier's class names, in the order of its logits:
            every signature also returns `label` (the most probable class's
            name) and `classes` (the names, per row, as `probabilities`).

    Returns:
        The path of the written version directory.
    """
    optional_positive_int("sequence_length", sequence_length, error=ExportError)
    target = check_export_target(directory, version, overwrite)
    named = named_inputs(model)
    _check_vocabulary_is_known(model, named)
    class_names = _checked_class_names(model, class_names)
    fixed_specs = input_specs(named, sequence_length)
    free_specs = input_specs(named, None)
    # Ids of any length where the backend traces a free axis and XLA compiles no
    # program per length; else the fixed length, checked by name (`_checked_inputs`).
    free = not jit_compile and backend.export_refusal(free_specs, None) is None
    specs = free_specs if free else fixed_specs
    lengths = {} if free else {name: spec.shape[1] for name, spec in specs.items()
                               if spec.shape.rank >= 2 and spec.shape[1] is not None}
    input_dtypes = {name: tensor.dtype for name, tensor in named.items()}
    if backend.export_refusal(specs, generation):
        raise ExportError(backend.export_refusal(specs, generation))
    archive = keras.export.ExportArchive()
    archive.track(model)
    forward = backend.served_forward(archive, forward_function(model, bool(jit_compile)), {
        name: tf.TensorSpec(spec.shape, input_dtypes[name], name=name)
        for name, spec in specs.items()})

    def serve(inputs):
        return _call_model(model, inputs, input_dtypes, forward, lengths, class_names)

    backend.add_endpoint(archive, "serving_default", serve, [specs])

    fixed_length = all(s.shape[1] is not None for s in fixed_specs.values() if s.shape.rank >= 2)
    if fixed_length:
        features = {
            name: tf.io.FixedLenFeature(spec.shape[1:], tf.int64)
            for name, spec in fixed_specs.items()
        }

        def serve_examples(examples):
            parsed = tf.io.parse_example(examples, features)
            return _call_model(model, parsed, input_dtypes, forward, class_names=class_names)

        backend.add_endpoint(archive, "serve_examples", serve_examples,
                              [tf.TensorSpec([None], tf.string, name="examples")])

    if preprocessor is not None:
        if isinstance(preprocessor, (keras.layers.Layer, tf.Module)):
            archive.track(preprocessor)  # its vocabulary tables travel with it
        if not callable(preprocessor):
            raise ExportError("`preprocessor` must map a batch of strings to the inputs.")

        def serve_text(text):
            features = backend.preprocessed(preprocessor, text)
            if not isinstance(features, dict):
                if len(named) != 1:
                    raise ExportError(
                        f"The preprocessor returned one tensor but the model takes "
                        f"{sorted(named)}; return a dict keyed by input name.")
                features = {next(iter(named)): features}
            return _call_model(model, features, input_dtypes, forward, lengths, class_names)

        backend.add_endpoint(archive, "serve_text", serve_text,
                              [tf.TensorSpec([None], tf.string, name="text")])

    if generation is not None:
        if not isinstance(generation, Generation):
            raise ExportError("`generation` must be a keras_ctx.export.Generation, got "
                              f"{type(generation).__name__}.")
        serve_generate, signature, serve_generate_text, seed_spec = _generation_functions(
            model, generation, bool(jit_compile))
        archive.add_endpoint("serve_generate", serve_generate, input_signature=signature)
        if serve_generate_text is not None:
            if isinstance(generation.text, (keras.layers.Layer, tf.Module)):
                archive.track(generation.text)
            archive.add_endpoint(
                "serve_generate_text", serve_generate_text,
                input_signature=[tf.TensorSpec([None], tf.string, name="text")] + seed_spec)

    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    # The pid in the name lets the next export clean up what a killed one left.
    staging = tempfile.mkdtemp(prefix=f".export-{os.getpid()}-", dir=parent)
    try:
        with open(os.path.join(staging, _TARGET), "w", encoding="utf-8") as handle:
            handle.write(os.path.basename(target))
        archive.write_out(os.path.join(staging, "model"), verbose=False)
        _claim_version(os.path.join(staging, "model"), target, overwrite, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


_TARGET = "target"  # in a staging directory: the version it is written for
_REPLACED = "replaced"  # in a staging directory: the version being replaced


def _claim_version(written, target, overwrite, staging):
    """Renames the finished export onto `target`; a version another export claimed
    meanwhile is never replaced without `overwrite` (rename refuses a non-empty one)."""
    if overwrite and os.path.lexists(target):
        # Aside inside the staging directory: a kill between the renames leaves it
        # where the next export puts it back (`_recover_killed_exports`).
        os.replace(target, os.path.join(staging, _REPLACED))
    try:
        os.rename(written, target)
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise ExportError(
            f"{target} was written by another export while this one ran; nothing was "
            f"replaced. Export again as another version, or pass --overwrite "
            "(overwrite=True) to replace it.") from None


def _recover_killed_exports(parent):
    """Puts back a version a killed `--overwrite` export had moved aside, then removes the
    staging directories of dead exporters."""
    import glob

    for leftover in glob.glob(os.path.join(glob.escape(parent), ".export-*")):
        pid = os.path.basename(leftover)[len(".export-"):].partition("-")[0]
        replaced = os.path.join(leftover, _REPLACED)
        if not pid.isdigit() or files.pid_alive(int(pid)) or not os.path.isdir(replaced):
            continue
        try:
            with open(os.path.join(leftover, _TARGET), encoding="utf-8") as handle:
                target = os.path.join(parent, os.path.basename(handle.read().strip()))
        except OSError:
            continue
        if not os.path.lexists(target):
            os.replace(replaced, target)
    files.remove_dead_staging(parent, ".export-")

