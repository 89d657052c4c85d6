"""Strings -> backbone inputs inside the graph (for `serve_text` and tf.data).

`TextPreprocessor` wraps a keras-hub tokenizer: tokenize, add the family's
start/end tokens, pad to a fixed length, and build the padding mask and
segment ids. Text longer than `sequence_length` is an error, never cut.
"""

import keras
import tensorflow as tf

# Start and end tokens per family, by name; the first name the vocabulary has wins.
FAMILY_TOKENS = {
    "bert": (["[CLS]"], ["[SEP]"]),
    "spanbert": (["[CLS]"], ["[SEP]"]),
    "electra": (["[CLS]"], ["[SEP]"]),
    "albert": (["[CLS]"], ["[SEP]"]),
    "roberta": (["<s>"], ["</s>"]),
    "xlnet": ([], ["[SEP]", "[CLS]"]),  # XLNet puts <sep> <cls> at the end
    "gpt": ([], []),
}
PAD_NAMES = ("[PAD]", "<pad>")


def _token_id(tokenizer, name):
    try:
        token_id = tokenizer.token_to_id(name)
    except (KeyError, ValueError):
        return None
    return token_id if token_id is not None and token_id >= 0 else None


class TextPreprocessor(keras.layers.Layer):
    """A batch of strings -> {"token_ids", "padding_mask", "segment_ids"} of fixed length.

    Args:
        tokenizer: a keras-hub tokenizer (WordPiece, byte-level BPE, SentencePiece).
        sequence_length: the fixed output length.
        family: which special tokens frame the text (see FAMILY_TOKENS).
    """

    def __init__(self, tokenizer, sequence_length, family="bert", **kwargs):
        super().__init__(**kwargs)
        if family not in FAMILY_TOKENS:
            raise ValueError(f"No text framing for the {family!r} family; known: "
                             f"{sorted(FAMILY_TOKENS)}.")
        self.tokenizer = tokenizer
        self.sequence_length = sequence_length
        self.family = family
        starts, ends = FAMILY_TOKENS[family]
        self.start_ids = [_token_id(tokenizer, n) for n in starts]
        self.end_ids = [_token_id(tokenizer, n) for n in ends]
        if None in self.start_ids + self.end_ids:
            raise ValueError(f"The tokenizer lacks the {family} special tokens "
                             f"{starts + ends}.")
        self.pad_id = next((i for i in (_token_id(tokenizer, n) for n in PAD_NAMES)
                            if i is not None), 0)
        self.built = True  # no weights of its own

    def call(self, text):
        tokens = self.tokenizer(text)
        if isinstance(tokens, list):  # keras-hub returns Python lists when eager
            tokens = tf.ragged.constant(tokens, dtype=tf.int32, ragged_rank=1)
        elif not isinstance(tokens, tf.RaggedTensor):
            tokens = tf.RaggedTensor.from_tensor(tokens)
        tokens = tf.cast(tokens, tf.int32)
        batch = tokens.nrows()
        pieces = []
        if self.start_ids:
            pieces.append(tf.RaggedTensor.from_tensor(
                tf.tile(tf.constant([self.start_ids], tf.int32), [batch, 1])))
        pieces.append(tokens)
        if self.end_ids:
            pieces.append(tf.RaggedTensor.from_tensor(
                tf.tile(tf.constant([self.end_ids], tf.int32), [batch, 1])))
        framed = tf.concat(pieces, axis=1)
        lengths = framed.row_lengths()
        check = tf.debugging.assert_less_equal(
            tf.cast(lengths, tf.int32), self.sequence_length,
            message=f"a text is longer than sequence_length={self.sequence_length} tokens "
                    "(special tokens included); shorten it or export a longer length.")
        with tf.control_dependencies([check]):
            ids = framed.to_tensor(self.pad_id, shape=[None, self.sequence_length])
        mask = tf.sequence_mask(lengths, self.sequence_length, tf.int32)
        return {"token_ids": ids, "padding_mask": mask, "segment_ids": tf.zeros_like(ids)}
