"""Checkpoint formats: recognise one, load it, write it as a keras-ctx run directory.

What `keras-ctx convert SRC DEST` (keras_ctx.commands.convert) and the model
handles (keras_ctx.handles) call. `detect_format(source)` recognises

- "huggingface": a directory with config.json (a `model_type`) + model.safetensors;
- "tensorflow":  a google-research directory with bert_config.json or
                 albert_config.json + a TF1 checkpoint (*.index, *.data-*);
- "allennlp":    ELMo options json + hdf5 weights: a directory holding one
                 *.json with "lstm"/"char_cnn" sections and one *.hdf5, or the
                 options file itself with the weights beside it
                 (..._options.json -> ..._weights.hdf5);
- "keras_hub":   a keras-hub preset directory (config.json naming a keras_hub
                 class, metadata.json, model.weights.h5).

`convert(source, dest)` loads it and writes DEST as the run directory that
the other commands read (keras_ctx.runs): backbone.keras, tokenizer/ (when
the source has a tokenizer), the pretraining heads a Hugging Face or
google-research checkpoint holds (objective_head.npz,
`keras_ctx.convert.heads.pretraining_heads`) and run.json (family, source,
format).
"""

import glob
import os

from keras_ctx import registry
from keras_ctx.common.files import missing_link, read_json
from keras_ctx.convert.base import CheckpointError

FORMATS = ("huggingface", "tensorflow", "allennlp", "keras_hub")

FIX = "fix or re-download it"


def read_sniffed(path):
    """The JSON value in `path`, a file that names itself (the source given, a
    config.json, an ELMo *options.json): a malformed one raises naming the file and the
    parse error, never reads as "not this format"."""
    return read_json(path, None, FIX, error=CheckpointError)


def _names_itself(path):
    name = os.path.basename(path)
    return name == "config.json" or name.endswith("options.json")


def _other_json(path):
    """The JSON value of a *.json file that does not name its format, or None when it is
    not JSON: a Hugging Face directory's tokenizer.json or vocab.json belongs to the format
    whose loader reads it (strictly, when it needs it); a damaged one is no ELMo options
    file, and `detect_format` names it when nothing else fits."""
    try:
        return read_sniffed(path)
    except CheckpointError:
        return None


def _is_elmo_options(options):
    return isinstance(options, dict) and "lstm" in options and "char_cnn" in options


def _elmo_files(source):
    """(options, weights) of an allennlp ELMo source, or None."""
    if os.path.isfile(source) and source.endswith(".json"):
        if not _is_elmo_options(read_sniffed(source)):
            return None
        candidates = [source.replace("options", "weights")[: -len(".json")] + ".hdf5",
                      os.path.splitext(source)[0] + ".hdf5"]
        hdf5 = sorted(glob.glob(os.path.join(os.path.dirname(source) or ".", "*.hdf5")))
        weights = next((c for c in candidates if os.path.isfile(c)), None)
        if weights is None and len(hdf5) == 1:
            weights = hdf5[0]
        if weights is None:
            raise CheckpointError(f"No hdf5 weights beside {source}: put the allennlp "
                                  "..._weights.hdf5 file in the same directory.")
        return source, weights
    if os.path.isdir(source):
        options = [p for p in sorted(glob.glob(os.path.join(glob.escape(source), "*.json")))
                   if _is_elmo_options(read_sniffed(p) if _names_itself(p) else _other_json(p))]
        weights = sorted(glob.glob(os.path.join(glob.escape(source), "*.hdf5")))
        if options and weights:
            if len(options) > 1 or len(weights) > 1:
                raise CheckpointError(f"{source} holds several ELMo options/hdf5 files: "
                                      "give the options file itself.")
            return options[0], weights[0]
    return None


def _unreadable_json(directory):
    """' (x.json is not valid JSON ...)' for the first *.json in `directory` that is not
    JSON, or '': said when no format fits, as it may be the file that would have."""
    for path in sorted(glob.glob(os.path.join(glob.escape(directory), "*.json"))):
        try:
            read_sniffed(path)
        except CheckpointError as error:
            return f" ({str(error).rstrip('.')})"
    return ""


