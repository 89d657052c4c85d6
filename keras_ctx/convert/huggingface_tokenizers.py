"""Hugging Face tokenizer files <-> keras-hub tokenizers.

`tokenizer_from_huggingface(directory)` reads a checkpoint directory's
vocabulary files (WordPiece, byte-level or "</w>" BPE, SentencePiece);
`save_tokenizer_files` writes a tokenizer back in the same names.
"""

import os

from keras_ctx.convert.base import CheckpointError, read_json_object, write_json_file


def tokenizer_from_huggingface(directory, lowercase=None):
    """The checkpoint's tokenizer as a keras-hub tokenizer, or None if it has no files.

    WordPiece (vocab.txt: BERT, ELECTRA), byte-level BPE (vocab.json +
    merges.txt: RoBERTa, GPT-2, BART), "</w>" BPE (the same files with
    end-of-word pieces: openai-gpt) and SentencePiece (spiece.model:
    ALBERT, XLNet, T5). `lowercase` overrides tokenizer_config.json's
    do_lower_case for WordPiece (HF's default when neither says: True).
    """
    directory = os.fspath(directory)
    settings = {}
    path = os.path.join(directory, "tokenizer_config.json")
    if os.path.isfile(path):
        settings = read_json_object(path, "tokenizer_config.json")
    vocab = os.path.join(directory, "vocab.txt")
    if os.path.isfile(vocab):
        import keras_hub

        unknown = _token(settings.get("unk_token", "[UNK]"))
        vocabulary = read_vocabulary(vocab, unknown)
        if lowercase is None:
            lowercase = bool(settings.get("do_lower_case", True))
        strip_accents = settings.get("strip_accents")
        # BERT's BasicTokenizer strips accents whenever it lowercases, unless
        # strip_accents is set explicitly.
        strip_accents = lowercase if strip_accents is None else bool(strip_accents)
        return keras_hub.tokenizers.WordPieceTokenizer(
            vocabulary=vocabulary, lowercase=lowercase, strip_accents=strip_accents,
            oov_token=unknown,
            split_on_cjk=bool(settings.get("tokenize_chinese_chars", True)),
        )
    vocab, merges = (os.path.join(directory, n) for n in ("vocab.json", "merges.txt"))
    if os.path.isfile(vocab) and os.path.isfile(merges):
        import keras_hub

        vocabulary = read_json_object(vocab, "vocab.json (token -> id)")
        ids = list(vocabulary.values())
        if not all(type(i) is int and i >= 0 for i in ids) or len(set(ids)) != len(ids):
            raise CheckpointError(f"{vocab} must map each token to its own id (a non-negative "
                                  "integer); some ids are repeated or not integers.")
        lines = _text_lines(merges)
        # merges.txt starts with a "#version" line; the rest are "a b" pairs.
        merge_list = [line for line in lines if line and not line.startswith("#version")]
        bad = next((line for line in merge_list if len(line.split(" ")) != 2), None)
        if bad is not None:
            raise CheckpointError(f"{merges}: {bad!r} is not a merge of two pieces.")
        from keras_ctx.data.tokenizers import WORD_END, WordEndBPETokenizer

        if any(piece.endswith(WORD_END) for piece in vocabulary):
            # openai-gpt: BPE over lowercased words with "</w>" ends, not bytes.
            unknown = _token(settings.get("unk_token", "<unk>"))
            return WordEndBPETokenizer(vocabulary, merge_list, unknown_token=unknown)
        try:
            return keras_hub.tokenizers.BytePairTokenizer(
                vocabulary=vocabulary, merges=merge_list,
                add_prefix_space=bool(settings.get("add_prefix_space", False)),
            )
        except ValueError as error:  # a merge of pieces the vocabulary lacks
            raise CheckpointError(f"{merges} does not fit {vocab} ({error}); use the two "
                                  "files of one tokenizer.") from None
    for name in ("spiece.model", "sentencepiece.bpe.model", "30k-clean.model"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            import keras_hub

            with open(path, "rb") as handle:
                proto = handle.read()
            try:
                return keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)
            except Exception as error:  # sentencepiece raises RuntimeError/TF errors
                raise CheckpointError(f"{path} is not a readable SentencePiece model "
                                      f"({type(error).__name__}: {error}).") from None
    return None


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


def tokenizer_file_names(tokenizer):
    """The files `save_tokenizer_files` writes for `tokenizer`."""
    if tokenizer is None:
        return ()
    import keras_hub

    if isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        return ("vocab.txt", "tokenizer_config.json")
    if isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
        return ("vocab.json", "merges.txt")
    if isinstance(tokenizer, keras_hub.tokenizers.SentencePieceTokenizer):
        return ("spiece.model",)
    return ()


def save_tokenizer_files(tokenizer, directory):
    """The tokenizer's vocabulary files in Hugging Face's names (None: nothing), atomically."""
    if tokenizer is None:
        return
    import keras_hub

    from keras_ctx.common.files import replacing

    def write(name):
        return replacing(os.path.join(directory, name), overwrite=True)

    if isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        with write("vocab.txt") as staging, open(staging, "w", encoding="utf-8") as handle:
            handle.writelines(token + "\n" for token in tokenizer.get_vocabulary())
        settings = {"do_lower_case": bool(tokenizer.lowercase),
                    "strip_accents": bool(tokenizer.strip_accents),
                    "tokenize_chinese_chars": bool(tokenizer.split_on_cjk)}
        if tokenizer.oov_token != "[UNK]":
            settings["unk_token"] = tokenizer.oov_token
        write_json_file(os.path.join(directory, "tokenizer_config.json"), settings,
                        sort_keys=False)
    elif isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
        write_json_file(os.path.join(directory, "vocab.json"), tokenizer.vocabulary,
                        ensure_ascii=False)
        with write("merges.txt") as staging, open(staging, "w", encoding="utf-8") as handle:
            handle.write("#version: 0.2\n")
            handle.writelines(merge + "\n" for merge in tokenizer.merges)
    elif isinstance(tokenizer, keras_hub.tokenizers.SentencePieceTokenizer):
        proto = tokenizer.proto
        if not isinstance(proto, bytes):
            raise CheckpointError("The SentencePiece tokenizer holds no serialized model.")
        with write("spiece.model") as staging, open(staging, "wb") as handle:
            handle.write(proto)
