"""allennlp's ELMo files (options json + hdf5 weights), read and written by the family
that registers them (`registry.AllenNLP`, ELMo's `models/elmo/convert.py`).

Reached through the registry, as the other formats reach their families' maps, so
that the converters' machinery imports no model (the model handles, below the
models, read every format through it).
"""

from keras_ctx import registry


def from_allennlp(options_file, weight_file):
    """The backbone of an allennlp options json and its hdf5 weights (with `.family`)."""
    return registry.allennlp().convert(options_file, weight_file)


def to_allennlp(backbone, options_file, weight_file, overwrite=False):
    """Writes `backbone` as an allennlp options json and hdf5 weights."""
    return registry.allennlp().export(backbone, options_file, weight_file, overwrite=overwrite)
