"""Dropout with cheaper random bits: the same rate and scaling as keras.layers.Dropout.

Drawing the random numbers is most of dropout's cost on a CPU (a BERT step
spends about 15% of its time in the random generator, 13 dropout layers). Two
ways to make them cheaper on TensorFlow, chosen where the layer is traced
(backend/tf_ops.py; other backends draw Keras' own dropout bits):

- Inside an XLA-compiled function (`jit_compile=True`): each element's bits
  are Philox-2x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy
  as 1, 2, 3"; the generator cuRAND and TensorFlow use) of its own counter
  (element index, per-call counter) under the layer's seed key, written as
  elementwise ops. XLA fuses the generator into the masking multiply, so no
  random tensor is written to memory and the work is spread over the cores.
- Elsewhere: TensorFlow's stateless Philox kernel draws 32 bits per *two*
  elements, and each element compares 16 of them with round(rate * 2^16):
  half the generator work. The rate is then a multiple of 2^-16 (0.1 ->
  0.100006) and the scale 1 / (1 - that rate), so E[output] = input exactly.
"""

import keras
from keras import ops

from keras_ctx import backend
from keras_ctx.layers import _checks


@keras.saving.register_keras_serializable(package="keras_ctx")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with cheaper random bits (see the module docstring).

    Same arguments and behaviour: in training, each element is zeroed with
    probability `rate` and the rest scaled by 1 / (1 - rate); at inference the
    input passes unchanged. With `noise_shape` it defers to Keras' dropout.

    Example:
    >>> layer = keras_ctx.layers.Dropout(0.1)
    >>> y = layer(x, training=True)
    """

    def call(self, inputs, training=False):
        if not training or not 0 < self.rate < 1 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        return backend.dropout(inputs, self.rate, self.seed_generator)


@keras.saving.register_keras_serializable(package="keras_ctx")
class LockedDropout(keras.layers.Layer):
    """Variational ("locked") dropout: one mask per sequence, shared by every step.

    For (batch, time, features) inputs, each (sequence, feature) is zeroed
    with probability `rate` at all time steps together and the rest scaled by
    1 / (1 - rate) (Gal & Ghahramani 2016; AWD-LSTM, Merity et al. 2017,
    Sec. 4.2). Identity outside training.

    Args:
        rate: drop probability.
        seed: optional seed.

    Example:
    >>> y = keras_ctx.layers.LockedDropout(0.3)(x, training=True)

    References:
        Gal & Ghahramani, "A Theoretically Grounded Application of Dropout in
        Recurrent Neural Networks", 2016.
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _checks.rate("rate", rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        shape = ops.shape(inputs)
        return keras.random.dropout(inputs, self.rate, noise_shape=(shape[0], 1, shape[2]),
                                    seed=self.seed_generator)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return dict(super().get_config(), rate=self.rate, seed=self.seed)


@keras.saving.register_keras_serializable(package="keras_ctx")
class EmbeddingDropout(keras.layers.Layer):
    """Drops whole words: rows of the embedding matrix (AWD-LSTM's dropoute).

    Each word type of the vocabulary is dropped with probability `rate` for
    the whole batch (every occurrence of it) and the kept rows are scaled by
    1 / (1 - rate) (Gal & Ghahramani 2016, Sec. 4; Merity et al. 2017,
    Sec. 4.3). Applied to the looked-up vectors: `x * keep[token_ids]`, the
    same as looking up in the row-dropped matrix.

    Args:
        vocabulary_size: the number of word types.
        rate: drop probability per word type (0.05 in ULMFiT).
        seed: optional seed.

    Call arguments:
        embedded: (batch, time, dim) looked-up vectors.
        token_ids: (batch, time) the ids they were looked up by.

    Example:
    >>> x = EmbeddingDropout(1000, 0.05)(embedding(ids), ids, training=True)
    """

    def __init__(self, vocabulary_size, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = int(vocabulary_size)
        self.rate = _checks.rate("rate", rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, embedded, token_ids, training=False):
        if not training or self.rate == 0:
            return embedded
        keep = keras.random.dropout(ops.ones((self.vocabulary_size,), embedded.dtype),
                                    self.rate, seed=self.seed_generator)
        return embedded * ops.take(keep, ops.cast(token_ids, "int32"), axis=0)[..., None]

    def compute_output_shape(self, embedded_shape, token_ids_shape=None):
        return embedded_shape

    def get_config(self):
        return dict(super().get_config(), vocabulary_size=self.vocabulary_size,
                    rate=self.rate, seed=self.seed)
