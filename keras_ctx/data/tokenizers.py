"""Tokenizers of the BERT family, trained on your corpus, as keras-hub tokenizer layers.

  - WordPiece (BERT, SpanBERT): `train_wordpiece` (Hugging Face `tokenizers`'
    WordPiece trainer) -> `keras_hub.tokenizers.WordPieceTokenizer`.
  - Byte-level BPE (RoBERTa, GPT-2): `train_byte_level_bpe` (Hugging Face
    `tokenizers` learns the merges) -> `keras_hub.tokenizers.BytePairTokenizer`.
  - SentencePiece (ALBERT): `train_sentencepiece` (the `sentencepiece`
    trainer) -> `keras_hub.tokenizers.SentencePieceTokenizer`; T5's as the released
    cc_all.32000 model (cased, </s> 1, <unk> 2): `train_t5_sentencepiece`.
  - BPE with end-of-word markers (GPT, Radford et al. 2018: lowercased words
    split on spaces and punctuation, merges ending in "</w>"):
    `train_word_end_bpe` -> `WordEndBPETokenizer`, Hugging Face `tokenizers`'
    BPE model as a Keras layer (a tf.py_function: usable in tf.data and
    eagerly, not in an exported SavedModel's graph).
  - XLM's BPE (Lample & Conneau 2019): the same "</w>" BPE over Moses words, lower
    cased without accents: `train_xlm_bpe` -> `xlm_text.XLMBPETokenizer`.

All three are Keras layers made of TensorFlow ops, so `tokenize_documents` runs
them inside tf.data. `special_token_ids(tokenizer)` gives the ids the
pipelines need; `continuation_table(tokenizer)` marks the word-internal pieces
(SpanBERT's whole-word masking); `check_vocabulary(tokenizer, backbone)` fails
clearly when the tokenizer and the embedding table disagree.
"""

import functools
import itertools
import json
import os
import re
import tempfile
import threading
import time
import unicodedata

import keras
import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.common import progress
from keras_ctx.data import albert_text, corpora, tokenizer_files, xlm_text
from keras_ctx.data.word_end_bpe import WORD_END, WordEndBPETokenizer  # noqa: F401  (public)
from keras_ctx.data.strings import WORD_START, map_strings  # noqa: F401  (WORD_START: a public name here too)
from keras_ctx.common.errors import RunDirectoryError

BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
ROBERTA_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")  # fairseq order
ALBERT_SPECIAL_TOKENS = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")  # ALBERT's spm ids 0-4
# T5's released SentencePiece (gs://t5-data/vocabs/cc_all.32000): <pad> 0, </s> 1, <unk> 2,
# no <s> (its TrainerSpec: pad_id 0, eos_id 1, unk_id 2, bos_id -1).
T5_SPECIAL_TOKENS = ("<pad>", "</s>", "<unk>")
SPM_CHARACTER_COVERAGE = 0.9995  # spm_train's default --character_coverage


def _texts(data):
    """Python strings from a list, a tf.data of scalar strings or of 1-D string tensors.

    Reading a tf.data (a corpus) is the pass `keras-ctx pretrain` counts aloud.
    """
    if isinstance(data, tf.data.Dataset):
        for item in progress.current().count(data.as_numpy_iterator(), "sentences read"):
            if isinstance(item, bytes):
                yield item.decode("utf-8")
            else:
                for line in np.asarray(item).reshape(-1):
                    yield line.decode("utf-8")
    else:
        for line in data:
            yield line.decode("utf-8") if isinstance(line, bytes) else line


def _counted(items, total, learning, library, weight=None):
    """`items` counted aloud as a trainer reads them; then the step `learning` begins.

    The trainers read our iterator first (a pass we can show; they may buffer
    ahead of their word counting) and then learn a vocabulary inside the
    library (no progress to show: the step's lines say when it starts and how
    long it took).
    """
    return progress.current().count(items, "sentences fed to the trainer", total=total,
                                    weight=weight, then=(learning, library))




