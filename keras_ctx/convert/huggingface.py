"""Hugging Face checkpoints (config.json + model.safetensors) -> keras_ctx backbones.

`from_huggingface(directory)` reads the config, builds the matching backbone,
and copies every tensor with safetensors' numpy API (no PyTorch). Each family
names its converter under its `model_type` in its registry entry
(`keras_ctx.registry.HuggingFace`); a converter lists, for each of
our variables, the checkpoint tensor and the transform (transpose, reshape)
that maps it, and every checkpoint tensor must be used or explicitly ignored,
so a layout we do not understand fails loudly instead of loading half a model.
Tokenizer files are read in `huggingface_tokenizers`; writing a checkpoint
(`to_huggingface`) is `huggingface_export`.
"""

import collections.abc
import json
import math
import os

import numpy as np

from keras_ctx import registry
from keras_ctx.common.files import missing_link, unique_keys
from keras_ctx.convert.base import (
    CheckpointError,
    LazyTensors,
    check_finite_numbers,
    check_settings,
    check_sizes,
    read_json_object,
    resolve_inside,
    tensor_shapes,
)
from keras_ctx.convert.huggingface_tokenizers import (
    check_tokenizer_fits,
    tokenizer_from_huggingface,
)
from keras_ctx.convert.mapping import load_checkpoint


class _ByModelType(collections.abc.Mapping):
    """{model_type: converter or exporter}, read from the registry (no table of its own)."""

    def __init__(self, field):
        self.field = field

    def __getitem__(self, model_type):
        found = registry.huggingface(model_type)
        function = getattr(found[1], self.field) if found else None
        if function is None:
            raise KeyError(model_type)
        return function

    def __iter__(self):
        return iter([t for t in registry.huggingface_model_types() if t in self])

    def __contains__(self, model_type):
        found = registry.huggingface(model_type)
        return found is not None and getattr(found[1], self.field) is not None

    def __len__(self):
        return len(list(iter(self)))


# (config, tensors, source=) -> backbone, and backbone -> (config, tensors), by model_type.
CONVERTERS = _ByModelType("convert")
EXPORTERS = _ByModelType("export")


def mapped_converter(backbone_class, settings, weight_map, fields, prefixes=("",), ignore=(),
                     prepare=None, shared_layers=False):
    """A converter (config, tensors) -> backbone for a layout a weight map describes.

    The backbone is `backbone_class(**settings(config))`, built only after
    every config field that changes the computation is honoured or refused
    (`fields`, the family's `config_fields.ConfigFields` table), every setting is
    checked (types, ranges) and, with tensors, every size
    against the tensors' shapes (`check_sizes`; `shared_layers`: the layers
    share one set of weights, as ALBERT's). Without tensors
    (`load_weights=False`) that is all. Otherwise `prepare(tensors, backbone)`,
    if given, returns the tensors fixed up first (tied copies checked and
    filled in, fused matrices split, what the map does not name loaded or
    dropped), then `weight_map(backbone)` fills every variable from names
    under one of `prefixes`, and every tensor must be used or match `ignore`
    (regular expressions of whole names).
    """
    def convert(config, tensors, source="config.json"):
        check_finite_numbers(config, source)
        fields.check(config, source)
        kwargs = _settings(settings, config, source)
        check_settings(kwargs, config, source)
        if tensors is not None:
            check_sizes(kwargs, tensor_shapes(tensors), config, source, shared_layers)
        try:
            backbone = backbone_class(**kwargs)
        except (ValueError, TypeError) as error:
            raise CheckpointError(f"{source}: its values do not build a {backbone_class.__name__} "
                                  f"({error}); fix the field.") from None
        if tensors is None:
            return backbone
        if prepare is not None:
            tensors = prepare(tensors, backbone)
        load_checkpoint(weight_map(backbone), tensors, prefixes=prefixes, ignore=ignore)
        return backbone

    convert.config_fields = fields  # what it honours and refuses, for its tests and docs
    return convert


def _settings(settings, config, source):
    try:
        return settings(config)
    except CheckpointError as error:
        raise CheckpointError(f"{source}: {error}") from None
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as error:
        raise CheckpointError(f"{source} has a field of the wrong type or value "
                              f"({type(error).__name__}: {error}); fix it.") from None


def read_config(directory):
    path = os.path.join(os.fspath(directory), "config.json")
    if not os.path.isfile(path):
        raise CheckpointError(missing_link(path) or f"{directory} has no config.json: give a "
                              "Hugging Face checkpoint directory (config.json + "
                              "model.safetensors).")
    return read_json_object(path, "config.json")


