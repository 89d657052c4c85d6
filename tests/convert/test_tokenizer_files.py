"""A checkpoint directory's tokenizer files: read by one documented rule, and files that
disagree refused naming both (keras_ctx/convert/huggingface_tokenizers.py)."""

import json
import os

import numpy as np
import pytest

from keras_ctx.convert import CheckpointError, tokenizer_from_huggingface
from tests.convert.hub_snapshots import snapshot_with_missing_blob
from tests.convert.tokenizer_files import _fast_wordpiece

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "bank", "river", "##s"]
BPE_VOCAB = {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "Ġ": 5}
BPE_MERGES = ["a b", "ab c"]


def _fast_bpe(vocab, merges):
    return {"version": "1.0", "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
            "model": {"type": "BPE", "vocab": vocab, "merges": merges}}


def _tokenizer_dir(directory, **files):
    os.makedirs(directory, exist_ok=True)
    for name, content in files.items():
        name = name.replace("__", ".")
        path = os.path.join(directory, name)
        if isinstance(content, (dict, list)):
            content = json.dumps(content)
        with open(path, "w" if isinstance(content, str) else "wb") as handle:
            handle.write(content)
    return str(directory)


def _refusal(directory):
    with pytest.raises(CheckpointError) as caught:
        tokenizer_from_huggingface(directory)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_vocab_txt_and_tokenizer_json_with_different_vocabularies_are_refused(tmp_path):
    other = WORDS[:5] + ["money", "river", "##s"]
    directory = _tokenizer_dir(tmp_path, vocab__txt="\n".join(WORDS) + "\n",
                               tokenizer__json=_fast_wordpiece(other))
    message = _refusal(directory)
    assert message.startswith(f"{tmp_path / 'vocab.txt'} and {tmp_path / 'tokenizer.json'} "
                              "disagree on the vocabulary (entry 5: 'bank' vs 'money')")


def test_merges_txt_and_tokenizer_json_with_different_merges_are_refused(tmp_path):
    directory = _tokenizer_dir(tmp_path, vocab__json=BPE_VOCAB,
                               merges__txt="#version: 0.2\n" + "\n".join(BPE_MERGES) + "\n",
                               tokenizer__json=_fast_bpe(BPE_VOCAB, ["a b", "b c"]))
    message = _refusal(directory)
    assert message.startswith(f"{tmp_path / 'merges.txt'} and {tmp_path / 'tokenizer.json'} "
                              "disagree on the merges (entry 1: 'ab c' vs 'b c')")


def test_vocab_json_and_tokenizer_json_with_different_vocabularies_are_refused(tmp_path):
    directory = _tokenizer_dir(tmp_path, vocab__json=BPE_VOCAB,
                               merges__txt="\n".join(BPE_MERGES) + "\n",
                               tokenizer__json=_fast_bpe(dict(BPE_VOCAB, c=6), BPE_MERGES))
    assert _refusal(directory).startswith(
        f"{tmp_path / 'vocab.json'} and {tmp_path / 'tokenizer.json'} disagree on the "
        "vocabulary")


def test_half_a_bpe_pair_is_refused_instead_of_reading_no_tokenizer(tmp_path):
    directory = _tokenizer_dir(tmp_path, vocab__json=BPE_VOCAB)
    assert _refusal(directory).startswith(
        f"{tmp_path / 'vocab.json'} is one half of a BPE tokenizer, but merges.txt is not "
        "beside it")


def test_two_kinds_of_vocabulary_are_refused(tmp_path):
    directory = _tokenizer_dir(tmp_path, vocab__txt="\n".join(WORDS) + "\n",
                               vocab__json=BPE_VOCAB, merges__txt="\n".join(BPE_MERGES) + "\n")
    assert _refusal(directory).startswith(
        f"{tmp_path / 'vocab.txt'} and {tmp_path / 'vocab.json'} are the vocabularies of two "
        "kinds of tokenizer (WordPiece and BPE)")


def test_two_different_sentencepiece_models_are_refused(tmp_path):
    directory = _tokenizer_dir(tmp_path, spiece__model=b"\x0a\x01a", **{
        "sentencepiece__bpe__model": b"\x0a\x01b"})
    assert _refusal(directory).startswith(
        f"{tmp_path / 'spiece.model'} and {tmp_path / 'sentencepiece.bpe.model'} are two "
        "different SentencePiece models")


def test_lowercasing_that_disagrees_is_refused(tmp_path):
    directory = _tokenizer_dir(tmp_path, vocab__txt="\n".join(WORDS) + "\n",
                               tokenizer_config__json={"do_lower_case": True},
                               tokenizer__json=_fast_wordpiece(WORDS, lowercase=False))
    assert _refusal(directory).startswith(
        f"{tmp_path / 'tokenizer_config.json'} and {tmp_path / 'tokenizer.json'} disagree on "
        "lowercasing")


def test_tokenizer_json_alone_is_read(tmp_path):
    """Many checkpoints ship tokenizer.json only: it was read as no tokenizer at all."""
    wordpiece = tokenizer_from_huggingface(_tokenizer_dir(tmp_path / "wp",
                                                          tokenizer__json=_fast_wordpiece(WORDS)))
    assert wordpiece.get_vocabulary() == WORDS
    ids = np.asarray(wordpiece("The banks river")).tolist()
    assert ids == [4, 5, 7, 6]  # the, bank ##s, river: lowercased as its normalizer says
    bpe = tokenizer_from_huggingface(_tokenizer_dir(
        tmp_path / "bpe", tokenizer__json=_fast_bpe(BPE_VOCAB, BPE_MERGES)))
    assert np.asarray(bpe("abc")).tolist() == [4]


def test_files_that_agree_are_read(tmp_path):
    directory = _tokenizer_dir(tmp_path, vocab__txt="\n".join(WORDS) + "\n",
                               tokenizer__json=_fast_wordpiece(WORDS))
    assert tokenizer_from_huggingface(directory).get_vocabulary() == WORDS


def test_a_vocabulary_whose_cache_blob_is_missing_is_named(tmp_path):
    snapshot, blob = snapshot_with_missing_blob(tmp_path, "vocab.txt")
    assert _refusal(snapshot).startswith(f"{snapshot / 'vocab.txt'} is a link to {blob}, "
                                         "which is missing")


def test_an_unknown_token_that_disagrees_is_refused(tmp_path):
    directory = _tokenizer_dir(tmp_path, vocab__txt="\n".join(WORDS) + "\n",
                               tokenizer_config__json={"unk_token": "[PAD]"},
                               tokenizer__json=_fast_wordpiece(WORDS))
    assert _refusal(directory).startswith(
        f"{tmp_path / 'tokenizer_config.json'} and {tmp_path / 'tokenizer.json'} disagree on "
        "the unknown token (unk_token '[PAD]' vs model.unk_token '[UNK]')")