def train_wordpiece(data, vocabulary_size, lowercase=True,
                    special_tokens=BERT_SPECIAL_TOKENS):
    """Learns a WordPiece vocabulary from `data` and returns a WordPieceTokenizer.

    Hugging Face `tokenizers` learns the pieces in Rust (seconds for a million
    sentences) with BERT's normalization and pre-tokenization (lowercased,
    accents stripped, split on spaces and punctuation, as keras-hub's
    WordPieceTokenizer splits). It learns BPE merges over words marked
    `▁word`, not with its WordPieceTrainer: that trainer numbers `##x`
    symbols in hash order, so equally frequent merges were broken differently
    in each process and two runs with one seed learned different vocabularies.
    Over single characters the ids are ordered and the merges reproducible.
    A piece `▁xy` becomes the word-initial `xy`, any other `xy` the
    continuation `##xy`; every character is kept in both forms, and the
    latest merges are dropped to fit `vocabulary_size`.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    lines = [t for t in _texts(data) if t.strip()]
    if not lines:
        raise ValueError("No text to learn a WordPiece vocabulary from.")
    learner = Tokenizer(models.BPE(unk_token=special_tokens[1]))
    learner.normalizer = normalizers.BertNormalizer(lowercase=lowercase,
                                                    strip_accents=lowercase)
    learner.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.BertPreTokenizer(),
        pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="always")])
    trainer = trainers.BpeTrainer(vocab_size=vocabulary_size, show_progress=False,
                                  special_tokens=list(special_tokens))
    learner.train_from_iterator(_counted(lines, len(lines), "Learning the WordPiece vocabulary",
                                         "Hugging Face tokenizers"), trainer)
    progress.current().finish("Learned the WordPiece vocabulary")
    learned = sorted(learner.get_vocab().items(), key=lambda item: item[1])  # merge order
    pieces = [piece for piece, _ in learned if piece not in special_tokens]
    characters = sorted({c for piece in pieces for c in piece if c != WORD_START})
    vocabulary = list(dict.fromkeys(
        [*special_tokens, *characters, *(f"##{c}" for c in characters)]))
    for piece in pieces:
        if len(vocabulary) >= vocabulary_size:
            break
        if piece.startswith(WORD_START):
            piece = piece[len(WORD_START):]
        else:
            piece = f"##{piece}"
        if piece and piece not in vocabulary:
            vocabulary.append(piece)
    # Read text as the pieces were learned: BERT's uncased BasicTokenizer lower
    # cases and strips accents (google-research/bert tokenization.py), else an
    # accented word would be [UNK]; its rules, not keras-hub's NFKC case folding.
    return bert_wordpiece_tokenizer(
        vocabulary=vocabulary, lowercase=lowercase, strip_accents=lowercase,
        oov_token=special_tokens[1], special_tokens=list(special_tokens))


# --- BERT's BasicTokenizer before keras-hub's WordPiece --------------------------------
#
# google-research/bert tokenization.py @eedf571: `_clean_text` drops NUL, U+FFFD and
# control characters (categories Cc and Cf, but tab, newline and return) and makes whitespace
# (space, tab, newline, return, category Zs) a space; the uncased tokenizer then lower
# cases (`str.lower`) and strips accents (`_run_strip_accents`: NFD, drop Mn), splits on
# punctuation (`_is_punctuation`: ASCII 33-47, 58-64, 91-96, 123-126 and category P*)
# and around CJK ideographs, and `whitespace_tokenize` splits on `str.split()`'s
# whitespace (U+2028 and U+2029 too). keras-hub's WordPieceTokenizer splits on the
# same punctuation and CJK ranges but lower cases with NFKC case folding, which turns
# U+00B4 (´) into a space and a combining accent, "²" into "2" and "ﬁ" into "fi", and
# keeps U+00A0 and other Zs spaces inside words: such words became [UNK].
_BERT_WHITESPACE = r"\t\n\r\p{Zs}\x{2028}\x{2029}"


def _is_bert_control(char):
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf")


def _is_bert_whitespace(char):
    return char in " \t\n\r\u2028\u2029" or unicodedata.category(char) == "Zs"


def bert_basic_text(text, lowercase=True, strip_accents=None):
    """One str normalised as BERT's BasicTokenizer does before it splits words.

    `_clean_text`, then (uncased) `str.lower` and `_run_strip_accents`;
    `strip_accents` None follows `lowercase`, as BERT. Splitting on whitespace,
    punctuation and CJK is keras-hub's, which splits on the same characters.
    """
    strip_accents = lowercase if strip_accents is None else strip_accents
    text = "".join(" " if _is_bert_whitespace(c) else c for c in text
                   if c not in "\x00\ufffd" and not _is_bert_control(c))
    if lowercase:
        text = text.lower()
    if strip_accents:
        text = "".join(c for c in unicodedata.normalize("NFD", text)
                       if unicodedata.category(c) != "Mn")
    return text


def bert_basic_text_tf(text, lowercase=True, strip_accents=None):
    """`bert_basic_text` in TensorFlow ops (tf.data maps, serving signatures)."""
    import tensorflow_text as tf_text

    strip_accents = lowercase if strip_accents is None else strip_accents
    text = tf.strings.regex_replace(text, r"\x00|\x{FFFD}|\p{Cf}|[^\P{Cc}\t\n\r]", "")
    text = tf.strings.regex_replace(text, f"[{_BERT_WHITESPACE}]", " ")
    if lowercase:
        text = tf.strings.lower(text, encoding="utf-8")  # str.lower's mapping, final sigma too
    if strip_accents:
        text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFD"), r"\p{Mn}", "")
    return text


_NORMALISING = threading.RLock()


@functools.cache
def bert_wordpiece_class():
    """`BertWordPieceTokenizer`: keras-hub's WordPieceTokenizer reading text as BERT's
    BasicTokenizer does (`bert_basic_text`); registered for `keras.saving`."""
    import keras_hub

    @keras.saving.register_keras_serializable(package="keras_ctx")
    class BertWordPieceTokenizer(keras_hub.tokenizers.WordPieceTokenizer):
        """A WordPiece tokenizer whose text normalisation is BERT's BasicTokenizer's.

        `lowercase` and `strip_accents` mean what they mean to keras-hub (and
        are written to a Hugging Face `tokenizer_config.json` as such); the
        normalisation they ask for is BERT's (`bert_basic_text`) instead of
        keras-hub's NFKC case folding, then keras-hub splits and applies WordPiece.
        """

        def tokenize(self, inputs):
            if self._use_tf_workflow() or type(inputs).__module__.startswith("tensorflow"):
                if not isinstance(inputs, (tf.Tensor, tf.RaggedTensor)):
                    inputs = tf.convert_to_tensor(inputs)
                inputs = bert_basic_text_tf(inputs, self.lowercase, self.strip_accents)
            else:
                inputs = map_strings(inputs, functools.partial(
                    bert_basic_text, lowercase=self.lowercase,
                    strip_accents=self.strip_accents))
            with _NORMALISING:  # keras-hub's own normalisation off for this call
                settings = self.lowercase, self.strip_accents
                self.lowercase = self.strip_accents = False
                try:
                    return super().tokenize(inputs)
                finally:
                    self.lowercase, self.strip_accents = settings

    return BertWordPieceTokenizer


def bert_wordpiece_tokenizer(**kwargs):
    """A `BertWordPieceTokenizer` (`bert_wordpiece_class`) made with keras-hub's arguments."""
    return bert_wordpiece_class()(**kwargs)


