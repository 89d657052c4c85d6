"""ERNIE's knowledge masking: whole phrases / entities, the 15% budget, the stage schedule."""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import knowledge_masking as km
from keras_ctx.data import pipelines
from tests.pretraining import synthetic as syn

SPECIALS = (0, 1, 2, 3)
MASK_ID = 4
VOCAB = 100
LENGTH = 42  # [CLS] + 40 tokens + [SEP]: budget round(0.15 * 40) = 6


def _blocks(width, length=LENGTH):
    """Unit ids: consecutive blocks of `width` tokens after [CLS], -1 on [CLS]/[SEP]."""
    ids = np.full(length, -1, "int32")
    for start in range(1, length - 1 - width + 1, width):
        ids[start:start + width] = start
    return ids


def _batch(rows=4, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, VOCAB, size=(rows, LENGTH)).astype("int32")
    ids[:, 0], ids[:, -1] = 2, 3
    return {"token_ids": ids, "padding_mask": np.ones_like(ids),
            "phrase_ids": np.tile(_blocks(2), (rows, 1)),   # 1-2, 3-4, ..., 39-40
            "entity_ids": np.tile(_blocks(5), (rows, 1))}   # 1-5, ..., 36-40


def _selected(batch):
    out = []
    for positions, weights in zip(batch["mask_positions"], batch["mask_weights"]):
        out.append(set(positions[weights > 0].tolist()))
    return out


def _level(selected):
    """Which annotation a row's masks follow (whole blocks of it), else basic."""
    # Budget 6: one 5-token entity, or three 2-token phrases.
    for level, width in (("entity", 5), ("phrase", 2)):
        blocks = {start: set(range(start, start + width))
                  for start in range(1, LENGTH - width, width)}
        covered = set().union(*(b for b in blocks.values() if b <= selected)) if selected else set()
        if covered == selected and all(not (b & selected) or b <= selected
                                       for b in blocks.values()):
            return level
    return "basic"


def test_lexicon_matches_leftmost_longest_without_overlaps():
    lexicon = km.Lexicon([(5, 6), (5, 6, 7), (9,), (7, 8)])
    ids = np.array([[1, 5, 6, 7, 8, 9, 5, 6, 2], [5, 6, 5, 6, 7, 7, 8, 0, 0]], "int32")
    np.testing.assert_array_equal(lexicon.unit_ids(ids).numpy(), [
        [-1, 1, 1, 1, -1, 5, 6, 6, -1],     # 5 6 7 (longest), then 8 alone, 9, 5 6
        [0, 0, 2, 2, 2, 5, 5, -1, -1]])
    with pytest.raises(ValueError, match="non-empty"):
        km.Lexicon([()])


@pytest.mark.parametrize("level", ["phrase", "entity"])
def test_units_are_never_split_and_about_15_percent_is_masked(level):
    schedule = km.KnowledgeMaskingSchedule(((level, None),))
    masker = km.KnowledgeMasker(VOCAB, MASK_ID, SPECIALS, schedule)
    batch = _batch(rows=512)
    # Random unit widths 1-4 per row, so the budget is not always met exactly.
    rng = np.random.default_rng(1)
    key = f"{level}_ids"
    for row in batch[key]:
        t = 1
        while t < LENGTH - 1:
            width = int(rng.integers(1, 5))
            row[t:min(t + width, LENGTH - 1)] = t
            t += width
    out = masker.mask(batch, tf.constant([3, 4]), step=0)
    assert key not in out
    out = {k: np.asarray(v) for k, v in out.items()}
    masked = 0
    for b, selected in enumerate(_selected(out)):
        for unit in np.unique(batch[key][b][batch[key][b] >= 0]):
            inside = [t in selected for t in np.flatnonzero(batch[key][b] == unit)]
            assert all(inside) or not any(inside), (b, unit)
        assert len(selected) <= 6
        masked += len(selected)
    # 40 candidates a row, budget 6 = 15%; whole units of <= 4 tokens fill it
    # nearly always (at least 5 of 6: 12.5%); over 512 rows the mean is within
    # a few tenths of a percent of 15% (binomial bound would be ~0.4%).
    rate = masked / (40 * len(out["token_ids"]))
    assert 0.14 < rate <= 0.15, rate
    # 80/10/10 per token among the masked.
    new = out["token_ids"][np.array([[t in s for t in range(LENGTH)] for s in _selected(out)])]
    assert abs(np.mean(new == MASK_ID) - 0.8) < 0.04


