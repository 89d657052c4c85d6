"""ELMo character ids as core TensorFlow ops (usable in tf.data and in SavedModels).

The convention is allennlp's `ELMoCharacterMapper` (bilm-tf's
`UnicodeCharsVocabulary` ids + 1, so that 0 is free for padding):

- a token is its UTF-8 bytes (ids 0..255), wrapped in begin-of-word (258) and
  end-of-word (259) and padded with the padding character (260) to
  `max_characters_per_token` (50) positions;
- the sentence boundary tokens `<S>` and `</S>` are [bow, 256, eow, pad...]
  and [bow, 257, eow, pad...];
- then every id is shifted by +1, so a real token never has a 0 and the all-zero
  row means "no token here" (padding). Hence 262 character ids.

Over-long words: a token with more than `max_characters_per_token - 2` (48)
UTF-8 bytes keeps only its first 48 bytes (which may cut a multi-byte
character), exactly as allennlp and bilm-tf do, so that ids match the
published models. This is the published convention and the one deliberate
exception to "nothing silently truncated"; pass `truncate_long_words=False`
to get an error instead.

Only core TF string ops are used (`tf.strings.length/substr/join`,
`tf.io.decode_raw`, `tf.strings.split` for whole sentences), no
tensorflow-text, so a stock TF Serving binary can run an exported signature
built from these functions.
"""

import keras
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.common.validation import positive_int

# allennlp ELMoCharacterMapper, before the +1 shift.
MAX_CHARACTERS_PER_TOKEN = 50
BEGINNING_OF_SENTENCE_CHARACTER = 256  # <begin sentence>
END_OF_SENTENCE_CHARACTER = 257  # <end sentence>
BEGINNING_OF_WORD_CHARACTER = 258  # <begin word>
END_OF_WORD_CHARACTER = 259  # <end word>
PADDING_CHARACTER = 260  # <padding>
NUM_CHARACTERS = 262  # 261 ids + 1 for the all-zero padding token
BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _check_length(max_characters_per_token):
    positive_int("max_characters_per_token", max_characters_per_token, least=3,
                 why="begin-of-word, one byte, end-of-word")


def _special_row(character, max_characters_per_token):
    row = [PADDING_CHARACTER] * max_characters_per_token
    row[0], row[1], row[2] = BEGINNING_OF_WORD_CHARACTER, character, END_OF_WORD_CHARACTER
    return tf.constant([c + 1 for c in row], tf.int32)


def tokens_to_character_ids(
    tokens, max_characters_per_token=MAX_CHARACTERS_PER_TOKEN, truncate_long_words=True
):
    """ELMo character ids of a string tensor of tokens, any shape.

    Args:
        tokens: tf.string tensor of any shape (e.g. (batch, time)); the empty
            string is padding and becomes an all-zero row. `<S>` and `</S>` are
            the sentence boundary tokens.
        max_characters_per_token: ids per token (50 in ELMo).
        truncate_long_words: keep the first `max_characters_per_token - 2`
            bytes of longer tokens (the published convention); if False, a
            longer token raises InvalidArgumentError instead.

    Returns:
        int32 tensor of shape `tokens.shape + (max_characters_per_token,)`.
    """
    _check_length(max_characters_per_token)
    tokens = tf.convert_to_tensor(tokens, tf.string)
    max_bytes = max_characters_per_token - 2
    lengths = tf.strings.length(tokens, unit="BYTE")
    if not truncate_long_words:
        tf.debugging.assert_less_equal(
            lengths,
            max_bytes,
            message=(
                f"a token has more than {max_bytes} UTF-8 bytes; pass "
                "truncate_long_words=True to truncate as ELMo does."
            ),
        )
    n = tf.minimum(lengths, max_bytes)[..., None]  # (..., 1)
    # Pad every token with NUL bytes, then cut exactly `max_bytes` bytes: a
    # fixed width lets decode_raw give a dense (..., max_bytes) tensor.
    padded = tf.strings.join([tokens, tf.constant("\x00" * max_bytes)])
    fixed = tf.strings.substr(padded, 0, max_bytes, unit="BYTE")
    raw = tf.cast(tf.io.decode_raw(fixed, tf.uint8), tf.int32)  # (..., max_bytes)
    raw = tf.reshape(raw, tf.concat([tf.shape(tokens), [max_bytes]], 0))
    positions = tf.range(max_bytes)
    body = tf.where(positions < n, raw, PADDING_CHARACTER)
    # Positions 1..max_bytes+1 after the begin-of-word; eow goes at n + 1.
    bow = tf.fill(tf.concat([tf.shape(tokens), [1]], 0), BEGINNING_OF_WORD_CHARACTER)
    tail = tf.fill(tf.concat([tf.shape(tokens), [1]], 0), PADDING_CHARACTER)
    ids = tf.concat([bow, body, tail], axis=-1)  # (..., max_chars)
    index = tf.range(max_characters_per_token)
    ids = tf.where(index == n + 1, END_OF_WORD_CHARACTER, ids) + 1
    ids = tf.where(
        (tokens == BOS_TOKEN)[..., None],
        _special_row(BEGINNING_OF_SENTENCE_CHARACTER, max_characters_per_token),
        ids,
    )
    ids = tf.where(
        (tokens == EOS_TOKEN)[..., None],
        _special_row(END_OF_SENTENCE_CHARACTER, max_characters_per_token),
        ids,
    )
    return tf.where((lengths == 0)[..., None], 0, ids)


