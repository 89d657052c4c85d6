"""A run's tokenizer/ as Hugging Face reads it, and runs written before it was (issue 52).

tokenizer/ holds the tokenizer's files in Hugging Face's names with the transformers
class in tokenizer_config.json, so `AutoTokenizer.from_pretrained(RUN/tokenizer)` gives
the ids our TextPreprocessor feeds the model (the reference: transformers' own
tokenizer on the same files, which downloads nothing). Its keras-hub config is
keras_tokenizer.json: tokenizer.json is the `tokenizers` library's name, and
`Tokenizer.from_file` could not read ours. Runs, saved tasks and prepared data written
with the old name still load and resume.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import keras_ctx
from keras_ctx import families, runs
from keras_ctx.data import fingerprints, tokenizers
from keras_ctx.preprocessing import TextPreprocessor

from tests.cli_helpers import TINY_SET, regression, run_cli, tiny_backbone, write_corpus

# Accents, apostrophes, PTB quotes, dashes, digits and CJK: where BERT's text
# normalisation, byte-level BPE and SentencePiece each have their own rules.
TEXTS = ["The café's naïve résumé, isn't it?", "Hello, WORLD! Ünïcödé — dashes... 3.14",
         "a river bank; money at the bank.", "中文 and x\u00a0y", "He said ``hi'' -- 'ok'."]
CORPUS = TEXTS * 10 + ["the quick brown fox jumps over the lazy dog near the river bank ."] * 10


def _transformers():
    return pytest.importorskip("transformers", reason="the test extra has it")


def _framed(tokenizer, family, text, length=48):
    """The ids TextPreprocessor gives the model for `text` (padding dropped)."""
    inputs = TextPreprocessor(tokenizer, length, family)(tf.constant([text]))
    return np.asarray(inputs["token_ids"])[0][np.asarray(inputs["padding_mask"])[0] == 1].tolist()


def _assert_read_by_transformers(directory, tokenizer, family):
    """AutoTokenizer on `directory` gives our pieces and, with special tokens, our framing."""
    read = _transformers().AutoTokenizer.from_pretrained(str(directory))
    for text in TEXTS:
        pieces = np.asarray(tokenizer(tf.constant(text))).tolist()
        assert read(text, add_special_tokens=False)["input_ids"] == pieces, text
        assert read(text)["input_ids"] == _framed(tokenizer, family, text), text


# Every kind of tokenizer a family trains that a transformers class reads as ours does:
# WordPiece (BertTokenizer), fairseq's and GPT-2's byte-level BPE, ALBERT's SentencePiece.
@pytest.mark.parametrize("family", ["bert", "roberta", "gpt2", "albert"])
def test_a_saved_tokenizer_is_read_by_transformers_with_our_ids(tmp_path, family):
    tokenizer = families.get(family).train_tokenizer(CORPUS, 200)
    tokenizers.save_tokenizer(tokenizer, str(tmp_path))
    if family == "albert":  # the `tokenizers` library's file, never the Keras config
        assert _tokenizers_library_reads(tmp_path / "tokenizer.json")
    else:
        assert not (tmp_path / "tokenizer.json").exists()
    _assert_read_by_transformers(tmp_path, tokenizer, family)
    again = tokenizers.load_tokenizer(str(tmp_path))
    for text in TEXTS:
        assert (np.asarray(again(tf.constant(text))).tolist()
                == np.asarray(tokenizer(tf.constant(text))).tolist())


def _tokenizers_library_reads(path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path)).get_vocab_size() > 0


# ALBERT's user-defined symbols ( ) " - . – £ € (google-research/albert README @b772393),
# with accents, PTB quotes, runs of spaces, a year before a comma and Hangul.
SYMBOL_LINES = ["a (b) c.d", '\u00a35 (approx.) - "x" \u20ac', "1990, the end.",
                "Pages 10\u201320 (see ``notes'') cost \u00a312.50, not \u20ac13.75.",
                "  Na\u00efve   r\u00e9sum\u00e9s -- e-mail (caf\u00e9)... \"ok\"  ",
                "He said ``hi'' - (x).(y) \u2013 '\u00a3\u20ac' -2.5.",
                "\ud55c\uad6d\uc5b4 (\ubb38\uc7a5)."]  # Hangul: NFKD's jamo composed again
SYMBOL_CORPUS = SYMBOL_LINES * 20 + [
    "The price (approx.) was \u00a35 - or \u20ac6 - said \"Smith\" in 1990.",
    "A well-known e-mail (sent at 10.30) read: \"no\" - then \"yes\".",
    "The caf\u00e9's na\u00efve r\u00e9sum\u00e9 (see p. 12) cost \u00a34.50."] * 30
ALBERT_SYMBOLS = ("(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac")


def _released_albert_ids(tokenizer, line):
    """sentencepiece's own ids after google-research/albert's preprocess_text and
    encode_pieces (transcribed), `` and '' read as " first (albert_text.QUOTES)."""
    import sentencepiece as spm

    from tests.data import albert_tokenization_reference as released

    model = spm.SentencePieceProcessor(model_proto=tokenizer.proto)
    return released.encode_ids(model, line.replace("``", '"').replace("''", '"'))


