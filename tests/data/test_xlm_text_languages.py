"""A multilingual XLM run learns its BPE on each corpus' Moses words by that corpus' own
language's rules (XLM's tools/tokenize.sh $lg before one learnbpe on them all), and reads
each corpus by them (keras_ctx/data/xlm_recipe.py `tokenizer_text`, `_for_language`):
ids equal to transformers' XLMTokenizer with that `lang`, on lines where English rules
read other words (French elision, German ordinals and "ist's", Romanian "Dl.")."""

import pytest

from keras_ctx import registry
from keras_ctx.data import tokenizers, xlm_text
from keras_ctx.data import xlm_recipe as recipe
from tests.data.xlm_vocabulary import write_xlm_vocabulary

LINES = {
    "en": ["The man's dog isn't here, is it?", "We met on 3 October at 5 p.m. in the U.S."],
    "fr": ["L'homme est là aujourd'hui, n'est-ce pas ?", "Qu'il vienne jusqu'à 20 h."],
    "de": ["Am 3. Oktober kam z.B. Nr. 5 mit 1.000,5 Euro.", "Das ist's, sagte Hr. Müller."],
    "ro": ["Dl. Popescu n-a venit în 2019.", "Şi ţara a plătit 1.000,5 lei, Dl. Ion."],
}
REPEATS = 12  # every word frequent enough to become one piece of the learnt vocabulary


@pytest.fixture(scope="module")
def learnt(tmp_path_factory):
    """(tokenizer learnt as a --languages en,fr,de,ro run learns it, its sample)."""
    root = tmp_path_factory.mktemp("xlm-languages")
    paths = []
    for language, lines in LINES.items():
        paths.append(str(root / f"{language}.txt"))
        with open(paths[-1], "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines * REPEATS) + "\n")
    run = registry.Run("xlm-mlm-enfr-1024", 4, 32, 1000, inputs=(
        ("languages", tuple(LINES)), ("parallel", ()), ("corpora", tuple(paths))))
    sample = recipe.tokenizer_text(run)
    return tokenizers.train_xlm_bpe(sample, run.vocabulary_size), sample


def test_the_sample_holds_each_corpus_with_its_language(learnt):
    _, sample = learnt
    assert sample.languages == [code for code in LINES for _ in range(2 * REPEATS)]
    assert sample == [line for lines in LINES.values() for line in lines * REPEATS]
    assert sample.seen == 8 * REPEATS


@pytest.mark.parametrize("language", list(LINES))
def test_each_language_is_learnt_and_read_with_its_own_moses_rules(learnt, language, tmp_path):
    from transformers import XLMTokenizer

    tokenizer, _ = learnt
    reference = XLMTokenizer(*write_xlm_vocabulary(tokenizer, tmp_path))
    lines, ours = LINES[language], recipe._for_language(tokenizer, language)
    english = recipe._for_language(tokenizer, "en").tokenize(lines).to_list()
    for line, row, as_english in zip(lines, ours.tokenize(lines).to_list(), english):
        # transformers 5.24's tokenize() does not hand `lang` on to XLM's _tokenize
        pieces = reference._tokenize(line, lang=language)
        assert row == reference.convert_tokens_to_ids(pieces), line
        # Learnt on this language's words, every (frequent) word is one piece; learnt on
        # English rules, French "l'" or German "3." would be split into smaller pieces.
        assert all(piece.endswith("</w>") for piece in pieces), (line, pieces)
        if language != "en":  # a line English rules read into other words and ids
            assert xlm_text.moses_words(line, "en") != xlm_text.moses_words(line, language)
            assert as_english != row, line
