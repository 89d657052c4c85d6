"""A language model's training stream: batchify + variable-length BPTT (Merity et al. 2017).

The corpus (one long sequence of N token ids) is laid out as B contiguous
streams, one per batch row (Merity et al.'s `batchify`); consecutive batches
continue each stream, so an LSTM can carry its state from batch to batch.
Stream i holds tokens [i L, (i + 1) L] (L = ceil((N - 1) / B)): the streams
overlap by one token, so that every token after the corpus' first is a
target exactly once per epoch (the last stream ends in padding when B does
not divide N - 1).

Each batch is a segment of the streams: inputs x[t .. t + s - 1], targets
x[t + 1 .. t + s]; the next batch starts its inputs at t + s. The segment
length s is drawn per batch (Merity et al. 2017, Sec. 4.1, as in their
awd-lstm-lm and fastai):

    bptt' = bptt with probability 0.95, else bptt / 2
    s     = max(min_length, int(N(bptt', 5)))          (min_length 5)

and the learning rate of that update is rescaled by s / bptt ("sampling
arbitrary sequence lengths with a fixed learning rate favors short sequences
over longer ones"). The batch says so in `learning_rate_scale`;
`AwdLstmLMPretrainer` applies it to any Keras optimizer's learning rate. s is
the segment's real length (shorter at the stream's end), as the paper words it.

Every epoch has the same number of batches, so Keras knows the epoch's
length (an unknown-length dataset makes Keras warn "Your input ran out of
data" after each epoch and cut later epochs to the first one's count, losing
targets). The count K is the median of the draws' counts; each epoch's
lengths are drawn as above from (seed, epoch) and drawn again until they make
K segments: Merity et al.'s distribution, conditioned on the epoch's count.

Static shapes for XLA: each batch is right-padded to a multiple of
`length_multiple` (8) time steps (padding_mask / sample weights 0), so a
jit-compiled step compiles once per bucket (a handful of lengths around bptt
and bptt / 2) instead of once per drawn length; padding wastes under 8 steps.
"""

import math

import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.common.validation import non_negative_int, positive_int

# Merity et al. 2017, Sec. 4.1 (awd-lstm-lm main.py; fastai's LanguageModelLoader).
FULL_LENGTH_PROBABILITY = 0.95
LENGTH_STDDEV = 5.0
MIN_LENGTH = 5


def stream_layout(token_ids, batch_size, padding_id=0):
    """Merity's `batchify`, losing no target: (B, L + 1) ids and mask.

    Row i is tokens [i L, (i + 1) L] of the corpus (L = ceil((N - 1) / B)), so
    the last token of row i is the first of row i + 1: as a target in row i,
    as an input in row i + 1. Positions past the corpus' end (only in the last
    row) hold `padding_id` with mask 0.
    """
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"`token_ids` must be a 1-D integer array (the corpus as one "
                         f"stream), got shape {ids.shape} and dtype {ids.dtype}.")
    batch_size = positive_int("batch_size", batch_size)
    if len(ids) < batch_size + 1:
        raise ValueError(f"The corpus has {len(ids)} tokens: fewer than batch_size + 1 = "
                         f"{batch_size + 1}; lower the batch size.")
    length = math.ceil((len(ids) - 1) / batch_size)
    padded = np.full(batch_size * length + 1, padding_id, "int32")
    padded[:len(ids)] = ids
    mask = np.zeros_like(padded)
    mask[:len(ids)] = 1
    rows = np.arange(batch_size)[:, None] * length + np.arange(length + 1)
    return padded[rows], mask[rows]


def segment_lengths(rng, total, bptt, variable_length=True, min_length=MIN_LENGTH):
    """One epoch's segment lengths over streams of `total` targets (they sum to total).

    Variable: Merity et al. 2017, Sec. 4.1 (see the module doc); fixed: bptt
    each. The last one is cut to what is left.
    """
    if not variable_length:
        full, rest = divmod(total, bptt)
        return [bptt] * full + ([rest] if rest else [])
    drawn, covered = [], 0
    while covered < total:  # draw in blocks (a bit more than needed), keep what covers total
        size = int((total - covered) / (0.9 * bptt)) + 16
        mean = np.where(rng.random(size) < FULL_LENGTH_PROBABILITY, bptt, bptt / 2)
        block = np.maximum(min_length, rng.normal(mean, LENGTH_STDDEV).astype(np.int64))
        drawn.append(block)
        covered += int(block.sum())
    lengths = np.concatenate(drawn)
    count = int(np.searchsorted(np.cumsum(lengths), total)) + 1  # first to reach total
    lengths = lengths[:count].tolist()
    lengths[-1] -= sum(lengths) - total
    return lengths


