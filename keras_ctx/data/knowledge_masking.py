"""ERNIE's knowledge masking in stages (Sun et al. 2019, Sec. 3.2), as a tf.data map.

    stage 1  basic-level masking:  basic language units (English words, Chinese
             characters) masked at random, as BERT
    stage 2  phrase-level masking: phrases (from lexical analysis / chunking)
             masked whole: all their basic units together
    stage 3  entity-level masking: named entities (persons, locations,
             organizations, products) masked whole

Units come from the data, per position: a batch's `phrase_ids` /
`entity_ids` (batch, time) int32, equal ids >= 0 on consecutive positions
make one unit, -1 elsewhere (a chunker's or tagger's spans, e.g. BIO tags
numbered), or a `Lexicon` of token-id sequences matched against the row
(leftmost-longest, non-overlapping). Positions outside every phrase / entity
stay basic units (words by `continuation_table`, else tokens), as in ERNIE
1.0's released data, where every token belongs to a unit (seg_labels).

Selection is ERNIE 1.0's released rule (PaddlePaddle/ERNIE ERNIE/batching.py
@dcfa462, `mask`): every unit is drawn once, with probability 0.15, and masked
whole; each masked token then gets 80/10/10 by its own draw. So 15% of the
maskable tokens ([CLS] / [SEP] never) are masked on average, and the masked
units have the row's unit lengths (a budget filled unit by unit would favour
short units near its end: docs/notes/data-references.md, ERNIE). The released
code gathers every masked position; here a row has `max_predictions` slots
(default ceil(0.25 T), `ERNIE_SLOT_RATE`), and in the rare row that draws more,
whole units beyond the slots (in a random order) are left unmasked.

`KnowledgeMaskingSchedule` says which level each training step uses; the
masker counts the batches it masks, so apply it to the stream in training
order (repeat the data before masking).
"""

import dataclasses
import os

import numpy as np
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.common.validation import optional_positive_int

from keras_ctx.data.masking import (
    MASK_RATE,
    MASK_TOKEN_RATE,
    RANDOM_TOKEN_RATE,
    Masker,
    candidate_mask,
    corrupted_batch,
    default_max_predictions,
    map_with_seeds,
)
from keras_ctx.data.ngram_masking import check_continuation_table, unit_starts

LEVELS = ("basic", "phrase", "entity")  # Sun et al. 2019, Sec. 3.2.1-3.2.3
UNIT_KEYS = {"phrase": "phrase_ids", "entity": "entity_ids"}
# Prediction slots per token: ERNIE's per-unit draws have no cap, so the slots
# leave room above the 15% mean (keras_ctx's choice: 4e-5 of the built-in corpus'
# rows of 128 tokens draw more than their 32, docs/notes/data-references.md).
ERNIE_SLOT_RATE = 0.25

# ERNIE's random replacements: batching.py @dcfa462 `np.random.randint(1,
# high=vocab_size)`, so id 0 ([PAD] in ERNIE's vocabulary and in keras_ctx's
# WordPiece) is never drawn.
ERNIE_RANDOM_LOW = 1


