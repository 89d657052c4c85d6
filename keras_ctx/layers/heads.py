"""Pretraining heads: masked LM (tied output), span boundary (SpanBERT), sentence pair.

The heads read a backbone's outputs; the masked-LM and span-boundary heads end
in the *input* embedding table read in reverse (`TokenEmbedding.reverse` or
`FactorizedEmbedding.reverse`) plus an output bias, as BERT, ALBERT and
SpanBERT do. Pass `token_embedding=` to tie; without it the head owns an
untied output kernel (and then serializes completely).
"""

import keras
from keras import ops

from keras_ctx.layers import _checks, activations
from keras_ctx.layers.gather import gather_positions
from keras_ctx.layers.lookup import take_rows


class _TiedOutput(keras.layers.Layer):
    """Shared by the vocabulary heads: logits = reverse(x) + bias, tied or not."""

    def __init__(self, vocabulary_size=None, token_embedding=None, **kwargs):
        super().__init__(**kwargs)
        self.token_embedding = token_embedding
        if token_embedding is not None:
            if not hasattr(token_embedding, "reverse"):
                raise ValueError(
                    "`token_embedding` must be a TokenEmbedding or FactorizedEmbedding "
                    f"(a layer with `.reverse`), got {type(token_embedding).__name__}."
                )
            table_vocab = token_embedding.vocabulary_size
            if vocabulary_size is not None and vocabulary_size != table_vocab:
                raise ValueError(
                    f"`vocabulary_size` ({vocabulary_size}) differs from the tied "
                    f"embedding's ({table_vocab}); leave it out or make them equal."
                )
            vocabulary_size = table_vocab
        if vocabulary_size is None:
            raise ValueError("Give `vocabulary_size` or a `token_embedding` to tie to.")
        self.vocabulary_size = _checks.positive_int("vocabulary_size", vocabulary_size)

    @property
    def own_weights(self):
        """This head's weights without the tied token table it reads (what a head keeps and
        copies: the table is the backbone's)."""
        tied = {id(v) for v in self.token_embedding.weights} if self.token_embedding else set()
        return [v for v in self.weights if id(v) not in tied]

    def _output_width(self, hidden):
        """Width of the vectors fed to the output table: E for ALBERT, H for BERT."""
        if self.token_embedding is None:
            return self.embedding_size or hidden
        if not self.token_embedding.built:
            self.token_embedding.build()
        return int(self.token_embedding.embeddings.shape[-1])

    def _build_output(self, width):
        if self.token_embedding is None:
            self.output_kernel = self.add_weight(
                name="output_kernel",
                shape=(width, self.vocabulary_size),
                initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            )
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.vocabulary_size,), initializer="zeros"
        )

    def _logits(self, x):
        if self.token_embedding is not None:
            logits = self.token_embedding.reverse(x)
        else:
            logits = ops.matmul(x, ops.cast(self.output_kernel, self.compute_dtype))
        return ops.cast(logits, self.compute_dtype) + ops.cast(self.output_bias, self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_ctx")
class MaskedLMHead(_TiedOutput):
    """BERT's masked-LM head: gather, dense + GeLU + LayerNorm, tied output + bias.

    `logits = LN(gelu(x_p W + b)) E^T + b_out` at the masked positions p, where
    E is the input embedding table (Devlin et al. 2019; for ALBERT the
    transform maps H -> E=128 and E is the V x 128 table, Lan et al. 2020).
    With `transform=False` it is XLM's `PredLayer` (Lample & Conneau 2019,
    facebookresearch/XLM): `logits = x_p E^T + b_out`, no dense or LayerNorm.

    Args:
        vocabulary_size: V; taken from `token_embedding` when tied.
        token_embedding: a `TokenEmbedding` / `FactorizedEmbedding` to tie to
            (not serialized: re-tie when rebuilding, as the pretrainers do).
        embedding_size: untied only: width of the transform (default: hidden).
        activation: of the transform ("gelu").
        layer_norm_epsilon: 1e-12 as in BERT.
        kernel_initializer: of the transform.
        transform: False drops the dense + LayerNorm transform (XLM); the
            output table must then be as wide as the hidden size.

    Call arguments:
        inputs: (batch, time, hidden) sequence output.
        mask_positions: optional (batch, P) int positions to predict; without
            it, every position is predicted.

    Returns:
        (batch, P, V) logits (or (batch, time, V)).

    Example:
    >>> head = keras_ctx.layers.MaskedLMHead(token_embedding=backbone.token_embedding)
    >>> logits = head(outputs["sequence_output"], mask_positions=positions)
    """

    def __init__(
        self,
        vocabulary_size=None,
        token_embedding=None,
        embedding_size=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer=None,
        transform=True,
        **kwargs,
    ):
        super().__init__(vocabulary_size, token_embedding, **kwargs)
        self.embedding_size = _checks.optional_positive_int("embedding_size", embedding_size)
        self.transform = bool(transform)
        if not self.transform and self.embedding_size is not None:
            raise ValueError("`embedding_size` sets the transform's width; with "
                             "`transform=False` leave it out (the output reads the hidden size).")
        self.activation = activation
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )

    def build(self, inputs_shape, mask_positions_shape=None):
        width = self._output_width(inputs_shape[-1])
        if not self.transform:
            if width != inputs_shape[-1]:
                raise ValueError(
                    f"Without a transform the output table ({width} wide) must be as wide "
                    f"as the hidden size ({inputs_shape[-1]}); use `transform=True`.")
            self._build_output(width)
            self.built = True
            return
        self.dense = keras.layers.Dense(
            width,
            activation=activations.get(self.activation),
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="transform",
        )
        self.dense.build(inputs_shape)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="transform_norm"
        )
        self.layer_norm.build(tuple(inputs_shape[:-1]) + (width,))
        self._build_output(width)
        self.built = True

    def call(self, inputs, mask_positions=None):
        x = inputs if mask_positions is None else gather_positions(inputs, mask_positions)
        return self._logits(self.transformed(x))

    def transformed(self, x):
        """The vectors fed to the output table: the transform's output, or x without one."""
        return self.layer_norm(self.dense(x)) if self.transform else x

    def compute_output_shape(self, inputs_shape, mask_positions_shape=None):
        length = inputs_shape[1] if mask_positions_shape is None else mask_positions_shape[1]
        return (inputs_shape[0], length, self.vocabulary_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_size": self.embedding_size,
                "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "transform": self.transform,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class SpanBoundaryHead(_TiedOutput):
    """SpanBERT's span boundary objective (SBO) head (Joshi et al. 2020, Sec. 3.2).

    Each token x_i of a masked span (s, e) is predicted from the boundary
    tokens x_{s-1}, x_{e+1} and a relative position embedding p_{i-s+1}:

        h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}]
        h1 = LayerNorm(GeLU(W1 h0))
        y_i = LayerNorm(GeLU(W2 h1))

    then through the (tied) output embedding, as the MLM head.

    Args:
        vocabulary_size, token_embedding: as in `MaskedLMHead`.
        max_span_length: rows of the relative position table (in tokens);
            offsets beyond it are clipped to the last row.
        embedding_size: untied only: width of y (default: hidden).
        activation, layer_norm_epsilon, kernel_initializer: as in `MaskedLMHead`.

    Call arguments:
        inputs: (batch, time, hidden) sequence output.
        left_positions: (batch, P) positions s-1 of each target's span.
        right_positions: (batch, P) positions e+1.
        span_offsets: (batch, P) i - s (0 for the first token of a span).

    Returns:
        (batch, P, V) logits.
    """

    def __init__(
        self,
        vocabulary_size=None,
        token_embedding=None,
        max_span_length=32,
        embedding_size=None,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(vocabulary_size, token_embedding, **kwargs)
        self.max_span_length = _checks.positive_int("max_span_length", max_span_length)
        self.embedding_size = _checks.optional_positive_int("embedding_size", embedding_size)
        self.activation = activation
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )

    def build(self, inputs_shape, left_positions_shape=None, right_positions_shape=None,
              span_offsets_shape=None):
        hidden = inputs_shape[-1]
        width = self._output_width(hidden)
        self.position_embeddings = self.add_weight(
            name="relative_position_embeddings",
            shape=(self.max_span_length, hidden),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )

        def projection(units, name):
            return keras.layers.Dense(units, activation=activations.get(self.activation),
                                      kernel_initializer=self.kernel_initializer,
                                      dtype=self.dtype_policy, name=name)

        def norm(name):
            return keras.layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)

        self.dense_1, self.norm_1 = projection(hidden, "ffn_1"), norm("ffn_1_norm")
        self.dense_2, self.norm_2 = projection(width, "ffn_2"), norm("ffn_2_norm")
        self.dense_1.build((None, None, 3 * hidden))
        self.norm_1.build((None, None, hidden))
        self.dense_2.build((None, None, hidden))
        self.norm_2.build((None, None, width))
        self._build_output(width)
        self.built = True

    def call(self, inputs, left_positions, right_positions, span_offsets):
        left = gather_positions(inputs, left_positions)
        right = gather_positions(inputs, right_positions)
        offsets = ops.clip(ops.cast(span_offsets, "int32"), 0, self.max_span_length - 1)
        table = ops.cast(self.position_embeddings, self.compute_dtype)
        positions = take_rows(table, offsets)  # offsets repeat: summed gradients
        h0 = ops.concatenate([left, right, positions], axis=-1)
        h1 = self.norm_1(self.dense_1(h0))
        y = self.norm_2(self.dense_2(h1))
        return self._logits(y)

    def compute_output_shape(self, inputs_shape, left_positions_shape=None, *args, **kwargs):
        return (inputs_shape[0], left_positions_shape[1], self.vocabulary_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "max_span_length": self.max_span_length,
                "embedding_size": self.embedding_size,
                "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class SentencePairHead(keras.layers.Layer):
    """NSP (BERT) / SOP (ALBERT) classifier: a dense layer over the pooled [CLS] vector.

    Args:
        num_classes: 2 for NSP (IsNext / NotNext) and SOP (in order / swapped).
        kernel_initializer: of the dense layer.

    Call arguments:
        inputs: (batch, hidden) pooled output.

    Returns:
        (batch, num_classes) logits.
    """

    def __init__(self, num_classes=2, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = _checks.positive_int("num_classes", num_classes)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )

    def build(self, input_shape):
        self.dense = keras.layers.Dense(self.num_classes,
                                        kernel_initializer=self.kernel_initializer,
                                        dtype=self.dtype_policy, name="classifier")
        self.dense.build(input_shape)
        self.built = True

    def call(self, inputs):
        return self.dense(inputs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_classes,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_classes": self.num_classes,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
