"""Parts that the BERT-style encoders (BERT, RoBERTa, ALBERT, ELECTRA) share.

    encoder_inputs        the token_ids / padding_mask (/ segment_ids) inputs
    post_ln_block_config  a post-LN TransformerEncoderBlock config (Devlin et al. 2019)
    cls_pooler            tanh(W h_[CLS] + b), BERT's pooler
"""

import keras


def encoder_inputs(with_segments):
    """int32 (batch, time) inputs by name; `segment_ids` only for two-segment families."""
    inputs = {
        "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
        "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
    }
    if with_segments:
        inputs["segment_ids"] = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
    return inputs


def post_ln_block_config(num_heads, hidden_size, intermediate_size, activation, dropout,
                         layer_norm_epsilon):
    """A TransformerEncoderBlock config: post-LN, truncated-normal(0.02) kernels."""
    return {
        "num_heads": num_heads,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "activation": activation,
        "dropout": dropout,
        "layer_norm_epsilon": layer_norm_epsilon,
        "normalize_first": False,  # post-LN, as BERT
        "kernel_initializer": {"class_name": "TruncatedNormal",
                               "config": {"stddev": 0.02}, "module": "keras.initializers"},
    }


def cls_pooler(hidden_size, dtype):
    """BERT's pooler, applied to the last layer's first row: tanh(W h_[CLS] + b)
    (Devlin et al. 2019, Sec. 3)."""
    return keras.layers.Dense(hidden_size, activation="tanh", dtype=dtype,
                              kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
                              name="pooler")
