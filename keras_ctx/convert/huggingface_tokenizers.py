"""Hugging Face tokenizer files <-> keras-hub tokenizers.

`tokenizer_from_huggingface(directory)` reads a checkpoint directory's
vocabulary files (WordPiece, byte-level or "</w>" BPE, SentencePiece);
`save_tokenizer_files` (`keras_ctx.data.tokenizer_files`) writes a tokenizer back in
the same names.
"""

import functools
import os

from keras_ctx.common.files import missing_link
from keras_ctx.convert.base import CheckpointError, read_json_object
from keras_ctx.data import albert_text
# The writer lives in the data layer (runs write it too); its names are this module's too.
from keras_ctx.data.tokenizer_files import (  # noqa: F401
    save_tokenizer_files, tokenizer_file_names)


# SentencePiece models, by the names checkpoints give them.
SENTENCEPIECE_FILES = ("spiece.model", "sentencepiece.bpe.model", "30k-clean.model")


def tokenizer_from_huggingface(directory, lowercase=None, text=None):
    """The checkpoint's tokenizer as a keras-hub tokenizer, or None if it has no files.

    WordPiece (vocab.txt: BERT, ELECTRA), byte-level BPE (vocab.json +
    merges.txt: RoBERTa, GPT-2, BART), "</w>" BPE (the same files with
    end-of-word pieces: openai-gpt) and SentencePiece (spiece.model:
    ALBERT, XLNet, T5). `lowercase` overrides tokenizer_config.json's
    do_lower_case for WordPiece (HF's default when neither says: True).
    `text`: the family's `registry.HuggingFace.text`, for a SentencePiece model
    that Hugging Face's tokenizer reads through `preprocess_text` (ALBERT, XLNet)
    or "</w>" BPE read through Moses (XLM's XLMTokenizer, `xlm_text`; merges.txt
    may hold fastBPE's counts): its defaults, under tokenizer_config.json's fields.

    Which files are read, when a directory holds several: one kind of
    vocabulary files only (vocab.txt, or vocab.json with merges.txt, or one
    SentencePiece model); two kinds, half of a BPE pair or two SentencePiece
    models that differ are refused naming the files. tokenizer.json (the
    `tokenizers` library's file) is read alone when it is the only one, for a
    WordPiece or BPE model; beside vocab.txt or vocab.json + merges.txt its
    vocabulary, merges and lowercasing must agree with them (refused naming both
    files if not); beside a SentencePiece model the model is read and
    tokenizer.json is not (it is converted from the model, with other ids for
    fairseq's special tokens).
    """
    directory = os.fspath(directory)
    present = {}
    for name in TOKENIZER_FILES:
        path = os.path.join(directory, name)
        if missing_link(path):
            raise CheckpointError(missing_link(path))
        if os.path.isfile(path):
            present[name] = path
    settings = {}
    if "tokenizer_config.json" in present:
        settings = read_json_object(present["tokenizer_config.json"], "tokenizer_config.json")
    fast = _fast_model(present.get("tokenizer.json"))
    kinds = _vocabulary_kinds(present)
    if not kinds:
        if fast is None:
            return None
        if fast["type"] == "Unigram":
            raise CheckpointError(f"{fast['path']} holds a Unigram (SentencePiece) vocabulary, "
                                  "which is read from its SentencePiece model: add spiece.model.")
        kinds = {fast["type"]: ["tokenizer.json"]}
    (kind, names), = kinds.items()
    if kind == "WordPiece":
        return _wordpiece(present, settings, fast, lowercase)
    if kind == "BPE":
        return _byte_pairs(present, settings, fast, text)
    return _sentencepiece(present[names[0]], settings, text)


