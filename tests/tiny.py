"""A tiny functional encoder with the backbone interface, for tests of generic code, and
random weights for any model."""

import keras
import numpy as np

import keras_ctx

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "bank", "river", "money", "on", "a"]


def tiny_encoder(vocabulary_size=len(VOCAB), hidden=16, seed=0):
    keras.utils.set_random_seed(seed)
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
    x = keras_ctx.layers.TokenEmbedding(vocabulary_size, hidden)(token_ids)
    x = x + keras_ctx.layers.PositionEmbedding(32)(x)
    h1 = keras_ctx.layers.TransformerEncoderBlock(num_heads=2, intermediate_size=2 * hidden,
                                                  dropout=0.0)(x, padding_mask=padding_mask)
    pooled = keras.layers.Dense(hidden, activation="tanh")(h1[:, 0])
    return keras.Model(
        {"token_ids": token_ids, "padding_mask": padding_mask},
        {"sequence_output": h1, "pooled_output": pooled, "hidden_states": [x, h1]},
        name="tiny_encoder",
    )


def randomize(model, seed, scale=0.3):
    """`model` with every weight drawn from N(0, scale), so that a weight read wrongly shows."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, scale, weight.shape).astype("float32"))
    return model
