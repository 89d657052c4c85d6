"""XLM's tokenizer (Lample & Conneau 2019): Moses words, lower cased without accents, then
BPE with "</w>" word ends, as the released pipeline and transformers' XLMTokenizer read text.

facebookresearch/XLM @cd281d3 tools/tokenize.sh (get-data-nmt.sh, prepare-xnli.sh):
Moses' replace-unicode-punctuation.perl | normalize-punctuation.perl -l $lang |
remove-non-printing-char.perl | tokenizer.perl -no-escape -l $lang, then
tools/lowercase_and_remove_accent.py (the xlm-mlm-*-* models) and fastBPE's
apply_bpe. transformers' XLMTokenizer (models/xlm/tokenization_xlm.py) runs the same
steps through sacremoses (the Moses scripts in Python), then the BPE of its
vocab.json + merges.txt, whose pieces end in "</w>" where a word ends (fastBPE's
"@@ " continuation the other way round): `XLMBPETokenizer` gives its ids.

sacremoses is an optional dependency (setup.py's `moses` extra); without it the
tokenizer refuses in one line saying what to install. Chinese, Japanese and Thai,
which XLM splits with their own segmenters (Stanford's, KyTea, PyThaiNLP), are
refused; every other language goes through Moses' rules for it. The steps themselves are
`keras_ctx.data.moses_words` (which also splits a large sample in one process per core).
`tokenizers.train_xlm_bpe` learns the BPE on the Moses words (of a multilingual sample,
each sentence by its own language's rules: `tagged_words`).
"""

import functools

import keras

from keras_ctx.common.optional import install_command
from keras_ctx.data import moses_words as moses
from keras_ctx.data.moses_words import SEGMENTED_LANGUAGES
from keras_ctx.data.word_end_bpe import WordEndBPETokenizer

# xlm/data/dictionary.py @cd281d3: BOS_WORD, EOS_WORD, PAD_WORD, UNK_WORD, then
# SPECIAL_WORD % i for i < SPECIAL_WORDS (10), ids 0-13; MASK_WORD is <special1>.
XLM_SPECIAL_TOKENS = ("<s>", "</s>", "<pad>", "<unk>", *(f"<special{i}>" for i in range(10)))
XLM_MASK = "<special1>"

def sacremoses(who="XLM's tokenizer"):
    """The sacremoses module; ImportError in one line naming `who` needs it and what installs
    it."""
    try:
        import sacremoses as module
    except ModuleNotFoundError as error:
        if error.name != "sacremoses":
            raise
        raise ImportError(f"{who} splits words with Moses' rules, which needs "
                          f"sacremoses: pip install sacremoses (or {install_command('moses')})."
                          ) from None
    return module


@functools.cache
def _moses(language):
    """(punctuation normalizer, tokenizer) of sacremoses for `language`; refused in one line
    for a segmented language or without sacremoses."""
    if language not in SEGMENTED_LANGUAGES:  # (those: refused with their own reason)
        sacremoses()
    return moses.xlm_moses(language)


def moses_words(text, language="en", lowercase_and_remove_accents=True):
    """One line's words as XLM reads them before BPE (empty words dropped)."""
    _moses(language)
    return moses.xlm_words(text, language, lowercase_and_remove_accents)


def tagged_words(lines, lowercase_and_remove_accents=True, workers=None):
    """`moses_words` of "LANGUAGE<TAB>text" lines, each by its own language's rules (a
    multilingual sample's, as XLM's tools/tokenize.sh $lg reads each corpus; see
    `tokenizers.train_xlm_bpe`): an iterator, in the lines' order, split by `workers`
    processes (None: one per core) for a sample of `moses_words.POOL_MIN_LINES` lines or
    more."""
    sacremoses()
    return moses.split("xlm-uncased" if lowercase_and_remove_accents else "xlm-cased",
                       (line.split("\t", 1) for line in lines), workers)


@keras.saving.register_keras_serializable(package="keras_ctx")
class XLMBPETokenizer(WordEndBPETokenizer):
    """XLM's tokenizer: Moses words (`moses_words`), then "</w>" BPE (GPT's kind).

    Args:
        vocabulary: {piece: id} (an XLM checkpoint's vocab.json).
        merges: ["a b", ...] in merge order (its merges.txt, fastBPE's codes).
        unknown_token: the piece for unknown characters.
        language: the Moses language code of the text (XLMTokenizer's `lang`, "en").
        lowercase_and_remove_accent: XLMTokenizer's `do_lowercase_and_remove_accent`
            (True for the xlm-mlm-*-* models, False for the cased 17- and 100-language ones).
    """

    gpt_text = False

    def __init__(self, vocabulary=None, merges=None, unknown_token="<unk>", language="en",
                 lowercase_and_remove_accent=True, **kwargs):
        self.language = language
        self.lowercase_and_remove_accent = bool(lowercase_and_remove_accent)
        super().__init__(vocabulary, merges, unknown_token, **kwargs)
        _moses(language)  # sacremoses missing, or a segmented language: refused now

    def words(self, lines):
        return [moses_words(line, self.language, self.lowercase_and_remove_accent)
                for line in lines]

    def for_language(self, language):
        """This tokenizer reading text by `language`'s Moses rules (the same BPE and ids)."""
        if language == self.language:
            return self
        return XLMBPETokenizer(self.vocabulary, self.merges, self.unknown_token,
                               language=language,
                               lowercase_and_remove_accent=self.lowercase_and_remove_accent)

    def get_config(self):
        return dict(super().get_config(), language=self.language,
                    lowercase_and_remove_accent=self.lowercase_and_remove_accent)