@dataclasses.dataclass(frozen=True)
class KnowledgeMaskingSchedule:
    """Which masking level each training step uses: stages in order.

    Args:
        stages: ((level, steps), ...): `level` in LEVELS, `steps` a positive
            int; the last stage's steps may be None (until the end). ERNIE
            trains basic, then phrase, then entity (Sun et al. 2019, Sec.
            3.2); the paper gives no stage lengths.

    Example:
    >>> schedule = KnowledgeMaskingSchedule((("basic", 1000), ("phrase", 1000),
    ...                                      ("entity", None)))
    >>> schedule.level_at(1500)
    'phrase'
    """

    stages: tuple

    def __post_init__(self):
        stages = tuple(tuple(stage) for stage in self.stages)
        if not stages:
            raise ValueError("A KnowledgeMaskingSchedule needs at least one (level, steps) stage.")
        for i, stage in enumerate(stages):
            if len(stage) != 2 or stage[0] not in LEVELS:
                raise ValueError(f"Stage {stage!r} must be (level, steps) with level in "
                                 f"{LEVELS}.")
            if stage[1] is None and i < len(stages) - 1:
                raise ValueError(f"Stage {stage!r}: steps None (until the end) is for the "
                                 "last stage only; give the others a positive integer.")
            optional_positive_int(f"steps of stage {stage[0]!r}", stage[1])
        object.__setattr__(self, "stages", stages)

    @property
    def levels(self):
        return tuple(level for level, _ in self.stages)

    @property
    def boundaries(self):
        """The first step of every stage after the first."""
        return tuple(int(b) for b in np.cumsum([s for _, s in self.stages[:-1]]))

    def stage_at(self, step):
        """Index of the stage that step `step` (int or int64 tensor) trains in."""
        if isinstance(step, (int, np.integer)):
            return sum(step >= b for b in self.boundaries)
        step = tf.cast(step, tf.int64)
        return tf.reduce_sum(tf.cast(step >= tf.constant(self.boundaries, tf.int64,
                                                         shape=[len(self.boundaries)]),
                                     tf.int32))

    def level_at(self, step):
        """The level name of step `step` (a Python int)."""
        return self.stages[self.stage_at(step)][0]


class Lexicon:
    """Phrases or entities as token-id sequences, found in rows of ids.

    Matches are leftmost-longest and never overlap; every match is one unit.

    Args:
        entries: sequences of token ids (each non-empty).

    Example:
    >>> entities = Lexicon.from_texts(tokenizer, ["Harry Potter", "J. K. Rowling"])
    >>> entities.unit_ids(batch["token_ids"])   # (batch, time), -1 outside matches
    """

    def __init__(self, entries):
        grouped = {}
        for entry in entries:
            entry = tuple(int(i) for i in np.asarray(entry).reshape(-1))
            if not entry or min(entry) < 0:
                raise ValueError(f"Lexicon entries must be non-empty sequences of token ids "
                                 f"(>= 0), got {entry!r}.")
            grouped.setdefault(len(entry), set()).add(",".join(map(str, entry)))
        if not grouped:
            raise ValueError("A Lexicon needs at least one entry.")
        self.entries = {n: sorted(keys) for n, keys in sorted(grouped.items())}
        self._tables = {
            n: tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant(keys),
                                                    tf.ones([len(keys)], tf.int32)), 0)
            for n, keys in self.entries.items()}

    def __len__(self):
        return sum(len(keys) for keys in self.entries.values())

    @classmethod
    def from_texts(cls, tokenizer, texts):
        """Each text tokenized alone and after a space (byte-level BPE marks a word's
        leading space, so a phrase inside a sentence has other ids than at its start)."""
        entries = set()
        for text in texts:
            for variant in (text, " " + text):
                ids = np.asarray(tokenizer(variant)).reshape(-1)
                if len(ids):
                    entries.add(tuple(int(i) for i in ids))
        return cls(sorted(entries))

    def unit_ids(self, token_ids):
        """(batch, time) int32: the start position of the match covering each position, else -1."""
        token_ids = tf.cast(token_ids, tf.int32)
        length = token_ids.shape[1]
        text = tf.strings.as_string(token_ids)
        longest = tf.zeros_like(token_ids)
        for n, table in self._tables.items():
            if n > length:
                continue
            keys = tf.strings.join([text[:, i:length - n + 1 + i] for i in range(n)], ",")
            found = table.lookup(keys)
            found = tf.pad(found, [[0, 0], [0, n - 1]])
            longest = tf.where(found > 0, n, longest)  # longer entries come later

        def step(state, column):
            free_from, current, end = state
            t, n = column
            take = (t >= free_from) & (n > 0)
            current = tf.where(take, t, current)
            end = tf.where(take, t + n, end)
            free_from = tf.where(take, t + n, free_from)
            return free_from, current, end

        batch = tf.shape(token_ids)[0]
        zeros = tf.zeros([batch], tf.int32)
        columns = (tf.broadcast_to(tf.range(length)[:, None], [length, batch]),
                   tf.transpose(longest))
        _, current, end = tf.scan(step, columns, (zeros, zeros - 1, zeros))
        t = tf.range(length)[:, None]
        return tf.transpose(tf.where(t < end, current, -1))


