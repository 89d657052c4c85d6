"""What every checkpoint converter shares: the error type and the tensor reader.

`TensorReader` hands out a checkpoint's tensors by name and insists, at the
end, that each was used; `assign` copies one into a variable after checking
its shape. Format modules (huggingface, tensorflow, kerashub, elmo) and the
declarative weight maps (mapping) build on these.
"""

import collections.abc
import math
import os
import re

import numpy as np

from keras_ctx.common import validation
from keras_ctx.common.errors import CheckpointError  # noqa: F401  (converters raise it from here)
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.files import read_json
from keras_ctx.common.keras_files import FLOATING_DTYPES


class TensorReader:
    """Hands out checkpoint tensors by name and remembers which were used."""

    def __init__(self, tensors, prefixes=("",)):
        self.tensors = tensors
        self.used = set()
        # Checkpoints saved from a model with a head prefix their names
        # ("bert.encoder..."); find the prefix that the tensors carry.
        self.prefix = next(
            (p for p in prefixes if any(k.startswith(p) for k in tensors)), ""
        )

    def has(self, name):
        return self.prefix + name in self.tensors

    def __call__(self, name):
        key = self.prefix + name
        if key not in self.tensors:
            raise CheckpointError(f"The checkpoint has no tensor {key!r}; it does not "
                                  "match its config.json's model_type.")
        self.used.add(key)
        value = np.asarray(self.tensors[key])
        check_floating(key, value.dtype)
        value = value.astype("float32", copy=False)
        check_finite_tensor(key, value)
        return value

    def check_all_used(self, ignore=()):
        """Every tensor was used or is named by `ignore`: regular expressions that must
        match a whole name (after the model prefix), so `classifier\\.weight` never
        drops `...attention.classifier_gate.weight`."""
        patterns = [re.compile(pattern) for pattern in ignore]

        def ignored(name):
            bare = name[len(self.prefix):] if name.startswith(self.prefix) else name
            return any(p.fullmatch(bare) or p.fullmatch(name) for p in patterns)

        unused = sorted(k for k in self.tensors if k not in self.used and not ignored(k))
        if unused:
            raise CheckpointError(
                f"{len(unused)} checkpoint tensors have no place in the model (first: "
                f"{unused[:3]}); the checkpoint has parts this converter does not know."
            )


def required(config, *keys):
    """CheckpointError naming the fields `config` lacks, of those the backbone needs."""
    missing = [key for key in keys if key not in config]
    if missing:
        raise CheckpointError(f"config.json lacks {', '.join(missing)}, needed to build "
                              f"the {config.get('model_type')} backbone.")


def check_class(backbone, name, model_type):
    """CheckpointError unless `backbone` is a `name` (or a subclass) that `model_type` exports."""
    if name not in [cls.__name__ for cls in type(backbone).__mro__]:
        raise CheckpointError(f"model_type {model_type!r} exports a {name}, not a "
                              f"{type(backbone).__name__}.")


def assign(variable, value, name):
    if tuple(variable.shape) != tuple(value.shape):
        raise CheckpointError(f"{name}: checkpoint shape {value.shape} does not fit the "
                              f"variable {variable.path} of shape {tuple(variable.shape)}.")
    variable.assign(value)


# ---------------------------------------------------------------- files read first

def read_json_object(path, what="config"):
    """A JSON file that must hold one object, with one named error for anything else
    (`keras_ctx.common.files.read_json`, the one JSON reader)."""
    path = os.fspath(path)
    value = read_json(path, None, "fix or re-download it", error=CheckpointError)
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} holds a JSON {type(value).__name__}, not an object "
                              f"of fields; it is not a {what} file.")
    check_finite_numbers(value, path)
    return value