def safetensors_files(directory):
    """The model.safetensors file(s) of a checkpoint directory (shards through their index)."""
    directory = os.fspath(directory)
    single = os.path.join(directory, "model.safetensors")
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(single):
        return [single]
    if not os.path.isfile(index):
        raise CheckpointError(
            missing_link(single) or missing_link(index) or f"{directory} has no "
            "model.safetensors (PyTorch .bin checkpoints are not read: convert them to "
            "safetensors).")
    weight_map = read_json_object(index, "checkpoint index").get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str)
                                                   for v in weight_map.values()):
        raise CheckpointError(f"{index} is not a checkpoint index: it needs a \"weight_map\" "
                              "of tensor name -> shard file.")
    files = []
    for shard in sorted(set(weight_map.values())):
        path = resolve_inside(directory, shard)
        if not os.path.isfile(path):
            raise CheckpointError(
                missing_link(os.path.join(directory, shard)) or f"{path} is listed in "
                "model.safetensors.index.json but missing; the download is incomplete.")
        files.append(path)
    return files


def read_tensors(directory):
    """{name: numpy array} of model.safetensors (or its shards), read lazily.

    Only the headers are read here (shapes, dtypes, offsets, each checked
    against the file's size); a file's data is read when one of its tensors
    is first used, so sizes can be checked before anything is allocated.
    """
    files = safetensors_files(directory)
    shapes, where = {}, {}
    for path in files:
        for name, shape in read_safetensors_header(path).items():
            if name in where:
                raise CheckpointError(f"{path}: tensor {name!r} is also in {where[name]}.")
            shapes[name], where[name] = shape, path
    _check_index(directory, where)
    renamed = _legacy_names(shapes)
    original = {new: old for new, old in zip(renamed, shapes)}
    loaded = {}

    def load(name):
        path = where[original[name]]
        if path not in loaded:
            loaded.clear()  # one file's data at a time
            loaded[path] = _load_safetensors(path)
        return loaded[path][original[name]]

    return LazyTensors(renamed, load)


def _check_index(directory, where):
    """Each tensor model.safetensors.index.json lists is in the shard it names: else the
    index or that shard is another download's (named, not blamed on the config later)."""
    index = os.path.join(os.fspath(directory), "model.safetensors.index.json")
    if os.path.isfile(os.path.join(directory, "model.safetensors")) or not os.path.isfile(index):
        return  # one file: no index was read
    weight_map = read_json_object(index, "checkpoint index")["weight_map"]
    for name, shard in sorted(weight_map.items()):
        found = where.get(name)
        if found is None or os.path.realpath(found) != resolve_inside(directory, shard):
            held = f"it is in {found}" if found else "no shard holds it"
            raise CheckpointError(
                f"{index} lists tensor {name!r} in {shard}, but {held}: the index and its "
                "shards are of different downloads; download the checkpoint again.")


def _load_safetensors(path):
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except TypeError:  # bfloat16, which numpy lacks: read the file ourselves
        return _read_safetensors_bfloat16(path)
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file "
                              f"({error}); the download may be incomplete.") from None


# Safetensors' largest header (the reference implementation's limit: 100 MB).
MAX_HEADER_BYTES = 100_000_000
_ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "BOOL": 1}


def read_safetensors_header(path):
    """{name: shape} of a safetensors file from its header alone, every entry checked.

    The format: an 8-byte little-endian header size, a JSON header
    {name: {dtype, shape, data_offsets}}, then the data. Shapes, dtypes and
    offsets must agree with each other and with the file's size, so no
    header can make a reader allocate more than the file holds.
    """
    import struct

    def refuse(why):
        raise CheckpointError(f"{path} is not a readable safetensors file ({why}); the "
                              "download may be incomplete or the file damaged.")

    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            refuse("shorter than its 8-byte header size")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, size - 8):
            refuse(f"its header claims {length} bytes")
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        refuse(f"its header is not JSON: {error}")
    if not isinstance(header, dict):
        refuse("its header is not a JSON object")
    body = size - 8 - length
    shapes = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or info.get("dtype") not in _ITEM_BYTES:
            refuse(f"tensor {name!r} has no supported dtype")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            refuse(f"tensor {name!r} has shape {shape!r}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(
                type(n) is int for n in offsets) or not 0 <= offsets[0] <= offsets[1] <= body:
            refuse(f"tensor {name!r} has data offsets {offsets!r} outside the file")
        if math.prod(shape) * _ITEM_BYTES[info["dtype"]] != offsets[1] - offsets[0]:
            refuse(f"tensor {name!r} of shape {shape} is not {offsets[1] - offsets[0]} bytes")
        shapes[name] = tuple(shape)
    return shapes