def read_lexicon(path, flag="--entities"):
    """The entries of a lexicon file: one phrase or entity name a line, UTF-8, blank lines
    and surrounding spaces dropped (`keras-ctx pretrain`'s --entities / --phrases).

    A missing or unreadable file, one that is not UTF-8 or one without an entry is
    refused in one line (ConfigError) naming `flag`.
    """
    path = os.fspath(path)
    how = f"give {flag} a UTF-8 text file with one name a line"
    try:
        with open(path, encoding="utf-8") as handle:
            entries = [line.strip() for line in handle]
    except FileNotFoundError:
        raise ConfigError(f"{flag} {path}: no such file; {how}.") from None
    except IsADirectoryError:
        raise ConfigError(f"{flag} {path} is a directory; {how}.") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{flag} {path} is not UTF-8 text (byte {error.start}); "
                          f"{how}.") from None
    except OSError as error:
        raise ConfigError(f"{flag} {path} cannot be read ({error.strerror}); {how}.") from None
    entries = [entry for entry in entries if entry]
    if not entries:
        raise ConfigError(f"{flag} {path} holds no entry (it is empty): {how}, or leave "
                          f"{flag} out.")
    return entries


def occurs_in(lexicon, documents):
    """Whether an entry of `lexicon` occurs in a sentence of `documents` (lists of 1-D
    token-id sentences, `keras_ctx.data.segments.load_documents`); stops at the first."""
    entries = {n: {tuple(map(int, key.split(","))) for key in keys}
               for n, keys in lexicon.entries.items()}
    for document in documents:
        for sentence in document:
            ids = tuple(np.asarray(sentence).reshape(-1).tolist())
            for n, keys in entries.items():
                if any(ids[i:i + n] in keys for i in range(len(ids) - n + 1)):
                    return True
    return False


# word2phrase (Mikolov et al. 2013, Sec. 4; word2vec's word2phrase.c defaults).
PHRASE_MIN_COUNT = 5
PHRASE_THRESHOLD = 100.0


def collocation_lexicon(documents, continuation_table=None, min_count=PHRASE_MIN_COUNT,
                        threshold=PHRASE_THRESHOLD):
    """Phrases learned from a tokenized corpus: word bigrams that occur together
    far more often than by chance, as word2phrase finds them:

        score(a, b) = (count(a b) - min_count) * N / (count(a) * count(b)) > threshold

    (N words in the corpus; a, b each seen at least min_count times).
    A stand-in, from the data, for the chunker ERNIE used (Sun et al. 2019, Sec. 3.2.2).

    Args:
        documents: documents as lists of 1-D int token-id sentences
            (`keras_ctx.data.segments.load_documents`).
        continuation_table: bool per vocabulary id (words of pieces), or None
            (every token a word).

    Returns:
        a `Lexicon` of the phrases' token ids, or None if none scores above threshold.
    """
    table = None if continuation_table is None else np.asarray(continuation_table, bool)
    unigrams, bigrams = {}, {}
    for document in documents:
        for sentence in document:
            sentence = np.asarray(sentence).reshape(-1)
            starts = (np.ones(len(sentence), bool) if table is None
                      else ~table[sentence])
            starts[:1] = True
            cuts = np.flatnonzero(starts).tolist() + [len(sentence)]
            words = [tuple(sentence[i:j].tolist()) for i, j in zip(cuts[:-1], cuts[1:])]
            for word in words:
                unigrams[word] = unigrams.get(word, 0) + 1
            for pair in zip(words[:-1], words[1:]):
                bigrams[pair] = bigrams.get(pair, 0) + 1
    total = sum(unigrams.values())
    phrases = [a + b for (a, b), count in bigrams.items()
               if unigrams[a] >= min_count and unigrams[b] >= min_count
               and (count - min_count) * total / (unigrams[a] * unigrams[b]) > threshold]
    return Lexicon(sorted(phrases)) if phrases else None


