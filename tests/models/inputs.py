"""Backbone inputs from random or given token ids, for the model tests."""

import numpy as np


def feed(encoder_ids, decoder_ids):
    """An encoder-decoder backbone's (BART, T5) inputs, every token real."""
    encoder_ids = np.asarray(encoder_ids, "int32")
    decoder_ids = np.asarray(decoder_ids, "int32")
    return {
        "encoder_token_ids": encoder_ids,
        "encoder_padding_mask": np.ones_like(encoder_ids),
        "decoder_token_ids": decoder_ids,
        "decoder_padding_mask": np.ones_like(decoder_ids),
    }


def one_segment(batch=2, length=7, seed=0, vocabulary=50):
    """Random ids below `vocabulary`, one segment, no padding."""
    rng = np.random.default_rng(seed)
    return {"token_ids": rng.integers(0, vocabulary, (batch, length)).astype("int32"),
            "segment_ids": np.zeros((batch, length), "int32"),
            "padding_mask": np.ones((batch, length), "int32")}


def two_segments(batch=2, length=7, seed=0, vocabulary=50):
    """Random ids below `vocabulary`, the second half of each row segment 1, no padding."""
    rng = np.random.default_rng(seed)
    return {
        "token_ids": rng.integers(0, vocabulary, (batch, length)).astype("int32"),
        "segment_ids": (np.arange(length)[None] >= length // 2).repeat(batch, 0).astype("int32"),
        "padding_mask": np.ones((batch, length), "int32"),
    }
