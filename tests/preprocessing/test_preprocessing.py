import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.preprocessing import TextPreprocessor
from tests.tiny import VOCAB


def _wordpiece():
    return keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)


def test_bert_framing_padding_and_masks():
    out = TextPreprocessor(_wordpiece(), 6, "bert")(tf.constant(["the bank", "a river bank"]))
    # [CLS]=2 the=4 bank=5 [SEP]=3, then [PAD]=0.
    np.testing.assert_array_equal(out["token_ids"], [[2, 4, 5, 3, 0, 0], [2, 9, 6, 5, 3, 0]])
    np.testing.assert_array_equal(out["padding_mask"], [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]])
    np.testing.assert_array_equal(out["segment_ids"], np.zeros((2, 6)))


def test_xlnet_puts_sep_and_cls_at_the_end():
    out = TextPreprocessor(_wordpiece(), 5, "xlnet")(tf.constant(["the bank"]))
    np.testing.assert_array_equal(out["token_ids"], [[4, 5, 3, 2, 0]])


def test_too_long_text_is_an_error_not_a_truncation():
    layer = TextPreprocessor(_wordpiece(), 4, "bert")
    # A ValueError with its reason on every backend (on JAX and torch Keras' call wrapper
    # dropped a TensorFlow error's message: "RuntimeError: ... TextPreprocessor.call()." alone).
    with pytest.raises(ValueError, match="longer than sequence_length=4"):
        layer(tf.constant(["the bank on the river"]))
    with pytest.raises(ValueError, match="special tokens"):
        TextPreprocessor(_wordpiece(), 4, "roberta")
