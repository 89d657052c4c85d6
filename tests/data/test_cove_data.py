"""CoVe's translation pairs against the released OpenNMT-py's preprocess.py (issue 54).

The reference is salesforce/cove @9a0d90b's OpenNMT-py (= OpenNMT/OpenNMT-py @2dca0c2e),
transcribed in tests/data/opennmt_preprocess_reference.py: the same pairs kept (each side at
most -seq_length words), the same vocabularies (the most frequent words of each side), the
same rows (`<s> y` read, `y </s>` predicted). docs/notes/data-references.md, "CoVe:
translation pairs", holds the numbers the slow test pins.
"""

import collections

import numpy as np
import pytest

from keras_ctx import registry
from keras_ctx.data import cove_recipe as recipe
from tests.data import opennmt_preprocess_reference as onmt

LENGTH = 4  # -seq_length of the hand-made lines
# Words of one letter: Moses' tokenizer leaves them as they are (lower cased). The second
# pair's target has LENGTH words (preprocess.py keeps it; keras_ctx dropped it before,
# counting <s> in the side's length); the third's source and the fourth's target are over.
HAND_PAIRS = ["a b c\tx y", "A a b\tx x y z", "a b c d e\tx", "b c\tz z x x w", "d\tw v",
              "c c a\ty w", "b\tv v x"]


def _cove_sides(inputs, labels, source_words, target_words):
    """Counter of (source words, target words) of a batch's rows, read back by the words."""
    rows = []
    for source, decoder, label in zip(inputs["encoder_token_ids"],
                                      inputs["decoder_token_ids"], labels):
        target = label[:list(label).index(recipe.TARGET_SPECIALS.index("</s>"))]
        # the decoder reads <s> y where it predicts y </s>
        np.testing.assert_array_equal(decoder[1:len(target) + 1], target)
        assert decoder[0] == recipe.TARGET_SPECIALS.index("<s>")
        rows.append((tuple(source_words[i] for i in source if i),
                     tuple(target_words[i] for i in target)))
    return collections.Counter(rows)


def _onmt_sides(src, tgt, src_dict, tgt_dict):
    words = src_dict.words(), tgt_dict.words()
    return collections.Counter((tuple(words[0][i] for i in s), tuple(words[1][i] for i in t[1:-1]))
                               for s, t in zip(src, tgt))


def _cove_epoch(pairs, length, vocabulary_size):
    """(tokenizer, target words, one batch holding every kept pair) of keras_ctx's recipe."""
    run = registry.Run("cove-base", 64, length, vocabulary_size,
                       inputs=(("parallel", (("en", "de", str(pairs)),)),))
    tokenizer = recipe.train_word_tokenizer(list(recipe.tokenizer_text(run)), vocabulary_size)
    words = recipe.target_vocabulary(run, tokenizer)
    kept = recipe._kept_pairs(run, None, None, "en", "de")[0]
    whole = registry.Run("cove-base", kept, length, vocabulary_size, inputs=run.inputs)
    # Every kept pair's row, in the file's order, padded to the longest.
    batch = next(recipe.translation_rows(tokenizer, whole).padded_batch(kept).as_numpy_iterator())
    return tokenizer, words, batch