def unit_mask(token_ids, seed, vocabulary_size, mask_token_id, starts, candidates,
              mask_rate=MASK_RATE, mask_token_rate=MASK_TOKEN_RATE,
              random_token_rate=RANDOM_TOKEN_RATE, max_predictions=None,
              random_token_range=None):
    """Every unit masked whole with probability `mask_rate` (ERNIE 1.0's `mask`).

    Args:
        token_ids: (batch, time) int.
        seed: (2,) int stateless seed.
        starts: (batch, time) bool, the first token of every unit
            (`keras_ctx.data.ngram_masking.unit_starts`).
        candidates: (batch, time) bool, the tokens that may be masked.
        max_predictions: slots per row (None: ceil(ERNIE_SLOT_RATE T)).

    Returns:
        dict with `token_ids` (corrupted), `mask_positions` (batch, P) in
        increasing order, `mask_ids`, `mask_weights`.
    """
    token_ids = tf.cast(tf.convert_to_tensor(token_ids), tf.int32)
    length = token_ids.shape[1]
    if max_predictions is None:
        max_predictions = default_max_predictions(length, ERNIE_SLOT_RATE)
    max_predictions = min(max_predictions, length)
    seeds = tf.unstack(tf.random.experimental.stateless_split(
        tf.cast(tf.convert_to_tensor(seed), tf.int32), 4))
    candidates = tf.cast(candidates, tf.bool)
    starts = tf.cast(starts, tf.bool) & candidates
    batch = tf.shape(token_ids)[0]
    span = tf.range(length)
    # Each token's unit (index of its start in the row), its size and its draw.
    unit = tf.where(candidates, tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, length)
    segments = unit + tf.range(batch)[:, None] * (length + 1)
    flat = batch * (length + 1)
    size = tf.reshape(tf.math.unsorted_segment_sum(tf.ones_like(unit), segments, flat),
                      [batch, length + 1])[:, :length]
    drawn = tf.random.stateless_uniform([batch, length], seeds[0]) < mask_rate
    chosen = tf.reshape(tf.math.unsorted_segment_max(
        tf.cast(drawn & starts, tf.int32), segments, flat), [batch, length + 1])[:, :length] > 0
    # Rows over their slots keep whole units in a random order while they fit.
    order = tf.argsort(tf.random.stateless_uniform([batch, length], seeds[1]), axis=1)
    used = tf.cumsum(tf.gather(tf.where(chosen, size, 0), order, batch_dims=1), axis=1)
    fits = tf.gather(used <= max_predictions, tf.argsort(order, axis=1), batch_dims=1)
    kept = tf.concat([chosen & fits, tf.zeros([batch, 1], tf.bool)], axis=1)
    selected = candidates & tf.gather(kept, unit, batch_dims=1)
    order_key = tf.where(selected, length - span[None], 0)
    keys, positions = tf.math.top_k(order_key, k=max_predictions)
    weights = tf.cast(keys > 0, tf.float32)
    positions = tf.where(keys > 0, positions, 0)
    return corrupted_batch(token_ids, selected, positions, weights, (seeds[2], seeds[3]),
                           vocabulary_size, mask_token_id, mask_token_rate,
                           random_token_rate, random_token_range)


