"""CVT's minibatches against cvt_text's (issue 54).

tensorflow/models research/cvt_text makes its unlabelled minibatches in Python 2 and
TensorFlow 1 (corpus_processing/unlabeled_data.py, example.py, minibatching.py);
cvt_minibatching_reference.py transcribes them and runs on our rows here: the
sentences kept, the word each id stands for, the characters, the length bins, the
padding, and the positions each auxiliary view learns from.
"""

import collections
import random

import numpy as np
import pytest

from keras_ctx.models.cvt import view_weights
from keras_ctx.tasks.cvt_tagger import tagging_inputs
from tests.data import cvt_minibatching_reference as reference

LINES = ["The River Bank opened in 1999 .", "the river bank -LRB- 2004 -RRB- was n't open",
         "They don 't know what 3\\/4 of 12,000 is .", "A café’s naïve résumé costs £5 ."]


def _reference_words(lines, words):
    """The word each of cvt_text's ids stands for (None: unknown), line by line, with a
    vocabulary of `words`."""
    vocabulary = reference.word_vocabulary(words)
    spelled = {i: w for w, i in vocabulary.items()}
    characters = {i: c for c, i in reference.get_char_vocab().items()}
    found = []
    for line in lines:
        example = reference.Example(line.split(), vocabulary, reference.get_char_vocab())
        found.append(([None if i == reference.UNK else spelled[i] for i in example.words[1:-1]],
                      ["".join(characters[c] for c in w) for w in example.chars[1:-1]]))
    return found


def test_word_ids_are_cvt_text_s_lower_cased_digit_folded_words():
    words = ["the", "river", "bank", "opened", "in", "0000", ".", "(", ")", "was", "n't",
             "open", "do", "know", "0/0", "of"]
    x = tagging_inputs([line.split() for line in LINES], words, 12)
    ours = [[None if i == 1 else words[i - 2] for i, real in zip(row, mask) if real]
            for row, mask in zip(x["token_ids"], x["padding_mask"])]
    # Before: ids of the words as written ("The", "1999" and "n't" after "do" unknown).
    assert ours == [found for found, _ in _reference_words(LINES, words)]


def test_characters_keep_case_and_cvt_text_s_bracket_tokens():
    from keras_ctx.data.characters import tokens_to_character_ids

    x = tagging_inputs([line.split() for line in LINES], ["the"], 12)
    compared = 0
    for row, (_, spellings) in enumerate(_reference_words(LINES, ["the"])):
        # cvt_text's characters outside its 99 are <unk>; ours are UTF-8 bytes: compare
        # the lines it can spell.
        if "<unk>" in "".join(spellings):
            continue
        expected = np.asarray(tokens_to_character_ids(np.array(spellings)))
        np.testing.assert_array_equal(x["character_ids"][row, :len(spellings)], expected)
        compared += 1
    assert compared == 3


def test_unlabelled_sentences_and_length_bins_are_cvt_text_s():
    from keras_ctx.data.cvt import length_buckets, unlabelled_sentences

    rng = np.random.default_rng(0)
    lines = [" ".join(["w"] * int(n)) for n in rng.integers(1, 130, size=400)]
    config = reference.Config()
    kept = list(reference.get_unlabeled_sentences(config, lines))
    assert unlabelled_sentences([line.split() for line in lines]) == kept
    lengths = [len(words) for words in kept]
    bins = length_buckets(lengths, batch_size=8)
    assert len(bins) == len(config.buckets)
    for members, bucket in zip(bins, config.buckets):
        assert {reference.get_bucket(config, lengths[i] + 2) for i in members} == {bucket}
    assert sorted(np.concatenate(bins)) == list(range(len(kept)))


def test_a_bin_smaller_than_a_batch_joins_the_next_longer():
    from keras_ctx.data.cvt import length_buckets

    lengths = [3] * 5 + [20] * 10 + [60] * 2
    # The 5 short ones join the 10 middle ones; the 2 long ones, the last bin, join them too.
    assert [sorted(b) for b in length_buckets(lengths, batch_size=8)] == [list(range(17))]
    assert [len(b) for b in length_buckets(lengths, batch_size=2)] == [5, 10, 2]


