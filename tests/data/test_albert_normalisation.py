"""ALBERT's SentencePiece reads text as its released tokenizer does (issue 54).

The reference is google-research/albert tokenization.py @b772393 (`preprocess_text`:
spaces collapsed, NFKD without combining characters, lower case; `encode_pieces`:
"▁1990," split before the comma), transcribed in albert_tokenization_reference.py,
on the same SentencePiece model: Unicode punctuation, symbols, accents and spaces;
with `` and '' read as " first, as transformers' AlbertTokenizer reads them.
keras-hub's SentencePiece alone keeps accents and spaces as they come.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import registry
from keras_ctx.data import albert_text, tokenizers
from tests.data import albert_tokenization_reference as reference
from tests.data.unicode_texts import TEXTS as BERT_TEXTS

TEXTS = [*BERT_TEXTS,
         "In 1990, 3,250 men sailed; 12,5 and 7, then x1, y22,z",
         "  leading   and\u00a0\u00a0trailing \x1c\x85 spaces\u2003 ",
         "``Quoted'' ‘single’ Ǆ ǅ ǆ ﬀ Ⅻ ㎏ ℃ ℡ ① ⁵ ₂ ½"]


def _pair(lowercase):
    # Trained in the test itself: keras-hub's TensorFlow SentencePiece resource made
    # under a pytest fixture is gone by the time a tf.data map in the test reads it.
    import sentencepiece as spm

    ours = tokenizers.train_albert_sentencepiece([t * 2 for t in TEXTS] * 3, 400,
                                                  lowercase=lowercase)
    return ours, spm.SentencePieceProcessor(model_proto=ours.proto)


def _quoted(text):
    """transformers' AlbertTokenizer's one change to the released preprocess_text."""
    return text.replace("``", '"').replace("''", '"')


def test_text_equals_preprocess_text():
    for lowercase in (True, False):
        for quotes, read in ((False, str), (True, _quoted)):
            expected = [reference.preprocess_text(read(t), lower=lowercase) for t in TEXTS]
            assert [albert_text.albert_text(t, lowercase, quotes) for t in TEXTS] == expected
            graph = albert_text.albert_text_tf(tf.constant(TEXTS), lowercase, quotes).numpy()
            assert [x.decode("utf-8") for x in graph] == expected
    assert albert_text.albert_text("``a'' b") == '"a" b'  # the default: transformers'


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_ids_equal_the_released_tokenizers(lowercase):
    ours, model = _pair(lowercase)
    expected = [reference.encode_ids(model, _quoted(t), lower=lowercase) for t in TEXTS]
    graph = tf.data.Dataset.from_tensor_slices(TEXTS).map(ours.tokenize)
    assert [row.numpy().tolist() for row in graph] == expected
    assert [np.asarray(row).tolist() for row in ours.tokenize(TEXTS)] == expected
    assert [np.asarray(row).tolist() for row in ours.tokenize(tf.constant(TEXTS))] == expected
    assert np.asarray(ours.tokenize(TEXTS[0])).tolist() == expected[0]


def test_digit_comma_pieces_are_split():
    ours, model = _pair(True)
    # The model learned pieces like "▁1990," (the test text repeats them): the
    # released encode_pieces splits each; keras-hub alone would not.
    splits, _ = albert_text.digit_comma_pieces(ours.proto)
    assert splits, "the test text should give a digit-comma piece"
    for index, parts in splits.items():
        assert model.IdToPiece(parts[-1]) == ","
        assert index not in parts


def test_albert_family_tokenizer_and_saving(tmp_path):
    tokenizer = registry.get("albert").train_tokenizer(TEXTS * 4, 300)
    assert isinstance(tokenizer, albert_text.albert_sentencepiece_class())
    tokenizers.save_tokenizer(tokenizer, str(tmp_path))
    again = tokenizers.load_tokenizer(str(tmp_path))
    assert type(again) is type(tokenizer) and again.lowercase
    assert _tokenized(again) == _tokenized(tokenizer)


def _tokenized(tokenizer, texts=TEXTS):
    return [np.asarray(row).tolist() for row in tokenizer.tokenize(texts)]


# transformers' AlbertTokenizer reads `` and '' as " (its preprocess_text and the fast
# tokenizer's Replace normalizers); google-research/albert's preprocess_text does not.
QUOTED = ["He said ``yes'' twice.", "``Quoted'' and ''twice'' and `single' ``", "a''b``c"]


def test_the_albert_family_reads_quotes_as_transformers_does(tmp_path):
    tokenizer = registry.get("albert").train_tokenizer(TEXTS * 4 + QUOTED * 8, 300)
    tokenizers.save_tokenizer(tokenizer, str(tmp_path))
    again = tokenizers.load_tokenizer(str(tmp_path))
    for text in QUOTED:
        ids = np.asarray(tokenizer(tf.constant(text))).tolist()
        assert ids == np.asarray(tokenizer(_quoted(text))).tolist() == _tokenized(again, [text])[0]
        assert ids == np.asarray(tokenizer(text)).tolist()  # the Python path too


@pytest.mark.slow  # imports transformers (about 8 s)
def test_an_exported_albert_tokenizer_reads_quotes_as_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    tokenizer = registry.get("albert").train_tokenizer(TEXTS * 4 + QUOTED * 8, 300)
    tokenizers.save_tokenizer(tokenizer, str(tmp_path))
    read = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in QUOTED:
        ids = np.asarray(tokenizer(tf.constant(text))).tolist()
        assert read(text, add_special_tokens=False)["input_ids"] == ids, text
