"""What the tokenizers' text normalisers share: one function mapped over str, bytes,
arrays and nested lists of them, and SentencePiece's word-start mark."""

import numpy as np

WORD_START = "\u2581"  # marks a word's first piece while learning (SentencePiece's ▁)


def map_strings(inputs, function):
    """`function` applied to every string in `inputs` (str, bytes, a NumPy array or
    nested lists of them), keeping the structure; bytes are read as UTF-8."""
    if isinstance(inputs, str):
        return function(inputs)
    if isinstance(inputs, bytes):
        return function(inputs.decode("utf-8"))
    if isinstance(inputs, np.ndarray):
        return np.vectorize(lambda x: map_strings(x, function), otypes=[object])(inputs)
    return [map_strings(x, function) for x in inputs]