def check_finite_numbers(value, source, field=""):
    """Every number in a (nested) config is finite: json reads NaN and Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        raise CheckpointError(f"{source}: {field or 'a value'} is {value}; every number in "
                              "it must be finite (fix the field).")
    if isinstance(value, dict):
        for key, item in value.items():
            check_finite_numbers(item, source, f"{field}.{key}" if field else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_finite_numbers(item, source, f"{field}[{index}]")


def check_floating(name, dtype, source="The checkpoint"):
    """Refuses a weight tensor that is not floating point, naming it, its dtype and the fix."""
    if str(dtype) not in FLOATING_DTYPES:
        raise CheckpointError(f"{source}: tensor {name!r} has dtype {dtype}, not a float "
                              f"({', '.join(FLOATING_DTYPES)}): its values would load as codes; "
                              "use the unquantized checkpoint (or dequantize it to float32).")


def check_finite_tensor(name, value):
    """Refuses a weight holding NaN or Inf: every output of the model would be NaN."""
    if value.dtype.kind == "f" and not np.isfinite(value).all():
        bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
        raise CheckpointError(f"Checkpoint tensor {name!r} holds {bad} NaN/Inf values; the "
                              "file is damaged (re-download or re-export it).")


def resolve_inside(directory, name):
    """The real path of file `name` listed inside checkpoint `directory`, or CheckpointError.

    The name itself must stay in the directory (no `../x`, no absolute path).
    Its symlinks are followed when the target stays inside the cache root:
    the directory itself, or for huggingface_hub's layout
    (`models--ORG--NAME/snapshots/REV/file -> ../../blobs/HASH`) the
    `models--ORG--NAME` folder. A link that leaves it is refused.
    """
    directory = os.path.abspath(os.fspath(directory))
    name = str(name)
    lexical = os.path.normpath(os.path.join(directory, name))
    if os.path.isabs(name) or os.path.commonpath([directory, lexical]) != directory:
        raise CheckpointError(f"{name!r} is outside the checkpoint directory {directory}; "
                              "refused.")
    root = cache_root(directory)
    real = os.path.realpath(lexical)
    if os.path.commonpath([root, real]) != root:
        raise CheckpointError(f"{name!r} in {directory} links to {real}, outside {root}; "
                              "refused (copy the file in instead of linking it).")
    return real


def cache_root(directory):
    """Where a checkpoint directory's files may live: itself, or its huggingface_hub repo folder."""
    real = os.path.realpath(os.fspath(directory))
    snapshots = os.path.dirname(real)
    repo = os.path.dirname(snapshots)
    if os.path.basename(snapshots) == "snapshots" and os.path.isdir(os.path.join(repo, "blobs")):
        return repo
    return real


# ---------------------------------------------------------------- sizes before building

# Our size names (docs/design.md) -> the config fields that carry them in the formats we read.
SIZE_FIELDS = {
    "vocabulary_size": ("vocab_size", "n_token"),
    "hidden_size": ("hidden_size", "d_model", "n_embd", "emb_dim"),
    "intermediate_size": ("intermediate_size", "d_inner", "d_ff", "n_inner", "encoder_ffn_dim"),
    "embedding_size": ("embedding_size",),
    "max_sequence_length": ("max_position_embeddings", "n_positions"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers"),
    "num_decoder_layers": ("num_decoder_layers", "decoder_layers"),
    "num_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads",
                  "encoder_attention_heads"),
    "head_size": ("d_kv", "d_head"),
    "type_vocab_size": ("type_vocab_size",),
    "num_languages": ("n_langs",),
    "num_buckets": ("relative_attention_num_buckets",),
    # ELMo's options file (sections flattened as "lstm.dim").
    "projection_dim": ("lstm.projection_dim",),
    "lstm_units": ("lstm.dim",),
    "character_embedding_dim": ("char_cnn.embedding.dim",),
    "num_highway_layers": ("char_cnn.n_highway",),
    "max_characters_per_token": ("char_cnn.max_characters_per_token",),
}
# Sizes that are the length of some tensor axis in every checkpoint we read.
AXIS_SIZES = ("vocabulary_size", "hidden_size", "intermediate_size", "embedding_size")
# Sizes of tables (or none): at most the longest axis the checkpoint has.
TABLE_SIZES = ("max_sequence_length", "type_vocab_size", "num_languages", "num_buckets",
               "num_heads", "head_size")
LAYER_COUNTS = ("num_layers", "num_decoder_layers")
# The deepest published models have ~100 layers; more is a damaged or hostile config.
MAX_LAYERS = 1000


def config_field(config, key, value):
    """The config field that gave setting `key` its `value` (for error messages)."""
    for field in SIZE_FIELDS.get(key, ()) + (key,):
        if field in config and config[field] == value:
            return field
    for field, item in config.items():
        if type(item) is type(value) and item == value:
            return field
    return key


def check_settings(settings, config, source):
    """Types and ranges of a backbone's settings, by common/validation's rules, each error
    naming the file and the config field."""
    for key, value in settings.items():
        rule = _setting_rule(key, value)
        if rule is not None:
            field = config_field(config, key, value)
            try:
                rule(field, value)
            except ConfigError as error:
                raise CheckpointError(f"{source}: {field} = {value!r} is not {error.rule}; fix "
                                      "the field.") from None


