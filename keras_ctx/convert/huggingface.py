"""Hugging Face checkpoints (config.json + model.safetensors) -> keras_ctx backbones.

`from_huggingface(directory)` reads the config, builds the matching backbone,
and copies every tensor with safetensors' numpy API (no PyTorch). Each family
registers a converter under its `model_type`; a converter lists, for each of
our variables, the checkpoint tensor and the transform (transpose, reshape)
that maps it, and every checkpoint tensor must be used or explicitly ignored,
so a layout we do not understand fails loudly instead of loading half a model.
"""

import json
import os

import numpy as np

CONVERTERS = {}


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be converted."""


def register_converter(model_type):
    def decorate(function):
        CONVERTERS[model_type] = function
        return function

    return decorate


def read_config(directory):
    path = os.path.join(os.fspath(directory), "config.json")
    if not os.path.isfile(path):
        raise CheckpointError(f"{directory} has no config.json: give a Hugging Face "
                              "checkpoint directory (config.json + model.safetensors).")
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON ({error}).") from None


def read_tensors(directory):
    """{name: numpy array} of model.safetensors (or its shards)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    directory = os.fspath(directory)
    single = os.path.join(directory, "model.safetensors")
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(single):
        files = [single]
    elif os.path.isfile(index):
        with open(index, encoding="utf-8") as handle:
            shards = sorted(set(json.load(handle)["weight_map"].values()))
        files = [os.path.join(directory, shard) for shard in shards]
    else:
        raise CheckpointError(f"{directory} has no model.safetensors (PyTorch .bin "
                              "checkpoints are not read: convert them to safetensors).")
    tensors = {}
    for path in files:
        try:
            tensors.update(load_file(path))
        except (SafetensorError, OSError) as error:
            raise CheckpointError(f"{path} is not a readable safetensors file "
                                  f"({error}); the download may be incomplete.") from None
    return tensors


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

    def __call__(self, name):
        key = self.prefix + name
        if key not in self.tensors:
            raise CheckpointError(f"The checkpoint has no tensor {key!r}; it does not "
                                  "match its config.json's model_type.")
        self.used.add(key)
        return np.asarray(self.tensors[key], dtype="float32")

    def check_all_used(self, ignore=()):
        unused = sorted(k for k in self.tensors if k not in self.used
                        and not any(pattern in k for pattern in ignore))
        if unused:
            raise CheckpointError(
                f"{len(unused)} checkpoint tensors have no place in the model (first: "
                f"{unused[:3]}); the checkpoint has parts this converter does not know."
            )


def assign(variable, value, name):
    if tuple(variable.shape) != tuple(value.shape):
        raise CheckpointError(f"{name}: checkpoint shape {value.shape} does not fit the "
                              f"variable {variable.path} of shape {tuple(variable.shape)}.")
    variable.assign(value)


def linear_to_heads(weight, bias, num_heads):
    """torch Linear (out, in) with out = heads * size -> kernel (in, heads, size), bias."""
    out_features, in_features = weight.shape
    size = out_features // num_heads
    return (weight.T.reshape(in_features, num_heads, size),
            bias.reshape(num_heads, size) if bias is not None else None)


def heads_to_linear_output(weight, num_heads):
    """torch Linear (out, heads * size) -> our output kernel (heads, size, out)."""
    out_features, in_features = weight.shape
    return weight.T.reshape(num_heads, in_features // num_heads, out_features)


def from_huggingface(directory, load_weights=True):
    """A keras_ctx backbone with the weights of a Hugging Face checkpoint directory."""
    config = read_config(directory)
    model_type = config.get("model_type")
    if model_type not in CONVERTERS:
        raise CheckpointError(
            f"model_type {model_type!r} is not supported; supported: "
            f"{', '.join(sorted(CONVERTERS))}."
        )
    tensors = read_tensors(directory) if load_weights else None
    backbone = CONVERTERS[model_type](config, tensors)
    # Not part of the model's config: the text side travels beside it.
    backbone.tokenizer = tokenizer_from_huggingface(directory)
    return backbone


def tokenizer_from_huggingface(directory):
    """The checkpoint's tokenizer as a keras-hub tokenizer, or None if it has no files.

    WordPiece (vocab.txt, BERT family) is supported here; families add theirs.
    """
    directory = os.fspath(directory)
    settings = {}
    path = os.path.join(directory, "tokenizer_config.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            settings = json.load(handle)
    vocab = os.path.join(directory, "vocab.txt")
    if os.path.isfile(vocab):
        import keras_hub

        lowercase = bool(settings.get("do_lower_case", True))
        strip_accents = settings.get("strip_accents")
        # BERT's BasicTokenizer strips accents whenever it lowercases, unless
        # strip_accents is set explicitly.
        strip_accents = lowercase if strip_accents is None else bool(strip_accents)
        with open(vocab, encoding="utf-8") as handle:
            vocabulary = [line.rstrip("\n") for line in handle]
        return keras_hub.tokenizers.WordPieceTokenizer(
            vocabulary=vocabulary, lowercase=lowercase, strip_accents=strip_accents,
            split_on_cjk=bool(settings.get("tokenize_chinese_chars", True)),
        )
    return None