def detect_format(source):
    """One of FORMATS, or a CheckpointError naming what was looked for."""
    from keras_ctx.convert.kerashub import is_keras_hub_preset
    from keras_ctx.convert.tensorflow import find_tf_config

    source = os.fspath(source)
    if not os.path.exists(source):
        raise CheckpointError(missing_link(source) or f"{source} does not exist.")
    if _elmo_files(source) is not None:
        return "allennlp"
    if os.path.isdir(source):
        if is_keras_hub_preset(source):
            return "keras_hub"
        config_file = os.path.join(source, "config.json")
        config = read_sniffed(config_file) if os.path.isfile(config_file) else None
        if isinstance(config, dict) and "model_type" in config:
            return "huggingface"
        if find_tf_config(source) is not None:
            return "tensorflow"
        for name in ("config.json", "metadata.json"):  # a Hugging Face cache's missing blob
            if missing_link(os.path.join(source, name)):
                raise CheckpointError(missing_link(os.path.join(source, name)))
    raise CheckpointError(
        f"Cannot tell the format of {source}"
        f"{_unreadable_json(source) if os.path.isdir(source) else ''}. Expected a Hugging "
        "Face directory (config.json with model_type + model.safetensors), a google-research "
        "TF checkpoint directory (bert_config.json / albert_config.json + *.index), an "
        "allennlp ELMo options json + hdf5, or a keras-hub preset directory."
    )


def load(source, format=None):
    """(backbone with .tokenizer, format) of any supported source."""
    source = os.fspath(source)
    format = format or detect_format(source)
    if format == "huggingface":
        from keras_ctx.convert.huggingface import from_huggingface

        backbone = from_huggingface(source)
    elif format == "tensorflow":
        from keras_ctx.convert.tensorflow import from_tf_checkpoint

        backbone = from_tf_checkpoint(source)
    elif format == "allennlp":
        from keras_ctx.convert.allennlp import from_allennlp

        files = _elmo_files(source)
        if files is None:
            raise CheckpointError(f"{source} holds no ELMo options json + hdf5 weights.")
        backbone = from_allennlp(*files)
        backbone.tokenizer = None
    elif format == "keras_hub":
        from keras_ctx.convert.kerashub import from_keras_hub_preset

        backbone = from_keras_hub_preset(source)
    else:
        raise CheckpointError(f"Unknown format {format!r}; known: {', '.join(FORMATS)}.")
    return backbone, format


def family_of_backbone(backbone):
    """The registry's family of a converted backbone (set by its format's loader)."""
    family = registry.of_backbone(backbone)
    if family is None:
        raise CheckpointError(f"No keras-ctx family for {type(backbone).__name__}.")
    return family.name


def run_info(model, backbone, format, sequence_length=128):
    """The run.json info of a converted backbone (`model` names where it came from).

    The sequence length is capped at the backbone's own position limit.
    """
    limit = getattr(backbone, "max_sequence_length", None)
    if limit is not None:
        sequence_length = min(sequence_length, limit)
    return {"model": model, "family": family_of_backbone(backbone),
            "sequence_length": sequence_length, "source_format": format,
            "backbone": type(backbone).__name__}


def convert(source, dest, format=None, sequence_length=128, overwrite=False):
    """Converts `source` (any supported format) into the run directory `dest`.

    A run already in `dest` is replaced only with `overwrite`. Returns the
    run.json info written there.
    """
    from keras_ctx import run_files as runs

    runs.check_free(os.fspath(dest), overwrite)  # before the (long) load
    source = os.fspath(source)
    format, heads = format or detect_format(source), {}
    # Its pretraining heads are kept with the run, where it has them.
    if format == "huggingface":
        from keras_ctx.convert.heads import with_pretraining_heads

        backbone, heads = with_pretraining_heads(source)
    elif format == "tensorflow":
        from keras_ctx.convert.tensorflow import from_tf_checkpoint

        backbone, heads = from_tf_checkpoint(source, heads=True)
    else:
        backbone, format = load(source, format)
    info = run_info(os.path.abspath(source), backbone, format, sequence_length)
    tokenizer = getattr(backbone, "tokenizer", None)
    runs.save_run(os.fspath(dest), info, backbone, tokenizer, overwrite=overwrite,
                  head_weights=heads)
    return info