def train_byte_level_bpe(data, vocabulary_size, special_tokens=ROBERTA_SPECIAL_TOKENS,
                         min_frequency=2):
    """Learns byte-level BPE merges (RoBERTa, Liu et al. 2019) and returns a BytePairTokenizer."""
    import keras_hub
    from tokenizers import ByteLevelBPETokenizer

    lines = [t for t in _texts(data) if t.strip()]
    trainer = ByteLevelBPETokenizer(add_prefix_space=False)
    trainer.train_from_iterator(_counted(lines, len(lines), "Learning byte-level BPE merges",
                                         "Hugging Face tokenizers"),
                                vocab_size=vocabulary_size, min_frequency=min_frequency,
                                special_tokens=list(special_tokens), show_progress=False)
    progress.current().finish("Learned the byte-level BPE merges")
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file, merges_file = trainer.save_model(tmp)
        tokenizer = keras_hub.tokenizers.BytePairTokenizer(
            vocabulary=vocab_file, merges=merges_file,
            unsplittable_tokens=list(special_tokens))
    return tokenizer


def train_sentencepiece(data, vocabulary_size, model_type="unigram",
                        special_tokens=ALBERT_SPECIAL_TOKENS, lowercase=True,
                        user_defined_symbols=(), character_coverage=SPM_CHARACTER_COVERAGE):
    """Trains a SentencePiece model (ALBERT, Lan et al. 2020) -> SentencePieceTokenizer.

    Ids 0-4 are ALBERT's <pad>, <unk>, [CLS], [SEP], [MASK]. `user_defined_symbols`
    and `character_coverage` are `spm_train`'s (`train_sentencepiece_proto`).
    """
    import keras_hub

    proto = train_sentencepiece_proto(
        _texts(data), vocabulary_size, model_type, special_tokens,
        "nmt_nfkc_cf" if lowercase else "nmt_nfkc", user_defined_symbols=user_defined_symbols,
        character_coverage=character_coverage)
    return keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)


