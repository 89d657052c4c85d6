"""Fixed sinusoidal position encodings and T5's bucketed relative position bias."""

import math

import keras
from keras import ops

from keras_ctx.layers import _checks
from keras_ctx.layers.lookup import take_rows


def sinusoidal_encoding(positions, dim, max_wavelength=10000.0):
    """Vaswani et al. (2017): [sin(p / w^(2i/d)), cos(p / w^(2i/d))] per position.

    `positions` is a float tensor of any shape; returns `positions.shape + (dim,)`,
    sines in the first half and cosines in the second (the Transformer-XL /
    XLNet layout; the same vectors as interleaving, up to a fixed permutation).
    """
    if dim % 2:
        raise ValueError(f"Sinusoidal encodings need an even `dim`, got {dim}.")
    inverse_frequency = 1.0 / (
        max_wavelength ** (ops.arange(0, dim, 2, dtype="float32") / dim)
    )
    angles = ops.cast(positions, "float32")[..., None] * inverse_frequency
    return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)


@keras.saving.register_keras_serializable(package="keras_ctx")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Fixed sinusoidal absolute position encodings (no weights).

    Args:
        max_wavelength: the longest wavelength, 10000 in Vaswani et al. (2017).

    Call arguments:
        inputs: (batch, time, dim); only its shape is used.
        start_index: position of the first token (for cached decoding).

    Returns:
        (batch, time, dim) encodings in the compute dtype.

    Example:
    >>> x = token_vectors + keras_ctx.layers.SinusoidalPositionEncoding()(token_vectors)
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = _checks.positive_number("max_wavelength", max_wavelength)

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        positions = ops.arange(shape[1], dtype="float32") + ops.cast(start_index, "float32")
        encoding = sinusoidal_encoding(positions, inputs.shape[-1], self.max_wavelength)
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype)[None], shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """T5's bucket of `key_position - query_position` (Raffel et al., 2020).

    Half the buckets (per direction when bidirectional) hold exact distances
    0 .. n/2 - 1; the rest grow logarithmically up to `max_distance`, beyond
    which everything shares the last bucket. Unidirectional (decoder) buckets
    see only non-positive relative positions (keys in the past).
    """
    relative_position = ops.cast(relative_position, "int32")
    bucket = ops.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + ops.cast(relative_position > 0, "int32") * num_buckets
        distance = ops.abs(relative_position)
    else:
        distance = -ops.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # max(distance, 1) keeps log() finite; those entries take the exact branch.
    scaled = ops.log(ops.cast(ops.maximum(distance, 1), "float32") / max_exact) / math.log(
        max_distance / max_exact
    )
    large = max_exact + ops.cast(scaled * (num_buckets - max_exact), "int32")
    large = ops.minimum(large, num_buckets - 1)
    return bucket + ops.where(is_small, distance, large)


@keras.saving.register_keras_serializable(package="keras_ctx")
class RelativePositionBias(keras.layers.Layer):
    """T5's learned scalar bias per head and relative-position bucket.

    Returns an additive attention bias (1, heads, q, k) for
    `MultiHeadAttention(attention_bias=...)`. T5 computes it in the first
    layer of each stack and shares it with the others.

    Args:
        num_heads: attention heads.
        num_buckets: 32 in T5.
        max_distance: 128 in T5.
        bidirectional: True for the encoder, False for the causal decoder.

    Call arguments:
        query: (batch, q, ...) tensor; only its length is used.
        key: (batch, k, ...) tensor; defaults to `query`.
        query_offset: absolute position of the first query (cached decoding).

    Example:
    >>> bias = keras_ctx.layers.RelativePositionBias(num_heads=8)(x)  # x: (2, 10, 64)
    >>> bias.shape
    (1, 8, 10, 10)

    References:
        Raffel et al., "Exploring the Limits of Transfer Learning with a
        Unified Text-to-Text Transformer", 2020.
    """

    def __init__(
        self, num_heads, num_buckets=32, max_distance=128, bidirectional=True,
        embeddings_initializer=None, **kwargs
    ):
        super().__init__(**kwargs)
        self.num_heads = _checks.positive_int("num_heads", num_heads)
        self.num_buckets = _checks.positive_int("num_buckets", num_buckets)
        self.max_distance = _checks.positive_int("max_distance", max_distance)
        self.bidirectional = bool(bidirectional)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )
        per_direction = num_buckets // 2 if bidirectional else num_buckets
        if per_direction < 2 or max_distance <= per_direction // 2:
            raise ValueError(
                f"`num_buckets` ({num_buckets}) must leave at least 2 buckets per "
                f"direction, and `max_distance` ({max_distance}) must exceed the "
                "exact range (half the buckets of a direction)."
            )

    def build(self, *args, **kwargs):
        self.bias_table = self.add_weight(
            name="relative_attention_bias",
            shape=(self.num_buckets, self.num_heads),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def call(self, query, key=None, query_offset=0):
        key = query if key is None else key
        query_positions = ops.arange(ops.shape(query)[1]) + query_offset
        key_positions = ops.arange(ops.shape(key)[1])
        buckets = relative_position_bucket(
            key_positions[None, :] - query_positions[:, None],
            self.bidirectional,
            self.num_buckets,
            self.max_distance,
        )
        # Each bucket is read by many (query, key) pairs: summed gradients (lookup.py).
        values = take_rows(ops.cast(self.bias_table, self.compute_dtype), buckets)
        return ops.transpose(values, (2, 0, 1))[None]

    def compute_output_shape(self, query_shape, key_shape=None, *args, **kwargs):
        key_shape = query_shape if key_shape is None else key_shape
        return (1, self.num_heads, query_shape[1], key_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "num_buckets": self.num_buckets,
                "max_distance": self.max_distance,
                "bidirectional": self.bidirectional,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
