"""`keras-ctx prepare`: a corpus tokenized once into sharded TFRecords for `pretrain --data`.

The work is the data path's (`keras_ctx.data.prepare`); this is the command's
Python face, which also says how much it wrote and why (BERT's layout writes
each instance `duplicate` times, each copy with its own static masks).
"""

import functools
import os

from keras_ctx.data import prepare as data_prepare
from keras_ctx.common import progress
from keras_ctx.common.progress import size

PROGRESS_EVERY = 5.0  # seconds between two progress lines of one shard's pass


@functools.wraps(data_prepare.prepare)
def prepare(preset, corpus, out, *args, say=print, **kwargs):
    from keras_ctx.common import validation

    validation.check_given(corpus=corpus, out=out)  # "" is not "builtin" or "here"
    say("Preparing: tokenizing the corpus into sharded TFRecords (a line per shard as "
        "each is done; a family with static masks writes each instance once per copy).")
    # A shard written in this process (one shard, or --workers 1) says how far it is.
    with progress.reporting(say, PROGRESS_EVERY):
        manifest = data_prepare.prepare(preset, corpus, out, *args, say=say, **kwargs)
    written = sum(os.path.getsize(os.path.join(out, shard["file"]))
                  for shard in manifest["shards"])
    copies = manifest.get("copies", 1)
    why = (f": {copies} copies of each instance, each with its own static masks (--duplicate, "
           "BERT's dupe_factor)" if copies > 1 else "")
    corpus = manifest["corpus_bytes"]
    say(f"Wrote {size(written)} of records for {size(corpus)} of corpus"
        + (f" ({written / corpus:,.0f}x)" if corpus else "") + f"{why}.")
    return manifest


__all__ = ["prepare"]