def train_albert_sentencepiece(data, vocabulary_size, lowercase=True,
                               special_tokens=ALBERT_SPECIAL_TOKENS, user_defined_symbols=(),
                               character_coverage=SPM_CHARACTER_COVERAGE,
                               quotes=albert_text.QUOTES):
    """ALBERT's SentencePiece, trained on `albert_text` lines with `nmt_nfkc` (the
    released `spm_train` rule; the case is lowered before, not folded), reading text
    as `albert_text.AlbertSentencePieceTokenizer`. XLNet's reads text by the same
    rules (zihangdai/xlnet prepro_utils.py), cased, `quotes` always."""
    lines = [albert_text.albert_text(t, lowercase, quotes) for t in _texts(data)]
    proto = train_sentencepiece_proto(lines, vocabulary_size, special_tokens=special_tokens,
                                      rule="nmt_nfkc", user_defined_symbols=user_defined_symbols,
                                      character_coverage=character_coverage)
    return albert_text.albert_sentencepiece_class()(proto=proto, lowercase=lowercase,
                                                    quotes=quotes)


def train_t5_sentencepiece(data, vocabulary_size, character_coverage=SPM_CHARACTER_COVERAGE,
                           byte_fallback=False):
    """T5's SentencePiece (Raffel et al. 2020, Sec. 2.2) -> SentencePieceTokenizer, trained
    as the released cc_all.32000 model's TrainerSpec and NormalizerSpec say: unigram,
    `nmt_nfkc` (the case kept), coverage 0.9995, <pad> 0, </s> 1, <unk> 2 and no <s>
    (`T5_SPECIAL_TOKENS`), on the raw text (T5 feeds its text to SentencePiece as is).
    mT5's (mc4.250000) takes `character_coverage=0.99999, byte_fallback=True`: a character
    the model lacks becomes its UTF-8 bytes' pieces <0x00>-<0xFF> (ids 3-258), not <unk>."""
    import keras_hub

    proto = train_sentencepiece_proto(_texts(data), vocabulary_size,
                                      special_tokens=T5_SPECIAL_TOKENS, rule="nmt_nfkc",
                                      character_coverage=character_coverage,
                                      end_of_text=True, byte_fallback=byte_fallback)
    return keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)


def train_sentencepiece_proto(texts, vocabulary_size, model_type="unigram",
                              special_tokens=ALBERT_SPECIAL_TOKENS, rule="nmt_nfkc_cf",
                              user_defined_symbols=(), character_coverage=SPM_CHARACTER_COVERAGE,
                              end_of_text=False, byte_fallback=False):
    """The serialized SentencePiece model trained on `texts` (str) under the
    normalization rule `rule`.

    `special_tokens`: <pad> (id 0), <unk> (1), then control symbols; with
    `end_of_text`, <pad> (0), the end-of-text piece (1, spm's eos) and <unk> (2), as
    T5's. `user_defined_symbols` (str each) are always pieces of their own, never merged
    into another (`spm_train --user_defined_symbols`; their ids follow the special
    tokens'); `character_coverage` is the share of the characters the model covers,
    the rest read as <unk> (spm's default 0.9995), or with `byte_fallback` as the 256
    byte pieces spm puts after the special tokens.
    """
    import sentencepiece as spm

    if end_of_text:
        pad, eos, unk, *control = special_tokens
        ids = dict(eos_id=1, eos_piece=eos, unk_id=2)
    else:
        pad, unk, *control = special_tokens
        ids = dict(eos_id=-1, unk_id=1)
    if not 0 < character_coverage <= 1:
        raise ValueError(f"character_coverage={character_coverage} is outside (0, 1]: "
                         "give the share of the characters the model keeps, e.g. 0.9995.")
    bad = [s for s in user_defined_symbols if not s or "," in s or s in special_tokens]
    if bad:
        raise ValueError(f"user_defined_symbols {bad} are empty, hold a comma or repeat a "
                         "special token: give each symbol once, without commas.")
    lines = [t for t in texts if t.strip()]
    if not lines:
        raise ValueError("No text to train a SentencePiece model on.")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        prefix = os.path.join(tmp, "spm")
        progress.current().start("Training the SentencePiece model", "sentencepiece")
        try:
            spm.SentencePieceTrainer.train(
                input=corpus, model_prefix=prefix, vocab_size=vocabulary_size,
                model_type=model_type, pad_id=0, pad_piece=pad, unk_piece=unk, bos_id=-1,
                control_symbols=",".join(control), **ids,
                user_defined_symbols=list(user_defined_symbols),  # a list: spm CSV-quotes each
                character_coverage=character_coverage, byte_fallback=byte_fallback,
                normalization_rule_name=rule, hard_vocab_limit=False, minloglevel=2)
        except RuntimeError as error:
            needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(error))
            if not needed:
                raise
            raise ValueError(f"A vocabulary of {vocabulary_size} pieces cannot hold the "
                             f"{needed.group(1)} the text's characters, specials and byte "
                             "pieces need: give --vocabulary-size "
                             f"{needed.group(1)} or more.") from None
        progress.current().finish("Trained the SentencePiece model")
        with open(prefix + ".model", "rb") as f:
            return f.read()


