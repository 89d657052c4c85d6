"""Inputs of an encoder-decoder backbone (BART, T5) from token ids, every token real."""

import numpy as np


def feed(encoder_ids, decoder_ids):
    encoder_ids = np.asarray(encoder_ids, "int32")
    decoder_ids = np.asarray(decoder_ids, "int32")
    return {
        "encoder_token_ids": encoder_ids,
        "encoder_padding_mask": np.ones_like(encoder_ids),
        "decoder_token_ids": decoder_ids,
        "decoder_padding_mask": np.ones_like(decoder_ids),
    }