def _assert_albert_ids_everywhere(directory, tokenizer, lines=SYMBOL_LINES):
    """AutoTokenizer on `directory`, keras_ctx's tokenizer and sentencepiece give one id list."""
    read = _transformers().AutoTokenizer.from_pretrained(str(directory))
    for line in lines:
        expected = _released_albert_ids(tokenizer, line)
        assert np.asarray(tokenizer(tf.constant(line))).tolist() == expected, line
        assert read(line, add_special_tokens=False)["input_ids"] == expected, line
        assert read(line)["input_ids"] == _framed(tokenizer, "albert", line), line
    pair = read(lines[0], lines[1])["input_ids"]
    assert pair == ([2] + _released_albert_ids(tokenizer, lines[0]) + [3]
                    + _released_albert_ids(tokenizer, lines[1]) + [3])  # [CLS] A [SEP] B [SEP]
    return read


def test_albert_symbols_are_the_familys_and_transformers_reads_them_with_sentencepieces_ids(
        tmp_path):
    tokenizer = families.get("albert").train_tokenizer(SYMBOL_CORPUS, 150)
    pieces = tokenizers.vocabulary(tokenizer)
    # The released symbols, pieces of their own, inside no other piece.
    assert all(symbol in pieces for symbol in ALBERT_SYMBOLS)
    assert [p for p in pieces if p not in ALBERT_SYMBOLS and set(p) & set(ALBERT_SYMBOLS)] == []
    tokenizers.save_tokenizer(tokenizer, str(tmp_path))
    read = _assert_albert_ids_everywhere(tmp_path, tokenizer)
    pieces = read.convert_ids_to_tokens(read("a (b) c.d")["input_ids"])
    at = pieces.index("(")  # SentencePiece's "▁" "(" "b", where AlbertTokenizer read "(" "▁b"
    assert pieces[at - 1:at + 3] == ["\u2581", "(", "b", ")"], pieces
    assert read.mask_token_id == 4 and read.pad_token_id == 0
    # keras_ctx reads the directory back as it was (spiece.model and the text options).
    again = tokenizers.load_tokenizer(str(tmp_path))
    assert [np.asarray(again(tf.constant(line))).tolist() for line in SYMBOL_LINES] == [
        _released_albert_ids(tokenizer, line) for line in SYMBOL_LINES]


def test_an_exported_albert_checkpoint_reads_its_symbols_as_sentencepiece_does(tmp_path):
    """to_huggingface: config.json says "albert", tokenizer_config.json the class that
    loads tokenizer.json as it is; from_huggingface reads the same ids back."""
    from keras_ctx.convert import from_huggingface, to_huggingface
    from keras_ctx.models import AlbertBackbone
    from keras_ctx.models.albert.family import (ALBERT_CHARACTER_COVERAGE,
                                               ALBERT_USER_DEFINED_SYMBOLS)

    tokenizer = tokenizers.train_albert_sentencepiece(
        SYMBOL_CORPUS, 150, user_defined_symbols=ALBERT_USER_DEFINED_SYMBOLS,
        character_coverage=ALBERT_CHARACTER_COVERAGE)
    backbone = AlbertBackbone(vocabulary_size=int(tokenizer.vocabulary_size()), num_layers=1,
                              num_heads=2, hidden_size=8, intermediate_size=16,
                              embedding_size=4)
    backbone.tokenizer = tokenizer
    to_huggingface(backbone, tmp_path / "hf")
    _assert_albert_ids_everywhere(tmp_path / "hf", tokenizer)
    back = from_huggingface(str(tmp_path / "hf")).tokenizer
    assert [np.asarray(back(tf.constant(line))).tolist() for line in SYMBOL_LINES] == [
        _released_albert_ids(tokenizer, line) for line in SYMBOL_LINES]


