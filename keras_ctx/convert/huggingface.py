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

from keras_ctx.convert.base import CheckpointError, TensorReader, assign  # noqa: F401
from keras_ctx.convert.mapping import load_checkpoint

CONVERTERS = {}
EXPORTERS = {}


def register_converter(model_type):
    def decorate(function):
        CONVERTERS[model_type] = function
        return function

    return decorate


def register_exporter(model_type):
    """An exporter takes (backbone) and returns (config dict, {name: numpy tensor})."""
    def decorate(function):
        EXPORTERS[model_type] = function
        return function

    return decorate


def mapped_converter(backbone_class, settings, weight_map, prefixes=("",), ignore=(),
                     prepare=None):
    """A converter (config, tensors) -> backbone for a layout a weight map describes.

    The backbone is `backbone_class(**settings(config))`; without tensors
    (`load_weights=False`) that is all. Otherwise `prepare(tensors, backbone)`,
    if given, returns the tensors fixed up first (tied copies checked and
    filled in, fused matrices split, what the map does not name loaded or
    dropped), then `weight_map(backbone)` fills every variable from names
    under one of `prefixes`, and every tensor must be used or match `ignore`.
    """
    def convert(config, tensors):
        backbone = backbone_class(**settings(config))
        if tensors is None:
            return backbone
        if prepare is not None:
            tensors = prepare(tensors, backbone)
        load_checkpoint(weight_map(backbone), tensors, prefixes=prefixes, ignore=ignore)
        return backbone

    return convert


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
        from keras_ctx.files import shard_files

        files = shard_files(directory, index)
    else:
        raise CheckpointError(f"{directory} has no model.safetensors (PyTorch .bin "
                              "checkpoints are not read: convert them to safetensors).")
    tensors = {}
    for path in files:
        if not os.path.isfile(path):
            raise CheckpointError(f"{path} is listed in model.safetensors.index.json but "
                                  "missing; the download is incomplete.")
        try:
            tensors.update(load_file(path))
        except TypeError:  # bfloat16, which numpy lacks: read the file ourselves
            tensors.update(_read_safetensors_bfloat16(path))
        except (SafetensorError, OSError) as error:
            raise CheckpointError(f"{path} is not a readable safetensors file "
                                  f"({error}); the download may be incomplete.") from None
    return _legacy_names(tensors)


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


# HF activation names -> the names our FeedForward accepts.
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
}


