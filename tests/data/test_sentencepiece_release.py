"""ALBERT's and XLNet's SentencePiece are trained as their released `spm_train` commands.

google-research/albert README.md @b772393 and zihangdai/xlnet README.md @bbaa3a6 make
`( ) " - . – £ €` (and XLNet's `<eop>`) user-defined symbols, always pieces of their
own, and keep 99.995% of the characters (`--character_coverage=0.99995`). The pieces
decide where ALBERT's n-grams (`_is_start_piece_sp`) and XLNet's spans
(`_is_start_piece`) start (issue 54). Both families train with both (ALBERT's
exported tokenizer.json reads them as SentencePiece does: tests/runs/test_tokenizer_files.py).
keras-hub's SentencePiece is checked against `sentencepiece`'s own processor on the
same model.
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
    """The family's tokenizer (ALBERT's and XLNet's train the released symbols)."""
    import sentencepiece as spm

    assert ALBERT_USER_DEFINED_SYMBOLS == SYMBOLS and ALBERT_CHARACTER_COVERAGE == 0.99995
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
    else:  # data_utils.py's preprocess_text and encode_ids
        expected = [_xlnet_encode_ids(model, t) for t in LINES]
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


def _xlnet_preprocess_text(inputs, lower=False, remove_space=True, keep_accents=False):
    """zihangdai/xlnet prepro_utils.py @bbaa3a6 `preprocess_text` (Python 3 branch),
    transcribed: ALBERT's, with `` and '' replaced by " after the spaces collapse."""
    outputs = " ".join(inputs.strip().split()) if remove_space else inputs
    outputs = outputs.replace("``", '"').replace("''", '"')
    return albert_reference.preprocess_text(outputs, remove_space=False, lower=lower) \
        if not keep_accents else (outputs.lower() if lower else outputs)


def _xlnet_encode_ids(model, line):
    """data_utils.py @bbaa3a6's line -> ids: `preprocess_text(line.strip(),
    lower=FLAGS.uncased)` (the released models are cased), then prepro_utils.py's
    `encode_ids`, whose `encode_pieces` is ALBERT's (transcribed in
    albert_tokenization_reference.py)."""
    text = _xlnet_preprocess_text(line.strip(), lower=False)
    return [model.PieceToId(p) for p in albert_reference.encode_pieces(model, text)]


ACCENTED = ["In 1990, the caf\u00e9 critic   said ``na\u00efve'' things about Jos\u00e9.",
            "By 1991, \u00c9mile's r\u00e9sum\u00e9 read ``fa\u00e7ade'' and 'ok'.",
            "Se\u00f1or Mu\u00f1oz\t came in 1990, then 1991, to the caf\u00e9.",
            "In 1990, 3,250 men sailed; 12,5 and 7, then x1, y22,z"] * 20


def test_xlnet_reads_text_as_released_prepro_utils():
    # Before, the XLNet family's SentencePiece read "café" and `` as they came and kept
    # "▁1990," whole, where data_utils.py gives "cafe", " and "▁1990" ",".
    tokenizer = registry.get("xlnet").train_tokenizer(ACCENTED, 100)
    import sentencepiece as spm

    model = spm.SentencePieceProcessor(model_proto=tokenizer.proto)
    lines = [ACCENTED[0], ACCENTED[1], ACCENTED[2], "  ``Caf\u00e9''  in 1990,  y22,z "]
    expected = [_xlnet_encode_ids(model, line) for line in lines]
    assert [np.asarray(row).tolist() for row in tokenizer.tokenize(lines)] == expected
    assert [np.asarray(row).tolist() for row in tokenizer.tokenize(tf_lines(lines))] == expected
    pieces = [model.IdToPiece(i) for row in expected for i in row]
    assert "\u2581caf\u00e9" not in pieces and "\u00e9" not in "".join(pieces)
    assert "``" not in "".join(pieces) and '"' in pieces
    # encode_pieces acted: the model learned a digit-comma piece ("2,"; too small a
    # corpus for "▁1990,"), the released path splits it.
    digit_comma = [p for p in model.EncodeAsPieces(_xlnet_preprocess_text(lines[-1]))
                   if len(p) > 1 and p[-1] == "," and p[-2].isdigit()]
    assert digit_comma and digit_comma[0] not in pieces and "," in pieces
    for symbol in ("<eop>", ".", '"'):
        assert model.PieceToId(symbol) == tokenizers.vocabulary(tokenizer).index(symbol)


def tf_lines(lines):
    """The lines as a string tensor: the tf.data path (TensorFlow ops)."""
    import tensorflow as tf

    return tf.constant(lines)


def test_a_saved_xlnet_tokenizer_reads_text_as_before_and_claims_no_albert_class(tmp_path):
    tokenizer = registry.get("xlnet").train_tokenizer(ACCENTED, 100)
    tokenizers.save_tokenizer(tokenizer, str(tmp_path))
    again = tokenizers.load_tokenizer(str(tmp_path))
    assert type(again) is type(tokenizer) and not again.lowercase and again.quotes
    lines = ACCENTED[:4]
    assert ([np.asarray(row).tolist() for row in again.tokenize(lines)]
            == [np.asarray(row).tolist() for row in tokenizer.tokenize(lines)])
    # transformers' AlbertTokenizer would add a [MASK] and frame [CLS] A [SEP]: XLNet's
    # rows end A [SEP] [CLS], read from tokenizer.json (tests/runs/test_tokenizer_files.py).
    import json

    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert settings["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert settings["do_lower_case"] is False and settings["padding_side"] == "left"