def test_an_albert_run_trained_without_symbols_keeps_its_ids_and_saves_a_tokenizer_json(
        tmp_path):
    """A run saved before the family took the released symbols: spiece.model, an
    AlbertTokenizer tokenizer_config.json, the Keras config; loaded, it reads text with its
    old pieces ("▁(" may be one), and saved again transformers reads it by tokenizer.json."""
    from keras_ctx.models.albert.family import ALBERT_CHARACTER_COVERAGE

    old = tokenizers.train_albert_sentencepiece(SYMBOL_CORPUS, 150,
                                                character_coverage=ALBERT_CHARACTER_COVERAGE)
    assert any(set(p) & set(ALBERT_SYMBOLS) and len(p) > 1
               for p in tokenizers.vocabulary(old))  # symbols inside longer pieces
    tokenizers.save_tokenizer(old, str(tmp_path / "run"))
    os.remove(tmp_path / "run" / "tokenizer.json")
    (tmp_path / "run" / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, "keep_accents": False, "remove_space": True,
         "tokenizer_class": "AlbertTokenizer"}))
    loaded = tokenizers.load_tokenizer(str(tmp_path / "run"))
    assert [np.asarray(loaded(tf.constant(line))).tolist() for line in SYMBOL_LINES] == [
        _released_albert_ids(old, line) for line in SYMBOL_LINES]
    tokenizers.save_tokenizer(loaded, str(tmp_path / "again"))
    _assert_albert_ids_everywhere(tmp_path / "again", old)


def _released_xlnet_ids(tokenizer, line):
    """sentencepiece's own ids as zihangdai/xlnet's data_utils.py @bbaa3a6 reads a line:
    prepro_utils.py's `preprocess_text(line, lower=False)` (ALBERT's, `` and '' read as ")
    and `encode_ids` (ALBERT's `encode_pieces`, transcribed)."""
    import sentencepiece as spm

    from tests.data import albert_tokenization_reference as released

    model = spm.SentencePieceProcessor(model_proto=tokenizer.proto)
    text = " ".join(line.split()).replace("``", '"').replace("''", '"')
    return released.encode_ids(model, text, lower=False)


def _preprocessed_xlnet_rows(tokenizer, texts, pairs=None, length=160):
    """[(ids, segment ids)] of TextPreprocessor(tokenizer, length, "xlnet"), real tokens."""
    inputs = TextPreprocessor(tokenizer, length, "xlnet")(
        tf.constant(texts), None if pairs is None else tf.constant(pairs))
    real = np.asarray(inputs["padding_mask"]) == 1
    return [(ids[keep].tolist(), segments[keep].tolist()) for ids, segments, keep in zip(
        np.asarray(inputs["token_ids"]), np.asarray(inputs["segment_ids"]), real)]


# XLNet's user-defined symbols <eop> . ( ) " - – £ € (zihangdai/xlnet README @bbaa3a6),
# cased, with accents, PTB quotes, "1990," and Hangul.
XLNET_LINES = SYMBOL_LINES + ["In 1990, <eop> Jos\u00e9 said ``Caf\u00e9''."]


