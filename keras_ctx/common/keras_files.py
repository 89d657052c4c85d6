"""Keras' own weight files (`.weights.h5`, the weights inside a `.keras`), checked.

Keras loads a `.weights.h5` by walking the model and reading what it finds:
a file from a deeper model loads into a shallower one with its extra layers
ignored, and an int8 or bool dataset is cast into a float variable, both
without a word. `load_weights` and `load_model` first compare the file's
datasets with the model's weights (count, shapes, dtypes), and `load_model`
checks the sizes a `.keras` config claims against the stored shapes before
building anything. Shared by run directories (`runs`), resumable training's
checkpoints (`training`) and keras-hub presets (`convert.kerashub`).
"""

import collections
import json
import os
import zipfile

import numpy as np

from keras_ctx.common.errors import CheckpointError
from keras_ctx.common.files import unique_keys

# Weights are real numbers. Integer or bool tensors would load their codes as values (an
# int8 table's -128..127 as embeddings); quantized layouts are declared by the model's own
# variables (Keras' int8 kernels and their scales), never inferred from a file.
FLOATING_DTYPES = ("float16", "bfloat16", "float32", "float64")

# Sizes a backbone's config names (ours, and keras-hub's spelling): each is the length of
# an axis of some stored tensor (a table's rows, a kernel's width), so none can exceed the
# longest axis, and the token table (rows x width) is stored whole. max_sequence_length is
# the rows of a learned position table in every config that names it (BERT, ALBERT,
# ELECTRA, ERNIE, XLM, GPT, BART, ours and keras-hub's; relative and recurrent models have
# no such key), so it is stored whole too.
VOCABULARY_SIZES = ("vocabulary_size", "vocab_size")
POSITIONS = "max_sequence_length"
WIDTHS = ("embedding_size", "embedding_dim", "hidden_size", "hidden_dim")
CLAIMED_SIZES = (VOCABULARY_SIZES + WIDTHS + ("intermediate_size", "intermediate_dim")
                 + (POSITIONS,))


class ClaimedSizeError(CheckpointError):
    """A size a file claims (a config, run.json) that its stored weights do not have: the
    message names the file and field, and is shown as it is."""


def h5_datasets(handle):
    """{path: (shape, dtype)} of a Keras weights file's datasets, its optimizer's left out."""
    import h5py

    found = {}

    def visit(name, item):
        if isinstance(item, h5py.Dataset) and not name.startswith("optimizer/"):
            found[name] = (tuple(int(n) for n in item.shape), str(item.dtype))

    handle.visititems(visit)
    return found


def read_h5_datasets(path):
    """h5_datasets of a file (or file object), with one error naming it when unreadable."""
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            return h5_datasets(handle)
    except OSError as error:
        raise CheckpointError(f"{getattr(path, 'name', path)} is not a readable Keras weights "
                              f"file ({str(error).splitlines()[0]}); it is damaged or "
                              "incomplete.") from None


def check_weights_fit(model, datasets, source, partial=False):
    """The file's datasets against the model's weights: dtypes, then one dataset per weight.

    A dataset that is not floating point must meet a model weight of its own
    dtype (Keras' int8 kernels declare theirs); a file holding weights the
    model has no place for, or lacking some, is a partial load: an error
    unless `partial`.
    """
    ours = collections.Counter(_kind(tuple(int(n) for n in w.shape), str(w.dtype))
                               for w in model.weights)
    theirs = collections.Counter(_kind(*value) for value in datasets.values())
    declared = {str(w.dtype) for w in model.weights}
    for name, (shape, dtype) in datasets.items():
        if dtype not in FLOATING_DTYPES and dtype not in declared:
            raise CheckpointError(
                f"{source}: weight {name!r} {shape} has dtype {dtype}, not a float, and the "
                f"model has no {dtype} weight: its values would load as codes; save the "
                "weights from the float model (or dequantize them).")
    if partial or ours == theirs:
        return
    extra = sorted(name for name, value in datasets.items()
                   if theirs[_kind(*value)] > ours[_kind(*value)])
    what = (f"its {extra[0]!r} {datasets[extra[0]][0]} has no place in the model"
            if extra else "some of the model's weights are missing from it")
    raise CheckpointError(
        f"{source} holds {len(datasets)} weights but {type(model).__name__} has "
        f"{len(model.weights)} ({what}): it was saved from another configuration; build "
        "the model it came from, or load with partial=True to set only what matches.")


def _kind(shape, dtype):
    """What must match between a stored weight and a variable: its shape, and its dtype
    unless both are floats (Keras casts float16 to float32 on load)."""
    return shape, "float" if dtype in FLOATING_DTYPES else dtype


def load_weights(model, path, partial=False):
    """`model.load_weights(path)` for a `.weights.h5`, refusing a file that does not fit.

    Args:
        model: a built Keras model.
        path: its `.weights.h5`.
        partial: allow a file with more or fewer weights than the model (Keras
            then sets what it finds by name).
    """
    path = os.fspath(path)
    check_weights_fit(model, read_h5_datasets(path), path, partial)
    import keras

    keras.Model.load_weights(model, path)  # checked here (CheckedWeightFiles would again)
    return model