def test_the_schedule_switches_levels_at_its_boundaries():
    schedule = km.KnowledgeMaskingSchedule((("basic", 3), ("phrase", 2), ("entity", None)))
    assert schedule.boundaries == (3, 5)
    assert [schedule.level_at(s) for s in range(8)] == ["basic"] * 3 + ["phrase"] * 2 + [
        "entity"] * 3
    masker = km.KnowledgeMasker(VOCAB, MASK_ID, SPECIALS, schedule, seed=5)
    stream = tf.data.Dataset.from_tensors(_batch()).repeat(8)
    levels = []
    for batch in masker.apply(stream).as_numpy_iterator():
        per_row = {_level(selected) for selected in _selected(batch)}
        assert len(per_row) == 1, per_row
        levels.append(per_row.pop())
    assert levels == ["basic"] * 3 + ["phrase"] * 2 + ["entity"] * 3


def test_schedule_and_missing_units_fail_clearly():
    with pytest.raises(ValueError, match="level"):
        km.KnowledgeMaskingSchedule((("sentence", 10),))
    with pytest.raises(ValueError, match="steps"):
        km.KnowledgeMaskingSchedule((("basic", None), ("entity", 5)))
    masker = km.KnowledgeMasker(VOCAB, MASK_ID, SPECIALS,
                                km.KnowledgeMaskingSchedule((("entity", None),)))
    batch = _batch()
    del batch["entity_ids"]
    with pytest.raises(ValueError, match="entity lexicon"):
        masker.mask(batch, tf.constant([1, 2]), step=0)


def test_ernie_dataset_masks_lexicon_entities_whole():
    docs = syn.documents(60)
    # Every 3-token run that starts at a multiple of 5 is an "entity".
    entries = {tuple(s[i:i + 3]) for d in docs for s in d for i in range(len(s) - 2)
               if s[i] % 5 == 0}
    lexicon = km.Lexicon(sorted(entries))
    schedule = km.KnowledgeMaskingSchedule((("entity", None),))
    data = pipelines.ernie_dataset(syn.dataset(docs), None, 8, sequence_length=32,
                                   entities=lexicon, schedule=schedule,
                                   special_ids=syn.SPECIAL, vocabulary_size=syn.VOCABULARY_SIZE,
                                   whole_word_basic=False)
    whole = 0
    for batch in data.take(3).as_numpy_iterator():
        original = batch["token_ids"].copy()
        np.put_along_axis(original, batch["mask_positions"],
                          np.where(batch["mask_weights"] > 0, batch["mask_ids"],
                                   np.take_along_axis(original, batch["mask_positions"], 1)), 1)
        units = lexicon.unit_ids(original).numpy()
        for b, selected in enumerate(_selected(batch)):
            for unit in np.unique(units[b][units[b] >= 0]):
                inside = [t in selected for t in np.flatnonzero(units[b] == unit)]
                assert all(inside) or not any(inside)
                whole += all(inside)
        assert {"token_ids", "segment_ids", "next_sentence_labels"} <= set(batch)
    assert whole > 0


def test_collocations_score_as_word2phrase_by_hand():
    # Words: 10 "new", 11 "york" (+ continuation piece 90 "##er" after 12);
    # "new york" 8 times, "new" 2 more times and "york" 2 more times, fillers.
    table = np.zeros(100, bool)
    table[90] = True
    sentences = ([[10, 11, 20 + i] for i in range(8)] + [[10, 30], [10, 31], [32, 11],
                                                         [33, 11]] +
                 [[12, 90, 40 + i] for i in range(6)])
    lexicon = km.collocation_lexicon([sentences], table, min_count=5, threshold=1.0)
    # N = 24 + 8 + 12 = 44 words; count(new) = count(york) = 10, count(new york) = 8:
    # (8 - 5) * 44 / (10 * 10) = 1.32 > 1; "york 2x" pairs occur once (< min_count
    # words); (12 ##er) counts 6 but its neighbours 40+i once each.
    assert lexicon.entries == {2: ["10,11"]}
    assert km.collocation_lexicon([sentences], table, min_count=5, threshold=1.4) is None
    # The word with a continuation piece is one word: (12, 90) never splits.
    assert km.collocation_lexicon([[[12, 90, 13]] * 6], table, 5, 0.0).entries == {3: ["12,90,13"]}