def _assert_xlnet_read_by_transformers(directory, tokenizer):
    """AutoTokenizer on `directory`: the released pieces, keras_ctx's XLNet framing A [SEP]
    (B [SEP]) [CLS] with its segments, <cls> of segment 2, padding on the left."""
    read = _transformers().AutoTokenizer.from_pretrained(str(directory))
    cls, sep = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]"))
    for line, (ids, segments) in zip(XLNET_LINES,
                                     _preprocessed_xlnet_rows(tokenizer, XLNET_LINES)):
        expected = _released_xlnet_ids(tokenizer, line)
        assert np.asarray(tokenizer(tf.constant(line))).tolist() == expected, line
        assert read(line, add_special_tokens=False)["input_ids"] == expected, line
        assert ids == expected + [sep, cls], line
        got = read(line, return_token_type_ids=True)
        assert got["input_ids"] == ids, line
        # <cls> is segment 2 (classifier_utils.py's SEG_ID_CLS, XLNetTokenizer's), the rest
        # keras_ctx's.
        assert got["token_type_ids"] == segments[:-1] + [2], line
    pairs = _preprocessed_xlnet_rows(tokenizer, XLNET_LINES[:-1], XLNET_LINES[1:])
    for a, b, (ids, segments) in zip(XLNET_LINES, XLNET_LINES[1:], pairs):
        assert ids == (_released_xlnet_ids(tokenizer, a) + [sep]
                       + _released_xlnet_ids(tokenizer, b) + [sep, cls]), (a, b)
        got = read(a, b, return_token_type_ids=True)
        assert got["input_ids"] == ids and got["token_type_ids"] == segments[:-1] + [2], (a, b)
    # transformers pads XLNet on the left (keras_ctx's TextPreprocessor on the right).
    [(short, _)] = _preprocessed_xlnet_rows(tokenizer, ["a (b)"])
    batch = read(["a (b)", XLNET_LINES[3]], padding=True)
    width = len(batch["input_ids"][1])
    assert read.padding_side == "left" and width > len(short)
    assert batch["input_ids"][0] == [read.pad_token_id] * (width - len(short)) + short
    assert batch["attention_mask"][0] == [0] * (width - len(short)) + [1] * len(short)
    assert tokenizer.id_to_token(read.pad_token_id) == "<pad>"
    assert (read.cls_token, read.sep_token, read.mask_token) == ("[CLS]", "[SEP]", "<mask>")


def test_a_saved_xlnet_tokenizer_is_read_by_transformers_with_our_ids_and_framing(tmp_path):
    tokenizer = families.get("xlnet").train_tokenizer(SYMBOL_CORPUS, 150)
    tokenizers.save_tokenizer(tokenizer, str(tmp_path))
    assert _tokenizers_library_reads(tmp_path / "tokenizer.json")
    _assert_xlnet_read_by_transformers(tmp_path, tokenizer)
    again = tokenizers.load_tokenizer(str(tmp_path))  # keras_ctx reads spiece.model back
    assert [np.asarray(again(tf.constant(line))).tolist() for line in XLNET_LINES] == [
        _released_xlnet_ids(tokenizer, line) for line in XLNET_LINES]


