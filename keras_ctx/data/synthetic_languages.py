"""Two synthetic languages with one grammar and disjoint vocabularies, parallel by construction.

For tests, examples and sanity checks of cross-lingual methods (XLM's TLM,
MAD-X, monolingual transfer) in CPU minutes. A sentence is

    D1 A1 N1 V D2 A2 N2        polarity s in {+, -}, uniform

with determiners agreeing in gender with their noun, both adjectives and the
verb of polarity s, so a masked word is predictable from its neighbours and
each word's role is visible from co-occurrence alone. The task label is s.
Language `k`'s word w has id `OFFSET + k * WORDS + w` (shared id space, as
one multilingual vocabulary), or, with `permutation`, its own vocabulary.
Ids 0-4 are `[PAD] [UNK] [CLS] [SEP] [MASK]`.
"""

import numpy as np

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
OFFSET = 5
# Word classes (indices into one language's WORDS words).
DETERMINERS = {0: [0, 1], 1: [2, 3]}  # by gender
NOUNS = {0: [4, 5, 6, 7], 1: [8, 9, 10, 11]}  # by gender
# Polarity classes of different sizes: otherwise swapping + and - would be a
# symmetry of the grammar, and text alone could not tell which is which.
ADJECTIVES = {0: [12, 13, 14, 15, 16], 1: [17, 18, 19]}  # by polarity (0 = +)
VERBS = {0: [20, 21], 1: [22, 23, 24, 25]}  # by polarity
WORDS = 26
SENTENCE_LENGTH = 7


def vocabulary_size(languages=2):
    """Ids of `languages` languages in one shared vocabulary (specials first)."""
    return OFFSET + languages * WORDS


def sentences(count, seed=0):
    """(words (count, 7) int in [0, WORDS), polarity labels (count,)): language-free."""
    rng = np.random.default_rng(seed)
    words = np.zeros((count, SENTENCE_LENGTH), np.int64)
    labels = rng.integers(0, 2, count)
    for row, s in enumerate(labels):
        g1, g2 = rng.integers(0, 2, 2)
        words[row] = [rng.choice(DETERMINERS[g1]), rng.choice(ADJECTIVES[s]),
                      rng.choice(NOUNS[g1]), rng.choice(VERBS[s]),
                      rng.choice(DETERMINERS[g2]), rng.choice(ADJECTIVES[s]),
                      rng.choice(NOUNS[g2])]
    return words, labels


def to_ids(words, language=0, permutation=None):
    """Token ids of language `language` (shared vocabulary), or own ids via `permutation`."""
    if permutation is not None:
        return OFFSET + np.asarray(permutation)[words]
    return OFFSET + language * WORDS + words


def classification_inputs(ids, sequence_length=None):
    """[CLS] ids [SEP] padded: the BERT-style inputs and a padding mask."""
    count, length = ids.shape
    sequence_length = sequence_length or length + 2
    token_ids = np.zeros((count, sequence_length), np.int32)
    token_ids[:, 0] = SPECIAL["cls"]
    token_ids[:, 1:length + 1] = ids
    token_ids[:, length + 1] = SPECIAL["sep"]
    padding_mask = (np.arange(sequence_length) < length + 2).astype(np.int32)
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
            "padding_mask": np.tile(padding_mask, (count, 1))}


def xlm_inputs(ids, language, sequence_length):
    """`</s> s </s>` per row with positions and the language id: XLM backbone inputs."""
    count, length = ids.shape
    eos = SPECIAL["sep"]
    token_ids = np.full((count, sequence_length), SPECIAL["pad"], np.int32)
    token_ids[:, 0] = eos
    token_ids[:, 1:length + 1] = ids
    token_ids[:, length + 1] = eos
    return {"token_ids": token_ids,
            "padding_mask": (token_ids != SPECIAL["pad"]).astype(np.int32),
            "position_ids": np.tile(np.arange(sequence_length, dtype=np.int32), (count, 1)),
            "language_ids": np.full((count, sequence_length), language, np.int32)}


def mlm_batches(examples, vocabulary_size, batch_size=32, seed=0):
    """Dicts of numpy arrays -> shuffled, repeated, dynamically masked batches."""
    import tensorflow as tf

    from keras_ctx.data.masking import MLMMasker

    data = tf.data.Dataset.from_tensor_slices(examples).shuffle(4096, seed=seed).repeat()
    masker = MLMMasker(vocabulary_size, SPECIAL["mask"], tuple(SPECIAL.values()), seed=seed)
    return masker.apply(data.batch(batch_size, drop_remainder=True))


__all__ = ["ADJECTIVES", "DETERMINERS", "NOUNS", "OFFSET", "SENTENCE_LENGTH", "SPECIAL",
           "VERBS", "WORDS", "classification_inputs", "mlm_batches", "sentences", "to_ids",
           "vocabulary_size", "xlm_inputs"]
