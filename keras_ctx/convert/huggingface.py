"""Hugging Face checkpoints (config.json + model.safetensors) -> keras_ctx backbones.

`from_huggingface(directory)` reads the config, builds the matching backbone,
and copies every tensor with safetensors' numpy API (no PyTorch). Each family
names its converter under its `model_type` in its registry entry
(`keras_ctx.registry.HuggingFace`); a converter lists, for each of
our variables, the checkpoint tensor and the transform (transpose, reshape)
that maps it, and every checkpoint tensor must be used or explicitly ignored,
so a layout we do not understand fails loudly instead of loading half a model.
"""

import collections.abc
import json
import math
import os

import numpy as np

from keras_ctx import registry
from keras_ctx.convert.base import (  # noqa: F401
    CheckpointError,
    LazyTensors,
    TensorReader,
    assign,
    check_finite_numbers,
    check_settings,
    check_sizes,
    read_json_object,
    resolve_inside,
    tensor_shapes,
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


def mapped_converter(backbone_class, settings, weight_map, prefixes=("",), ignore=(),
                     prepare=None, shared_layers=False):
    """A converter (config, tensors) -> backbone for a layout a weight map describes.

    The backbone is `backbone_class(**settings(config))`, built only after
    every setting is checked (types, ranges) and, with tensors, every size
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
        raise CheckpointError(f"{directory} has no config.json: give a Hugging Face "
                              "checkpoint directory (config.json + model.safetensors).")
    return read_json_object(path, "config.json")


def safetensors_files(directory):
    """The model.safetensors file(s) of a checkpoint directory (shards through their index)."""
    directory = os.fspath(directory)
    single = os.path.join(directory, "model.safetensors")
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(single):
        return [single]
    if not os.path.isfile(index):
        raise CheckpointError(f"{directory} has no model.safetensors (PyTorch .bin "
                              "checkpoints are not read: convert them to safetensors).")
    weight_map = read_json_object(index, "checkpoint index").get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str)
                                                   for v in weight_map.values()):
        raise CheckpointError(f"{index} is not a checkpoint index: it needs a \"weight_map\" "
                              "of tensor name -> shard file.")
    files = [resolve_inside(directory, shard) for shard in sorted(set(weight_map.values()))]
    for path in files:
        if not os.path.isfile(path):
            raise CheckpointError(f"{path} is listed in model.safetensors.index.json but "
                                  "missing; the download is incomplete.")
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
        header = json.loads(raw.decode("utf-8"))
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
    family, spec = huggingface_format(config.get("model_type"))
    tensors = read_tensors(directory) if load_weights else None
    backbone = spec.convert(config, tensors,
                            source=os.path.join(os.fspath(directory), "config.json"))
    # Which family the checkpoint is (recorded in run directories), from its
    # model_type through the registry: never guessed from sizes.
    backbone.family = family.name
    # Not part of the model's config: the text side travels beside it.
    backbone.tokenizer = tokenizer_from_huggingface(directory)
    check_tokenizer_fits(backbone, backbone.tokenizer, directory)
    return backbone


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
        settings = read_json_object(path, "tokenizer_config.json")
    vocab = os.path.join(directory, "vocab.txt")
    if os.path.isfile(vocab):
        import keras_hub

        unknown = _token(settings.get("unk_token", "[UNK]"))
        vocabulary = read_vocabulary(vocab, unknown)
        if lowercase is None:
            lowercase = bool(settings.get("do_lower_case", True))
        strip_accents = settings.get("strip_accents")
        # BERT's BasicTokenizer strips accents whenever it lowercases, unless
        # strip_accents is set explicitly.
        strip_accents = lowercase if strip_accents is None else bool(strip_accents)
        return keras_hub.tokenizers.WordPieceTokenizer(
            vocabulary=vocabulary, lowercase=lowercase, strip_accents=strip_accents,
            oov_token=unknown,
            split_on_cjk=bool(settings.get("tokenize_chinese_chars", True)),
        )
    vocab, merges = (os.path.join(directory, n) for n in ("vocab.json", "merges.txt"))
    if os.path.isfile(vocab) and os.path.isfile(merges):
        import keras_hub

        vocabulary = read_json_object(vocab, "vocab.json (token -> id)")
        ids = list(vocabulary.values())
        if not all(type(i) is int and i >= 0 for i in ids) or len(set(ids)) != len(ids):
            raise CheckpointError(f"{vocab} must map each token to its own id (a non-negative "
                                  "integer); some ids are repeated or not integers.")
        lines = _text_lines(merges)
        # merges.txt starts with a "#version" line; the rest are "a b" pairs.
        merge_list = [line for line in lines if line and not line.startswith("#version")]
        bad = next((line for line in merge_list if len(line.split(" ")) != 2), None)
        if bad is not None:
            raise CheckpointError(f"{merges}: {bad!r} is not a merge of two pieces.")
        from keras_ctx.data.tokenizers import WORD_END, WordEndBPETokenizer

        if any(piece.endswith(WORD_END) for piece in vocabulary):
            # openai-gpt: BPE over lowercased words with "</w>" ends, not bytes.
            unknown = _token(settings.get("unk_token", "<unk>"))
            return WordEndBPETokenizer(vocabulary, merge_list, unknown_token=unknown)
        try:
            return keras_hub.tokenizers.BytePairTokenizer(
                vocabulary=vocabulary, merges=merge_list,
                add_prefix_space=bool(settings.get("add_prefix_space", False)),
            )
        except ValueError as error:  # a merge of pieces the vocabulary lacks
            raise CheckpointError(f"{merges} does not fit {vocab} ({error}); use the two "
                                  "files of one tokenizer.") from None
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


def _token(value):
    """A special token from tokenizer_config.json: a string or {"content": ...}."""
    value = value.get("content") if isinstance(value, dict) else value
    if not isinstance(value, str):
        raise CheckpointError(f"tokenizer_config.json: a special token is {value!r}, not a "
                              "string; fix the field.")
    return value


def _text_lines(path):
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{path} is not UTF-8 text ({error.reason} at byte "
                              f"{error.start}); re-save it as UTF-8.") from None
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def read_vocabulary(path, unknown="[UNK]"):
    """The tokens of a WordPiece vocab.txt (one per line, its line number its id), checked.

    A repeated token would give two ids one string, and a vocabulary
    without its unknown token cannot tokenize unseen words: both refused.
    """
    tokens = [line.rstrip("\r") for line in _text_lines(path)]
    seen = {}
    for number, token in enumerate(tokens):
        if token in seen:
            raise CheckpointError(f"{path}: token {token!r} is on lines {seen[token] + 1} "
                                  f"and {number + 1}; each token must appear once.")
        seen[token] = number
    if unknown not in seen:
        raise CheckpointError(f"{path} has no unknown token {unknown!r}; add it (or set "
                              "unk_token in tokenizer_config.json).")
    return tokens


def check_tokenizer_fits(backbone, tokenizer, directory):
    """A tokenizer whose ids run past the embedding table would fail only at embed time."""
    from keras_ctx.layers.embeddings import vocabulary_size_of

    if tokenizer is None:
        return
    rows = vocabulary_size_of(backbone)
    largest = largest_token_id(tokenizer)
    if rows is not None and largest >= rows:
        size = int(tokenizer.vocabulary_size())
        raise CheckpointError(f"The tokenizer in {directory} has {size} tokens but the "
                              f"embedding has {rows} rows (its largest id is {largest}); the "
                              "tokenizer files belong to another model (use the matching "
                              "vocabulary).")


def largest_token_id(tokenizer):
    """The largest id a tokenizer can give: its vocabulary's largest, not its token count.

    A vocab.json maps tokens to ids that need not be 0..n-1 (a GPT-2 vocabulary
    cut to 41 tokens may keep id 5000).
    """
    vocabulary = getattr(tokenizer, "vocabulary", None)
    if isinstance(vocabulary, dict) and vocabulary:
        return max(int(i) for i in vocabulary.values())
    return int(tokenizer.vocabulary_size()) - 1


def default_model_type(backbone):
    """The Hugging Face model_type the backbone's family writes (its registry entry)."""
    family = registry.of_backbone(backbone)
    if family is None or not family.huggingface:
        raise CheckpointError(f"No Hugging Face export for {type(backbone).__name__}; "
                              f"exportable model types: {', '.join(EXPORTERS)}.")
    return family.huggingface[0].model_type


def to_huggingface(backbone, directory, model_type=None, overwrite=False):
    """Writes `backbone` as a Hugging Face checkpoint directory.

    config.json + model.safetensors in the layout of `model_type` ("bert",
    "roberta", "albert", "xlnet"; default: the backbone's own family), and
    the tokenizer's vocabulary when the backbone carries a `tokenizer`
    (vocab.txt for WordPiece). `from_huggingface(directory)` reads it back
    exactly.

    Args:
        backbone: the backbone to write.
        directory: where; other files in it are left alone.
        model_type: the Hugging Face layout; default: the backbone's family.
        overwrite: replace the checkpoint files (config, weights, tokenizer
            files) already there. Without it, any of them existing is an
            error. With it, tokenizer files the new export does not write are
            removed, so old vocabularies never pair with new weights.

    Returns:
        The directory.
    """

    model_type = model_type or default_model_type(backbone)
    if model_type not in EXPORTERS:
        raise CheckpointError(f"Cannot export to model_type {model_type!r}; exportable: "
                              f"{', '.join(EXPORTERS)}.")
    check_writable(directory, HF_FILES, overwrite)
    config, tensors = EXPORTERS[model_type](backbone)
    return write_checkpoint_directory(directory, config, tensors,
                                      getattr(backbone, "tokenizer", None), overwrite=overwrite)


# Every file a checkpoint directory of ours may hold: what an export replaces.
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "vocab.json", "merges.txt",
                   "spiece.model", "sentencepiece.bpe.model", "30k-clean.model",
                   "tokenizer.json", "special_tokens_map.json")
