"""ALBERT's text before and after SentencePiece, as its released tokenizer reads it.

google-research/albert tokenization.py @b772393 (create_pretraining_data.py calls
it on every line when `--spm_model_file` is set):

  - `preprocess_text(line, lower=do_lower_case)`: `" ".join(line.strip().split())`,
    NFKD, every character with a nonzero canonical combining class dropped
    (`unicodedata.combining`), then `str.lower` (uncased models);
  - `encode_pieces`: a piece that ends in "," after a digit ("▁1990,") is encoded
    again without the comma and the comma becomes a piece of its own.

One difference is kept on purpose: `` and '' are read as " (`QUOTES`), as
transformers' AlbertTokenizer always reads them (its `preprocess_text`, and the
fast tokenizer's `Replace` normalizers), so that a tokenizer keras_ctx trains and
exports (`save_tokenizer`, `to_huggingface`) gives the same ids when transformers
reads it; google-research/albert's `preprocess_text` keeps them
(docs/notes/data-references.md, ALBERT).

`AlbertSentencePieceTokenizer` does both around keras-hub's SentencePiece, in
TensorFlow ops (tf.data, serving) and in Python alike; `tokenizers.train_albert_sentencepiece`
trains the model on the normalised text with the released `spm_train` rule
(README: the default `nmt_nfkc`; the case is lowered before, not folded).

zihangdai/xlnet prepro_utils.py @bbaa3a6 has the same `preprocess_text` and
`encode_pieces`, `` and '' always read as ": the XLNet family reads text with
them too (`lowercase=False`, `quotes=True`; keras_ctx/models/xlnet/family.py).
"""

import functools
import sys
import unicodedata

import keras
import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.data.strings import WORD_START, map_strings


# `` and '' read as ": transformers' AlbertTokenizer does, google-research/albert does not.
QUOTES = True


def albert_text(text, lowercase=True, quotes=QUOTES, keep_accents=False):
    """One str as ALBERT's `preprocess_text(text, lower=lowercase)` returns it.

    `quotes` and `keep_accents` are the two options Hugging Face's AlbertTokenizer and
    XLNetTokenizer add (their `preprocess_text`): `` and '' read as " (the default,
    `QUOTES`; False: google-research/albert's reading), accents kept.
    """
    text = " ".join(text.strip().split())
    if quotes:
        text = text.replace("``", '"').replace("''", '"')
    if not keep_accents:
        text = "".join(c for c in unicodedata.normalize("NFKD", text)
                       if not unicodedata.combining(c))
    return text.lower() if lowercase else text


@functools.cache
def _character_class(predicate_name):
    """An RE2 character class of the code points Python's `unicodedata` (or str) puts
    in the class, so the TensorFlow path uses Python's tables, not RE2's."""
    predicate = {"space": str.isspace, "combining": unicodedata.combining}[predicate_name]
    ranges, start = [], None
    for point in range(sys.maxunicode + 2):
        inside = point <= sys.maxunicode and bool(predicate(chr(point)))
        if inside and start is None:
            start = point
        elif not inside and start is not None:
            ranges.append(f"\\x{{{start:X}}}-\\x{{{point - 1:X}}}")
            start = None
    return "[" + "".join(ranges) + "]"


def albert_text_tf(text, lowercase=True, quotes=QUOTES, keep_accents=False):
    """`albert_text` in TensorFlow ops."""
    import tensorflow_text as tf_text

    text = tf.strings.regex_replace(text, _character_class("space") + "+", " ")
    text = tf.strings.regex_replace(text, "^ | $", "")
    if quotes:
        text = tf.strings.regex_replace(text, "``|''", '"')
    if not keep_accents:
        text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFKD"),
                                        _character_class("combining"), "")
    if not lowercase:
        return text
    # tf.strings.lower ends a string at its first NUL; Python's lower keeps it.
    parts = tf.strings.split(text, "\x00")
    lowered = tf.ragged.map_flat_values(
        lambda part: tf.strings.lower(part, encoding="utf-8") + "\x00", parts)
    joined = tf.strings.reduce_join(lowered, axis=-1)  # a separator attribute drops NUL
    length = tf.strings.length(joined) - 1
    return tf.strings.substr(joined, tf.zeros_like(length), length)