def split_and_pad(sentences, sequence_length, add_sentence_boundaries=True):
    """Whitespace-splits (batch,) sentences into (batch, sequence_length) tokens.

    Adds `<S>`/`</S>` around each sentence when `add_sentence_boundaries`
    (as the biLM was trained), pads with "" (padding). A sentence longer than
    `sequence_length` tokens (boundaries included) raises InvalidArgumentError:
    raise `sequence_length` or split the text first.
    """
    positive_int("sequence_length", sequence_length)
    sentences = tf.convert_to_tensor(sentences, tf.string)
    scalar = sentences.shape.rank == 0
    if scalar:
        sentences = sentences[None]
    words = tf.strings.split(sentences)  # ragged (batch, None)
    if add_sentence_boundaries:
        batch = tf.shape(sentences)[:1]
        bos = tf.fill(tf.concat([batch, [1]], 0), BOS_TOKEN)
        eos = tf.fill(tf.concat([batch, [1]], 0), EOS_TOKEN)
        words = tf.concat([bos, words, eos], axis=1)
    tf.debugging.assert_less_equal(
        words.row_lengths(),
        tf.cast(sequence_length, words.row_lengths().dtype),
        message=(
            f"a sentence has more than sequence_length={sequence_length} tokens "
            "(boundaries included); raise sequence_length or split the text."
        ),
    )
    dense = words.to_tensor(default_value="", shape=[None, sequence_length])
    return dense[0] if scalar else dense


def sentences_to_character_ids(
    sentences,
    sequence_length,
    max_characters_per_token=MAX_CHARACTERS_PER_TOKEN,
    add_sentence_boundaries=True,
):
    """(batch,) whitespace-tokenised sentences -> (batch, sequence_length, 50) ids."""
    tokens = split_and_pad(sentences, sequence_length, add_sentence_boundaries)
    return tokens_to_character_ids(tokens, max_characters_per_token)


@keras.saving.register_keras_serializable(package="keras_ctx")
class ElmoCharacterIds(keras.layers.Layer):
    """Preprocessing layer: strings -> ELMo character ids.

    Put it in front of `keras_ctx.models.Elmo` (or an `ElmoBackbone`) to feed
    raw text. Not trainable; runs on CPU in tf.data as well.

    Args:
        sequence_length: tokens per sentence, boundaries included.
        max_characters_per_token: ids per token (50 in ELMo).
        add_sentence_boundaries: wrap each sentence in `<S>` ... `</S>`.
        pre_tokenized: if True the input is already (batch, time) tokens
            ("" for padding) and is not split.

    Call arguments:
        inputs: (batch,) sentences, or (batch, time) tokens if `pre_tokenized`.

    Returns:
        int32 (batch, sequence_length, max_characters_per_token).
    """

    def __init__(
        self,
        sequence_length,
        max_characters_per_token=MAX_CHARACTERS_PER_TOKEN,
        add_sentence_boundaries=True,
        pre_tokenized=False,
        **kwargs,
    ):
        kwargs.setdefault("dtype", "int32")
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        _check_length(max_characters_per_token)
        self.sequence_length = sequence_length
        self.max_characters_per_token = max_characters_per_token
        self.add_sentence_boundaries = bool(add_sentence_boundaries)
        self.pre_tokenized = bool(pre_tokenized)
        self.built = True
        # Strings stay strings on JAX and torch too (as TextPreprocessor's).
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True

    def call(self, inputs):
        if self.pre_tokenized:
            return tokens_to_character_ids(inputs, self.max_characters_per_token)
        return sentences_to_character_ids(
            inputs,
            self.sequence_length,
            self.max_characters_per_token,
            self.add_sentence_boundaries,
        )

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.sequence_length, self.max_characters_per_token)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(
            (inputs.shape[0], self.sequence_length, self.max_characters_per_token),
            dtype="int32",
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "max_characters_per_token": self.max_characters_per_token,
                "add_sentence_boundaries": self.add_sentence_boundaries,
                "pre_tokenized": self.pre_tokenized,
            }
        )
        return config