def test_an_exported_xlnet_checkpoint_is_read_by_transformers_with_our_ids_and_framing(
        tmp_path):
    """to_huggingface: config.json says "xlnet", tokenizer_config.json the class that loads
    tokenizer.json as it is; from_huggingface reads the same ids back."""
    from keras_ctx.convert import from_huggingface, to_huggingface
    from keras_ctx.models import XLNetBackbone

    tokenizer = families.get("xlnet").train_tokenizer(SYMBOL_CORPUS, 150)
    backbone = XLNetBackbone(vocabulary_size=int(tokenizer.vocabulary_size()), num_layers=1,
                             num_heads=2, hidden_size=8, intermediate_size=16)
    backbone.tokenizer = tokenizer
    to_huggingface(backbone, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "xlnet"
    _assert_xlnet_read_by_transformers(tmp_path / "hf", tokenizer)
    back = from_huggingface(str(tmp_path / "hf")).tokenizer
    assert [np.asarray(back(tf.constant(line))).tolist() for line in XLNET_LINES] == [
        _released_xlnet_ids(tokenizer, line) for line in XLNET_LINES]


def _old_layout(directory, tokenizer):
    """tokenizer/ as keras_ctx wrote it before keras_tokenizer.json: the Keras config as
    tokenizer.json, its assets beside it, nothing else (the earlier save_tokenizer)."""
    import keras

    for name in os.listdir(directory):
        if name != runs.CLAIMED_SAMPLE_FILE:
            path = os.path.join(directory, name)
            (os.remove if os.path.isfile(path) else shutil.rmtree)(path)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as handle:
        json.dump(keras.saving.serialize_keras_object(tokenizer), handle)
    tokenizer.save_assets(directory)


def _text_ids(tokenizer):
    return [np.asarray(tokenizer(tf.constant(text))).tolist() for text in TEXTS]


def test_a_run_written_with_the_old_tokenizer_json_still_loads(tmp_path):
    tokenizer = families.get("bert").train_tokenizer(CORPUS, 200)
    run = tmp_path / "run"
    runs.save_run(str(run), {"model": "bert-tiny", "family": "bert", "sequence_length": 16},
                  tiny_backbone(), tokenizer)
    assert sorted(os.listdir(run / "tokenizer")) == [
        "keras_assets", "keras_tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    _old_layout(str(run / "tokenizer"), tokenizer)
    # run.json records the hash of tokenizer/ as the old layout had it.
    info = json.loads((run / "run.json").read_text())
    info["tokenizer_sha256"] = fingerprints.directory(str(run / "tokenizer"))
    (run / "run.json").write_text(json.dumps(info))
    _, _, loaded = runs.load_run(str(run), need_tokenizer=True)
    assert _text_ids(loaded) == _text_ids(tokenizer)


def test_a_claimed_run_with_the_old_tokenizer_json_resumes_with_its_fingerprint(tmp_path):
    """pretrain resumes a claimed run with the tokenizer kept in it (runs.claimed_tokenizer),
    not saved again, and compares the hash of tokenizer/ with the one its settings record:
    a run claimed before the rename must pass that check, its tokenizer/ untouched."""
    tokenizer = families.get("bert").train_tokenizer(CORPUS, 200)
    out = tmp_path / "run"
    settings = {"model": "bert-tiny", "learning_rate": 0.1}

    def save_the_old_way():  # a new run claimed by the pretrain of before the rename
        runs.save_claimed_tokenizer(str(out), tokenizer, {"tokenizer_sample": {"sentences": 50}})
        assert (out / "tokenizer" / "keras_tokenizer.json").is_file()
        assert not (out / "tokenizer" / "tokenizer.json").exists()
        _old_layout(str(out / "tokenizer"), tokenizer)
        return fingerprints.directory(str(out / "tokenizer"))

    runs.claim(str(out), settings, data={}, save_tokenizer=save_the_old_way)
    recorded = runs.read_settings(str(out))[runs.FINGERPRINT_KEY]["tokenizer"]
    model, data = regression()
    keras_ctx.training.fit_resumable(model, data, steps=1, out_dir=str(out),
                                     checkpoint_every=1, verbose=0)

    claimed, info = runs.claimed_tokenizer(str(out))
    assert info == {"tokenizer_sample": {"sentences": 50}}
    assert _text_ids(claimed) == _text_ids(tokenizer)
    # What commands/pretrain.py's _claim does for a claimed tokenizer: hash, not save.
    runs.claim(str(out), settings, data={},
               save_tokenizer=lambda: runs.tokenizer_fingerprint(str(out), claimed, {}))
    assert runs.read_settings(str(out))[runs.FINGERPRINT_KEY] == {"tokenizer": recorded}
    assert fingerprints.directory(str(out / "tokenizer")) == recorded


def test_a_saved_text_task_tokenizer_is_read_by_transformers_and_an_old_one_loads(tmp_path):
    from keras_ctx.tasks import text
    from tests.tasks.text_fixtures import backbone, tokenizer

    classifier = text.TextClassifier(backbone("bert"), tokenizer("bert"), num_classes=2,
                                     sequence_length=16)
    classifier.save(str(tmp_path / "clf"))
    read = _transformers().AutoTokenizer.from_pretrained(str(tmp_path / "clf" / "tokenizer"))
    lines = ["the bank approved the loan .", "a fine film , i loved it ."]
    for line in lines:
        assert read(line)["input_ids"] == _framed(tokenizer("bert"), "bert", line)
    assert not (tmp_path / "clf" / "tokenizer" / "tokenizer.json").exists()
    # A task saved before the rename: tokenizer/ holds tokenizer.json and its assets.
    _old_layout(str(tmp_path / "clf" / "tokenizer"), tokenizer("bert"))
    loaded = text.TextClassifier.load(str(tmp_path / "clf")).tokenizer
    for line in lines:
        assert (np.asarray(loaded(tf.constant(line))).tolist()
                == np.asarray(tokenizer("bert")(tf.constant(line))).tolist())


@pytest.mark.slow
def test_a_pretrained_run_is_read_by_transformers_and_an_old_one_resumes(tmp_path, capsys):
    """The CLI end to end: a tiny BERT pretrain's tokenizer/ read by AutoTokenizer; the
    same run with tokenizer/ in the old layout resumes (same fingerprint) and finishes."""
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    with open(corpus, "a", encoding="utf-8") as handle:
        handle.write("\n".join(CORPUS) + "\n")
    out = tmp_path / "run"
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus), "--out",
                           str(out), *TINY_SET)
    assert code == 0, output
    _, _, tokenizer = runs.load_run(str(out), need_tokenizer=True)
    _assert_read_by_transformers(out / "tokenizer", tokenizer, "bert")

    _old_layout(str(out / "tokenizer"), tokenizer)
    old = fingerprints.directory(str(out / "tokenizer"))
    settings = json.loads((out / runs.SETTINGS_FILE).read_text())
    settings[runs.FINGERPRINT_KEY]["tokenizer"] = old  # as the old pretrain recorded it
    (out / runs.SETTINGS_FILE).write_text(json.dumps(settings))
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus), "--out",
                           str(out), *TINY_SET[:-4], "--steps", "4", "--checkpoint-every", "2")
    assert code == 0 and "Resuming from step 2" in output, output
    assert fingerprints.directory(str(out / "tokenizer")) == old
    info, _, resumed = runs.load_run(str(out), need_tokenizer=True)
    assert info["tokenizer_sha256"] == old and info["steps"] == 4
    assert _text_ids(resumed) == _text_ids(tokenizer)


