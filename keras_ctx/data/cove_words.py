"""CoVe's words (McCann et al. 2017) as its released pipeline made them: Moses' tokenizer, lower
cased, one id per word.

salesforce/cove OpenNMT-py/README.md @9a0d90b (Multi30k, IWSLT'16, WMT'17 en-de): each
language's side through `tokenizer.perl -no-escape -l $l -q` (no `-a`: hyphenated words
stay whole; the README downloads Moses' nonbreaking_prefix.en and .de beside it), then
`lowercase.perl`, then `preprocess.py -lower` (words: the line's `split()`). No
normalize-punctuation.perl (XLM's first Moses step, `keras_ctx.data.xlm_text`): the README
runs none. sacremoses' MosesTokenizer is tokenizer.perl in Python (`escape=False`: its
-no-escape), through xlm_text's import: the optional `moses` extra, refused in one line
when missing; `keras_ctx.data.moses_words` runs it (`words_of`: in one process per core
for a large sample).

`MosesWordTokenizer` turns text into those words' ids (Python, as XLM's tokenizer: no
serve_text in an exported SavedModel); a word it lacks is its unknown word.
"""

import functools
import json
import os

import keras
import numpy as np

from keras_ctx.data import moses_words as moses
from keras_ctx.data import xlm_text
from keras_ctx.data.word_end_bpe import PythonTokenizer


@functools.cache
def _tokenizer(language):
    xlm_text.sacremoses("CoVe's recipe")  # missing: refused in one line
    return moses.tokenizer(language)


def moses_words(text, language):
    """One line's words as the released pipeline made them: tokenizer.perl -no-escape -l
    `language` (no -a), lowercase.perl (and preprocess.py -lower), split on spaces."""
    _tokenizer(language)
    return moses.cove_words(text, language)


def words_of(sentences, language, workers=None):
    """`moses_words` of each of `sentences`: an iterator, in their order, split by `workers`
    processes (None: one per core) for `moses_words.POOL_MIN_LINES` sentences or more."""
    _tokenizer(language)
    return moses.split("cove-lowercased", ((language, text) for text in sentences), workers)


@keras.saving.register_keras_serializable(package="keras_ctx")
class MosesWordTokenizer(PythonTokenizer):
    """Whole words of `moses_words`, one id each (keras-hub's tokenizer interface).

    Args:
        vocabulary: the words in id order (the specials first).
        language: the Moses language code of the text it reads.
        oov_token: the word a word outside `vocabulary` becomes.
    """

    def __init__(self, vocabulary=None, language="en", oov_token="<unk>", **kwargs):
        super().__init__(**kwargs)
        self.language, self.oov_token = language, oov_token
        self.set_vocabulary(vocabulary)
        _tokenizer(language)  # sacremoses missing: refused now

    def set_vocabulary(self, vocabulary):
        self.vocabulary = list(vocabulary or [])
        self._ids = {word: i for i, word in enumerate(self.vocabulary)}
        if self.vocabulary and self.oov_token not in self._ids:
            raise ValueError(f"The vocabulary lacks the unknown word {self.oov_token!r}.")

    def _encode(self, texts):
        unknown = self._ids[self.oov_token]
        rows = [[self._ids.get(word, unknown) for word in moses_words(t.decode("utf-8"),
                                                                       self.language)]
                for t in np.asarray(texts).reshape(-1)]
        return (np.array([i for row in rows for i in row], np.int32),
                np.array([len(row) for row in rows], np.int64))

    def detokenize(self, ids):
        rows = np.asarray(ids).tolist()
        if rows and not isinstance(rows[0], list):
            return " ".join(self.vocabulary[i] for i in rows)
        return [" ".join(self.vocabulary[i] for i in row) for row in rows]

    def vocabulary_size(self):
        return len(self.vocabulary)

    def get_vocabulary(self):
        return list(self.vocabulary)

    def token_to_id(self, token):
        if token not in self._ids:
            raise KeyError(f"{token!r} is not in the vocabulary.")
        return self._ids[token]

    def id_to_token(self, token_id):
        return self.vocabulary[token_id]

    @staticmethod
    def piece_surface(piece):
        """The characters a word covers (for keras_ctx.preprocessing.piece_spans)."""
        return piece

    def save_assets(self, directory):
        with open(os.path.join(directory, "words.json"), "w", encoding="utf-8") as handle:
            json.dump(self.vocabulary, handle, ensure_ascii=False)

    def load_assets(self, directory):
        with open(os.path.join(directory, "words.json"), encoding="utf-8") as handle:
            self.set_vocabulary(json.load(handle))

    def get_build_config(self):
        """None: nothing to build, so its saved config (and fingerprint) is the same before
        and after its first call."""
        return None

    def get_config(self):
        # The words travel as an asset (save_assets).
        return dict(super().get_config(), language=self.language, oov_token=self.oov_token)