class CheckedWeightFiles:
    """Mixin for a keras.Model: `load_weights` of a `.weights.h5` refuses a file that does
    not fit (Keras sets what it finds by name and says nothing: a file of another depth
    loaded 10 of a backbone's 23 variables). `skip_mismatch=True` keeps Keras' own
    behaviour; `keras_ctx.common.keras_files.load_weights(..., partial=True)` sets only
    what matches, checked."""

    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        if not skip_mismatch and str(filepath).endswith(".weights.h5"):
            path = os.fspath(filepath)
            check_weights_fit(self, read_h5_datasets(path), path)
        return super().load_weights(filepath, skip_mismatch=skip_mismatch, **kwargs)


def check_claimed_sizes(config, shapes, source):
    """The sizes a config claims (our names, at any depth) against the stored shapes.

    Each must be at most the longest stored axis, and the embedding table the
    vocabulary and width imply must fit in what is stored: checked before
    anything is built, so a claimed 10**10-row table is refused, not allocated.
    """
    longest = max((n for shape in shapes for n in shape), default=0)
    stored = sum(int(np.prod(shape, dtype=np.float64)) for shape in shapes)
    for settings in _configs(config):
        sizes = {key: settings[key] for key in CLAIMED_SIZES
                 if type(settings.get(key)) is int}
        for key, value in sizes.items():
            if value > longest:
                raise ClaimedSizeError(
                    f"{source}: {key} = {value} is more than "
                    f"the longest stored weight axis ({longest}); the config does not match "
                    "its weights (fix the field or use the matching file).")
        width = next((sizes[key] for key in WIDTHS if key in sizes), 1)
        tables = [("token", next((sizes[k] for k in VOCABULARY_SIZES if k in sizes), 0)),
                  ("position", sizes.get(POSITIONS, 0))]
        for table, rows in tables:
            if rows * width > stored:
                raise ClaimedSizeError(
                    f"{source}: a {rows} x {width} {table} table is more than the "
                    f"{stored:,} weights stored; the config does not match its weights.")


def check_sequence_length(config, sequence_length, source):
    """A recorded sequence length against the position table the model config names.

    `config` is a `.keras` config whose sizes were checked against its stored
    weights (`check_claimed_sizes`): a run.json claiming longer inputs than
    the table holds is refused before inputs of that length are made.
    """
    limit = next((settings[POSITIONS] for settings in _configs(config)
                  if type(settings.get(POSITIONS)) is int), None)
    if limit is not None and type(sequence_length) is int and sequence_length > limit:
        raise ClaimedSizeError(
            f"{source}: sequence_length = {sequence_length} is more than the model's "
            f"{POSITIONS} ({limit}, its stored position table); the file does not match "
            f"the model (fix the field to at most {limit}).")


def _configs(value, depth=0):
    """Every dict inside a (Keras-serialised) config, the nested layers' configs included."""
    if depth > 100:  # Keras' own configs nest a few levels; deeper is not one of them
        raise CheckpointError("The model config nests more than 100 levels; it is damaged.")
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _configs(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _configs(item, depth + 1)


# What keras.saving.load_model raises on a damaged or refused file: safe mode refuses a
# config naming an arbitrary function (e.g. `subprocess.check_call`) with a TypeError.
LOAD_ERRORS = (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError, TypeError,
               AttributeError)


def load_model(path, partial=False, compile=False, claims=()):
    """A `.keras` file's model, its claimed sizes and its weights checked (one-line errors).

    Its config.json's sizes are checked against model.weights.h5's shapes
    before Keras builds the model, and the loaded model's weights against the
    file's datasets after (`check_weights_fit`).

    Args:
        path: the `.keras` file.
        partial: allow a file with more or fewer weights than the model.
        compile: restore the compiled loss and metrics too (Keras' own flag).
        claims: [(source, record)]: other files' records about this model (a
            run's run.json: its "sizes", "sequence_length"), checked against
            the same stored shapes before anything is built.
    """
    import keras

    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json").decode("utf-8"),
                                object_pairs_hook=unique_keys)
            with archive.open("model.weights.h5") as weights:
                datasets = read_h5_datasets(weights)
    except (zipfile.BadZipFile, KeyError, OSError, UnicodeDecodeError, ValueError,
            RecursionError) as error:
        raise CheckpointError(f"{path} is not a readable .keras file ({_one_line(error)}); "
                              "it is damaged or incomplete.") from None
    shapes = [shape for shape, _ in datasets.values()]
    check_claimed_sizes(config, shapes, path)
    for source, record in claims:
        check_claimed_sizes(record, shapes, source)
        if isinstance(record, dict):
            check_sequence_length(config, record.get("sequence_length"), source)
    try:
        model = keras.saving.load_model(path, compile=compile)
    except LOAD_ERRORS as error:
        raise CheckpointError(f"{path} cannot be loaded ({_one_line(error)}); it is damaged "
                              "or names code keras-ctx does not run.") from None
    check_weights_fit(model, datasets, path, partial)
    return model


def _one_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