def _onmt_lines(pairs):
    """Each side's lines as tokenizer.perl -no-escape + lowercase.perl give them to
    preprocess.py (the recipe's Moses words, checked against sacremoses elsewhere)."""
    from keras_ctx.data import cove_words

    sides = list(zip(*(line.split("\t") for line in pairs)))
    return [[" ".join(words) for words in cove_words.words_of(side, language, workers=1)]
            for side, language in zip(sides, ("en", "de"))]


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_the_pairs_vocabularies_and_rows_are_preprocess_pys(tmp_path):
    pytest.importorskip("sacremoses")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(line + "\n" for line in HAND_PAIRS), encoding="utf-8")
    size = 6  # 4 source words, 2 target words: both vocabularies cut
    tokenizer, words, (inputs, labels) = _cove_epoch(pairs, LENGTH, size)
    src_lines, tgt_lines = _onmt_lines(HAND_PAIRS)
    # -src_vocab_size / -tgt_vocab_size count words; keras_ctx's size counts its specials.
    src_dict = onmt.make_vocabulary(src_lines, size - len(recipe.SOURCE_SPECIALS))
    tgt_dict = onmt.make_vocabulary(tgt_lines, size - len(recipe.TARGET_SPECIALS))
    assert tokenizer.get_vocabulary()[2:] == src_dict.words()[4:] == ["a", "b", "c", "d"]
    assert words[4:] == tgt_dict.words()[4:] == ["x", "y"]
    src, tgt, ignored = onmt.make_data(src_lines, tgt_lines, src_dict, tgt_dict, LENGTH)
    assert ignored == 2 and len(src) == len(labels) == 5  # by hand: the 3rd and 4th pairs
    assert (_cove_sides(inputs, labels, ["", "<unk>", *tokenizer.get_vocabulary()[2:]], words)
            == _onmt_sides(src, tgt, src_dict, tgt_dict))
    # A side of LENGTH words: the batches' encoder rows LENGTH long, the decoder's one longer.
    run = registry.Run("cove-base", 5, LENGTH, size, inputs=(("parallel", (("en", "de", str(pairs)),)),))
    inputs, labels = next(recipe.cove_dataset(None, tokenizer, run).as_numpy_iterator())
    assert inputs["encoder_token_ids"].shape == (5, LENGTH)
    assert inputs["decoder_token_ids"].shape == labels.shape == (5, LENGTH + 1)


@pytest.mark.backend_neutral("the recipe's Moses words, no model")
def test_capital_sigma_lower_cases_as_lowercase_perl():
    sacremoses = pytest.importorskip("sacremoses")
    line = "ΟΔΟΣ Σ ΑΣΣΟΣ, Σοφία."
    moses = " ".join(sacremoses.MosesTokenizer(lang="en").tokenize(line, escape=False))
    # Perl's lc (Moses' lowercase.perl): "σ" everywhere; Python's str.lower: "ς" at the end
    # of a word, which keras_ctx gave before (another word than the released vocabulary's).
    assert onmt.lowercase_perl(moses).split() == ["οδοσ", "σ", "ασσοσ", ",", "σοφία", "."]
    assert recipe.word_counts([line], "en") == collections.Counter(
        onmt.lowercase_perl(moses).split())


def _builtin_pairs(path):
    """Consecutive sentences of each built-in corpus document as stand-in translations."""
    from keras_ctx.data import corpora

    pairs = [f"{a}\t{b}".replace("\n", " ") for document in corpora.builtin_documents()
             for a, b in zip(document, document[1:])
             if "\t" not in a + b and a.strip() and b.strip()]
    path.write_text("".join(line + "\n" for line in pairs), encoding="utf-8")
    return pairs


def _cove_statistics(sources, labels, source_unk, target_unk):
    real_source, real_labels = sources[sources != 0], labels[labels != 0]
    return {"source words": real_source.size / len(sources),
            "targets": real_labels.size / len(labels),
            "<unk> share, source": np.mean(real_source == source_unk),
            "<unk> share, targets": np.mean(real_labels == target_unk)}


def _padding_shares(batches, longest=False):
    """(source, targets) shares of the batches' positions that hold padding (id 0); with
    `longest`, of the positions each batch would hold padded to its longest row."""
    shares = []
    for arrays in ([b[0] for b in batches], [b[-1] for b in batches]):
        words = [np.count_nonzero(a, 1) for a in arrays]
        positions = [len(a) * w.max() if longest else a.size for a, w in zip(arrays, words)]
        shares.append(1 - sum(w.sum() for w in words) / sum(positions))
    return tuple(shares)


def _default_cove_run(pairs):
    """keras_ctx's default run on `pairs`: batches of 64 at length 75, V 8,000."""
    return registry.Run("cove-base", 64, 75, 8000, inputs=(("parallel", (("en", "de", str(pairs)),)),))


def _cove_batches(tokenizer, pairs, count):
    """keras_ctx's first `count` batches: (inputs, labels)."""
    return list(recipe.cove_dataset(None, tokenizer, _default_cove_run(pairs)).take(count)
                .as_numpy_iterator())


