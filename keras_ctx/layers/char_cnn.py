"""Character CNN + highway token embedder (Kim et al., 2016; ELMo, Peters et al., 2018)."""

import keras
from keras import ops

from keras_ctx.common import validation
from keras_ctx.layers import _checks, activations

# ELMo "original" (bilm-tf options.json): (width, count) per filter bank.
ELMO_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))

# bilm-tf initialises the transform-gate bias to -2 so that a new highway
# layer mostly carries its input (Srivastava et al., 2015, sec. 2.2).
TRANSFORM_GATE_BIAS = -2.0


def _activation(name, value):
    return keras.activations.serialize(activations.get(_checks.activation(name, value)))


def _filters(filters, max_characters_per_token):
    """Checks `filters` and returns them as a list of [width, count] lists."""
    if not isinstance(filters, (list, tuple)) or not filters or not all(
            isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in filters):
        validation.refuse("filters", "a non-empty list of (width, count) pairs", filters)
    pairs = [validation.positive_ints(f"filters[{i}]", pair) for i, pair in enumerate(filters)]
    for i, (width, _) in enumerate(pairs):
        if width > max_characters_per_token:  # a valid convolution fits in the token
            validation.refuse(f"filters[{i}]", "a (width, count) pair of width <= "
                              f"max_characters_per_token ({max_characters_per_token})",
                              filters[i])
    return pairs