def test_view_weights_are_cvt_text_s_rolled_masks():
    lengths = np.array([1, 2, 5, 7])
    width = 7
    real = (np.arange(width) < lengths[:, None]).astype("int32")
    ours = {k: np.asarray(v) for k, v in view_weights(real).items()}
    # cvt_text's rows: <start> w1 .. wn <end>, padded; the mask 0 on <start>/<end>.
    mask = reference.build_array([[0] + [1] * n + [0] + [0] * (width - n) for n in lengths])
    for view, direction in (("full", 0), ("forward", 0), ("backward", 0), ("future", 1),
                            ("past", -1)):
        logit_weights = reference.loss_weights(mask, direction)
        # The logit at t learns the label at t + direction: weigh the labels.
        label_weights = np.roll(logit_weights, direction, axis=1)
        np.testing.assert_array_equal(ours[view], label_weights[:, 1:width + 1], err_msg=view)


def _tagger_batches(tmp_path, monkeypatch, unlabelled_lines, tagged_lines):
    """The unlabelled batches `train_cvt_tagger` trains on (fit replaced by a recorder)."""
    from keras_ctx.pretraining.cvt import CrossViewTrainer
    from keras_ctx.tasks.cvt_tagger import train_cvt_tagger

    (tmp_path / "u.txt").write_text("\n".join(unlabelled_lines) + "\n", encoding="utf-8")
    (tmp_path / "t.tsv").write_text("\n\n".join(
        "\n".join(f"{w}\tX" for w in line.split()) for line in tagged_lines) + "\n",
        encoding="utf-8")
    seen = {}
    monkeypatch.setattr(CrossViewTrainer, "fit", lambda self, data, **_: seen.update(data=data))
    small = {"embedding_size": 4, "first_layer_size": 4, "second_layer_size": 4,
             "projection_size": 4, "filters": [[2, 2]], "character_embedding_size": 2}
    train_cvt_tagger(str(tmp_path / "t.tsv"), str(tmp_path / "u.txt"), steps=1, batch_size=4,
                     encoder_config=small)
    return [element["unlabelled"]["tags"] for element in seen["data"].take(12).as_numpy_iterator()]


def test_the_tagger_trains_on_length_bins_without_sentences_of_100_words(tmp_path,
                                                                          monkeypatch, capsys):
    short = [" ".join(f"s{i}" for i in range(n)) for n in (3, 5, 7, 9)] * 2
    middle = [" ".join(f"m{i}" for i in range(n)) for n in (14, 20, 30, 35)]
    unlabelled = short + middle + [" ".join(["long"] * 120)]
    batches = _tagger_batches(tmp_path, monkeypatch, unlabelled, short[:4])
    widths = collections.Counter(batch["token_ids"].shape[1] for batch in batches)
    # Before: every batch padded to 120 words, the 120-word sentence among them. Each row
    # also holds <start> and <end> (cvt_text's).
    assert set(widths) == {9 + 2, 35 + 2}
    assert "Skipped 1 of 13 unlabelled sentences of 100 words or more" in capsys.readouterr().out
    assert all(batch["padding_mask"].sum(axis=1).max() <= batch["token_ids"].shape[1]
               for batch in batches)