# A word's last character c is learned as the one character chr(_END + ord(c)) (Unicode's
# supplementary private use planes): GPT's "c</w>" symbol as a single character.
_END = 0xF0000
_MARKS = re.compile("[\U000F0000-\U0010FFFF]")


def _marked_words(reader, lines, words=None):
    """`lines` read as `reader` (a WordEndBPETokenizer) reads them, or their rows of `words`
    (an iterator of each line's words, read on), as one string of words with each word's
    last character marked (GPT's: one library call per batch)."""
    text = "\n".join(lines)
    found = _MARKS.search(text)
    if found:
        raise ValueError("The text holds characters of Unicode's supplementary private use "
                         "planes (U+F0000-U+10FFFF), which GPT's BPE trainer uses as "
                         f"end-of-word marks ({found.group()!r}); remove them from the corpus.")
    if words is not None:
        words = itertools.islice(words, len(lines))
    else:
        words = reader.words([text] if reader.gpt_text else lines)
    return " ".join(word[:-1] + chr(_END + ord(word[-1])) for row in words for word in row
                    if word)


def _unmarked(piece):
    last = ord(piece[-1]) if piece else 0
    return piece[:-1] + chr(last - _END) + WORD_END if last >= _END else piece


def train_word_end_bpe(data, vocabulary_size, special_tokens=(), unknown_token="<unk>",
                       min_frequency=2, tokenizer_class=None, read_words=None, **options):
    """Learns GPT's "</w>" BPE merges (Radford et al. 2018) -> a WordEndBPETokenizer.

    Hugging Face's BpeTrainer with `end_of_word_suffix` numbers the `c</w>`
    symbols in hash order, so equally frequent merges were broken differently
    in each process and two runs with one seed learned different merges. Here
    each word's last character c is one private-use character standing for
    `c</w>` (so every symbol is one character, which the trainer numbers in
    order), and the learned pieces and merges are mapped back to `c</w>`.

    `tokenizer_class` (a WordEndBPETokenizer subclass, made with `options`) reads the
    text into words its own way (XLM's Moses); `read_words` (all lines -> an iterator of each
    line's words, which may read ahead in other processes), where given, reads the learnt
    text instead (XLM's sentences of several languages, in one process per core). The special
    tokens come first, in their order, the unknown token first unless they list it.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    lines = [t for t in _texts(data) if t.strip()]
    if not lines:
        raise ValueError("No text to learn BPE merges from.")
    make = functools.partial(tokenizer_class or WordEndBPETokenizer, **options)
    reader = make({}, [], unknown_token)
    learner = Tokenizer(models.BPE(unk_token=unknown_token))
    learner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    specials = list(dict.fromkeys(special_tokens if unknown_token in special_tokens
                                  else [unknown_token, *special_tokens]))
    trainer = trainers.BpeTrainer(vocab_size=vocabulary_size, min_frequency=min_frequency,
                                  special_tokens=specials, show_progress=False)
    batches = [lines[i:i + 512] for i in range(0, len(lines), 512)]
    counted = _counted(batches, len(lines), "Learning BPE merges", "Hugging Face tokenizers",
                       weight=len)
    words = iter(read_words(lines)) if read_words else None
    learner.train_from_iterator((_marked_words(reader, batch, words) for batch in counted),
                                trainer)
    progress.current().finish("Learned the BPE merges")
    model = json.loads(learner.to_str())["model"]
    vocabulary = {_unmarked(piece): index for piece, index in model["vocab"].items()}
    merges = [tuple(_unmarked(part) for part in (m.split(" ") if isinstance(m, str) else m))
              for m in model["merges"]]
    return make(vocabulary, merges, unknown_token)


def train_xlm_bpe(data, vocabulary_size, language="en", lowercase_and_remove_accent=True,
                  special_tokens=xlm_text.XLM_SPECIAL_TOKENS, min_frequency=2, workers=None):
    """XLM's BPE codes learnt on the Moses words of `data` -> an `xlm_text.XLMBPETokenizer`.

    XLM learns them with fastBPE's learnbpe on the tokenized, lower cased text; here
    Hugging Face `tokenizers` learns them (`train_word_end_bpe`, GPT's "</w>" trainer)
    on the same words. Ids 0-13 are XLM's dictionary's specials. `data` with a
    `languages` attribute (one code per sentence: `xlm_recipe.tokenizer_text`'s sample)
    has each sentence read by its own language's Moses rules, as XLM tokenizes each
    corpus with tools/tokenize.sh $lg before learning one BPE on them all (README,
    "bpe.train"); `language` is then only the tokenizer's default. A sample of
    `moses_words.POOL_MIN_LINES` sentences or more is split in `workers` processes (None: one
    per core; 1: this one), the words the same.
    """
    texts = _texts(data)
    languages = getattr(data, "languages", None) or itertools.repeat(language)
    data = [f"{code}\t{line}" for code, line in zip(languages, texts) if line.strip()]
    read_words = functools.partial(xlm_text.tagged_words, lowercase_and_remove_accents=(
        lowercase_and_remove_accent), workers=workers)
    return train_word_end_bpe(data, vocabulary_size, special_tokens, "<unk>", min_frequency,
                              tokenizer_class=xlm_text.XLMBPETokenizer, read_words=read_words,
                              language=language,
                              lowercase_and_remove_accent=lowercase_and_remove_accent)


def vocabulary(tokenizer):
    """The tokenizer's pieces, in id order."""
    return [tokenizer.id_to_token(i) for i in range(tokenizer.vocabulary_size())]


def known_token_id(tokenizer, token):
    """`token`'s id, or None where the vocabulary has no such entry: SentencePiece gives
    its `<unk>` id for any piece it lacks (keras-hub's other tokenizers raise), so an id
    counts only if it reads back as `token`."""
    try:
        found = tokenizer.token_to_id(token)
    except (KeyError, ValueError):
        return None
    if found is None or int(found) < 0 or tokenizer.id_to_token(int(found)) != token:
        return None
    return int(found)


def token_id_of(tokenizer, token, role):
    """`known_token_id`, refusing a token the vocabulary lacks (`role` names its use)."""
    found = known_token_id(tokenizer, token)
    if found is None:
        raise ValueError(f"The tokenizer's vocabulary has no {token!r} ({role}): pass the "
                         f"spelling its vocabulary uses, or a tokenizer trained with it.")
    return found


def special_token_ids(tokenizer):
    """{"cls", "sep", "pad", "mask", "unk"} -> id, whichever spelling the vocabulary uses."""
    pieces = {piece: i for i, piece in enumerate(vocabulary(tokenizer))}
    spellings = {
        # A released XLNet vocabulary holds <s> and </s> beside its <cls> and <sep>.
        "cls": ("[CLS]", "<cls>", "<s>"), "sep": ("[SEP]", "<sep>", "</s>"),
        "pad": ("[PAD]", "<pad>"),
        "mask": ("[MASK]", "<mask>", "<special1>"), "unk": ("[UNK]", "<unk>"),  # XLM: <special1>
    }
    ids = {}
    for role, names in spellings.items():
        found = [pieces[n] for n in names if n in pieces]
        if not found:
            raise ValueError(f"The tokenizer's vocabulary has no {role} token ({names}).")
        ids[role] = found[0]
    return ids


# Where a word starts, as each released pipeline decides it for its own tokenizer.
def wordpiece_word_start(piece):
    """WordPiece: a piece without "##" (google-research/bert create_pretraining_data.py
    @eedf571, whole-word masking; SpanBERT, ERNIE and ELECTRA read WordPiece the same)."""
    return not piece.startswith("##")


def byte_level_word_start(piece):
    """Byte-level BPE: a piece that carries the space before it, "Ġ" (fairseq
    GPT2BPE.is_beginning_of_word: the decoded piece starts with a space)."""
    return piece.startswith("\u0120")


def sentencepiece_word_start(piece):
    """SentencePiece: a piece that opens with "▁" (its marker for a word's start)."""
    return piece.startswith(WORD_START)


# XLNet data_utils.py @bbaa3a6 and ALBERT create_pretraining_data.py @b772393 (the
# string lists '"' twice: no apostrophe, no "<", "=" or ">").
START_PIECES = frozenset('!"#$%&"()*+,-./:;?@[\\]^_`{|}~')
_ENGLISH = frozenset("abcdefghijklmnopqrstuvwxyz")


def xlnet_word_start(piece):
    """XLNet's `_is_start_piece` (data_utils.py @bbaa3a6): "▁", "<" or a lone
    punctuation piece opens a word (span)."""
    return piece.startswith((WORD_START, "<")) or piece in START_PIECES


def albert_word_start(piece):
    """ALBERT's `_is_start_piece_sp` (create_pretraining_data.py @b772393): XLNet's rule,
    and any piece with a character that is neither an English letter nor one of the
    punctuation marks ("for foreign characters, we always treat them as a whole piece"):
    digits, accented letters, apostrophes."""
    return xlnet_word_start(piece) or not all(
        c.lower() in _ENGLISH or c in START_PIECES for c in piece)


def continuation_table(tokenizer, sentencepiece_word_start=sentencepiece_word_start):
    """Bool array over ids: True for pieces that continue a word (not a word start).

    WordPiece: "##x" (`wordpiece_word_start`). Byte-level BPE: pieces without the
    leading "Ġ" (`byte_level_word_start`). SentencePiece: by
    `sentencepiece_word_start(piece)`, the family's released rule (ALBERT's
    `albert_word_start`, XLNet's `xlnet_word_start`; by default a "▁" start).
    Special tokens ([X] / <x>) start words.
    """
    pieces = vocabulary(tokenizer)
    kind = type(tokenizer).__name__
    if "WordPiece" in kind:
        starts = wordpiece_word_start
    elif "BytePair" in kind:
        starts = byte_level_word_start
    else:
        starts = sentencepiece_word_start
    table = np.zeros(len(pieces), bool)
    for i, piece in enumerate(pieces):
        if piece.startswith(("[", "<")) and piece.endswith(("]", ">")):
            continue
        table[i] = not starts(piece)
    return table


def check_vocabulary(tokenizer, backbone):
    """ValueError when the tokenizer's ids do not fit the backbone's embedding table."""
    size = tokenizer.vocabulary_size()
    table = backbone.token_embedding.vocabulary_size
    if size > table:
        raise ValueError(
            f"The tokenizer has {size} tokens but the backbone's embedding table has "
            f"{table} rows; build the backbone with vocabulary_size={size} (or larger)."
        )
    return size


def marks_leading_space(tokenizer):
    """Whether `tokenizer` is byte-level BPE, whose pieces carry the space before a word ("Ġ")."""
    import keras_hub

    return isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer)


def tokenize_documents(documents, tokenizer):
    """Maps a tf.data of documents (1-D tf.string sentences) to ragged [sentences, tokens].

    Byte-level BPE tokenizes running text (GPT-2, Radford et al. 2019: whole
    WebText documents; fairseq's RoBERTa/BART: whole lines): a sentence after a
    document's first starts with the space that separated it, so its first word
    gets the same "Ġ" piece as in the document tokenized whole.
    """
    leading_space = marks_leading_space(tokenizer)

    def tokenize(sentences):
        if leading_space:
            sentences = tf.strings.join(
                [tf.where(tf.range(tf.size(sentences)) > 0, " ", ""), sentences])
        tokens = tokenizer(sentences)
        if not isinstance(tokens, tf.RaggedTensor):
            tokens = tf.RaggedTensor.from_tensor(tokens)
        return tf.cast(tokens, tf.int32)

    return documents.map(tokenize)


# Where a run directory (keras_ctx.runs), a prepared-data directory
# (keras_ctx.data.prepare) and a saved text task keep their tokenizer.
TOKENIZER_DIR = "tokenizer"
# In it: the keras-hub layer's Keras config and its assets (what `load_tokenizer` reads),
# beside the Hugging Face files (`tokenizer_files`) that transformers' AutoTokenizer reads.
KERAS_CONFIG = "keras_tokenizer.json"
KERAS_ASSETS = "keras_assets"
# Written before keras_tokenizer.json: the same Keras config, its assets beside it. Still
# read (old runs, prepared data and saved tasks); never written, as the name is the
# `tokenizers` library's (Tokenizer.from_file could not read ours).
EARLIER_KERAS_CONFIG = "tokenizer.json"


def save_tokenizer(tokenizer, directory):
    """Writes a keras-hub tokenizer to `directory`: its Keras config (keras_tokenizer.json)
    and assets (keras_assets/), and its files in Hugging Face's names with the
    transformers class that reads them (`tokenizer_files.huggingface_class`)."""
    os.makedirs(os.path.join(directory, KERAS_ASSETS), exist_ok=True)
    with open(os.path.join(directory, KERAS_CONFIG), "w", encoding="utf-8") as handle:
        json.dump(keras.saving.serialize_keras_object(tokenizer), handle)
    tokenizer.save_assets(os.path.join(directory, KERAS_ASSETS))
    tokenizer_files.save_tokenizer_files(tokenizer, directory,
                                         tokenizer_files.huggingface_class(tokenizer))


def saved_tokenizer_files(directory):
    """(Keras config, assets directory) `save_tokenizer` wrote in `directory`, in either
    layout (`EARLIER_KERAS_CONFIG`), or None where it wrote none."""
    path = os.path.join(directory, KERAS_CONFIG)
    if os.path.isfile(path):
        return path, os.path.join(directory, KERAS_ASSETS)
    path = os.path.join(directory, EARLIER_KERAS_CONFIG)
    return (path, directory) if os.path.isfile(path) else None


def load_tokenizer(directory):
    """The tokenizer `save_tokenizer` wrote to `directory`, or None where it wrote none."""
    saved = saved_tokenizer_files(directory)
    if saved is None:
        return None
    import keras_hub  # noqa: F401  (registers the tokenizer classes)

    bert_wordpiece_class()  # registers keras_ctx's
    albert_text.albert_sentencepiece_class()
    path, assets = saved
    try:
        with open(path, encoding="utf-8") as handle:
            tokenizer = keras.saving.deserialize_keras_object(json.load(handle))
        tokenizer.load_assets(assets)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RunDirectoryError(f"The tokenizer in {directory} is corrupt ({error}); "
                                "convert or pretrain the run again.") from None
    return tokenizer


TOKENIZER_SAMPLE = "tokenizer_sample"  # run.json: how many sentences the tokenizer read


def train_tokenizer(family, source, run):
    """(tokenizer, {"tokenizer_sample": ...}): `family`'s tokenizer trained on a seeded sample.

    `source` is a corpus source, a tf.data of documents, or a `corpora.Sample`
    already drawn; the sample is at most `corpora.TOKENIZER_SAMPLE_SENTENCES`
    sentences (sentencepiece's input_sentence_size), read in one stream.
    """
    progress.say(f"Reading the corpus and training the tokenizer on it (up to "
                 f"{run.vocabulary_size} entries)...")
    began = time.time()
    sample = source if isinstance(source, corpora.Sample) else corpora.sample_sentences(
        source, seed=run.seed)
    progress.say(f"Sampled {len(sample):,} of the corpus' {sample.seen:,} sentences for the "
                 f"tokenizer (at most {corpora.TOKENIZER_SAMPLE_SENTENCES:,}, seed {run.seed}).")
    with progress.reporting(progress.say):  # the library's own steps timed
        tokenizer = family.train_tokenizer(sample, run.vocabulary_size,
                                           **family.tokenizer_options(run))
    size = getattr(tokenizer, "vocabulary_size", None)
    progress.say(f"Trained the tokenizer in {progress.duration(time.time() - began)}"
                 + (f" ({size()} entries)." if callable(size) else "."))
    return tokenizer, {TOKENIZER_SAMPLE: {"sentences": len(sample),
                                            "corpus_sentences": sample.seen,
                                            "seed": run.seed}}