class KnowledgeMasker(Masker):
    """A tf.data map over batches: ERNIE's staged knowledge masking of `token_ids`.

    Each batch is masked at the level its step has in `schedule`; phrase and
    entity units come from the batch's `phrase_ids` / `entity_ids` when it
    has them, else from the `phrases` / `entities` lexicons. Output keys as
    `keras_ctx.data.masking.MLMMasker` (the unit keys are dropped).

    Args:
        vocabulary_size, mask_token_id, special_token_ids: as `MLMMasker`.
        mask_rate, mask_token_rate, random_token_rate: as `MLMMasker`.
        max_predictions: slots per row (None: ceil(ERNIE_SLOT_RATE T)).
        dynamic, seed: as `MLMMasker`.
        random_token_range: (low, high) of the random replacement ids; None:
            ERNIE's [1, vocabulary_size) (`ERNIE_RANDOM_LOW`).
        schedule: a `KnowledgeMaskingSchedule`.
        continuation_table: bool per vocabulary id: basic units are words
            (English, Sun et al. 2019); None: tokens (Chinese characters).
        phrases, entities: `Lexicon`s, for batches without unit ids.

    Example:
    >>> masker = KnowledgeMasker(vocab, mask_id, specials, schedule,
    ...                          entities=Lexicon.from_texts(tokenizer, names))
    >>> batches = masker.apply(batches.repeat())

    References:
        Sun et al. 2019, "ERNIE: Enhanced Representation through Knowledge
        Integration", Sec. 3.2; PaddlePaddle/ERNIE batching.py (ERNIE 1.0).
    """

    def __init__(self, vocabulary_size, mask_token_id, special_token_ids=(), schedule=None,
                 continuation_table=None, phrases=None, entities=None, mask_rate=MASK_RATE,
                 mask_token_rate=MASK_TOKEN_RATE, random_token_rate=RANDOM_TOKEN_RATE,
                 max_predictions=None, dynamic=True, seed=0, random_token_range=None):
        if not isinstance(schedule, KnowledgeMaskingSchedule):
            raise ValueError("`schedule` must be a KnowledgeMaskingSchedule, e.g. "
                             "KnowledgeMaskingSchedule((('basic', 1000), ('phrase', 1000), "
                             "('entity', None))).")
        for lexicon in (phrases, entities):
            if lexicon is not None and not isinstance(lexicon, Lexicon):
                raise ValueError("`phrases` and `entities` must be Lexicon objects "
                                 "(Lexicon.from_texts(tokenizer, texts)).")
        super().__init__(vocabulary_size, mask_token_id, special_token_ids, mask_rate,
                         mask_token_rate, random_token_rate, max_predictions,
                         random_token_range or (ERNIE_RANDOM_LOW, vocabulary_size),
                         dynamic=dynamic, seed=seed)
        # Every level masks whole units; the units differ per stage.
        self.continuation_table = (None if continuation_table is None else
                                   check_continuation_table(continuation_table,
                                                            vocabulary_size))
        self.schedule = schedule
        self.lexicons = {"phrase": phrases, "entity": entities}

    def _level_units(self, batch, level):
        key = UNIT_KEYS[level]
        if key in batch:
            return tf.cast(batch[key], tf.int32)
        if self.lexicons[level] is None:
            raise ValueError(
                f"The schedule has a {level!r} stage but the batches carry no `{key}` and no "
                f"{level} lexicon was given: pass `{level}s=Lexicon.from_texts(tokenizer, "
                f"...)` or `{key}` (batch, time) in the batches.")
        return self.lexicons[level].unit_ids(batch["token_ids"])

    def mask(self, batch, seed, step):
        """The batch masked at the level of training step `step`."""
        batch = dict(batch)
        basic = -tf.ones_like(tf.cast(batch["token_ids"], tf.int32))
        per_stage = [basic if level == "basic" else self._level_units(batch, level)
                     for level in self.schedule.levels]
        unit_ids = tf.gather(tf.stack(per_stage), self.schedule.stage_at(step))
        for key in UNIT_KEYS.values():
            batch.pop(key, None)
        candidates = candidate_mask(batch["token_ids"], batch.get("padding_mask"),
                                    self.special_token_ids)
        starts = unit_starts(batch["token_ids"], candidates, self.continuation_table, unit_ids)
        batch.update(unit_mask(
            batch["token_ids"], seed, self.vocabulary_size, self.mask_token_id, starts,
            candidates, self.mask_rate, self.mask_token_rate, self.random_token_rate,
            self.max_predictions, self.random_token_range))
        return batch

    def __call__(self, indexed, seed):
        step, batch = indexed
        return self.mask(batch, seed, step)

    def apply(self, dataset):
        """Masks every batch of `dataset`, counting its batches as training steps."""
        return map_with_seeds(dataset.enumerate(), self, self.seed, self.dynamic)


__all__ = ["KnowledgeMasker", "KnowledgeMaskingSchedule", "Lexicon", "collocation_lexicon",
           "occurs_in", "read_lexicon", "unit_mask", "LEVELS", "ERNIE_SLOT_RATE", "ERNIE_RANDOM_LOW"]
