"""A tiny synthetic language for the pretraining tests.

A document is a run of consecutive integers (step 1 or 2, no wrap-around) cut
into sentences: a masked token is its neighbour +- the step (MLM), a NotNext
segment breaks the run (NSP), and swapped segments put the larger numbers
first (SOP). Ids 0-4 are [PAD] [UNK] [CLS] [SEP] [MASK].
"""

import numpy as np
import tensorflow as tf

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
OFFSET = 5
SPAN = 100
VOCABULARY_SIZE = OFFSET + SPAN


def documents(count, seed=0, max_sentences=5):
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(count):
        step = int(rng.integers(1, 3))
        sentences = []
        lengths = rng.integers(3, 8, size=int(rng.integers(2, max_sentences + 1)))
        total = int(lengths.sum()) * step
        x = int(rng.integers(0, SPAN - total + 1))
        for length in lengths:
            sentences.append([OFFSET + x + step * i for i in range(length)])
            x += step * int(length)
        docs.append(sentences)
    return docs


def dataset(docs):
    return tf.data.Dataset.from_generator(
        lambda: (tf.ragged.constant(d, dtype=tf.int32) for d in docs),
        output_signature=tf.RaggedTensorSpec((None, None), tf.int32, ragged_rank=1))