def _vocabulary_kinds(present):
    """{kind: file names} of the vocabulary files present; CheckpointError for two kinds,
    half a BPE pair, or SentencePiece models that differ."""
    pair = [name for name in ("vocab.json", "merges.txt") if name in present]
    if len(pair) == 1:
        other = ({"vocab.json", "merges.txt"} - set(pair)).pop()
        raise CheckpointError(f"{present[pair[0]]} is one half of a BPE tokenizer, but "
                              f"{other} is not beside it; add it (or remove {pair[0]}).")
    pieces = [name for name in SENTENCEPIECE_FILES if name in present]
    for name in pieces[1:]:
        if _read_bytes(present[name]) != _read_bytes(present[pieces[0]]):
            raise CheckpointError(f"{present[pieces[0]]} and {present[name]} are two different "
                                  "SentencePiece models; keep the one of this model.")
    wordpiece = ["vocab.txt"] if "vocab.txt" in present else []
    kinds = {kind: names for kind, names in (("WordPiece", wordpiece), ("BPE", pair),
                                             ("SentencePiece", pieces)) if names}
    if len(kinds) > 1:
        files = " and ".join(present[n] for names in kinds.values() for n in names[:1])
        raise CheckpointError(f"{files} are the vocabularies of two kinds of tokenizer "
                              f"({' and '.join(kinds)}); keep the files of this model's one.")
    return kinds


def _fast_model(path):
    """tokenizer.json's WordPiece or BPE model (with its normalizer and pre-tokenizer), or
    None when there is no such file (or it is keras-hub's tokenizer.json, not this one)."""
    if path is None:
        return None
    document = read_json_object(path, "tokenizer.json")
    model = document.get("model")
    if not isinstance(model, dict) or "type" not in model:
        return None  # not the tokenizers library's file
    if model["type"] not in ("WordPiece", "BPE", "Unigram"):
        raise CheckpointError(f"{path}: model type {model['type']!r} is not read; give the "
                              "vocabulary files (vocab.txt, vocab.json + merges.txt or a "
                              "SentencePiece model).")
    vocabulary = model.get("vocab")
    if model["type"] == "Unigram":
        return {"type": "Unigram", "path": path}
    if not isinstance(vocabulary, dict):
        raise CheckpointError(f"{path}: model.vocab is not an object of token -> id.")
    normalizer = document.get("normalizer") or {}
    pre_tokenizer = document.get("pre_tokenizer") or {}
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    return {"type": model["type"], "path": path, "vocab": vocabulary, "merges": merges,
            "unk_token": model.get("unk_token"),
            "lowercase": normalizer.get("lowercase") if normalizer.get("type") == "BertNormalizer"
            else None,
            "add_prefix_space": pre_tokenizer.get("add_prefix_space")
            if pre_tokenizer.get("type") == "ByteLevel" else None}


def _disagree(first, second, what):
    raise CheckpointError(f"{first} and {second} disagree on {what}; they belong to two "
                          "tokenizers: keep the files of this model's one (or fix one).")


def _first_difference(ours, theirs):
    """'index i: a vs b' of the first place two sequences differ."""
    for index, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"entry {index}: {a!r} vs {b!r}"
    return f"{len(ours)} vs {len(theirs)} entries"


def _wordpiece(present, settings, fast, lowercase):
    from keras_ctx.data.tokenizers import bert_wordpiece_tokenizer

    if fast is not None and fast["type"] != "WordPiece":
        _disagree(present.get("vocab.txt"), fast["path"], f"the kind of tokenizer (WordPiece "
                  f"vs {fast['type']})")
    unknown = _token(settings.get("unk_token", (fast or {}).get("unk_token") or "[UNK]"))
    if fast is not None and fast["unk_token"] is not None and fast["unk_token"] != unknown:
        _disagree(present["tokenizer_config.json"], fast["path"], f"the unknown token "
                  f"(unk_token {unknown!r} vs model.unk_token {fast['unk_token']!r})")
    if "vocab.txt" in present:
        vocabulary = read_vocabulary(present["vocab.txt"], unknown)
        if fast is not None:
            theirs = _tokens_by_id(fast)
            if theirs != vocabulary:
                _disagree(present["vocab.txt"], fast["path"],
                          f"the vocabulary ({_first_difference(vocabulary, theirs)})")
    else:
        vocabulary = _tokens_by_id(fast)
        if unknown not in vocabulary:
            raise CheckpointError(f"{fast['path']} has no unknown token {unknown!r}.")
    if fast is not None and fast["lowercase"] is not None:
        if "do_lower_case" in settings and bool(settings["do_lower_case"]) != fast["lowercase"]:
            _disagree(present["tokenizer_config.json"], fast["path"], "lowercasing "
                      f"(do_lower_case {settings['do_lower_case']} vs normalizer.lowercase "
                      f"{fast['lowercase']})")
        settings = dict(settings, do_lower_case=fast["lowercase"])
    if lowercase is None:
        lowercase = bool(settings.get("do_lower_case", True))
    strip_accents = settings.get("strip_accents")
    # BERT's BasicTokenizer strips accents whenever it lowercases, unless
    # strip_accents is set explicitly.
    strip_accents = lowercase if strip_accents is None else bool(strip_accents)
    # BERT's BasicTokenizer normalises text before WordPiece (keras-hub's NFKC case folding
    # does not: ´timeout´ became [UNK], ² ﬁ Ａ other words, U+00A0 no space).
    return bert_wordpiece_tokenizer(
        vocabulary=vocabulary, lowercase=lowercase, strip_accents=strip_accents,
        oov_token=unknown, split_on_cjk=bool(settings.get("tokenize_chinese_chars", True)))


