"""A tokenizer's files in Hugging Face's names (vocab.txt, vocab.json + merges.txt, spiece.model,
an ALBERT or XLNet SentencePiece's tokenizer.json).

The one writer of them: `keras_ctx.convert`'s export writes them beside a
checkpoint, and a run's (or a saved task's) tokenizer/ holds them so that
`transformers.AutoTokenizer.from_pretrained(RUN/tokenizer)` reads it
(`keras_ctx.data.tokenizers.save_tokenizer`). It lives in the data layer
because runs and prepared data, below `keras_ctx.convert`, write it too
(docs/design.md, the house's import direction).
"""

import dataclasses
import json
import os

from keras_ctx.common import files
from keras_ctx.common.errors import CheckpointError
from keras_ctx.data import albert_text, xlm_text
from keras_ctx.data.strings import WORD_START


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
# transformers reads ALBERT's and XLNet's SentencePiece through tokenizer.json, loaded as it is
# by this class: its AlbertTokenizer / XLNetTokenizer rebuild the pre-tokenizer and read spm's
# user-defined symbols as added tokens, each text chunk between them its own "▁" word
# ("a (b)": "▁a", "(", "▁b", where SentencePiece gives "▁a", "▁", "(", "b").
SENTENCEPIECE_FAST_CLASS = "PreTrainedTokenizerFast"


@dataclasses.dataclass(frozen=True)
class FastFraming:
    """How a tokenizer.json frames text, in transformers' terms: `single` and `pair`
    (TemplateProcessing's, with each special token's role for its spelling: "$A:0 sep:0
    cls:2"), the tokenizer_config.json names of the roles (`names`: {name: role}),
    `padding_side`, and `marks`, the pieces a vocabulary holds when the framing is its own."""

    single: str
    pair: str
    names: dict
    marks: tuple
    padding_side: str = "right"

    def spellings(self, vocabulary):
        """{role: the vocabulary's spelling}, the first of its spellings it holds."""
        return {role: next((s for s in spellings if s in vocabulary), spellings[0])
                for role, spellings in _ROLES.items()}


# A role's spellings, keras_ctx's first: its XLNet tokenizer spells <cls> <sep> as [CLS] [SEP]
# (XLNET_SPECIAL_TOKENS), a converted released XLNet vocabulary as <cls> <sep>.
_ROLES = {"cls": ("[CLS]", "<cls>"), "sep": ("[SEP]", "<sep>"), "unk": ("<unk>",),
          "pad": ("<pad>",), "mask": ("[MASK]", "<mask>")}
# ALBERT: [CLS] A [SEP] (B [SEP]), as transformers' AlbertTokenizer frames it.
ALBERT_FAST = FastFraming(
    single="cls:0 $A:0 sep:0", pair="cls:0 $A:0 sep:0 $B:1 sep:1",
    names={"bos_token": "cls", "eos_token": "sep", "unk_token": "unk", "sep_token": "sep",
           "pad_token": "pad", "cls_token": "cls", "mask_token": "mask"},
    marks=("[MASK]",))
# XLNet: A <sep> (B <sep>) <cls>, <cls> its own segment 2, padded on the left, as
# transformers' XLNetTokenizer frames it (zihangdai/xlnet classifier_utils.py @bbaa3a6,
# convert_single_example: SEG_ID_CLS 2, the padding put first). Padding's token type is
# transformers' 0 (its generic class takes no other; XLNetTokenizer's 3, the release's 4).
XLNET_FAST = FastFraming(
    single="$A:0 sep:0 cls:2", pair="$A:0 sep:0 $B:1 sep:1 cls:2",
    names={"unk_token": "unk", "sep_token": "sep", "pad_token": "pad", "cls_token": "cls",
           "mask_token": "mask"},
    marks=("<mask>", "<eod>"), padding_side="left")
FAST_FRAMINGS = (ALBERT_FAST, XLNET_FAST)


def fast_framing(tokenizer, kind=None):
    """The `FastFraming` of an ALBERT-style SentencePiece tokenizer, told by its vocabulary
    (ALBERT's [MASK]; XLNet's <mask> and <eod>), or None (no tokenizer.json)."""
    kind = kind or (_kind(tokenizer) if tokenizer is not None else None)
    if kind != "albert_sentencepiece":
        return None
    vocabulary = set(tokenizer.get_vocabulary())
    return next((f for f in FAST_FRAMINGS if set(f.marks) <= vocabulary), None)


def tokenizer_file_names(tokenizer, tokenizer_class=None):
    """The files `save_tokenizer_files` writes for `tokenizer` (with `tokenizer_class`)."""
    kind = _kind(tokenizer) if tokenizer is not None else None
    names = _NAMES.get(kind, ())
    if fast_framing(tokenizer, kind):
        names += ("tokenizer.json",)
    if names and tokenizer_class and "tokenizer_config.json" not in names:
        names += ("tokenizer_config.json",)
    return names


