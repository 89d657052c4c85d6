"""keras_ctx backbones -> Hugging Face checkpoints (config.json + model.safetensors).

`to_huggingface(backbone, directory)` writes the layout of a model_type
(each family's exporter, by model_type in the registry) and the tokenizer's
files beside it; `from_huggingface` reads it back exactly.
"""

import os

from keras_ctx import registry
from keras_ctx.common.files import write_json
from keras_ctx.convert.base import CheckpointError
from keras_ctx.convert.huggingface import EXPORTERS
from keras_ctx.convert.huggingface_tokenizers import (
    TOKENIZER_FILES,
    save_tokenizer_files,
    tokenizer_file_names,
)


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
    write_json(os.path.join(directory, "config.json"), config, sort_keys=True)
    save_tokenizer_files(tokenizer, directory)
    return directory
