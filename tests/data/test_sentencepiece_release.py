"""ALBERT's and XLNet's SentencePiece are trained as their released `spm_train` commands.

google-research/albert README.md @b772393 and zihangdai/xlnet README.md @bbaa3a6 make
`( ) " - . – £ €` (and XLNet's `<eop>`) user-defined symbols, always pieces of their
own, and keep 99.995% of the characters (`--character_coverage=0.99995`). The pieces
decide where ALBERT's n-grams (`_is_start_piece_sp`) and XLNet's spans
(`_is_start_piece`) start (issue 54). The XLNet family trains with both; the ALBERT
family with the coverage, its symbols on request (`ALBERT_USER_DEFINED_SYMBOLS`: kept
out of the family's default so that transformers reads an exported ALBERT tokenizer
with our ids). keras-hub's SentencePiece is checked against `sentencepiece`'s own
processor on the same model.
"""

import numpy as np
import pytest

from keras_ctx import registry
from keras_ctx.data import tokenizers
from keras_ctx.data.xlnet_stream import xlnet_word_starts
from keras_ctx.models.albert.family import (ALBERT_CHARACTER_COVERAGE,
                                           ALBERT_USER_DEFINED_SYMBOLS)
from tests.data import albert_tokenization_reference as albert_reference
from tests.data import word_boundaries_reference as reference

SYMBOLS = ("(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac")  # the READMEs' lists
CORPUS = ["The price (approx.) was \u00a35 - or \u20ac6 - said \"Smith\" in 1990.",
          "Pages 10\u201320 (see \"notes\") cost \u00a312.50, not \u20ac13.75.",
          "A well-known e-mail (sent at 10.30) read: \"no\" - then \"yes\".",
          "Naive hyphen-ated words, (brackets), dots... and \u00a3\u20ac signs."] * 30
LINES = ['\u00a35 (approx.) - "x" \u20ac', "e-mail (1990.) \u2013 \"\u00a3\u20ac\"",
         "Pages 10\u201320, \"notes\"."]
LINE = LINES[0]
# The words of LINE by each released rule, its pieces joined: every symbol is a piece of
# its own; ALBERT lowers the case and starts a word at "£", "€" and digits too.
ALBERT_WORDS = ["\u2581", "\u00a3", "5", "\u2581", "(approx", ".", ")", "\u2581", "-",
                "\u2581", '"x', '"', "\u2581", "\u20ac"]
XLNET_WORDS = ["\u2581\u00a35", "\u2581", "(approx", ".", ")", "\u2581", "-", "\u2581", '"x',
               '"', "\u2581\u20ac"]


def _trained(name):
    """The XLNet family's tokenizer, or ALBERT's with the released symbols."""
    import sentencepiece as spm

    if name == "albert":
        assert ALBERT_USER_DEFINED_SYMBOLS == SYMBOLS
        tokenizer = tokenizers.train_albert_sentencepiece(
            CORPUS, 120, user_defined_symbols=ALBERT_USER_DEFINED_SYMBOLS,
            character_coverage=ALBERT_CHARACTER_COVERAGE)
    else:
        tokenizer = registry.get(name).train_tokenizer(CORPUS, 120)
    return tokenizer, spm.SentencePieceProcessor(model_proto=tokenizer.proto)


def _released_words(pieces, starts):
    words = []
    for piece, start in zip(pieces, starts):
        if start or not words:
            words.append(piece)
        else:
            words[-1] += piece
    return words


@pytest.mark.parametrize("name", ["albert", "xlnet"])
def test_user_defined_symbols_are_pieces_of_their_own(name):
    tokenizer, model = _trained(name)
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto.FromString(tokenizer.proto)
    pieces = tokenizers.vocabulary(tokenizer)
    symbols = SYMBOLS + (("<eop>",) if name == "xlnet" else ())
    for symbol in symbols:
        assert model.PieceToId(symbol) == pieces.index(symbol)
        assert proto.pieces[pieces.index(symbol)].type == proto.SentencePiece.USER_DEFINED
    assert [p for p in pieces if p not in symbols and set(p) & set(SYMBOLS)] == []
    # keras-hub's SentencePiece (TensorFlow ops) gives sentencepiece's own ids.
    if name == "albert":  # preprocess_text and encode_pieces first, as released
        expected = [albert_reference.encode_ids(model, t) for t in LINES]
    else:
        expected = [model.EncodeAsIds(t) for t in LINES]
    assert [np.asarray(row).tolist() for row in tokenizer.tokenize(LINES)] == expected
    for symbol in SYMBOLS:
        assert [pieces.index(symbol)] in [[i] for row in expected for i in row], symbol


def test_word_starts_fall_on_the_symbols_as_released():
    albert, _ = _trained("albert")
    pieces = tokenizers.vocabulary(albert)
    line = [pieces[i] for i in np.asarray(albert.tokenize(LINE)).tolist()]
    table = tokenizers.continuation_table(albert, registry.get("albert").dataset.options[
        "word_start"])
    assert [not table[pieces.index(p)] for p in line] == [
        reference.is_start_piece_sp(p) for p in line]
    assert _released_words(line, [reference.is_start_piece_sp(p) for p in line]) == ALBERT_WORDS

    xlnet, _ = _trained("xlnet")
    pieces = tokenizers.vocabulary(xlnet)
    line = [pieces[i] for i in np.asarray(xlnet.tokenize(LINE)).tolist()]
    starts = xlnet_word_starts(xlnet)
    assert [bool(starts[pieces.index(p)]) for p in line] == [
        reference.is_start_piece(p) for p in line]
    assert _released_words(line, [reference.is_start_piece(p) for p in line]) == XLNET_WORDS


def test_character_coverage_is_the_released_one():
    # "ж" is 1 in about 5,000 characters: under spm's default 0.9995 it is <unk>,
    # under the released 0.99995 a piece.
    text = ["the quick brown fox jumps over the lazy dog again and again " * 4] * 20
    text[0] += " ж"
    for name in ("albert", "xlnet"):
        tokenizer = registry.get(name).train_tokenizer(text, 60)
        assert "\u0436" in "".join(tokenizers.vocabulary(tokenizer)), name
    default = tokenizers.train_sentencepiece(text, 60)
    assert "\u0436" not in "".join(tokenizers.vocabulary(default))


def test_bad_trainer_settings_raise():
    with pytest.raises(ValueError, match="character_coverage"):
        tokenizers.train_sentencepiece_proto(CORPUS, 60, character_coverage=1.5)
    with pytest.raises(ValueError, match="user_defined_symbols"):
        tokenizers.train_sentencepiece_proto(CORPUS, 60, user_defined_symbols=("a,b",))
    with pytest.raises(ValueError, match="user_defined_symbols"):
        tokenizers.train_sentencepiece_proto(CORPUS, 60, user_defined_symbols=("[CLS]",))
