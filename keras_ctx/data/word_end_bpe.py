"""GPT's BPE with end-of-word markers (Radford et al. 2018) as a Keras layer: pieces ending in
"</w>" where a word ends, merged by Hugging Face `tokenizers`' BPE model.

`WordEndBPETokenizer` reads text as GPT's (lower cased, no accents, split on spaces and
punctuation); a subclass that splits words its own way (XLM's Moses,
`keras_ctx.data.xlm_text`) gives its words to the same BPE. `tokenizers.train_word_end_bpe`
learns the merges.
"""

import os

import keras
import numpy as np
from keras_ctx.common.optional import tensorflow as tf

WORD_END = "</w>"


def _word_end_bpe(vocabulary, merges, unknown_token, gpt_text=True):
    """The BPE model over "</w>" words; `gpt_text`: it reads text as GPT's (NFD, lower
    case, no accents, split on spaces and punctuation), else words split before."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    bpe = Tokenizer(models.BPE(vocab=dict(vocabulary), merges=[tuple(m) for m in merges],
                               unk_token=unknown_token, end_of_word_suffix=WORD_END))
    if gpt_text:
        bpe.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(),
                                               normalizers.StripAccents()])
        bpe.pre_tokenizer = pre_tokenizers.BertPreTokenizer()  # spaces and punctuation
    bpe.decoder = decoders.BPEDecoder(suffix=WORD_END)
    return bpe


class PythonTokenizer(keras.layers.Layer):
    """A tokenizer layer whose `_encode(texts)` (a numpy array of UTF-8 bytes -> (flat ids,
    ids per text)) runs in Python through tf.py_function: this class and XLM's, CoVe's
    Moses words (`keras_ctx.data.cove_words`)."""

    # Runs Python (tf.py_function): no serve_text in an exported SavedModel.
    in_graph = False

    def __init__(self, **kwargs):
        kwargs.pop("dtype", None)
        super().__init__(dtype="int32", **kwargs)
        # Strings stay strings on JAX and torch too (as TextPreprocessor's).
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True

    def tokenize(self, inputs):
        inputs = tf.convert_to_tensor(inputs, tf.string)
        scalar = inputs.shape.rank == 0
        values, lengths = tf.py_function(self._encode, [inputs], [tf.int32, tf.int64])
        values.set_shape([None])
        lengths.set_shape([None])
        tokens = tf.RaggedTensor.from_row_lengths(values, lengths)
        return tokens[0] if scalar else tokens

    def __call__(self, inputs, *args, **kwargs):
        return super().__call__(tf.convert_to_tensor(inputs, tf.string), *args, **kwargs)

    def call(self, inputs):
        return self.tokenize(inputs)


@keras.saving.register_keras_serializable(package="keras_ctx")
class WordEndBPETokenizer(PythonTokenizer):
    """GPT's BPE (Radford et al. 2018): lowercased words, merges ending in "</w>".

    Hugging Face `tokenizers`' BPE model does the merging; this layer gives it
    the keras-hub tokenizer interface (`tokenize`, `detokenize`,
    `token_to_id`, `id_to_token`, `vocabulary_size`, `get_vocabulary`).

    Args:
        vocabulary: {piece: id} (openai-gpt's vocab.json).
        merges: ["a b", ...] or [("a", "b"), ...] (merges.txt, in merge order).
        unknown_token: the piece for unknown characters.

    Example:
    >>> tokenizer = WordEndBPETokenizer(vocabulary, merges)
    >>> tokenizer("The bank.")  # ids of "the</w>", "bank</w>", ".</w>"
    """

    # GPT's text rules inside the BPE model (`words`); False: a subclass splits the words.
    gpt_text = True

    def __init__(self, vocabulary=None, merges=None, unknown_token="<unk>", **kwargs):
        super().__init__(**kwargs)
        self.unknown_token = unknown_token
        self.set_vocabulary_and_merges(vocabulary, merges)

    def set_vocabulary_and_merges(self, vocabulary, merges):
        self.vocabulary = dict(vocabulary or {})
        self.merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                       for m in (merges or [])]
        self._bpe = (_word_end_bpe(self.vocabulary, self.merges, self.unknown_token,
                                   gpt_text=self.gpt_text)
                     if self.vocabulary else None)
        self._pieces = {i: p for p, i in self.vocabulary.items()}

    def words(self, lines):
        """The words of each str in `lines` as the BPE reads them (GPT: lower cased, no
        accents, split on spaces and punctuation); a subclass that splits words its own
        way (XLM's Moses) overrides it and sets `gpt_text` False."""
        bpe = _word_end_bpe({}, [], self.unknown_token)
        return [[word for word, _ in bpe.pre_tokenizer.pre_tokenize_str(
            bpe.normalizer.normalize_str(line))] for line in lines]

    def _encode(self, texts):
        texts = [t.decode("utf-8") for t in np.asarray(texts).reshape(-1)]
        if not self.gpt_text:  # a subclass' words, split before
            encoded = self._bpe.encode_batch(self.words(texts), is_pretokenized=True,
                                             add_special_tokens=False)
        else:
            encoded = self._bpe.encode_batch(texts, add_special_tokens=False)
        rows = [e.ids for e in encoded]
        return (np.array([i for r in rows for i in r], np.int32),
                np.array([len(r) for r in rows], np.int64))

    def detokenize(self, ids):
        rows = np.asarray(ids).tolist()
        if rows and not isinstance(rows[0], list):
            return self._bpe.decode(rows)
        return [self._bpe.decode(row) for row in rows]

    def vocabulary_size(self):
        return len(self.vocabulary)

    def get_vocabulary(self):
        return [self._pieces[i] for i in range(len(self._pieces))]

    def token_to_id(self, token):
        if token not in self.vocabulary:
            raise KeyError(f"{token!r} is not in the vocabulary.")
        return self.vocabulary[token]

    def id_to_token(self, token_id):
        return self._pieces[token_id]

    @staticmethod
    def piece_surface(piece):
        """The characters a piece covers (for keras_ctx.preprocessing.piece_spans)."""
        return piece[: -len(WORD_END)] + " " if piece.endswith(WORD_END) else piece

    def save_assets(self, directory):
        import json

        with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as handle:
            json.dump(self.vocabulary, handle, ensure_ascii=False)
        with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as handle:
            handle.write("#version: 0.2\n")
            handle.writelines(" ".join(m) + "\n" for m in self.merges)

    def load_assets(self, directory):
        import json

        with open(os.path.join(directory, "vocab.json"), encoding="utf-8") as handle:
            vocabulary = json.load(handle)
        with open(os.path.join(directory, "merges.txt"), encoding="utf-8") as handle:
            merges = [line.rstrip("\n") for line in handle
                      if line.strip() and not line.startswith("#version")]
        self.set_vocabulary_and_merges(vocabulary, merges)

    def get_config(self):
        # The vocabulary and merges travel as assets (save_assets).
        return dict(super().get_config(), unknown_token=self.unknown_token)