@pytest.mark.slow  # ~50 s: the built-in corpus through Moses twice, then three epochs
def test_the_built_in_pairs_match_preprocess_py(tmp_path):
    pytest.importorskip("sacremoses")
    pairs = tmp_path / "pairs.tsv"
    lines = _builtin_pairs(pairs)
    assert len(lines) == 9569
    src_lines, tgt_lines = _onmt_lines(lines)
    found = {}
    for length, size in ((75, 8000), (50, 8000), (75, 4000)):
        src_dict = onmt.make_vocabulary(src_lines, size - len(recipe.SOURCE_SPECIALS))
        tgt_dict = onmt.make_vocabulary(tgt_lines, size - len(recipe.TARGET_SPECIALS))
        src, tgt, _ = onmt.make_data(src_lines, tgt_lines, src_dict, tgt_dict, length)
        tokenizer, words, (inputs, labels) = _cove_epoch(pairs, length, size)
        assert len(labels) == len(src)  # the same pairs kept
        released = onmt.batches(src, tgt, len(src))[0]
        found[length, size] = (
            _cove_statistics(released[0], released[2], onmt.UNK, onmt.UNK),
            _cove_statistics(inputs["encoder_token_ids"], labels, 1, 3))
        if size == 4000:  # the cut above the words seen once: the same words, in order
            assert tokenizer.get_vocabulary()[2:] == src_dict.words()[4:]
            assert words[4:] == tgt_dict.words()[4:]
            assert (_cove_sides(inputs, labels, ["", "<unk>", *tokenizer.get_vocabulary()[2:]],
                                words) == _onmt_sides(src, tgt, src_dict, tgt_dict))
        found[length, size] += (len(src),)
        if (length, size) == (75, 8000):  # one epoch's batches of 64
            ours = _cove_batches(tokenizer, pairs, len(src) // 64)
            found["batches"] = (ours, tokenizer)
            released = [(source, labels) for source, _, labels in onmt.batches(src, tgt, 64)]
            ours = [(inputs["encoder_token_ids"], labels) for inputs, labels in ours]
            found["padding"] = (_padding_shares(released), _padding_shares(ours),
                                _padding_shares(ours, longest=True))
    # The released batches sort the file by source length; keras_ctx's a pool of 100
    # batches at a time, each batch padded to the narrowest of its widths (multiples of 8)
    # holding its longest source and targets: 0.371 / 0.275 when a batch held pairs of one
    # width by their longer side, 0.781 / 0.740 when every row was 75 wide.
    released, ours, longest = found.pop("padding")
    np.testing.assert_allclose(released, (0.0160, 0.6544), atol=2e-4)
    np.testing.assert_allclose(ours, (0.1925, 0.6719), rtol=0.03)
    np.testing.assert_allclose(longest, (0.0202, 0.6522), rtol=0.03)  # without the widths
    batches, tokenizer = found.pop("batches")
    shapes = collections.Counter((inputs["encoder_token_ids"].shape, labels.shape)
                                 for inputs, labels in batches)
    assert {rows for (rows, _), _ in shapes} == {64} and len(batches) == 147
    assert 28 <= len(shapes) <= 34  # 31 here; at most 10 source widths x 10 target widths
    # Two pools: the reference's pooled batches of the same stream, row for row.
    stream = _stream_pairs(tokenizer, _default_cove_run(pairs), 200 * 64)
    assert _assert_pools(_cove_batches(tokenizer, pairs, 200), onmt.pooled_batches(*stream, 64),
                         recipe.bucket_widths(75))
    assert [found[key][2] for key in found] == [9471, 9166, 9471]  # 9469, 9142 before
    # source words and targets (y </s>) per pair, <unk> shares of each (V 8000: the
    # released vocabularies keep 4 words fewer, see the note)
    pinned = {(75, 8000): (16.457, 19.772, 0.001906, 0.005810),
              (50, 8000): (15.837, 18.953, 0.002030, 0.005680),
              (75, 4000): (16.457, 19.772, 0.03127, 0.03203)}
    for key, numbers in pinned.items():
        released, ours, _ = found[key]
        np.testing.assert_allclose(list(released.values()), numbers, rtol=5e-3, err_msg=key)
        np.testing.assert_allclose(list(ours.values()), list(released.values()), rtol=0.03,
                                   err_msg=key)


def _stream_pairs(tokenizer, run, count):
    """The first `count` rows `cove_dataset` batches (its kept pairs shuffled again each
    pass), as the reference's pairs: (source ids, `<s> y </s>` ids)."""
    bos = recipe.TARGET_SPECIALS.index("<s>")
    rows = recipe.translation_rows(tokenizer, run).shuffle(4096, seed=run.seed).repeat()
    return tuple(zip(*[(inputs["encoder_token_ids"], np.concatenate([[bos], labels]))
                       for inputs, labels in rows.take(count).as_numpy_iterator()]))


def _pool_position(batch, pool, widths):
    """Which of the reference's `pool` batches `batch` holds, row for row: its source and
    targets those rows, padded to the narrowest of `widths` holding the longest (the
    decoder's one more); the decoder reads `<s> y` (OpenNMT-py's `<s> y </s>` of a shorter
    row, the </s> being read as padding)."""
    inputs, labels = batch
    eos = recipe.TARGET_SPECIALS.index("</s>")
    found = []
    for position, (source, decoder, targets) in enumerate(pool):
        width = min(w for w in widths if w >= source.shape[1])
        target_width = min(w for w in widths if w >= targets.shape[1] - 1) + 1
        expected = (np.pad(source, [(0, 0), (0, width - source.shape[1])]),
                    np.pad(np.where(decoder == eos, 0, decoder),
                           [(0, 0), (0, target_width - decoder.shape[1])]),
                    np.pad(targets, [(0, 0), (0, target_width - targets.shape[1])]))
        ours = (inputs["encoder_token_ids"], inputs["decoder_token_ids"], labels)
        if all(a.shape == b.shape and (a == b).all() for a, b in zip(ours, expected)):
            np.testing.assert_array_equal(inputs["encoder_padding_mask"], expected[0] != 0)
            np.testing.assert_array_equal(inputs["decoder_padding_mask"], expected[1] != 0)
            found.append(position)
    assert len(found) == 1, (f"a batch of sources {inputs['encoder_padding_mask'].sum(1)} is "
                             f"{len(found)} of its pool's batches")
    return found[0]


def _assert_pools(batches, pools, widths):
    """`batches` hold the reference's `pools` (each its pool's batches, in some order);
    True if some pool's order is not the sorted one (train.py shuffles it)."""
    batches, shuffled = iter(batches), False
    for pool in pools:
        order = [_pool_position(next(batches), pool, widths) for _ in pool]
        assert sorted(order) == list(range(len(pool))), order
        shuffled |= order != sorted(order)
    return shuffled


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_batches_are_the_pools_sorted_runs_of_the_released_batching(tmp_path):
    """OpenNMT-py (salesforce/cove @9a0d90b) sorts the pairs by source length, cuts batches
    of consecutive pairs, each by decreasing source length, and shuffles their order;
    keras_ctx does it a pool at a time (at most the kept pairs, 100 batches), each batch
    padded to the narrowest of a few widths (8, 16, then --sequence-length 20 here) holding
    its longest source, and its targets' own. Before, a batch held pairs of one width by
    their longer side, in the shuffled order: 4-word sources beside 7-word ones."""
    pytest.importorskip("sacremoses")
    rng = np.random.default_rng(3)
    sources = [2, 3, 7, 9, 12, 15, 17, 20, 5, 8, 16, 1, 3, 7, 3]  # ties: their order kept
    lines = [" ".join(rng.choice(list("abcdefgh"), n)) + "\t"
             + " ".join(rng.choice(list("vwxyz"), int(rng.integers(1, 21)))) for n in sources]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    run = registry.Run("cove-base", 2, 20, 12, inputs=(("parallel", (("en", "de", str(pairs)),)),))
    tokenizer = recipe.word_tokenizer(list("abcdefgh"))
    widths = recipe.bucket_widths(20)
    assert widths == (8, 16, 20) and recipe.bucket_widths(6) == (6,)
    # The file's 15 pairs make pools of 7 batches (14 pairs, where the file is shorter than
    # 100 batches), across passes: 3 pools.
    src, tgt = _stream_pairs(tokenizer, run, 42)
    batches = list(recipe.cove_dataset(None, tokenizer, run).take(21).as_numpy_iterator())
    assert _assert_pools(batches, onmt.pooled_batches(src, tgt, 2, 7), widths)
    # A resumed run builds the stream again and skips the batches done (training.py).
    again = list(recipe.cove_dataset(None, tokenizer, run).skip(5).take(3).as_numpy_iterator())
    for (inputs, labels), (first, first_labels) in zip(again, batches[5:8]):
        np.testing.assert_array_equal(inputs["encoder_token_ids"], first["encoder_token_ids"])
        np.testing.assert_array_equal(labels, first_labels)
