"""Text -> backbone inputs: the one path for serving, embedding, fine-tuning and export.

`TextPreprocessor` wraps a keras-hub tokenizer and runs inside the graph
(`serve_text`, tf.data) as well as eagerly (`keras-ctx embed`, `finetune`):
tokenize the whole text, frame it with the family's special tokens (one text
or a pair, `keras_ctx.families.Framing`), pad to a fixed length, and build the
padding mask and, for two-segment families, the segment ids. Encoder-decoder
families get the encoder inputs and the decoder inputs shifted right.

`truncation` says what happens to text longer than `sequence_length`:
"error" (the default: an error naming the limit, nothing is cut) or
"longest_first" (tokens are dropped from the end of the longer text of the
pair, one at a time, as Hugging Face's tokenizers do).

`language` is the text's language, for a family whose models read a language id
per token (XLM): it picks the language id (the model's `languages`, XLM's
id2lang) and the tokenizer's rules for that language (XLM's Moses rules);
`text_language` says what is refused.

`piece_spans(tokenizer, text)` gives each piece of the whole-text
tokenization its [start, end) characters in `text`, so a word's pieces are
found from offsets, never by tokenizing word by word (which loses byte-level
BPE's leading-space marker).
"""

import keras
import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx import registry
from keras_ctx.common import validation

TRUNCATIONS = ("error", "longest_first")


def token_id(tokenizer, spellings):
    """The id of the first spelling the tokenizer's vocabulary has, else None."""
    from keras_ctx.data.tokenizers import known_token_id

    return next((found for found in (known_token_id(tokenizer, name) for name in spellings)
                 if found is not None), None)


def _family(family):
    return registry.get(family) if isinstance(family, str) else family


def text_language(family, languages, language=None):
    """(the text's language code or None, its language id) for a model of `family`.

    Args:
        family: a `Family`; only one whose framing gives language ids (XLM's) takes a
            language.
        languages: the model's language codes in id order (`XLMBackbone.languages`,
            XLM's id2lang), or None where it names none.
        language: the text's language code, or None.

    A code the model does not name is refused, and so is no code for a model of several
    languages (nothing is picked for the user); a model of one language needs none. A
    model that names no languages reads text as before they were kept: id 0, the
    tokenizer's own rules, and refuses a code it cannot place.
    """
    given = "language" if language is None else f"language {language!r}"
    if not (family.framing is not None and family.framing.positions):
        if language is not None:
            raise ValueError(f"The {family.name} family's models read no language ids (they "
                             f"have no language embedding): leave the {given} out.")
        return None, 0
    if languages is None:
        if language is not None:
            raise ValueError(f"The model names no languages (its config has no lang2id: a "
                             f"run or checkpoint saved before keras_ctx kept them), so "
                             f"{given} has no language id; leave it out (language id 0, the "
                             "tokenizer's own rules) or use a model whose config names them.")
        return None, 0
    known = ", ".join(languages)
    if language is None:
        if len(languages) > 1:
            raise ValueError(f"The model reads {len(languages)} languages ({known}), each with "
                             "its own language id and word rules: give the text's language "
                             f"with --language CODE (language= in Python), one of {known}.")
        language = languages[0]
    if language not in languages:
        raise ValueError(f"{given} is not one of the model's languages ({known}); give one "
                         "of them.")
    return language, tuple(languages).index(language)