def test_prepared_data_reads_its_tokenizer_record_under_the_old_name_only_without_the_new(
        tmp_path):
    from keras_ctx.data import prepared_files

    assert prepared_files.tokenizer_record_path(str(tmp_path)) == str(
        tmp_path / "tokenizer_record.json")  # what prepare writes
    (tmp_path / "tokenizer.json").write_text(json.dumps({"run_files": {"vocabulary": ["a"]}}))
    assert prepared_files.load_tokenizer(str(tmp_path)) == ["a"]  # prepared before the rename
    (tmp_path / "tokenizer_record.json").write_text(
        json.dumps({"run_files": {"vocabulary": ["b"]}}))
    assert prepared_files.load_tokenizer(str(tmp_path)) == ["b"]


@pytest.mark.slow
def test_prepared_data_names_its_tokenizer_record_honestly_and_reads_the_old_name(tmp_path):
    from keras_ctx.data import prepare

    corpus, data = tmp_path / "corpus.txt", tmp_path / "data"
    write_corpus(corpus, documents=10)

    def prepare_data():
        prepare.prepare("bert-tiny", str(corpus), str(data), sequence_length=16,
                        vocabulary_size=200, workers=1, duplicate=1, shard_bytes=4_000,
                        say=lambda *_: None)

    prepare_data()
    assert (data / "tokenizer_record.json").is_file() and not (data / "tokenizer.json").exists()
    tokenizer = prepare.load_tokenizer(str(data))
    _assert_read_by_transformers(data / "tokenizer", tokenizer, "bert")
    # Prepared before the rename: the same record under tokenizer.json.
    os.replace(data / "tokenizer_record.json", data / "tokenizer.json")
    before = {name: (data / name).read_bytes() for name in os.listdir(data)
              if (data / name).is_file()}
    prepare_data()  # resumed: the record read, the tokenizer not trained again
    assert {name: (data / name).read_bytes() for name in os.listdir(data)
            if (data / name).is_file()} == before
    prepare.load_manifest(str(data))
    assert _text_ids(prepare.load_tokenizer(str(data))) == _text_ids(tokenizer)
