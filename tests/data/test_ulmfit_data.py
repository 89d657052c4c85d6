"""ULMFiT's language-model data against fastai's (issue 54; docs/notes/data-references.md).

fastai's rules, vocabulary and stream loaders are transcribed in fastai_lm_reference.py;
its word splitter is spaCy's English tokenizer (not installed here): the SPACY_WORDS
below are what fastai v1's `Tokenizer` (spaCy 3.8's spacy.blank("en"), fastai's special
cases) made of each line, written down from a run where spaCy was installed.
"""

import collections

import numpy as np
import pytest

from tests.data import fastai_lm_reference as reference

# fastai's words, vocabulary and stream layout are Python and numpy: no Keras backend.
NEUTRAL = pytest.mark.backend_neutral("ULMFiT's words and stream: Python and numpy")

# (line, fastai's words for it with spaCy)
SPACY_WORDS = [
    ('Don\'t use os.path.join() here, e.g. when the U.S. file\'s name is "x".',
     ['xxbos', 'xxmaj', 'do', "n't", 'use', 'os.path.join', '(', ')', 'here', ',', 'e.g.', 'when', 'the', 'xxup', 'u.s.', 'file', "'s", 'name', 'is', '"', 'x', '"', '.']),
    ("The BEST movie I've seen!!!! It's a well-known fact: 3.14 > 3, isn't it?",
     ['xxbos', 'xxmaj', 'the', 'xxup', 'best', 'movie', 'i', "'ve", 'seen', 'xxrep', '4', '!', 'xxmaj', 'it', "'s", 'a', 'well', '-', 'known', 'fact', ':', '3.14', '>', '3', ',', 'is', "n't", 'it', '?']),
    ("See http://www.python.org/ or the docs (chapter 5); it can't fail &amp; won't.",
     ['xxbos', 'xxmaj', 'see', 'http', ':', '/', '/', 'www.python.org', '/', 'or', 'the', 'docs', '(', 'chapter', '5', ')', ';', 'it', 'ca', "n't", 'fail', '&', '&', 'wo', "n't", '.']),
    ('It was very very very very good &lt;br /&gt;<br />Really, Mr. Smith cannot say #1/2.',
     ['xxbos', 'xxmaj', 'it', 'was', 'xxwrep', '4', 'very', 'good', '<', 'br', '/', '>', '\n ', 'xxmaj', 'really', ',', 'xxmaj', 'mr.', 'xxmaj', 'smith', 'can', 'not', 'say', '#', '1', '/', '2', '.']),
    ('Returns (a, b): the pair [x] of `int`s -- or None... "quoted" \'single\' text.',
     ['xxbos', 'xxmaj', 'returns', '(', 'a', ',', 'b', '):', 'the', 'pair', '[', 'x', ']', 'of', '`', 'int`s', '--', 'or', 'xxmaj', 'none', '...', '"', 'quoted', '"', "'", 'single', "'", 'text', '.']),
    ("NASA's A.B.C. test at 10% costs $5,000; O'Neil said ID and id differ.",
     ['xxbos', 'xxup', 'nasa', "'s", 'xxup', 'a.b.c.', 'test', 'at', '10', '%', 'costs', '$', '5,000', ';', "o'neil", 'said', 'xxup', 'id', 'and', 'i', 'd', 'differ', '.']),
]


@NEUTRAL
def test_ulmfit_words_equal_fastai_with_spacy_on_hand_made_lines():
    from keras_ctx.data.ulmfit_text import ulmfit_words

    for line, want in SPACY_WORDS:
        assert ulmfit_words(line) == want, line


@NEUTRAL
def test_ulmfit_rules_equal_fastai_transform_rules():
    from keras_ctx.data.ulmfit_text import ulmfit_words

    # Only the rules: both split on single spaces (fastai's BaseTokenizer).
    lines = ["Hello WORLD!!!!! hello hello hello hello x", "a &amp; b &quot;c&quot; <unk> 3 @-@ 4",
             "path/to#tag  two  spaces \\n line", "MiXed CASE Ok OK ok ÉTÉ Été", "zzzzz ab ab ab ab ab."]
    for line in lines:
        want = reference.process_text(reference.join_text(line), reference.base_tokenizer)
        assert ulmfit_words(line, words=reference.base_tokenizer) == want, line
    assert ulmfit_words("Hello WORLD!!!!!", words=reference.base_tokenizer) == [
        "xxbos", "xxmaj", "hello", "xxup", "world", "xxrep", "5", "!"]


@NEUTRAL
def test_ulmfit_vocabulary_is_fastai_vocab_create():
    from keras_ctx.data.ulmfit_text import SPECIALS, ulmfit_vocabulary

    documents = [["xxbos", "b", "a", "c", "a", "xxmaj", "d"], ["xxbos", "c", "a", "b", "e"]]
    # counts: a 3, b 2, c 2, xxbos 2, d 1, e 1, xxmaj 1; min_freq 2 keeps a, b, c (ties:
    # first seen first), specials first; max_vocab cuts after them.
    assert ulmfit_vocabulary(documents, max_vocab=100) == list(SPECIALS) + ["a", "b", "c"]
    assert ulmfit_vocabulary(documents, max_vocab=100, min_freq=1)[9:] == ["a", "b", "c", "d", "e"]
    assert ulmfit_vocabulary(documents, max_vocab=11) == list(SPECIALS) + ["a", "b"]
    for max_vocab, min_freq in ((100, 2), (100, 1), (11, 2), (10, 1)):
        ours = ulmfit_vocabulary(documents, max_vocab, min_freq)
        theirs = reference.vocab_create(documents, max_vocab, min_freq)
        assert ours[len(SPECIALS):] == theirs[len(SPECIALS):]
        assert set(ours[:len(SPECIALS)]) == set(theirs[:len(SPECIALS)])
    assert SPECIALS[:2] == ("xxpad", "xxunk")  # keras_ctx's padding 0, unknown 1