class TextPreprocessor(keras.layers.Layer):
    """A batch of strings (or of string pairs) -> the backbone's inputs, fixed length.

    Args:
        tokenizer: a keras-hub tokenizer (WordPiece, byte-level BPE, SentencePiece).
        sequence_length: the fixed output length.
        family: a family name (or `Family`); its framing frames the text.
        truncation: "error" or "longest_first" (see the module docstring).
        language: the text's language code (XLM: its language id and Moses rules;
            `text_language` says when it is needed).
        languages: the model's language codes in id order (`backbone.languages`, XLM's
            id2lang); None where the model names none.

    Call arguments:
        text: (batch,) strings.
        text_pair: optional (batch,) strings, the second text of each pair.

    Example:
    >>> preprocess = TextPreprocessor(tokenizer, 128, "bert")
    >>> inputs = preprocess(tf.constant(["A man."]), tf.constant(["A person."]))
    """

    def __init__(self, tokenizer, sequence_length, family="bert", truncation="error",
                 language=None, languages=None, **kwargs):
        super().__init__(**kwargs)
        family = _family(family)
        if family.framing is None:
            raise ValueError(f"The {family.name} family reads {family.inputs}, not "
                             "tokenized text: it has no TextPreprocessor.")
        validation.one_of("truncation", truncation, TRUNCATIONS)
        self.languages = None if languages is None else tuple(languages)
        self.language, self.language_id = text_language(family, self.languages, language)
        if self.language is not None and hasattr(tokenizer, "for_language"):
            tokenizer = tokenizer.for_language(self.language)  # XLM: that language's Moses
        self.tokenizer = tokenizer
        self.sequence_length = sequence_length
        self.family = family.name
        self.truncation = truncation
        self.encoder_decoder = family.inputs == "encoder_decoder"
        framing = family.framing
        self.segments, self.positions = framing.segments, framing.positions
        self.summary_segment = framing.summary_segment
        ids = {part: [token_id(tokenizer, s) for s in getattr(framing, part)]
               for part in ("start", "middle", "end", "decoder_start")}
        # A vocabulary without the pair's separator (OpenAI GPT's released one has no
        # <|endoftext|>) still frames single texts; a pair is refused when given.
        self.pair_missing = None
        if None in ids["middle"]:
            self.pair_missing = (f"The tokenizer has no {framing.middle} to join a pair of "
                                 f"texts as the {family.name} family does; pass single texts "
                                 "or a tokenizer with that token.")
            ids["middle"] = []
        missing = [part for part, found in ids.items() if None in found]
        if missing:
            raise ValueError(f"The tokenizer lacks the {family.name} special tokens "
                             f"({', '.join(missing)}: {[getattr(framing, p) for p in missing]}).")
        self.start_ids, self.middle_ids = ids["start"], ids["middle"]
        self.end_ids, self.decoder_start_ids = ids["end"], ids["decoder_start"]
        pad = [token_id(tokenizer, s) for s in framing.pad]
        self.pad_id = pad[0] if pad and pad[0] is not None else 0
        self.built = True  # no weights of its own
        # Strings stay strings: Keras would convert the inputs to the backend's
        # tensors, and JAX has none for text (keras-hub's preprocessing layers
        # set the same two flags). The work is TensorFlow's on every backend.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True

    def _tokenize(self, text):
        tokens = self.tokenizer(tf.convert_to_tensor(text))
        if isinstance(tokens, list):  # keras-hub returns Python lists when eager
            tokens = tf.ragged.constant(tokens, dtype=tf.int32, ragged_rank=1)
        elif not isinstance(tokens, tf.RaggedTensor):
            tokens = tf.RaggedTensor.from_tensor(tokens)
        return tf.cast(tokens, tf.int32)

    def _constant(self, ids, batch):
        return tf.RaggedTensor.from_tensor(
            tf.tile(tf.constant([ids], tf.int32), [batch, 1]))

    def _truncate(self, first, second):
        """Drops tokens from the end of the longer text until the row fits."""
        specials = len(self.start_ids) + len(self.end_ids) + (
            len(self.middle_ids) if second is not None else 0)
        room = self.sequence_length - specials
        a = tf.cast(first.row_lengths(), tf.int32)
        if second is None:
            return first[:, :room] if self.truncation != "error" else first, None
        if self.truncation == "error":
            return first, second
        b = tf.cast(second.row_lengths(), tf.int32)
        # Closed form of "remove one token from the longer (ties: the second)".
        keep_b = tf.minimum(b, tf.maximum(room - a, room // 2))
        keep_a = tf.minimum(a, room - keep_b)
        cut = lambda tokens, keep: tf.ragged.boolean_mask(  # noqa: E731
            tokens, tf.ragged.range(tokens.row_lengths()) < tf.cast(keep[:, None], tf.int64))
        return cut(first, keep_a), cut(second, keep_b)

    def call(self, text, text_pair=None):
        if text_pair is not None and self.pair_missing:
            raise ValueError(self.pair_missing)
        first = self._tokenize(text)
        second = None if text_pair is None else self._tokenize(text_pair)
        first, second = self._truncate(first, second)
        batch = first.nrows()
        pieces = [(self._constant(self.start_ids, batch), 0)] if self.start_ids else []
        pieces.append((first, 0))
        if second is not None:
            if self.middle_ids:
                pieces.append((self._constant(self.middle_ids, batch), 0))
            pieces.append((second, 1))
        text_segment = 1 if second is not None else 0
        for i, end in enumerate(self.end_ids):
            last = i == len(self.end_ids) - 1 and self.summary_segment is not None
            pieces.append((self._constant([end], batch),
                           self.summary_segment if last else text_segment))
        framed = tf.concat([p for p, _ in pieces], axis=1)
        segments = tf.concat([tf.ones_like(p) * s for p, s in pieces], axis=1)
        lengths = framed.row_lengths()
        too_long = (f"a text is longer than sequence_length={self.sequence_length} tokens "
                    "(special tokens included); shorten it, raise the length, or pass "
                    "truncation='longest_first'.")
        # Eagerly a ValueError, on every backend: on JAX and torch Keras' call wrapper
        # drops a TensorFlow error's message. In graphs (tf.data, SavedModel) the assert.
        if tf.executing_eagerly() and np.max(lengths.numpy(), initial=0) > self.sequence_length:
            raise ValueError(too_long)
        check = tf.debugging.assert_less_equal(
            tf.cast(lengths, tf.int32), self.sequence_length, message=too_long)
        with tf.control_dependencies([check]):
            ids = framed.to_tensor(self.pad_id, shape=[None, self.sequence_length])
        mask = tf.sequence_mask(lengths, self.sequence_length, tf.int32)
        if self.encoder_decoder:
            # Teacher forcing's shift: the decoder reads its start token, then
            # the encoder's text one position late (Lewis et al. 2020).
            start = tf.fill([tf.shape(ids)[0], 1], tf.constant(self.decoder_start_ids[0]))
            return {"encoder_token_ids": ids, "encoder_padding_mask": mask,
                    "decoder_token_ids": tf.concat([start, ids[:, :-1]], 1),
                    "decoder_padding_mask": mask}
        out = {"token_ids": ids, "padding_mask": mask}
        if self.segments > 1:
            out["segment_ids"] = segments.to_tensor(0, shape=[None, self.sequence_length])
        if self.positions:  # XLM: positions 0.., the text's language id
            out["position_ids"] = tf.zeros_like(ids) + tf.range(self.sequence_length)
            out["language_ids"] = tf.zeros_like(ids) + self.language_id
        return out

    def framed_length(self, text):
        """The framed length of one text (special tokens included), eagerly."""
        return len(self.start_ids) + len(self.end_ids) + len(
            np.asarray(self._tokenize(tf.constant([text]))[0]))

    def get_config(self):
        return dict(super().get_config(), sequence_length=self.sequence_length,
                    family=self.family, truncation=self.truncation, language=self.language,
                    languages=None if self.languages is None else list(self.languages))


# ---------------------------------------------------------------- offsets

def _piece_surface(tokenizer, piece):
    """The characters a piece covers, as they appear in the text (case aside)."""
    import keras_hub

    if isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
        from keras_ctx.common import compat

        byte_values, characters = compat.bytes_to_unicode()
        byte_of = dict(zip(characters, byte_values))  # "Ġ" -> b" "
        raw = b"".join(byte_of[c] for c in piece if c in byte_of)
        return raw.decode("utf-8", errors="ignore")
    if isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        return piece[2:] if piece.startswith("##") else piece
    surface = getattr(tokenizer, "piece_surface", None)  # tokenizers of our own
    if surface is not None:
        return surface(piece)
    return piece.replace("\u2581", " ")  # SentencePiece's word-start marker


def piece_spans(tokenizer, text):
    """(ids, [(start, end)]) of the whole-text tokenization of `text`.

    Each piece's surface (bytes for byte-level BPE, without ## or ▁ markers)
    is found in `text` from where the previous piece ended, ignoring case
    and accents as the tokenizers do; a piece that cannot be found (an
    unknown-token id) covers the rest of its whitespace-delimited word.
    """
    import unicodedata

    def fold(s):
        return "".join(c for c in unicodedata.normalize("NFD", s.lower())
                       if unicodedata.category(c) != "Mn")

    ids = np.asarray(tokenizer(tf.constant(text))).reshape(-1).tolist()
    folded = [fold(c) for c in text]  # per character, so offsets stay the text's
    spans, cursor = [], 0
    for token in ids:
        surface = fold(_piece_surface(tokenizer, tokenizer.id_to_token(token))).strip()
        while cursor < len(text) and text[cursor].isspace():
            cursor += 1
        start, end, i = cursor, cursor, 0
        while surface and end < len(text) and i < len(surface):
            piece = folded[end]
            if surface.startswith(piece, i) and piece:
                i += len(piece)
                end += 1
            elif not piece:  # a character the folding removes
                end += 1
            else:
                break
        if not surface or i < len(surface):  # unknown token: the rest of the word
            end = start
            while end < len(text) and not text[end].isspace():
                end += 1
        spans.append((start, end))
        cursor = end
    return ids, spans


def word_positions(tokenizer, text, word, offset=0):
    """Row positions of the pieces of the first whole-word `word` in `text`.

    Pieces that overlap the word's characters count; a period after it does
    not. `offset` is the number of framing tokens before the text.
    """
    import re

    match = re.search(r"(?<!\w)" + re.escape(word) + r"(?!\w)", text, re.IGNORECASE)
    if match is None:
        raise ValueError(f"{word!r} does not occur as a word in {text!r}.")
    _, spans = piece_spans(tokenizer, text)
    positions = [offset + i for i, (s, e) in enumerate(spans)
                 if s < match.end() and e > match.start()]
    if not positions:
        raise ValueError(f"No piece of {text!r} covers {word!r}.")
    return positions


def character_inputs(texts, sequence_length):
    """ELMo's inputs: (batch, time, 50) character ids, <S> ... </S> around each text."""
    from keras_ctx.data.characters import sentences_to_character_ids

    longest = max(len(t.split()) for t in texts) + 2
    return {"character_ids": sentences_to_character_ids(
        tf.constant(texts), max(sequence_length, longest))}


def text_inputs(family, tokenizer, texts, sequence_length, language=None, languages=None):
    """(inputs, preprocessor or None) for `texts`; rows at least `sequence_length` long.

    Longer texts get longer rows (up to the backbone's own position limit,
    which it checks), never truncation. `language`, `languages`: as TextPreprocessor's.
    """
    if family.framing is None:
        text_language(family, languages, language)  # a language is refused
        return character_inputs(texts, sequence_length), None
    probe = TextPreprocessor(tokenizer, sequence_length, family, language=language,
                             languages=languages)
    length = max([sequence_length] + [probe.framed_length(t) for t in texts])
    preprocessor = TextPreprocessor(tokenizer, length, family, language=language,
                                    languages=languages)
    inputs = preprocessor(np.array(texts, dtype=object))
    return {k: np.asarray(v) for k, v in inputs.items()}, preprocessor
