"""`keras-ctx prepare`: a corpus tokenized once into sharded TFRecords for `pretrain --data`.

The work is the data path's (`keras_ctx.data.prepare`); this is the command's
Python face.
"""

from keras_ctx.data.prepare import prepare

__all__ = ["prepare"]