def huggingface_class(tokenizer):
    """The transformers tokenizer class that reads these files as `tokenizer` reads text,
    adding the special tokens of its framing (None: no class does).

    Told by the kind and, for byte-level BPE, by the vocabulary's special tokens (as
    `tokenizers.special_token_ids` finds them): fairseq's <s> ... </s> (RoBERTa, BART)
    or none (GPT-2). A plain SentencePiece model (T5) frames text by its family, which
    these files do not say: no class. ALBERT's and XLNet's (`albert_text`) are read from
    their tokenizer.json (`SENTENCEPIECE_FAST_CLASS`, `fast_framing`).
    """
    kind = _kind(tokenizer) if tokenizer is not None else None
    if kind == "byte_pairs":
        fairseq = {"<s>", "</s>"} <= set(tokenizer.vocabulary)
        return "RobertaTokenizer" if fairseq else "GPT2Tokenizer"
    if kind == "albert_sentencepiece":
        return SENTENCEPIECE_FAST_CLASS if fast_framing(tokenizer, kind) else None
    return {"wordpiece": "BertTokenizer", "moses_bpe": "XLMTokenizer"}.get(kind)


def sentencepiece_tokenizer_json(tokenizer, framing):
    """tokenizer.json (the `tokenizers` library's file, as a str) that reads text as the ALBERT
    SentencePiece `tokenizer` (ALBERT's or XLNet's) does, its case, quotes and accents as the
    tokenizer keeps them, framed by `framing` (a `FastFraming`).

    google-research/albert's path (`albert_text`): `preprocess_text`
    (`albert_text.albert_text_normalizers`), then SentencePiece itself: the model's
    precompiled charsmap (`nmt_nfkc`, after NFC), spaces collapsed and stripped, each one "▁" and a
    "▁" first (its NormalizerSpec), and the Viterbi path over the pieces' own scores (a
    Unigram over the whole normalised line, as spm's lattice). The user-defined symbols stay
    pieces of the model: SentencePiece keeps them out of every other piece, so the path
    splits them off where they stand. `encode_pieces`' split of a digit-comma piece
    ("▁1990,") has no counterpart in the library: a model with one reads such a word
    otherwise (docs/notes/data-references.md, ALBERT).
    """
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, processors
    from tokenizers.models import Unigram

    proto = sentencepiece_model_pb2.ModelProto.FromString(tokenizer.proto)
    spec = proto.normalizer_spec
    fast = Tokenizer(Unigram([(p.piece, p.score) for p in proto.pieces],
                             unk_id=proto.trainer_spec.unk_id, byte_fallback=False))
    steps = albert_text.albert_text_normalizers(
        lowercase=tokenizer.lowercase, quotes=tokenizer.quotes,
        keep_accents=tokenizer.keep_accents)
    if spec.precompiled_charsmap:
        # NFC first: spm's charsmap composes what NFKD split (Hangul jamo) by its longest
        # match, the library's `Precompiled` only within short graphemes ("한" stayed 3 jamo).
        steps += [normalizers.NFC(), normalizers.Precompiled(spec.precompiled_charsmap)]
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(" +"), " "), normalizers.Strip()]
    steps.append(normalizers.Replace(" ", WORD_START))
    if spec.add_dummy_prefix:
        steps.append(normalizers.Prepend(WORD_START))
    fast.normalizer = normalizers.Sequence(steps)
    fast.decoder = decoders.Metaspace(WORD_START, prepend_scheme="always")
    control = [p.piece for p in proto.pieces if p.type in (p.CONTROL, p.UNKNOWN)]
    fast.add_special_tokens([AddedToken(piece, normalized=False, special=True)
                             for piece in control])
    spelled = framing.spellings({p.piece for p in proto.pieces})

    def template(parts):  # "cls:2" -> "[CLS]:2"; "$A:0" stays
        return " ".join(f"{spelled.get(name, name)}:{type_id}"
                        for name, type_id in (part.split(":") for part in parts.split()))

    fast.post_processor = processors.TemplateProcessing(
        single=template(framing.single), pair=template(framing.pair),
        special_tokens=[(spelled[role], fast.token_to_id(spelled[role]))
                        for role in ("cls", "sep")])
    return fast.to_str()


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
        framing = fast_framing(tokenizer, kind)
        if framing:
            # A checkpoint's config.json would name AlbertTokenizer / XLNetTokenizer: the
            # class is said here, with the special tokens and the side padding goes.
            files.write_text(os.path.join(directory, "tokenizer.json"),
                             sentencepiece_tokenizer_json(tokenizer, framing))
            tokenizer_class = SENTENCEPIECE_FAST_CLASS
            spelled = framing.spellings(set(tokenizer.get_vocabulary()))
            settings.update({name: spelled[role] for name, role in framing.names.items()},
                            padding_side=framing.padding_side)
    if tokenizer_class:
        settings["tokenizer_class"] = tokenizer_class
    if settings:
        files.write_json(os.path.join(directory, "tokenizer_config.json"), settings, indent=None)
