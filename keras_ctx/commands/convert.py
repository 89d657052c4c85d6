"""`keras-ctx convert`: a checkpoint in any supported format into a run directory."""

from keras_ctx import runs
from keras_ctx.convert.formats import convert as convert_checkpoint


def convert(source, dest, overwrite=False):
    """Converts a checkpoint (any supported format) into the run directory `dest`."""
    with runs.writing(dest):  # a pretrain, finetune or convert writing DEST refuses us
        info = convert_checkpoint(source, dest, overwrite=overwrite)
    print(f"Converted {source} to {dest}.")
    return info