def _tokens_by_id(fast):
    """tokenizer.json's WordPiece vocabulary as a list (its ids 0..n-1)."""
    ids = sorted(fast["vocab"].values(), key=lambda i: (type(i) is not int, i))
    if ids != list(range(len(ids))):
        raise CheckpointError(f"{fast['path']}: model.vocab's ids are not 0..{len(ids) - 1}, "
                              "each once.")
    return [token for token, _ in sorted(fast["vocab"].items(), key=lambda item: item[1])]


def _byte_pairs(present, settings, fast, text=None):
    import keras_hub

    from keras_ctx.data.tokenizers import WORD_END, WordEndBPETokenizer

    if fast is not None and fast["type"] != "BPE":
        _disagree(present.get("vocab.json"), fast["path"],
                  f"the kind of tokenizer (BPE vs {fast['type']})")
    if "vocab.json" in present:
        vocab, merges = present["vocab.json"], present["merges.txt"]
        vocabulary = read_json_object(vocab, "vocab.json (token -> id)")
        lines = _text_lines(merges)
        # merges.txt starts with a "#version" line; the rest are "a b" pairs.
        merge_list = [line for line in lines if line and not line.startswith("#version")]
        if fast is not None:
            if fast["vocab"] != vocabulary:
                _disagree(vocab, fast["path"], "the vocabulary")
            if fast["merges"] != merge_list:
                _disagree(merges, fast["path"],
                          f"the merges ({_first_difference(merge_list, fast['merges'])})")
    else:
        vocab = merges = fast["path"]
        vocabulary, merge_list = fast["vocab"], fast["merges"]
    ids = list(vocabulary.values())
    if not all(type(i) is int and i >= 0 for i in ids) or len(set(ids)) != len(ids):
        raise CheckpointError(f"{vocab} must map each token to its own id (a non-negative "
                              "integer); some ids are repeated or not integers.")
    if text is not None:  # XLM's merges.txt is fastBPE's codes: "a b count"
        merge_list = [_codes_merge(line, merges) for line in merge_list]
    bad = next((line for line in merge_list if len(line.split(" ")) != 2), None)
    if bad is not None:
        raise CheckpointError(f"{merges}: {bad!r} is not a merge of two pieces.")
    if any(piece.endswith(WORD_END) for piece in vocabulary):
        unknown = _token(settings.get("unk_token", "<unk>"))
        if text is None:  # openai-gpt: BPE over lowercased words with "</w>" ends, not bytes.
            return WordEndBPETokenizer(vocabulary, merge_list, unknown_token=unknown)
        # XLM: transformers' XLMTokenizer reads text through Moses first (xlm_text).
        from keras_ctx.data.xlm_text import XLMBPETokenizer

        options = {**text, **{k: settings[k] for k in text if k in settings}}
        return XLMBPETokenizer(vocabulary, merge_list, unknown_token=unknown,
                               lowercase_and_remove_accent=bool(
                                   options["do_lowercase_and_remove_accent"]))
    prefix_space = settings.get("add_prefix_space")
    if fast is not None and fast["add_prefix_space"] is not None:
        if prefix_space is not None and bool(prefix_space) != fast["add_prefix_space"]:
            _disagree(present["tokenizer_config.json"], fast["path"], "add_prefix_space")
        prefix_space = fast["add_prefix_space"]
    try:
        return keras_hub.tokenizers.BytePairTokenizer(
            vocabulary=vocabulary, merges=merge_list, add_prefix_space=bool(prefix_space))
    except ValueError as error:  # a merge of pieces the vocabulary lacks
        raise CheckpointError(f"{merges} does not fit {vocab} ({error}); use the two "
                              "files of one tokenizer.") from None


