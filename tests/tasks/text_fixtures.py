"""Tiny trained-tokenizer backbones of four families for the text-task tests."""

import functools

import keras

from keras_ctx import families
from keras_ctx.models import from_preset

TINY = dict(num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32, dropout=0.0)
LINES = ["the bank approved the loan .", "we sat on the bank of the river .",
         "a fine film , i loved it .", "a dull film , i left early .",
         "paris is the capital of france .", "the river runs to the sea ."] * 20
PRESETS = {"bert": "bert-base", "gpt2": "gpt2", "t5": "t5-small", "bart": "bart-base"}


@functools.lru_cache(maxsize=None)
def tokenizer(family):
    kind = families.get(family).train_tokenizer
    return kind(LINES, 300)


def backbone(family, seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    spec = families.get(family)
    size = tokenizer(family).vocabulary_size() + spec.extra_tokens
    config = dict(TINY, vocabulary_size=size, **overrides)
    if spec.inputs != "encoder_decoder":
        config.setdefault("max_sequence_length", 64)
    return from_preset(PRESETS[family], **config)
