"""XLM's tokenizer (keras_ctx.data.xlm_text) against transformers' XLMTokenizer (Moses through
sacremoses, lower case without accents, "</w>" BPE) on the same vocab.json + merges.txt."""

import sys

import numpy as np
import pytest

from keras_ctx.data import tokenizers, xlm_text
from tests.data.unicode_texts import TEXTS
from tests.data.xlm_vocabulary import LINES, write_xlm_vocabulary


def _reference(tokenizer, directory, **options):
    from transformers import XLMTokenizer

    return XLMTokenizer(*write_xlm_vocabulary(tokenizer, directory), **options)


def _assert_same_ids(ours, reference, texts, language="en"):
    rows = ours.tokenize(texts)
    for text, row in zip(texts, rows):
        if language == "en":
            want = reference(text, add_special_tokens=False)["input_ids"]
        else:  # transformers 5.24's tokenize() does not hand `lang` on to XLM's _tokenize
            want = reference.convert_tokens_to_ids(reference._tokenize(text, lang=language))
        assert np.asarray(row).tolist() == want, text


# (language, lowercase_and_remove_accent, a line, its words by Moses' rules): XLMTokenizer's
# default (English: "n't" splits before the apostrophe, "“ ”" become '"', "…" "..."); a cased
# model (XLM-17/100) in French (the apostrophe stays with the word before it); Romanian's
# extra step (xlm-mlm-enro-1024: cedilla and comma letters, then marks, dropped).
@pytest.mark.parametrize("language, lowercase, line, words", [
    ("en", True, "“Didn't” Café…", ['"', "didn", "'t", '"', "cafe", "..."]),
    ("fr", False, "L'économie, à 5 %!", ["L'", "économie", ",", "à", "5", "%", "!"]),
    ("ro", True, "Şi ţară ÎNTÂI", ["si", "tara", "intai"]),
])
def test_ids_are_xlm_tokenizers_on_lines_and_unicode(tmp_path, language, lowercase, line,
                                                      words):
    assert xlm_text.moses_words(line, language, lowercase) == words
    ours = tokenizers.train_xlm_bpe(LINES + TEXTS * 3, 400, language=language,
                                  lowercase_and_remove_accent=lowercase)
    reference = _reference(ours, tmp_path, do_lowercase_and_remove_accent=lowercase)
    _assert_same_ids(ours, reference, sorted(set(LINES)) + TEXTS + [line], language)


def test_the_trained_vocabulary_opens_with_xlms_dictionary():
    ours = tokenizers.train_xlm_bpe(LINES, 300)
    # xlm/data/dictionary.py: <s> 0, </s> 1, <pad> 2, <unk> 3, <special0..9> 4-13;
    # MASK_WORD = <special1>.
    assert [ours.id_to_token(i) for i in range(14)] == list(xlm_text.XLM_SPECIAL_TOKENS)
    assert tokenizers.special_token_ids(ours) == {"cls": 0, "sep": 1, "pad": 2, "mask": 5,
                                                  "unk": 3}


def test_a_saved_xlm_tokenizer_loads_with_its_settings(tmp_path):
    ours = tokenizers.train_xlm_bpe(LINES, 300, language="fr", lowercase_and_remove_accent=False)
    tokenizers.save_tokenizer(ours, str(tmp_path))
    again = tokenizers.load_tokenizer(str(tmp_path))
    assert type(again) is xlm_text.XLMBPETokenizer
    assert (again.language, again.lowercase_and_remove_accent) == ("fr", False)
    assert again.tokenize(TEXTS).to_list() == ours.tokenize(TEXTS).to_list()


def test_a_saved_xlm_tokenizer_is_read_by_transformers_with_our_ids(tmp_path):
    from transformers import AutoTokenizer

    ours = tokenizers.train_xlm_bpe(LINES, 300, lowercase_and_remove_accent=False)
    tokenizers.save_tokenizer(ours, str(tmp_path))
    read = AutoTokenizer.from_pretrained(str(tmp_path))
    assert type(read).__name__ == "XLMTokenizer" and not read.do_lowercase_and_remove_accent
    texts = sorted(set(LINES)) + TEXTS
    for text, row in zip(texts, ours.tokenize(texts).to_list()):
        assert read(text, add_special_tokens=False)["input_ids"] == row, text


def test_without_sacremoses_the_tokenizer_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sacremoses", None)
    xlm_text._moses.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"^XLM's tokenizer .* pip install sacremoses "
                                              r"\(or pip install -e \"\.\[moses\]\""):
            xlm_text.XLMBPETokenizer({"a</w>": 0}, [])
    finally:
        xlm_text._moses.cache_clear()


def test_segmented_languages_are_refused_in_one_line():
    with pytest.raises(ValueError, match="XLM splits 'zh' text with its own segmenter"):
        xlm_text.XLMBPETokenizer({"a</w>": 0}, [], language="zh")


@pytest.mark.slow  # the built-in corpus (16,872 sentences) through Moses twice (about 90 s)
def test_ids_are_xlm_tokenizers_on_the_builtin_corpus(tmp_path):
    from keras_ctx.data import corpora

    lines = [s for d in corpora.builtin_documents() for s in d]
    ours = tokenizers.train_xlm_bpe(lines, 8000)
    _assert_same_ids(ours, _reference(ours, tmp_path), lines + TEXTS)