def _codes_merge(line, path):
    """'a b' of a fastBPE codes line 'a b count' (XLMTokenizer reads its first two fields)."""
    fields = line.split(" ")
    if len(fields) == 3 and fields[2].isdigit():
        return " ".join(fields[:2])
    if len(fields) != 2:
        raise CheckpointError(f"{path}: {line!r} is not a merge of two pieces with its count "
                              "(fastBPE's codes: 'a b count').")
    return line


def _read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def _sentencepiece(path, settings, text):
    import keras_hub

    if text is None:
        make = keras_hub.tokenizers.SentencePieceTokenizer
    else:
        # transformers' AlbertTokenizer / XLNetTokenizer: preprocess_text (spaces
        # collapsed, `` and '' as ", accents stripped unless keep_accents, lower case if
        # do_lower_case), then the digit-comma split: what albert_text's class does.
        options = {**text, **{k: settings[k] for k in text if k in settings}}
        if not settings.get("remove_space", True):
            raise CheckpointError("tokenizer_config.json: remove_space false is not "
                                  "supported (spaces are always collapsed); remove the field.")
        make = functools.partial(albert_text.albert_sentencepiece_class(),
                                 lowercase=bool(options["do_lower_case"]), quotes=True,
                                 keep_accents=bool(options["keep_accents"]))
    try:
        return make(proto=_read_bytes(path))
    except Exception as error:  # sentencepiece raises RuntimeError/TF errors
        raise CheckpointError(f"{path} is not a readable SentencePiece model "
                              f"({type(error).__name__}: {error}).") from None


def _token(value):
    """A special token from tokenizer_config.json: a string or {"content": ...}."""
    value = value.get("content") if isinstance(value, dict) else value
    if not isinstance(value, str):
        raise CheckpointError(f"tokenizer_config.json: a special token is {value!r}, not a "
                              "string; fix the field.")
    return value


def _text_lines(path):
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{path} is not UTF-8 text ({error.reason} at byte "
                              f"{error.start}); re-save it as UTF-8.") from None
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def read_vocabulary(path, unknown="[UNK]"):
    """The tokens of a WordPiece vocab.txt (one per line, its line number its id), checked.

    A repeated token would give two ids one string, and a vocabulary
    without its unknown token cannot tokenize unseen words: both refused.
    """
    tokens = [line.rstrip("\r") for line in _text_lines(path)]
    seen = {}
    for number, token in enumerate(tokens):
        if token in seen:
            raise CheckpointError(f"{path}: token {token!r} is on lines {seen[token] + 1} "
                                  f"and {number + 1}; each token must appear once.")
        seen[token] = number
    if unknown not in seen:
        raise CheckpointError(f"{path} has no unknown token {unknown!r}; add it (or set "
                              "unk_token in tokenizer_config.json).")
    return tokens


def check_tokenizer_fits(backbone, tokenizer, directory):
    """A tokenizer whose ids run past the embedding table would fail only at embed time."""
    from keras_ctx.layers.embeddings import vocabulary_size_of

    if tokenizer is None:
        return
    rows = vocabulary_size_of(backbone)
    largest = largest_token_id(tokenizer)
    if rows is not None and largest >= rows:
        size = int(tokenizer.vocabulary_size())
        raise CheckpointError(f"The tokenizer in {directory} has {size} tokens but the "
                              f"embedding has {rows} rows (its largest id is {largest}); the "
                              "tokenizer files belong to another model (use the matching "
                              "vocabulary).")


def largest_token_id(tokenizer):
    """The largest id a tokenizer can give: its vocabulary's largest, not its token count.

    A vocab.json maps tokens to ids that need not be 0..n-1 (a GPT-2 vocabulary
    cut to 41 tokens may keep id 5000).
    """
    vocabulary = getattr(tokenizer, "vocabulary", None)
    if isinstance(vocabulary, dict) and vocabulary:
        return max(int(i) for i in vocabulary.values())
    return int(tokenizer.vocabulary_size()) - 1


# Every tokenizer file a checkpoint directory of ours may hold: what an export replaces.
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "vocab.json", "merges.txt",
                   "spiece.model", "sentencepiece.bpe.model", "30k-clean.model",
                   "tokenizer.json", "special_tokens_map.json")
