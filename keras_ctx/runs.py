"""A run directory: what `keras-ctx pretrain` leaves behind and the other commands read.

    OUT/run.json          the preset, family, sequence length and overrides
    OUT/backbone.keras    the trained backbone (what fine-tuning and export use)
    OUT/tokenizer/        the tokenizer's config and vocabulary files
    OUT/checkpoints/      resumable training state (keras_ctx.training)
    OUT/logs/             TensorBoard logs
"""

import json
import os

import keras

RUN_FILE = "run.json"


def save_tokenizer(tokenizer, directory):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as handle:
        json.dump(keras.saving.serialize_keras_object(tokenizer), handle)
    tokenizer.save_assets(directory)


def load_tokenizer(directory):
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.isfile(path):
        return None
    import keras_hub  # noqa: F401  (registers the tokenizer classes)

    with open(path, encoding="utf-8") as handle:
        tokenizer = keras.saving.deserialize_keras_object(json.load(handle))
    tokenizer.load_assets(directory)
    return tokenizer


def save_run(out_dir, info, backbone, tokenizer=None):
    os.makedirs(out_dir, exist_ok=True)
    backbone.save(os.path.join(out_dir, "backbone.keras"))
    if tokenizer is not None:
        save_tokenizer(tokenizer, os.path.join(out_dir, "tokenizer"))
    with open(os.path.join(out_dir, RUN_FILE), "w", encoding="utf-8") as handle:
        json.dump(info, handle, indent=2)


def load_run(run_dir):
    """(info dict, backbone, tokenizer or None) of a finished run directory."""
    path = os.path.join(run_dir, RUN_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir} is not a finished keras-ctx run (no {RUN_FILE}); "
                         "give the --out directory of `keras-ctx pretrain` or `convert`.")
    with open(path, encoding="utf-8") as handle:
        info = json.load(handle)
    import keras_ctx  # noqa: F401  (registers our classes for loading)

    backbone = keras.saving.load_model(os.path.join(run_dir, "backbone.keras"), compile=False)
    tokenizer = load_tokenizer(os.path.join(run_dir, "tokenizer"))
    return info, backbone, tokenizer