@keras.saving.register_keras_serializable(package="keras_ctx")
class Highway(keras.layers.Layer):
    """Highway layers: a gated mix of a transform of `x` and `x` itself.

    For each of `num_layers` layers (Srivastava et al., 2015):

        t = sigmoid(x W_t + b_t)            # transform gate
        y = t * activation(x W_h + b_h) + (1 - t) * x

    `b_t` starts at `transform_gate_bias` (-2, as in bilm-tf), so a fresh layer
    mostly carries `x` through. The gate sigmoid, the activation and the mix
    are computed in float32 under mixed precision; the output is cast back to
    the compute dtype.

    Gate convention, for importing weights:
        - bilm-tf (`CNN_high_k`): its `W_carry`/`b_carry` is our transform gate
          `t` (it multiplies the transformed value despite the name), and its
          `W_transform`/`b_transform` is our `W_h`/`b_h`. Copy them as is.
        - allennlp `Highway`: one `Linear(D, 2D)` whose first half is the
          nonlinear part (our `W_h`/`b_h`) and whose second half is a gate
          `g` that multiplies `x`, i.e. `g = 1 - t` (carry gate). Since
          `1 - sigmoid(z) = sigmoid(-z)`, set `W_t = -W_g` and `b_t = -b_g`
          (allennlp's own ELMo loader negates bilm-tf's carry weights the
          same way). Torch stores `Linear` weights as (out, in): transpose.

    The weights of layer `k` are in `layer.transform_gates[k]` (`W_t`, `b_t`)
    and `layer.transforms[k]` (`W_h`, `b_h`), both `Dense` layers.

    Args:
        num_layers: number of highway layers, at least 1.
        activation: the activation of the transform, "relu" in ELMo.
        kernel_initializer: for `W_t` and `W_h`.
        transform_gate_bias: initial value of `b_t`.

    Call arguments:
        inputs: (..., dim) float tensor.

    Returns:
        (..., dim), in the compute dtype.

    Example:
    >>> layer = keras_ctx.layers.Highway(num_layers=2)
    >>> layer(np.random.rand(2, 10, 64).astype("float32")).shape
    (2, 10, 64)

    References:
        Srivastava et al., "Highway Networks", 2015.
        Kim et al., "Character-Aware Neural Language Models", 2016.
    """

    def __init__(
        self,
        num_layers,
        activation="relu",
        kernel_initializer="glorot_uniform",
        transform_gate_bias=TRANSFORM_GATE_BIAS,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_layers = _checks.positive_int("num_layers", num_layers)
        self.activation = _activation("activation", activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.transform_gate_bias = _checks.finite_number(
            "transform_gate_bias", transform_gate_bias
        )
        self._activation_fn = activations.get(self.activation)
        self.supports_masking = True

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim is None:
            raise ValueError(
                "Highway needs a known last input dimension, got input shape "
                f"{input_shape}."
            )
        self.transform_gates = []
        self.transforms = []
        for k in range(self.num_layers):
            gate = keras.layers.Dense(
                dim,
                kernel_initializer=self.kernel_initializer,
                bias_initializer=keras.initializers.Constant(self.transform_gate_bias),
                dtype=self.dtype_policy,
                name=f"transform_gate_{k}",
            )
            gate.build(input_shape)
            transform = keras.layers.Dense(
                dim,
                kernel_initializer=self.kernel_initializer,
                dtype=self.dtype_policy,
                name=f"transform_{k}",
            )
            transform.build(input_shape)
            self.transform_gates.append(gate)
            self.transforms.append(transform)
        self.built = True

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        for gate, transform in zip(self.transform_gates, self.transforms):
            t = ops.sigmoid(ops.cast(gate(x), "float32"))
            h = self._activation_fn(ops.cast(transform(x), "float32"))
            x = t * h + (1.0 - t) * x
        return ops.cast(x, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_layers": self.num_layers,
                "activation": self.activation,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "transform_gate_bias": self.transform_gate_bias,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class CharCNNHighwayEmbedder(keras.layers.Layer):
    """ELMo's context-independent token embedder: char CNN, highway, projection.

    For each token, its characters are embedded, each filter bank convolves
    over the characters ("valid", no padding), takes the max over character
    positions and then the activation (bilm-tf applies it after the max), the
    banks are concatenated (`sum(counts)` features), passed through
    `num_highway_layers` highway layers and projected linearly to
    `projection_dim` (Kim et al., 2016; Peters et al., 2018). The defaults are
    ELMo "original": 2048 CNN features, 2 highway layers, projection to 512.
    Activations are computed in float32 under mixed precision.

    A token whose character ids are all 0 is padding: `compute_mask` returns
    (batch, time) false there, so Keras passes the mask on to later layers.
    The ids follow allennlp's `ELMoCharacterMapper` (bilm-tf's ids + 1, so
    that 0 is free for padding), hence 262 characters.

    Weights, for importing: `char_embedding` (`Embedding`), `char_convs[i]`
    (`Conv1D`, kernel (width, embedding_dim, count); bilm-tf's `W_cnn_i` is
    (1, width, embedding_dim, count): drop the first axis), `highway`
    (`Highway`, see its gate convention) and `projection` (`Dense`).

    Args:
        filters: list of (width, count) pairs, one Conv1D per pair.
        num_highway_layers: number of highway layers (0 for none).
        projection_dim: size of the output; None keeps the `sum(counts)`
            CNN features without a projection.
        max_characters_per_token: the last input dimension (50 in ELMo).
        character_vocabulary_size: number of character ids, padding 0 included.
        character_embedding_dim: size of the character embeddings.
        activation: applied after the max over positions and in the highway
            layers.
        kernel_initializer: for the convolutions, highway and projection.
        use_one_hot_lookup: look characters up by a one-hot matmul instead
            of a gather (for XLA/TPU setups where gathers are slow).

    Call arguments:
        inputs: int character ids (batch, time, max_characters_per_token),
            0 for padding.

    Returns:
        (batch, time, projection_dim) (or `sum(counts)` without projection),
        in the compute dtype.

    Example:
    >>> layer = keras_ctx.layers.CharCNNHighwayEmbedder(
    ...     filters=[[1, 4], [2, 8]], projection_dim=6, max_characters_per_token=10)
    >>> ids = np.random.randint(1, 262, size=(2, 5, 10))
    >>> layer(ids).shape
    (2, 5, 6)

    References:
        Kim et al., "Character-Aware Neural Language Models", 2016.
        Srivastava et al., "Highway Networks", 2015.
        Peters et al., "Deep contextualized word representations", 2018.
    """

    def __init__(
        self,
        filters=ELMO_FILTERS,
        num_highway_layers=2,
        projection_dim=512,
        max_characters_per_token=50,
        character_vocabulary_size=262,
        character_embedding_dim=16,
        activation="relu",
        kernel_initializer="glorot_uniform",
        use_one_hot_lookup=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.max_characters_per_token = _checks.positive_int(
            "max_characters_per_token", max_characters_per_token
        )
        self.filters = _filters(filters, self.max_characters_per_token)
        self.num_highway_layers = _checks.non_negative_int(
            "num_highway_layers", num_highway_layers
        )
        self.projection_dim = _checks.optional_positive_int(
            "projection_dim", projection_dim
        )
        self.character_vocabulary_size = _checks.positive_int(
            "character_vocabulary_size", character_vocabulary_size
        )
        self.character_embedding_dim = _checks.positive_int(
            "character_embedding_dim", character_embedding_dim
        )
        self.activation = _activation("activation", activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.use_one_hot_lookup = bool(use_one_hot_lookup)
        self._activation_fn = activations.get(self.activation)
        self.supports_masking = True

    @property
    def num_cnn_features(self):
        return sum(count for _, count in self.filters)

    @property
    def output_dim(self):
        return self.projection_dim or self.num_cnn_features

    def _check_characters(self, shape):
        if len(shape) < 2 or shape[-1] != self.max_characters_per_token:
            raise ValueError(
                "CharCNNHighwayEmbedder expects character ids of shape (batch, "
                f"time, max_characters_per_token={self.max_characters_per_token}), "
                f"got shape {tuple(shape)}. Pad or truncate every token to "
                f"{self.max_characters_per_token} characters, or construct the "
                f"layer with max_characters_per_token={shape[-1] if shape else None}."
            )

    def build(self, input_shape):
        self._check_characters(input_shape)
        chars = self.max_characters_per_token
        self.char_embedding = keras.layers.Embedding(
            self.character_vocabulary_size,
            self.character_embedding_dim,
            dtype=self.dtype_policy,
            name="char_embedding",
        )
        self.char_embedding.build((None, chars))
        self.char_convs = []
        for i, (width, count) in enumerate(self.filters):
            conv = keras.layers.Conv1D(
                count,
                width,
                padding="valid",
                kernel_initializer=self.kernel_initializer,
                dtype=self.dtype_policy,
                name=f"char_conv_{i}",
            )
            conv.build((None, chars, self.character_embedding_dim))
            self.char_convs.append(conv)
        features_shape = (None, self.num_cnn_features)
        self.highway = None
        if self.num_highway_layers:
            self.highway = Highway(
                self.num_highway_layers,
                activation=self.activation,
                kernel_initializer=self.kernel_initializer,
                dtype=self.dtype_policy,
                name="highway",
            )
            self.highway.build(features_shape)
        self.projection = None
        if self.projection_dim is not None:
            self.projection = keras.layers.Dense(
                self.projection_dim,
                kernel_initializer=self.kernel_initializer,
                dtype=self.dtype_policy,
                name="projection",
            )
            self.projection.build(features_shape)
        self.built = True

    def _embed_characters(self, ids):
        if self.use_one_hot_lookup:
            one_hot = ops.one_hot(
                ids, self.character_vocabulary_size, dtype=self.compute_dtype
            )
            table = ops.cast(self.char_embedding.embeddings, self.compute_dtype)
            return ops.matmul(one_hot, table)
        return self.char_embedding(ids)

    def call(self, inputs):
        self._check_characters(inputs.shape)
        leading = ops.shape(inputs)[:-1]
        ids = ops.reshape(
            ops.cast(inputs, "int32"), (-1, self.max_characters_per_token)
        )
        chars = self._embed_characters(ids)  # (tokens, chars, char_dim)
        features = []
        for conv in self.char_convs:
            convolved = conv(chars)  # (tokens, chars - width + 1, count)
            # bilm-tf: max over positions, then the activation.
            pooled = ops.max(convolved, axis=1)
            features.append(self._activation_fn(ops.cast(pooled, "float32")))
        x = ops.concatenate(features, axis=-1)  # (tokens, sum(counts))
        if self.highway is not None:
            x = self.highway(x)
        if self.projection is not None:
            x = self.projection(x)
        x = ops.cast(x, self.compute_dtype)
        return ops.reshape(x, tuple(leading) + (self.output_dim,))

    def compute_mask(self, inputs, mask=None):
        return ops.any(ops.not_equal(inputs, 0), axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": [list(pair) for pair in self.filters],
                "num_highway_layers": self.num_highway_layers,
                "projection_dim": self.projection_dim,
                "max_characters_per_token": self.max_characters_per_token,
                "character_vocabulary_size": self.character_vocabulary_size,
                "character_embedding_dim": self.character_embedding_dim,
                "activation": self.activation,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "use_one_hot_lookup": self.use_one_hot_lookup,
            }
        )
        return config