def _setting_rule(key, value):
    """The check of setting `key` (name, value) -> value, or None for a free one."""
    if key in SIZE_FIELDS or key in LAYER_COUNTS or key == "num_highway_layers":
        low = 0 if key in ("type_vocab_size", "num_languages", "num_decoder_layers",
                           "num_highway_layers") else 1
        if key in LAYER_COUNTS + ("num_highway_layers",):  # more: a damaged file
            return lambda name, v: validation.integer_in(name, v, low, MAX_LAYERS)
        return lambda name, v: validation.integer_in(name, v, low, 2**31 - 1)
    if value is None:
        return None
    if "dropout" in key:
        return validation.rate
    if "epsilon" in key:  # a layer norm's
        return validation.open_fraction
    return None


def check_sizes(settings, shapes, config, source, shared_layers=False):
    """Every size in `settings` against the checkpoint's tensor shapes, before building.

    `shapes` is {name: shape} read from the file headers. Sizes that are an
    axis of some tensor must be one; table sizes at most the longest axis;
    layer counts at most the layers the names number (`.0.`, `.1.`, ...)
    unless layers share weights (ALBERT); and the matrices the sizes imply
    must fit in what the file stores. Nothing is built before this passes.
    """
    axes = {int(n) for shape in shapes.values() for n in shape}
    longest = max(axes, default=0)
    stored = sum(int(np.prod(shape, dtype=np.float64)) for shape in shapes.values())

    def refuse(key, why):
        field = config_field(config, key, settings[key])
        raise CheckpointError(f"{source}: {field} = {settings[key]} {why}; the config does not "
                              "match its weights (fix the field or use the matching file).")

    for key in AXIS_SIZES:
        if key in settings and settings[key] not in axes:
            refuse(key, "is not the size of any tensor in the checkpoint")
    for key in TABLE_SIZES:
        if settings.get(key) is not None and settings[key] > longest:
            refuse(key, f"is more than the longest tensor axis ({longest})")
    if not shared_layers:
        numbered = {int(n) for name in shapes for n in re.findall(r"(?:^|\.|_)(\d+)(?=\.|/|$)",
                                                                     name)}
        depth = max(numbered, default=-1) + 1
        for key in LAYER_COUNTS:
            if settings.get(key, 0) > depth:
                refuse(key, f"layers, but the checkpoint's tensors number at most {depth}")
    # What the sizes imply at least: the embedding table and, per layer, attention's four
    # projections and the feed-forward pair (Vaswani et al., 2017).
    hidden = settings.get("hidden_size", 0)
    inner = settings.get("num_heads", 0) * (settings.get("head_size") or 0) or hidden
    layers = 1 if shared_layers else sum(settings.get(k, 0) for k in LAYER_COUNTS)
    width = settings.get("embedding_size") or hidden
    implied = (settings.get("vocabulary_size", 0) * width
               + layers * (4 * hidden * inner + 2 * hidden * settings.get("intermediate_size", 0)))
    if implied > stored:  # a lower bound: every family stores at least these
        named = ", ".join(f"{config_field(config, k, settings[k])} = {settings[k]}" for k in
                          ("vocabulary_size", "embedding_size", "hidden_size", "num_heads",
                           "head_size", "intermediate_size") + LAYER_COUNTS if k in settings)
        raise CheckpointError(f"{source}: its sizes ({named}) imply at least {implied:,} "
                              "weights, but the "
                              f"checkpoint stores {stored:,}; the config does not match its "
                              "weights.")


def tensor_shapes(tensors):
    """{name: shape} of a tensor mapping, without loading lazy ones."""
    shapes = getattr(tensors, "shapes", None)
    if shapes is not None:
        return dict(shapes)
    return {name: tuple(np.shape(value)) for name, value in tensors.items()}


class LazyTensors(collections.abc.Mapping):
    """{name: numpy array} whose shapes are known from headers and whose data is read on use.

    Args:
        shapes: {name: shape}, from the files' headers.
        load: name -> numpy array.
    """

    def __init__(self, shapes, load):
        self.shapes = dict(shapes)
        self._load = load

    def __getitem__(self, name):
        if name not in self.shapes:
            raise KeyError(name)
        return self._load(name)

    def __iter__(self):
        return iter(self.shapes)

    def __len__(self):
        return len(self.shapes)