def activation_from_huggingface(name):
    if name not in HF_ACTIVATIONS:
        raise CheckpointError(f"Activation {name!r} (config.json hidden_act) is not "
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
    model_type = config.get("model_type")
    if model_type not in CONVERTERS:
        raise CheckpointError(
            f"model_type {model_type!r} is not supported; supported: "
            f"{', '.join(sorted(CONVERTERS))}."
        )
    from keras_ctx import families

    tensors = read_tensors(directory) if load_weights else None
    backbone = CONVERTERS[model_type](config, tensors)
    # Which family the checkpoint is (recorded in run directories), from its
    # model_type through the registry: never guessed from sizes.
    backbone.family = families.of_huggingface(model_type).name
    # Not part of the model's config: the text side travels beside it.
    backbone.tokenizer = tokenizer_from_huggingface(directory)
    return backbone


def tokenizer_from_huggingface(directory, lowercase=None):
    """The checkpoint's tokenizer as a keras-hub tokenizer, or None if it has no files.

    WordPiece (vocab.txt: BERT, ELECTRA), byte-level BPE (vocab.json +
    merges.txt: RoBERTa, GPT-2, BART), "</w>" BPE (the same files with
    end-of-word pieces: openai-gpt) and SentencePiece (spiece.model:
    ALBERT, XLNet, T5). `lowercase` overrides tokenizer_config.json's
    do_lower_case for WordPiece (HF's default when neither says: True).
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

        if lowercase is None:
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
    vocab, merges = (os.path.join(directory, n) for n in ("vocab.json", "merges.txt"))
    if os.path.isfile(vocab) and os.path.isfile(merges):
        import keras_hub

        try:
            with open(vocab, encoding="utf-8") as handle:
                vocabulary = json.load(handle)
        except json.JSONDecodeError as error:
            raise CheckpointError(f"{vocab} is not valid JSON ({error}).") from None
        with open(merges, encoding="utf-8") as handle:
            lines = [line.rstrip("\n") for line in handle]
        # merges.txt starts with a "#version" line; the rest are "a b" pairs.
        merge_list = [line for line in lines if line and not line.startswith("#version")]
        bad = next((line for line in merge_list if len(line.split(" ")) != 2), None)
        if bad is not None:
            raise CheckpointError(f"{merges}: {bad!r} is not a merge of two pieces.")
        from keras_ctx.data.tokenizers import WORD_END, WordEndBPETokenizer

        if any(piece.endswith(WORD_END) for piece in vocabulary):
            # openai-gpt: BPE over lowercased words with "</w>" ends, not bytes.
            unknown = settings.get("unk_token", "<unk>")
            unknown = unknown.get("content", "<unk>") if isinstance(unknown, dict) else unknown
            return WordEndBPETokenizer(vocabulary, merge_list, unknown_token=unknown)
        return keras_hub.tokenizers.BytePairTokenizer(
            vocabulary=vocabulary, merges=merge_list,
            add_prefix_space=bool(settings.get("add_prefix_space", False)),
        )
    for name in ("spiece.model", "sentencepiece.bpe.model", "30k-clean.model"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            import keras_hub

            with open(path, "rb") as handle:
                proto = handle.read()
            try:
                return keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)
            except Exception as error:  # sentencepiece raises RuntimeError/TF errors
                raise CheckpointError(f"{path} is not a readable SentencePiece model "
                                      f"({type(error).__name__}: {error}).") from None
    return None


def default_model_type(backbone):
    """The Hugging Face model_type the backbone's family writes (its registry entry)."""
    from keras_ctx import families

    family = families.of_backbone(backbone)
    if family is None or not family.huggingface:
        raise CheckpointError(f"No Hugging Face export for {type(backbone).__name__}; "
                              f"exportable model types: {', '.join(sorted(EXPORTERS))}.")
    return family.huggingface[0]


def to_huggingface(backbone, directory, model_type=None):
    """Writes `backbone` as a Hugging Face checkpoint directory.

    config.json + model.safetensors in the layout of `model_type` ("bert",
    "roberta", "albert", "xlnet"; default: the backbone's own family), and
    the tokenizer's vocabulary when the backbone carries a `tokenizer`
    (vocab.txt for WordPiece). `from_huggingface(directory)` reads it back
    exactly. Returns the directory.
    """

    model_type = model_type or default_model_type(backbone)
    if model_type not in EXPORTERS:
        raise CheckpointError(f"Cannot export to model_type {model_type!r}; exportable: "
                              f"{', '.join(sorted(EXPORTERS))}.")
    config, tensors = EXPORTERS[model_type](backbone)
    return write_checkpoint_directory(directory, config, tensors,
                                      getattr(backbone, "tokenizer", None))


def write_checkpoint_directory(directory, config, tensors, tokenizer=None):
    """config.json + model.safetensors (+ the tokenizer's files) in `directory`."""
    from safetensors.numpy import save_file

    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2, sort_keys=True)
    save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    save_tokenizer_files(tokenizer, directory)
    return directory


def save_tokenizer_files(tokenizer, directory):
    """The tokenizer's vocabulary files in Hugging Face's names (None: nothing)."""
    if tokenizer is None:
        return
    import keras_hub

    if isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as handle:
            handle.writelines(token + "\n" for token in tokenizer.get_vocabulary())
        with open(os.path.join(directory, "tokenizer_config.json"), "w",
                  encoding="utf-8") as handle:
            json.dump({"do_lower_case": bool(tokenizer.lowercase),
                       "strip_accents": bool(tokenizer.strip_accents),
                       "tokenize_chinese_chars": bool(tokenizer.split_on_cjk)}, handle)
    elif isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
        with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as handle:
            json.dump(tokenizer.vocabulary, handle, ensure_ascii=False)
        with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as handle:
            handle.write("#version: 0.2\n")
            handle.writelines(merge + "\n" for merge in tokenizer.merges)
    elif isinstance(tokenizer, keras_hub.tokenizers.SentencePieceTokenizer):
        proto = tokenizer.proto
        if not isinstance(proto, bytes):
            raise CheckpointError("The SentencePiece tokenizer holds no serialized model.")
        with open(os.path.join(directory, "spiece.model"), "wb") as handle:
            handle.write(proto)