HF_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json",
            "pytorch_model.bin", "tf_model.h5") + TOKENIZER_FILES


def check_writable(directory, names, overwrite):
    """Refuses to replace a user's checkpoint files unless `overwrite`, or to write into
    something that is not a directory."""
    directory = os.fspath(directory)
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise CheckpointError(f"{directory} is a file, not a directory; give a directory "
                              "to write the checkpoint into (a new or an existing one).")
    there = [name for name in names if os.path.lexists(os.path.join(directory, name))]
    if there and not overwrite:
        raise CheckpointError(f"{directory} already holds {', '.join(there)}; pass "
                              "overwrite=True to replace them, or choose another directory.")


def write_checkpoint_directory(directory, config, tensors, tokenizer=None, overwrite=False):
    """config.json + model.safetensors (+ the tokenizer's files) in `directory`.

    Each file is written beside and renamed into place. Stale tokenizer
    files go first, so a write stopped half-way leaves files missing, never
    an old vocabulary beside new weights.
    """
    from safetensors.numpy import save_file

    from keras_ctx.common.files import replacing

    directory = os.fspath(directory)
    check_writable(directory, HF_FILES, overwrite)
    os.makedirs(directory, exist_ok=True)
    written = tokenizer_file_names(tokenizer)
    for name in set(HF_FILES) - set(written) - {"config.json", "model.safetensors"}:
        if os.path.lexists(os.path.join(directory, name)):
            os.remove(os.path.join(directory, name))
    with replacing(os.path.join(directory, "model.safetensors"), overwrite=True) as staging:
        save_file(tensors, staging, metadata={"format": "pt"})
    write_json_file(os.path.join(directory, "config.json"), config)
    save_tokenizer_files(tokenizer, directory)
    return directory