def albert_text_normalizers(lowercase=True, quotes=QUOTES, keep_accents=False):
    """`albert_text` as the `tokenizers` library's normalizers (a list, in its order), for a
    tokenizer.json that transformers reads as keras_ctx does (`tokenizer_files`): the
    spaces and combining characters are Python's classes (transformers' AlbertTokenizer
    splits on Rust's whitespace and strips every mark, `StripAccents`)."""
    from tokenizers import Regex, normalizers

    # Strip removes Rust's whitespace, a subset of Python's: only the collapsed " " is left.
    steps = [normalizers.Replace(Regex(_character_class("space") + "+"), " "),
             normalizers.Strip()]
    if quotes:
        steps += [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if not keep_accents:
        steps += [normalizers.NFKD(),
                  normalizers.Replace(Regex(_character_class("combining")), "")]
    return steps + [normalizers.Lowercase()] if lowercase else steps


def digit_comma_pieces(proto):
    """({id: [ids]} for the pieces `encode_pieces` splits ("▁1990," -> "▁1990", ","),
    the number of pieces)."""
    import sentencepiece as spm

    model = spm.SentencePieceProcessor(model_proto=proto)
    splits = {}
    for index in range(model.GetPieceSize()):
        piece = model.IdToPiece(index)
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            parts = model.EncodeAsPieces(piece[:-1].replace(WORD_START, ""))
            if piece[0] != WORD_START and parts[0][0] == WORD_START:
                parts = parts[1:] if len(parts[0]) == 1 else [parts[0][1:], *parts[1:]]
            splits[index] = [model.PieceToId(p) for p in [*parts, piece[-1]]]
    return splits, model.GetPieceSize()


def _split_lists(tokens, splits):
    """keras-hub's Python output (a list of id lists, or one array) with the splits."""
    if isinstance(tokens, np.ndarray) and tokens.ndim == 1:
        return np.asarray(_split_lists(tokens.tolist(), splits), tokens.dtype)
    if tokens and isinstance(tokens[0], (int, np.integer)):
        return [j for i in tokens for j in splits.get(int(i), [int(i)])]
    return [_split_lists(row, splits) for row in tokens]


@functools.cache
def albert_sentencepiece_class():
    """`AlbertSentencePieceTokenizer`, registered for `keras.saving`."""
    import keras_hub

    @keras.saving.register_keras_serializable(package="keras_ctx")
    class AlbertSentencePieceTokenizer(keras_hub.tokenizers.SentencePieceTokenizer):
        """keras-hub's SentencePiece tokenizer reading text as ALBERT's released
        `preprocess_text` + `encode_pieces` do (module docstring)."""

        def __init__(self, proto=None, lowercase=True, quotes=QUOTES, keep_accents=False,
                     **kwargs):
            self.lowercase = lowercase
            self.quotes = quotes
            self.keep_accents = keep_accents
            self._splits = None
            super().__init__(proto=proto, **kwargs)

        def set_proto(self, proto):
            super().set_proto(proto)
            self._splits, self._pieces = digit_comma_pieces(self.proto) if self.proto else (None, 0)
            if self.proto and tf.executing_eagerly():
                self._maybe_initialized_tf()  # eager: a tf.data map's lazy one dies with it

        def tokenize(self, inputs):
            graph = self._use_tf_workflow() or type(inputs).__module__.startswith("tensorflow")
            if graph:
                inputs = albert_text_tf(tf.convert_to_tensor(inputs), **self._text_options())
            else:
                inputs = map_strings(
                    inputs, functools.partial(albert_text, **self._text_options()))
                if isinstance(inputs, np.ndarray):
                    inputs = inputs.tolist()
            if not self._splits:
                return super().tokenize(inputs)
            if self.sequence_length:
                raise ValueError("AlbertSentencePieceTokenizer splits pieces after encoding; "
                                 "build it without sequence_length and pad afterwards.")
            tokens = super().tokenize(inputs)
            if not isinstance(tokens, (tf.Tensor, tf.RaggedTensor)):
                return _split_lists(tokens, self._splits)
            rows = [self._splits.get(i, [i]) for i in range(self._pieces)]
            table = tf.ragged.constant(rows, dtype=tokens.dtype)
            return tf.gather(table, tokens).merge_dims(-2, -1)

        def _text_options(self):
            return {"lowercase": self.lowercase, "quotes": self.quotes,
                    "keep_accents": self.keep_accents}

        def get_config(self):
            return {**super().get_config(), **self._text_options()}

    return AlbertSentencePieceTokenizer