class BpttStream:
    """Batches of a token stream for truncated BPTT with a carried LSTM state.

    Args:
        token_ids: the corpus as one 1-D sequence of ids.
        batch_size: B, the number of contiguous streams (= batch rows).
        bptt: the nominal segment length (70 in Merity et al. and ULMFiT).
        variable_length: draw each segment's length (Merity et al. 2017,
            Sec. 4.1) and rescale the learning rate by length / bptt; False:
            fixed segments of `bptt`, scale 1.
        min_length: the shortest drawn length (5).
        length_multiple: pad each batch's time axis to a multiple of this
            (static shapes for XLA; 1: no padding).
        seed: a non-negative integer; epoch e's lengths are drawn from (seed, e),
            e counting the passes over `batches()` / `dataset()`.
        padding_id: the id of padding positions.

    `dataset()` yields `(x, y, sample_weight)`: x = {"token_ids",
    "padding_mask", "learning_rate_scale"} with token_ids (B, T) int32 and
    learning_rate_scale (B,) float32 (the same length / bptt in every row),
    y the next tokens (B, T), sample_weight 1 where y is a real target. One
    pass is one epoch of `steps_per_epoch` batches (the dataset's
    cardinality): reset the LSTM state at its start (`StateReset`).

    Example:
    >>> stream = BpttStream(ids, batch_size=64, bptt=70)
    >>> lm = AwdLstmLMPretrainer(backbone, batch_size=64, carry_state=True)
    >>> lm.fit(stream.dataset(), epochs=3, callbacks=[StateReset()])

    References:
        Merity et al., "Regularizing and Optimizing LSTM Language Models", 2017.
    """

    def __init__(self, token_ids, batch_size, bptt=70, variable_length=True,
                 min_length=MIN_LENGTH, length_multiple=8, seed=0, padding_id=0):
        self.batch_size = positive_int("batch_size", batch_size)
        self.bptt = positive_int("bptt", bptt)
        self.min_length = positive_int("min_length", min_length)
        self.length_multiple = positive_int("length_multiple", length_multiple)
        self.variable_length = bool(variable_length)
        self.seed = non_negative_int("seed", seed)
        self.padding_id = padding_id
        self.streams, self.mask = stream_layout(token_ids, batch_size, padding_id)
        self.targets = self.streams.shape[1] - 1  # per stream
        self.epoch = 0  # the next pass's index
        self.steps_per_epoch = self._count()

    def _draw(self, *key):
        rng = np.random.default_rng([self.seed, *key])  # keys of one length: no collisions
        return segment_lengths(rng, self.targets, self.bptt, self.variable_length,
                               self.min_length)

    def _count(self):
        """K: the median count of 31 draws (the most likely counts sit there)."""
        return int(np.median([len(self._draw(1, i, 0)) for i in range(31)]))

    def epoch_lengths(self, epoch):
        """Epoch `epoch`'s K segment lengths: the first draw from (seed, epoch) with K."""
        for attempt in range(100_000):
            lengths = self._draw(0, epoch, attempt)
            if len(lengths) == self.steps_per_epoch:
                return lengths
        raise RuntimeError(f"No draw of {self.steps_per_epoch} segments in 100000 tries "
                           f"(bptt={self.bptt}, {self.targets} targets per stream).")

    def expected_steps(self, epochs=1):
        """Batches in `epochs` epochs (for STLR's T): exactly epochs x steps_per_epoch."""
        return epochs * self.steps_per_epoch

    def batches(self):
        """One epoch of (x, y, sample_weight) numpy batches."""
        for start, length in self._segments():
            padded = -(-length // self.length_multiple) * self.length_multiple
            end = start + length
            x = np.full((self.batch_size, padded), self.padding_id, "int32")
            y = np.full_like(x, self.padding_id)
            x_mask = np.zeros_like(x)
            y_mask = np.zeros((self.batch_size, padded), "float32")
            x[:, :length] = self.streams[:, start:end]
            y[:, :length] = self.streams[:, start + 1:end + 1]
            x_mask[:, :length] = self.mask[:, start:end]
            y_mask[:, :length] = self.mask[:, start + 1:end + 1]
            scale = np.full((self.batch_size,), length / self.bptt, "float32")
            yield ({"token_ids": x, "padding_mask": x_mask, "learning_rate_scale": scale},
                   y, y_mask)

    def _segments(self):
        lengths = self.epoch_lengths(self.epoch)
        self.epoch += 1
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return zip(starts.tolist(), lengths)

    def dataset(self):
        """`batches()` as a tf.data.Dataset of known cardinality; each pass: the next epoch."""
        b = self.batch_size
        signature = ({"token_ids": tf.TensorSpec((b, None), tf.int32),
                      "padding_mask": tf.TensorSpec((b, None), tf.int32),
                      "learning_rate_scale": tf.TensorSpec((b,), tf.float32)},
                     tf.TensorSpec((b, None), tf.int32), tf.TensorSpec((b, None), tf.float32))
        dataset = tf.data.Dataset.from_generator(self.batches, output_signature=signature)
        return dataset.apply(tf.data.experimental.assert_cardinality(self.steps_per_epoch))
