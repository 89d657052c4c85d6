"""A tokenizer's files in Hugging Face's names (vocab.txt, vocab.json + merges.txt, spiece.model).

The one writer of them: `keras_ctx.convert`'s export writes them beside a
checkpoint, and a run's (or a saved task's) tokenizer/ holds them so that
`transformers.AutoTokenizer.from_pretrained(RUN/tokenizer)` reads it
(`keras_ctx.data.tokenizers.save_tokenizer`). It lives in the data layer
because runs and prepared data, below `keras_ctx.convert`, write it too
(docs/design.md, the house's import direction).
"""

import json
import os

from keras_ctx.common import files
from keras_ctx.common.errors import CheckpointError
from keras_ctx.data import albert_text, xlm_text


def _kind(tokenizer):
    """"wordpiece", "byte_pairs", "albert_sentencepiece", "sentencepiece", "moses_bpe" or
    None (a tokenizer these files do not hold: ELMo's words, GPT's "</w>" BPE)."""
    import keras_hub

    if isinstance(tokenizer, xlm_text.XLMBPETokenizer):
        return "moses_bpe"
    if isinstance(tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        return "wordpiece"
    if isinstance(tokenizer, keras_hub.tokenizers.BytePairTokenizer):
        return "byte_pairs"
    if isinstance(tokenizer, albert_text.albert_sentencepiece_class()):
        return "albert_sentencepiece"
    if isinstance(tokenizer, keras_hub.tokenizers.SentencePieceTokenizer):
        return "sentencepiece"
    return None


_NAMES = {"wordpiece": ("vocab.txt", "tokenizer_config.json"),
          "byte_pairs": ("vocab.json", "merges.txt"),
          "albert_sentencepiece": ("spiece.model", "tokenizer_config.json"),
          "sentencepiece": ("spiece.model",),
          "moses_bpe": ("vocab.json", "merges.txt", "tokenizer_config.json")}


def tokenizer_file_names(tokenizer, tokenizer_class=None):
    """The files `save_tokenizer_files` writes for `tokenizer` (with `tokenizer_class`)."""
    names = _NAMES.get(_kind(tokenizer), ()) if tokenizer is not None else ()
    if names and tokenizer_class and "tokenizer_config.json" not in names:
        names += ("tokenizer_config.json",)
    return names


def huggingface_class(tokenizer):
    """The transformers tokenizer class that reads these files as `tokenizer` reads text,
    adding the special tokens of its framing (None: no class does).

    Told by the kind and, for byte-level BPE, by the vocabulary's special tokens (as
    `tokenizers.special_token_ids` finds them): fairseq's <s> ... </s> (RoBERTa, BART)
    or none (GPT-2). A plain SentencePiece model (T5) frames text by its family, which
    these files do not say: no class; nor for XLNet's, which reads text as ALBERT's
    does (`albert_text`) but has no [MASK] (AlbertTokenizer would add one and frame
    [CLS] A [SEP], where XLNet's rows end A [SEP] [CLS]).
    """
    kind = _kind(tokenizer) if tokenizer is not None else None
    if kind == "byte_pairs":
        fairseq = {"<s>", "</s>"} <= set(tokenizer.vocabulary)
        return "RobertaTokenizer" if fairseq else "GPT2Tokenizer"
    if kind == "albert_sentencepiece" and "[MASK]" not in tokenizer.get_vocabulary():
        return None
    return {"wordpiece": "BertTokenizer", "albert_sentencepiece": "AlbertTokenizer",
            "moses_bpe": "XLMTokenizer"}.get(kind)


def save_tokenizer_files(tokenizer, directory, tokenizer_class=None):
    """The tokenizer's vocabulary files in Hugging Face's names (None: nothing), atomically.

    `tokenizer_class` (`huggingface_class`): recorded in tokenizer_config.json, which
    is what `AutoTokenizer` needs where no config.json says the model type (a run's
    tokenizer/). A checkpoint's export leaves it to config.json.
    """
    kind = _kind(tokenizer) if tokenizer is not None else None
    if kind is None:
        return

    def write(name):
        return files.replacing(os.path.join(directory, name), overwrite=True)

    settings = {}
    if kind == "wordpiece":
        with write("vocab.txt") as staging, open(staging, "w", encoding="utf-8") as handle:
            handle.writelines(token + "\n" for token in tokenizer.get_vocabulary())
        settings = {"do_lower_case": bool(tokenizer.lowercase),
                    "strip_accents": bool(tokenizer.strip_accents),
                    "tokenize_chinese_chars": bool(tokenizer.split_on_cjk)}
        if tokenizer.oov_token != "[UNK]":
            settings["unk_token"] = tokenizer.oov_token
    elif kind == "byte_pairs":
        files.write_text(os.path.join(directory, "vocab.json"),
                         json.dumps(tokenizer.vocabulary, ensure_ascii=False))
        with write("merges.txt") as staging, open(staging, "w", encoding="utf-8") as handle:
            handle.write("#version: 0.2\n")
            handle.writelines(merge + "\n" for merge in tokenizer.merges)
        if tokenizer_class:
            settings = {"add_prefix_space": bool(tokenizer.add_prefix_space)}
    elif kind == "moses_bpe":  # XLM's: XLMTokenizer reads every merges.txt line, no header
        files.write_text(os.path.join(directory, "vocab.json"),
                         json.dumps(tokenizer.vocabulary, ensure_ascii=False))
        files.write_text(os.path.join(directory, "merges.txt"),
                         "".join(" ".join(merge) + "\n" for merge in tokenizer.merges))
        settings = {"do_lowercase_and_remove_accent": tokenizer.lowercase_and_remove_accent}
    else:
        proto = tokenizer.proto
        if not isinstance(proto, bytes):
            raise CheckpointError("The SentencePiece tokenizer holds no serialized model.")
        with write("spiece.model") as staging, open(staging, "wb") as handle:
            handle.write(proto)
        if kind == "albert_sentencepiece":
            # What transformers' AlbertTokenizer / XLNetTokenizer read back.
            settings = {"do_lower_case": bool(tokenizer.lowercase),
                        "keep_accents": bool(tokenizer.keep_accents), "remove_space": True}
    if tokenizer_class:
        settings["tokenizer_class"] = tokenizer_class
    if settings:
        files.write_json(os.path.join(directory, "tokenizer_config.json"), settings, indent=None)