def test_a_tagger_saved_before_the_rule_looks_its_raw_words_up(tmp_path):
    import json

    from keras_ctx.models.cvt import CvtEncoder
    from keras_ctx.pretraining.cvt import CrossViewTrainer
    from keras_ctx.tasks.cvt_tagger import load_cvt_tagger, save_cvt_tagger

    encoder = CvtEncoder(5, embedding_size=4, first_layer_size=4, second_layer_size=4,
                         projection_size=4, filters=[[2, 2]], character_embedding_size=2)
    save_cvt_tagger(CrossViewTrainer(encoder, 2, hidden_size=4), ["the", "Bank", "0"],
                    ["A", "B"], str(tmp_path))
    _, words, _ = load_cvt_tagger(str(tmp_path))
    assert words.normalized and words.ids(["The", "Bank", "7", "don", "'t"]) == [2, 1, 4, 1, 1]
    record = json.loads((tmp_path / "vocabulary.json").read_text())
    del record["normalized_words"]  # as keras-ctx cvt wrote it before
    (tmp_path / "vocabulary.json").write_text(json.dumps(record))
    _, words, _ = load_cvt_tagger(str(tmp_path))
    assert not words.normalized and words.ids(["The", "Bank", "7", "the"]) == [1, 3, 1, 2]


# ---------------------------------------------------------------- the built-in corpus

def cvt_statistics(lines, seed=0, batch_size=64):
    """Ours and cvt_text's minibatches of `lines` (one pass each), side by side."""
    from keras_ctx.data.cvt import (
        WordVocabulary,
        bucketed_batches,
        length_buckets,
        unlabelled_sentences,
    )

    kept = unlabelled_sentences([line.split() for line in lines])
    vocabulary = WordVocabulary.of_sentences(kept, 20000, sentence_boundaries=True)
    lengths = [len(words) for words in kept]
    data = bucketed_batches(kept, lengths, lambda rows, width: tagging_inputs(
        rows, vocabulary, width), batch_size, seed)
    passes = sum(len(b) // batch_size for b in length_buckets(lengths, batch_size))
    ours = collections.Counter()
    for x in data.take(passes).as_numpy_iterator():
        real = x["padding_mask"] == 1
        # Each row's first and last real positions are <start> and <end>.
        ours.update(batches=1, rows=len(real), real=real.sum(), cells=real.size,
                    words=real.sum() - 2 * len(real),
                    unknown=(real & (x["token_ids"] == 1)).sum())
    # cvt_text reads the corpus endlessly in chunks of 10,000: three passes.
    np.random.seed(seed)
    random.seed(seed)
    theirs = collections.Counter()
    for mb in reference.unlabeled_minibatches(reference.Config(), lines * 3,
                                              reference.word_vocabulary(vocabulary)):
        theirs.update(batches=1, rows=mb.size, real=mb.mask.sum(), cells=mb.mask.size,
                      padding=(mb.words == reference.PAD).sum(),
                      unknown=((mb.words == reference.UNK) & (mb.mask == 1)).sum())
    kept_theirs = list(reference.get_unlabeled_sentences(reference.Config(), lines))
    return {"kept": (len(kept), len(kept_theirs)),
            "rows per batch": (ours["rows"] / ours["batches"], theirs["rows"] / theirs["batches"]),
            "not a word": (1 - ours["words"] / ours["cells"], 1 - theirs["real"] / theirs["cells"]),
            "padding": (1 - ours["real"] / ours["cells"], theirs["padding"] / theirs["cells"]),
            "unknown": (ours["unknown"] / ours["words"], theirs["unknown"] / theirs["real"])}


@pytest.mark.slow  # the built-in corpus through both pipelines (~60 s on 2 cores)
def test_builtin_corpus_minibatches_match_cvt_text():
    from keras_ctx.data import corpora

    lines = [line for document in corpora.builtin_documents() for line in document]
    found = cvt_statistics(lines)
    print(found)
    assert found["kept"] == (16862, 16862)
    assert found["rows per batch"][0] == 64
    assert found["rows per batch"][1] == pytest.approx(64, abs=1)
    # Positions that hold no word: padding and <start>/<end>, both sides (ours 39.4% padding
    # + 8.5% boundaries; cvt_text's 37.3% + 8.7%: its batches are its own longest).
    assert found["not a word"][0] == pytest.approx(0.479, abs=0.005)
    assert found["not a word"][0] == pytest.approx(found["not a word"][1], abs=0.025)
    assert found["unknown"][0] == pytest.approx(found["unknown"][1], rel=0.03)
