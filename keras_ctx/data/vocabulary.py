"""Word vocabularies and ELMo's biLM inputs (Peters et al., 2018).

`word_vocabulary` counts a corpus' words (most frequent first, as bilm-tf's
sampled softmax needs); `bilm_inputs` turns a batch of sentences into the
`character_ids` and `token_ids` that `BiLMPretrainer` reads.
"""

import collections

from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.common.validation import positive_int

from keras_ctx.data.characters import BOS_TOKEN, EOS_TOKEN, split_and_pad, tokens_to_character_ids

SPECIAL_TOKENS = ("<pad>", BOS_TOKEN, EOS_TOKEN, "<UNK>")


def make_vocabulary(words):
    """[`<pad>`, `<S>`, `</S>`, `<UNK>`] + `words` (most frequent first), deduplicated."""
    out = list(SPECIAL_TOKENS)
    for w in words:
        if w not in out:
            out.append(w)
    return out


def bilm_inputs(sentences, vocabulary, sequence_length):
    """(batch,) sentences -> {"character_ids", "token_ids"} for `BiLMPretrainer`.

    `vocabulary` is a list whose index 0 is padding and which contains `<S>`,
    `</S>` and `<UNK>` (see `make_vocabulary`); unknown words get `<UNK>`.
    Usable in `tf.data.Dataset.map` after `.batch(..., drop_remainder=True)`.
    """
    for special in (BOS_TOKEN, EOS_TOKEN, "<UNK>"):
        if special not in vocabulary:
            raise ValueError(
                f"`vocabulary` must contain {special!r}; build it with make_vocabulary(words)."
            )
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(vocabulary)), tf.range(len(vocabulary), dtype=tf.int32)
        ),
        default_value=vocabulary.index("<UNK>"),
    )
    tokens = split_and_pad(sentences, sequence_length, add_sentence_boundaries=True)
    token_ids = tf.where(tokens == "", 0, table.lookup(tokens))
    return {"character_ids": tokens_to_character_ids(tokens), "token_ids": token_ids}


def sentence_rows(sentences, sequence_length):
    """A tf.data of sentences (scalar strings) -> the biLM's rows, one sentence each.

    A sentence of more words than a row holds (sequence_length - 2, with `<S>`
    and `</S>`) continues in the next rows, each with its own boundaries:
    bilm-tf (allenai/bilm-tf bilm/data.py `_get_batch`) trains on every word of
    a sentence of any length, where `bilm_inputs` alone would refuse it.
    """
    positive_int("sequence_length", sequence_length, least=3, why="<S>, a word, </S>")
    words_per_row = sequence_length - 2

    def pieces(sentence):
        words = tf.strings.split(sentence)
        starts = tf.range(0, tf.maximum(tf.size(words), 1), words_per_row)
        return tf.data.Dataset.from_tensor_slices(starts).map(
            lambda start: tf.strings.reduce_join(words[start:start + words_per_row],
                                                 separator=" "))

    return sentences.flat_map(pieces)


def word_vocabulary(sentences, size):
    """make_vocabulary of the `size` most frequent whitespace-separated words.

    `sentences` is a tf.data of scalar strings or a list of str; ties keep
    first-seen order.
    """
    if isinstance(sentences, tf.data.Dataset):
        sentences = (s.decode("utf-8") for s in sentences.as_numpy_iterator())
    counts = collections.Counter(word for sentence in sentences for word in sentence.split())
    return make_vocabulary([word for word, _ in counts.most_common(size)])