def write_json_file(path, value, **options):
    from keras_ctx.common.files import replacing

    with replacing(path, overwrite=True) as staging:
        with open(staging, "w", encoding="utf-8") as handle:
            json.dump(value, handle, **(options or {"indent": 2, "sort_keys": True}))


def tokenizer_file_names(tokenizer):
    """The files `save_tokenizer_files` writes for `tokenizer`."""
    if tokenizer is None:
        return ()
    import keras_hub

    if isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        return ("vocab.txt", "tokenizer_config.json")
    if isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
        return ("vocab.json", "merges.txt")
    if isinstance(tokenizer, keras_hub.tokenizers.SentencePieceTokenizer):
        return ("spiece.model",)
    return ()


def save_tokenizer_files(tokenizer, directory):
    """The tokenizer's vocabulary files in Hugging Face's names (None: nothing), atomically."""
    if tokenizer is None:
        return
    import keras_hub

    from keras_ctx.common.files import replacing

    def write(name):
        return replacing(os.path.join(directory, name), overwrite=True)

    if isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        with write("vocab.txt") as staging, open(staging, "w", encoding="utf-8") as handle:
            handle.writelines(token + "\n" for token in tokenizer.get_vocabulary())
        settings = {"do_lower_case": bool(tokenizer.lowercase),
                    "strip_accents": bool(tokenizer.strip_accents),
                    "tokenize_chinese_chars": bool(tokenizer.split_on_cjk)}
        if tokenizer.oov_token != "[UNK]":
            settings["unk_token"] = tokenizer.oov_token
        write_json_file(os.path.join(directory, "tokenizer_config.json"), settings,
                        sort_keys=False)
    elif isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
        write_json_file(os.path.join(directory, "vocab.json"), tokenizer.vocabulary,
                        ensure_ascii=False)
        with write("merges.txt") as staging, open(staging, "w", encoding="utf-8") as handle:
            handle.write("#version: 0.2\n")
            handle.writelines(merge + "\n" for merge in tokenizer.merges)
    elif isinstance(tokenizer, keras_hub.tokenizers.SentencePieceTokenizer):
        proto = tokenizer.proto
        if not isinstance(proto, bytes):
            raise CheckpointError("The SentencePiece tokenizer holds no serialized model.")
        with write("spiece.model") as staging, open(staging, "wb") as handle:
            handle.write(proto)
