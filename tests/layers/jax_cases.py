"""Attention calls run on each backend from the same numpy weights (tests/backends.py),
and texts turned into inputs (`keras_ctx.preprocessing.text_inputs`).

On JAX the plain cases run `keras.ops.dot_product_attention`, the others
(relative bias, returned scores, dropout in training, a band) the einsum core
TensorFlow runs for all of them; every case's numbers must agree.
"""

import numpy as np

BATCH, LENGTH, HIDDEN, HEADS, HEAD_SIZE = 2, 6, 16, 4, 4
PADDING = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], "int32")

# name -> (plain: runs the fused kernel on JAX, layer settings, call settings)
CASES = {
    "self_padding": (True, {"dropout": 0.1}, {"padding_mask": PADDING}),
    "no_mask": (True, {}, {}),
    "causal_padding": (True, {}, {"padding_mask": PADDING, "use_causal_mask": True}),
    "training_without_dropout": (True, {}, {"padding_mask": PADDING, "training": True}),
    "cross_attention": (True, {}, {"value": "other", "attention_mask": "cross"}),
    "cached_decoding": (True, {}, {"cache": True}),
    "relative_bias": (False, {}, {"attention_bias": True, "padding_mask": PADDING}),
    "returned_scores": (False, {}, {"return_attention_scores": True}),
    "banded": (False, {"window_size": 2}, {"use_causal_mask": True}),
}

# family -> texts (one longer than the 8 asked for: its rows grow).
TEXT_CASES = {"bert": ["the bank", "money on the river bank the bank a"],
              "gpt": ["the river", "a bank"]}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<|endoftext|>", "the", "bank",
         "river", "money", "on", "a"]


def wordpiece_tokenizer():
    import keras_hub

    return keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)


def texts_as_inputs():
    """{name: ids} of TEXT_CASES (`text_inputs`) and of a pair (`TextPreprocessor`)."""
    from keras_ctx import families
    from keras_ctx.preprocessing import TextPreprocessor, text_inputs

    arrays = {}
    for family, texts in TEXT_CASES.items():
        inputs, _ = text_inputs(families.get(family), wordpiece_tokenizer(), texts, 8)
        arrays.update({f"text/{family}/{k}": v for k, v in inputs.items()})
    pair = TextPreprocessor(wordpiece_tokenizer(), 12, "bert")(
        np.array(["the bank", "a river"], object), np.array(["money", "on the bank"], object))
    arrays.update({f"pair/{k}": np.asarray(v) for k, v in pair.items()})
    return arrays


def _rng(name):
    return np.random.default_rng(sorted(CASES).index(name))


def run(name, float_dtype="float32"):
    """The case's output (and returned scores), one float32 array, on this backend."""
    import keras

    from keras_ctx.layers import MultiHeadAttention

    _, layer_settings, call = CASES[name]
    rng = _rng(name)
    layer = MultiHeadAttention(HEADS, HEAD_SIZE, dtype=float_dtype, **layer_settings)
    query = rng.normal(size=(BATCH, LENGTH, HIDDEN)).astype("float32")
    kwargs = dict(call)
    if kwargs.get("value") == "other":
        kwargs["value"] = rng.normal(size=(BATCH, LENGTH + 3, HIDDEN)).astype("float32")
        layer.build(query.shape, kwargs["value"].shape)
    else:
        layer.build(query.shape)
    if kwargs.get("attention_mask") == "cross":
        kwargs["attention_mask"] = (rng.random((BATCH, LENGTH, LENGTH + 3)) > 0.3).astype("int32")
    if kwargs.get("attention_bias") is True:
        kwargs["attention_bias"] = rng.normal(size=(1, HEADS, LENGTH, LENGTH)).astype("float32")
    layer.set_weights([rng.normal(scale=0.3, size=w.shape).astype("float32")
                       for w in layer.weights])
    if kwargs.pop("cache", None):
        # Decoding step 3 of a cache of 6 positions: keys 0-3 are seen.
        cache = rng.normal(size=(BATCH, 2, LENGTH, HEADS, HEAD_SIZE)).astype("float32")
        output, _ = layer(query[:, :1], cache=cache, cache_update_index=3,
                          padding_mask=np.ones((BATCH, LENGTH), "int32"), use_causal_mask=True)
        return keras.ops.convert_to_numpy(output).astype("float32")
    result = layer(query, **kwargs)
    if isinstance(result, tuple):
        return np.concatenate([keras.ops.convert_to_numpy(r).astype("float32").ravel()
                               for r in result])
    return keras.ops.convert_to_numpy(result).astype("float32")
