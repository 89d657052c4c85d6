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
refused; every other language goes through Moses' rules for it.
`tokenizers.train_xlm_bpe` learns the BPE on the Moses words (of a multilingual sample,
each sentence by its own language's rules: `tagged_words`).
"""

import functools
import unicodedata

import keras

from keras_ctx.common.optional import install_command
from keras_ctx.data.word_end_bpe import WordEndBPETokenizer

# xlm/data/dictionary.py @cd281d3: BOS_WORD, EOS_WORD, PAD_WORD, UNK_WORD, then
# SPECIAL_WORD % i for i < SPECIAL_WORDS (10), ids 0-13; MASK_WORD is <special1>.
XLM_SPECIAL_TOKENS = ("<s>", "</s>", "<pad>", "<unk>", *(f"<special{i}>" for i in range(10)))
XLM_MASK = "<special1>"

# XLM segments these with tools of their own, not Moses (tokenization_xlm.py: Jieba / the
# Stanford segmenter, KyTea, PyThaiNLP).
SEGMENTED_LANGUAGES = ("zh", "ja", "th")


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
    """(punctuation normalizer, tokenizer) of sacremoses for `language`."""
    if language in SEGMENTED_LANGUAGES:
        raise ValueError(f"XLM splits {language!r} text with its own segmenter, which "
                         "keras_ctx does not run; segment it first (XLM's tools/) and give "
                         "the words separated by spaces with another language code.")
    module = sacremoses()
    # pre_replace_unicode_punct: replace-unicode-punctuation.perl before the normalizer
    # (sacremoses' table is transformers' replace_unicode_punct, entry for entry).
    return (module.MosesPunctNormalizer(lang=language, pre_replace_unicode_punct=True),
            module.MosesTokenizer(lang=language))


def remove_non_printing_char(text):
    """remove-non-printing-char.perl: every character of a category C* dropped (Python's
    Unicode tables, as transformers' port)."""
    return "".join(c for c in text if not unicodedata.category(c).startswith("C"))


def romanian(text):
    """transformers' romanian_preprocessing (Sennrich's WMT16 scripts; xlm-mlm-enro-1024):
    cedilla to comma forms, then s, t, a, i without their marks."""
    for source, target in (("\u015e", "\u0218"), ("\u015f", "\u0219"), ("\u0162", "\u021a"),
                           ("\u0163", "\u021b"), ("\u0218", "S"), ("\u0219", "s"),
                           ("\u021a", "T"), ("\u021b", "t"), ("\u0102", "A"), ("\u0103", "a"),
                           ("\u00c2", "A"), ("\u00e2", "a"), ("\u00ce", "I"), ("\u00ee", "i")):
        text = text.replace(source, target)
    return text


def lowercase_and_remove_accent(words):
    """tools/lowercase_and_remove_accent.py on a line's words: lower case, NFD, marks
    (category Mn) dropped, lower case again; split on the spaces that joined them."""
    text = unicodedata.normalize("NFD", " ".join(words).lower())
    return "".join(c for c in text if unicodedata.category(c) != "Mn").lower().split(" ")


def moses_words(text, language="en", lowercase_and_remove_accents=True):
    """One line's words as XLM reads them before BPE (empty words dropped)."""
    normalizer, tokenizer = _moses(language)
    text = remove_non_printing_char(normalizer.normalize(text))
    if language == "ro":
        text = romanian(text)
    words = tokenizer.tokenize(text, return_str=False, escape=False)
    if lowercase_and_remove_accents:
        words = lowercase_and_remove_accent(words)
    return [word for word in words if word]


def tagged_words(lines, lowercase_and_remove_accents=True):
    """`moses_words` of "LANGUAGE<TAB>text" lines, each by its own language's rules (a
    multilingual sample's, as XLM's tools/tokenize.sh $lg reads each corpus; see
    `tokenizers.train_xlm_bpe`)."""
    return [moses_words(text, language, lowercase_and_remove_accents)
            for language, text in (line.split("\t", 1) for line in lines)]


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

    def get_config(self):
        return dict(super().get_config(), language=self.language,
                    lowercase_and_remove_accent=self.lowercase_and_remove_accent)