def _legacy_names(tensors):
    """Old checkpoints (e.g. bert-base-uncased) name LayerNorm parameters gamma/beta.

    transformers renames them on load (`.gamma` -> `.weight`, `.beta` -> `.bias`);
    so do we.
    """
    renamed = {}
    for name, value in tensors.items():
        if name.endswith(".gamma"):
            name = name[: -len(".gamma")] + ".weight"
        elif name.endswith(".beta"):
            name = name[: -len(".beta")] + ".bias"
        if name in renamed:
            raise CheckpointError(f"The checkpoint holds {name!r} twice (old and new names).")
        renamed[name] = value
    return renamed


_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                       "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def _read_safetensors_bfloat16(path):
    """A safetensors file with bfloat16 tensors, as float32 (bf16 is float32's top half).

    The format: an 8-byte little-endian header size, a JSON header
    {name: {dtype, shape, data_offsets}}, then the raw little-endian data.
    """
    import struct

    with open(path, "rb") as handle:
        data = handle.read()
    try:
        (size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + size])
    except (struct.error, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file ({error}).") from None
    body = memoryview(data)[8 + size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        if end > len(body):
            raise CheckpointError(f"{path}: tensor {name!r} runs past the end of the file; "
                                  "the download may be incomplete.")
        raw = body[start:end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw, "<u2").astype("uint32") << 16
            value = bits.view("float32")
        elif info["dtype"] in _SAFETENSORS_DTYPES:
            value = np.frombuffer(raw, _SAFETENSORS_DTYPES[info["dtype"]])
        else:
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {info['dtype']}, "
                                  "which is not supported.")
        tensors[name] = value.reshape(info["shape"]).copy()
    return tensors


def check_tied_copy(tensors, name, table_name, why):
    """A stored copy of a tied table (`lm_head.weight`) must equal it: HF would overwrite
    it with the table, and so would we; a different one is a checkpoint we misread."""
    if name in tensors and (tensors[name].shape != tensors[table_name].shape
                            or not np.array_equal(tensors[name], tensors[table_name])):
        raise CheckpointError(f"{name} differs from {table_name}, but the output layer is "
                              f"tied to it ({why}).")


# HF activation names -> the names our FeedForward accepts.
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
}


def activation_from_huggingface(name, field="hidden_act"):
    """Our name of the Hugging Face activation `name` (config field `field`)."""
    if not isinstance(name, str) or name not in HF_ACTIVATIONS:
        raise CheckpointError(f"Activation {name!r} (config.json {field}) is not "
                              f"supported; supported: {', '.join(sorted(HF_ACTIVATIONS))}.")
    return HF_ACTIVATIONS[name]


def activation_to_huggingface(activation):
    if activation in ("gelu", "relu"):
        return activation
    if activation == "gelu_approximate":
        return "gelu_new"
    raise CheckpointError(f"Activation {activation!r} has no Hugging Face name.")


def from_huggingface(directory, load_weights=True):
    """A keras_ctx backbone with the weights of a Hugging Face checkpoint directory."""
    config = read_config(directory)
    family, spec = huggingface_format(config.get("model_type"))
    config = _with_tokenizer_settings(spec, config, directory)
    tensors = read_tensors(directory) if load_weights else None
    backbone = spec.convert(config, tensors,
                            source=os.path.join(os.fspath(directory), "config.json"))
    # Which family the checkpoint is (recorded in run directories), from its
    # model_type through the registry: never guessed from sizes.
    backbone.family = family.name
    # Not part of the model's config: the text side travels beside it.
    backbone.tokenizer = tokenizer_from_huggingface(directory, text=spec.text)
    check_tokenizer_fits(backbone, backbone.tokenizer, directory)
    return backbone


def _with_tokenizer_settings(spec, config, directory):
    """config.json's fields with those the family reads from tokenizer_config.json too
    (`registry.HuggingFace.tokenizer_config`)."""
    path = os.path.join(os.fspath(directory), "tokenizer_config.json")
    if spec.tokenizer_config is None or not os.path.isfile(path):
        return config
    return spec.tokenizer_config(config, read_json_object(path, "tokenizer_config.json"))


def huggingface_format(model_type):
    """(Family, `registry.HuggingFace` spec) of a model_type, or a CheckpointError naming
    the supported ones: the one look-up of a model_type."""
    found = registry.huggingface(model_type)
    if found is None:
        raise CheckpointError(
            f"model_type {model_type!r} is not supported; supported: "
            f"{', '.join(registry.huggingface_model_types())}."
        )
    return found
