"""`keras-ctx convert`: a checkpoint in any supported format into a run directory."""

from keras_ctx import run_files, runs
from keras_ctx.convert.formats import convert as convert_checkpoint
from keras_ctx.pretraining.kept_head import role_name


def convert(source, dest, overwrite=False):
    """Converts a checkpoint (any supported format) into the run directory `dest`, with the
    pretraining heads it holds (`pretrain --from DEST` continues them)."""
    with runs.writing(dest):  # a pretrain, finetune or convert writing DEST refuses us
        info = convert_checkpoint(source, dest, overwrite=overwrite)
    heads = run_files.load_heads(dest)
    print(f"Converted {source} to {dest}"
          + (f", with its pretraining {', '.join(map(role_name, heads))}." if heads else "."))
    return info