@NEUTRAL
def test_ulmfit_command_streams_fastai_words():
    from keras_ctx.commands.ulmfit import _lm_dataset
    from keras_ctx.data.ulmfit_text import ulmfit_ids, ulmfit_vocabulary, ulmfit_words

    texts = ["The CAT sat.", "The dog sat!!!!"] * 40
    documents = [ulmfit_words(t) for t in texts]
    vocabulary = ulmfit_vocabulary(documents)
    index = {w: i for i, w in enumerate(vocabulary)}
    stream = _lm_dataset(documents, index, 5, 2)
    words = [vocabulary[i] for i in stream.streams[0][:12]]
    assert words == ["xxbos", "xxmaj", "the", "xxup", "cat", "sat", ".",
                     "xxbos", "xxmaj", "the", "dog", "sat"]
    assert ulmfit_ids(["never-seen"], index) == [1]


def _builtin_texts():
    from keras_ctx.data.corpora import builtin_documents

    return [" ".join(document) for document in builtin_documents()]


@NEUTRAL
@pytest.mark.slow
def test_ulmfit_stream_on_the_builtin_corpus_against_fastai():
    from keras_ctx.data.lm_stream import BpttStream
    from keras_ctx.data.ulmfit_text import (
        UNKNOWN_ID, spacy_like_words, ulmfit_vocabulary, ulmfit_words)

    texts = _builtin_texts()
    ours = [ulmfit_words(t) for t in texts]
    # fastai's rules and Vocab.create give the same stream on our words.
    theirs = [reference.process_text(reference.join_text(t), spacy_like_words) for t in texts]
    assert ours == theirs
    vocabulary = ulmfit_vocabulary(ours)
    assert vocabulary[9:] == reference.vocab_create(ours, 60000, 2)[9:]
    index = {w: i for i, w in enumerate(vocabulary)}
    ids = np.array([index.get(w, UNKNOWN_ID) for t in ours for w in t])
    counts = collections.Counter(w for t in ours for w in t)
    # fastai with spaCy on the same text (measured 2026-11-30, docs/notes/data-references.md):
    # 299,699 words, 6,185 entries, xxunk 1.68%, xxmaj 6.60%, xxup 1.30%.
    for got, want in ((len(ids), 299_699), (len(vocabulary), 6_185),
                      (np.mean(ids == UNKNOWN_ID), 0.0168), (counts["xxmaj"] / len(ids), 0.0660),
                      (counts["xxup"] / len(ids), 0.0130)):
        assert abs(got / want - 1) < 0.03, (got, want)
    assert counts["xxbos"] == len(texts)
    # Every target once per epoch; fastai v0.7's loader (n // bptt - 1 batches) drops the tail.
    stream = BpttStream(ids, 64, 70, seed=0)
    targets = sum(float(w.sum()) for _, _, w in stream.batches())
    assert targets == len(ids) - 1
    np.random.seed(0)
    loader = reference.LanguageModelLoaderV07(ids, 64, 70)
    theirs_targets = sum(x.shape[0] for x, _ in loader) * 64
    assert 0.93 < theirs_targets / (len(ids) - 1) < 0.96


@pytest.mark.slow
def test_ulmfit_command_saves_fastai_vocabulary(tmp_path):
    import json

    from keras_ctx.cli import main

    # "The"/"the" one word behind xxmaj; "Rare" and "once" seen once: xxunk (min_freq 2).
    lines = ["The cat sat on the mat.", "the DOG sat on the cat!"] * 30 + ["Rare once"]
    text = tmp_path / "t.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    train = tmp_path / "l.tsv"
    train.write_text("".join(f"{line}\t{'ab'[k % 2]}\n" for k, line in enumerate(lines[:16])),
                     encoding="utf-8")
    out = tmp_path / "out"
    assert main(["ulmfit", "--text", str(text), "--train", str(train), "--out", str(out),
                 "--directions", "forward",
                 "--batch-size", "4", "--sequence-length", "8", "--lm-epochs", "1",
                 "--set", "embedding_size=8", "--set", "hidden_size=8",
                 "--set", "num_layers=1"]) == 0
    saved = json.loads((out / "vocabulary.json").read_text())
    words = saved["words"]
    assert words[:9] == ["xxpad", "xxunk", "xxbos", "xxeos", "xxfld", "xxmaj", "xxup",
                         "xxrep", "xxwrep"]
    assert sorted(words[9:]) == sorted(["the", "cat", "sat", "on", "mat", ".", "dog", "!"])
    assert (saved["padding_id"], saved["unknown_id"]) == (0, 1)
