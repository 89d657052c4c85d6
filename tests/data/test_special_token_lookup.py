"""Special tokens are looked up by their spelling, and a spelling the vocabulary lacks is absent.

SentencePiece answers `token_to_id` for a piece it lacks with its `<unk>` id (keras-hub's
WordPiece and byte-level BPE raise), so a framing's first spelling ("[SEP]" where a
released XLNet spells "<sep>", "</s>" where a T5 tokenizer keras_ctx trained before issue
54 spells "[SEP]") used to become `<unk>` silently, and the data pipelines' end-of-text
and BART ids too.
"""

import keras_hub
import pytest

import keras_ctx.families  # noqa: F401 (registers the families)
from keras_ctx.data import pipelines, tokenizers
from keras_ctx.data.tokenizers import known_token_id, token_id_of
from keras_ctx.preprocessing import TextPreprocessor, token_id

TEXTS = [f"the quick brown fox jumps over the lazy dog {i} times." for i in range(300)]


def _sentencepiece(special_tokens):
    proto = tokenizers.train_sentencepiece_proto(TEXTS, 60, special_tokens=special_tokens)
    return keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)


@pytest.fixture(scope="module")
def released_xlnet_spelling():
    # zihangdai/xlnet's spm_train: control symbols <cls>, <sep> (README.md @bbaa3a6).
    return _sentencepiece(("<pad>", "<unk>", "<cls>", "<sep>", "<mask>"))


@pytest.fixture(scope="module")
def albert_spelling():
    # The ALBERT ids a T5 tokenizer keras_ctx trained before issue 54 had: no </s>.
    return _sentencepiece(tokenizers.ALBERT_SPECIAL_TOKENS)


def test_a_piece_sentencepiece_lacks_is_absent_not_its_unk(released_xlnet_spelling):
    tokenizer = released_xlnet_spelling
    pieces = {tokenizer.id_to_token(i): i for i in range(5)}
    assert tokenizer.token_to_id("[SEP]") == pieces["<unk>"]  # what the lookup must not take
    assert known_token_id(tokenizer, "[SEP]") is None
    assert known_token_id(tokenizer, "<sep>") == pieces["<sep>"] == 3
    assert known_token_id(tokenizer, "<unk>") == 1  # <unk> itself is an entry
    assert token_id(tokenizer, ("[SEP]", "<sep>")) == 3
    assert token_id(tokenizer, ("[SEP]", "</s>")) is None
    with pytest.raises(ValueError, match=r"no '\[SEP\]' \(XLNet's separator\)"):
        token_id_of(tokenizer, "[SEP]", "XLNet's separator")


def test_wordpiece_and_byte_level_tokenizers_answer_alike():
    wordpiece = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "fox"])
    assert known_token_id(wordpiece, "[SEP]") == 3
    assert known_token_id(wordpiece, "</s>") is None
    byte_level = keras_hub.tokenizers.BytePairTokenizer(
        vocabulary={"<s>": 0, "</s>": 1, "a": 2, "b": 3, "ab": 4}, merges=["a b"])
    assert known_token_id(byte_level, "</s>") == 1
    assert known_token_id(byte_level, "<|endoftext|>") is None


def test_xlnet_text_frames_with_the_released_spelling(released_xlnet_spelling):
    # A <sep> B <sep> <cls> (Yang et al. 2019): ids 3, 3, 2, never <unk> (1).
    preprocess = TextPreprocessor(released_xlnet_spelling, 64, "xlnet")
    inputs = preprocess(["the fox"], ["the dog"])
    ids = [int(i) for i, real in zip(inputs["token_ids"][0], inputs["padding_mask"][0]) if real]
    assert ids.count(1) == 0, ids
    assert [i for i in ids if i in (2, 3)] == [3, 3, 2], ids
    assert ids[-1] == 2


def test_t5_text_ends_with_the_tokenizers_own_end_of_text(albert_spelling):
    # T5_FRAMING: </s>, else [SEP] (id 3 here); it was <unk> (1) for such a tokenizer.
    preprocess = TextPreprocessor(albert_spelling, 64, "t5")
    inputs = preprocess(["the fox"])
    ids = [int(i) for i, real in zip(inputs["encoder_token_ids"][0],
                                     inputs["encoder_padding_mask"][0]) if real]
    assert ids[-1] == albert_spelling.token_to_id("[SEP]") == 3, ids
    assert 1 not in ids, ids


def test_pipelines_refuse_an_end_token_the_vocabulary_lacks(albert_spelling):
    with pytest.raises(ValueError, match="'</s>'"):
        pipelines.span_corruption_example(albert_spelling, 32, 4)
    with pytest.raises(ValueError, match="'<|endoftext|>'"):
        pipelines.causal_lm_dataset([["the fox"]], albert_spelling, 2, 8)
    with pytest.raises(ValueError, match="BART's noise"):
        pipelines.denoising_example(albert_spelling, 32)
    pipelines.span_corruption_example(albert_spelling, 32, 4, eos_token="[SEP]")  # it has


def test_a_released_xlnet_vocabularys_cls_and_sep_are_its_own_not_s_and_end_of_s():
    # zihangdai/xlnet's vocabulary: <unk> <s> </s> <cls> <sep> <pad> <mask> <eod> (README.md
    # @bbaa3a6); its rows end <sep> <cls>, where <s> / </s> would be RoBERTa's.
    tokenizer = _sentencepiece(("<pad>", "<unk>", "<s>", "</s>", "<cls>", "<sep>", "<mask>",
                                "<eod>"))
    ids = tokenizers.special_token_ids(tokenizer)
    assert ids == {"cls": 4, "sep": 5, "pad": 0, "mask": 6, "unk": 1}, ids
    roberta_like = _sentencepiece(("<pad>", "<unk>", "<s>", "</s>", "<mask>"))
    assert tokenizers.special_token_ids(roberta_like) == {"cls": 2, "sep": 3, "pad": 0,
                                                          "mask": 4, "unk": 1}
