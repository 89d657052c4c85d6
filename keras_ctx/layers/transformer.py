"""Transformer encoder and decoder blocks, post-LN (BERT) or pre-LN (GPT-2, T5).

One block is: self-attention, (decoder: cross-attention,) feed-forward, each
wrapped in dropout + residual + normalisation. `TransformerEncoderStack`
stacks blocks and can share their weights across depth as ALBERT does.
"""

import keras
from keras import ops

from keras_ctx.layers import _checks, activations
from keras_ctx.layers.adapters import AdapterHost, add_and_norm
from keras_ctx.layers.attention import MultiHeadAttention
from keras_ctx.layers.dropout import Dropout
from keras_ctx.layers.gather import gather_positions

NORMALIZATIONS = ("layer_norm", "rms_norm")


def _normalization(kind, epsilon, dtype, name):
    if kind == "rms_norm":
        # T5: scale only, no mean subtraction and no bias.
        return keras.layers.RMSNormalization(epsilon=epsilon, dtype=dtype, name=name)
    return keras.layers.LayerNormalization(epsilon=epsilon, dtype=dtype, name=name)


@keras.saving.register_keras_serializable(package="keras_ctx")
class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network: dense -> activation -> dense.

    The activation runs in float32 under mixed precision (GELU/ReLU in
    bfloat16 lose precision that later layers amplify).

    Args:
        intermediate_size: inner width (4 * hidden in BERT and GPT-2).
        activation: a Keras activation name ("gelu", "relu", ...) or
            "gelu_approximate" (tanh GELU: GPT, GPT-2, ALBERT).
        gated: T5 v1.1 / GLU variants: `act(x W) * (x V)` (Shazeer, 2020).
        use_bias: biases in both dense layers (T5 has none).
        dropout: dropout after the activation (T5; BERT uses 0 here).
        kernel_initializer: of the first dense (and the gate).
        output_kernel_initializer: of the second dense; defaults to
            kernel_initializer.

    Example:
    >>> ffn = keras_ctx.layers.FeedForward(intermediate_size=3072)
    >>> y = ffn(x)   # same shape as x
    """

    def __init__(
        self,
        intermediate_size,
        activation="gelu",
        gated=False,
        use_bias=True,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        output_kernel_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_size = _checks.positive_int("intermediate_size", intermediate_size)
        self.activation = activation
        self._activation_fn = activations.get(activation)
        self.gated = bool(gated)
        self.use_bias = bool(use_bias)
        self.dropout = _checks.rate("dropout", dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_kernel_initializer = keras.initializers.get(
            output_kernel_initializer or kernel_initializer
        )

    def _dense(self, units, name, initializer):
        return keras.layers.Dense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, input_shape):
        self.intermediate_dense = self._dense(
            self.intermediate_size, "intermediate", self.kernel_initializer
        )
        self.intermediate_dense.build(input_shape)
        if self.gated:
            self.gate_dense = self._dense(self.intermediate_size, "gate", self.kernel_initializer)
            self.gate_dense.build(input_shape)
        self.output_dense = self._dense(
            input_shape[-1], "output", self.output_kernel_initializer
        )
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def call(self, inputs, training=None):
        hidden = self._activation_fn(ops.cast(self.intermediate_dense(inputs), "float32"))
        if self.gated:
            hidden = hidden * ops.cast(self.gate_dense(inputs), "float32")
        hidden = self.dropout_layer(ops.cast(hidden, self.compute_dtype), training=training)
        return self.output_dense(hidden)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_size": self.intermediate_size,
                "activation": self.activation,
                "gated": self.gated,
                "use_bias": self.use_bias,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "output_kernel_initializer": keras.initializers.serialize(
                    self.output_kernel_initializer
                ),
            }
        )
        return config


class _TransformerBlock(AdapterHost, keras.layers.Layer):
    """What encoder and decoder blocks share: arguments, sublayers, residuals."""

    window_size = None  # banded self-attention: causal decoder blocks only

    def __init__(
        self,
        num_heads,
        intermediate_size,
        hidden_size=None,
        activation="gelu",
        dropout=0.1,
        attention_dropout=None,
        normalize_first=False,
        normalization="layer_norm",
        layer_norm_epsilon=1e-12,
        use_bias=True,
        gated_feedforward=False,
        feedforward_dropout=0.0,
        attention_scale=None,
        kernel_initializer="glorot_uniform",
        output_kernel_initializer=None,
        head_size=None,
        use_qkv_bias=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _checks.positive_int("num_heads", num_heads)
        self.intermediate_size = _checks.positive_int("intermediate_size", intermediate_size)
        self.hidden_size = _checks.optional_positive_int("hidden_size", hidden_size)
        self.head_size = _checks.optional_positive_int("head_size", head_size)
        self.use_qkv_bias = use_qkv_bias if use_qkv_bias is None else bool(use_qkv_bias)
        if hidden_size is not None and head_size is None:
            _checks.divisible("hidden_size", hidden_size, "num_heads", num_heads)
        self.activation = activation
        self.dropout = _checks.rate("dropout", dropout)
        self.attention_dropout = _checks.rate(
            "attention_dropout", dropout if attention_dropout is None else attention_dropout
        )
        self.normalize_first = bool(normalize_first)
        self.normalization = _checks.one_of("normalization", normalization, NORMALIZATIONS)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.use_bias = bool(use_bias)
        self.gated_feedforward = bool(gated_feedforward)
        self.feedforward_dropout = _checks.rate("feedforward_dropout", feedforward_dropout)
        self.attention_scale = attention_scale
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_kernel_initializer = keras.initializers.get(
            output_kernel_initializer or kernel_initializer
        )

    def _check_hidden(self, hidden):
        if self.hidden_size is not None and hidden != self.hidden_size:
            raise ValueError(
                f"The input's last dimension is {hidden}, but `hidden_size` is "
                f"{self.hidden_size}."
            )
        if self.head_size is None:
            _checks.divisible("hidden size", hidden, "num_heads", self.num_heads)

    def _attention(self, name, hidden, window_size=None):
        return MultiHeadAttention(
            num_heads=self.num_heads,
            head_size=self.head_size or hidden // self.num_heads,
            dropout=self.attention_dropout,
            use_bias=self.use_bias,
            use_qkv_bias=self.use_qkv_bias,
            scale=self.attention_scale,
            window_size=window_size,
            kernel_initializer=self.kernel_initializer,
            output_kernel_initializer=self.output_kernel_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def _norm(self, name):
        return _normalization(
            self.normalization, self.layer_norm_epsilon, self.dtype_policy, name
        )

    def _feedforward(self):
        return FeedForward(
            self.intermediate_size,
            activation=self.activation,
            gated=self.gated_feedforward,
            use_bias=self.use_bias,
            dropout=self.feedforward_dropout,
            kernel_initializer=self.kernel_initializer,
            output_kernel_initializer=self.output_kernel_initializer,
            dtype=self.dtype_policy,
            name="feedforward",
        )

    def build(self, input_shape):
        hidden = input_shape[-1]
        self._check_hidden(hidden)
        # Made by methods, so that a block can take a sublayer from elsewhere
        # (ALBERT's partly shared blocks, keras_ctx.models.albert.backbone). Made and built
        # in this order: it is the order the weights draw their initial values.
        self.self_attention = self._attention("self_attention", hidden, self.window_size)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.feedforward = self._feedforward()
        self.feedforward_norm = self._norm("feedforward_norm")
        for layer in (self.self_attention_norm, self.feedforward_norm, self.feedforward):
            if not layer.built:
                layer.build(input_shape)
        if not self.self_attention.built:
            self.self_attention.build(input_shape, input_shape)
        # One dropout layer after every sublayer, called in the order of the sublayers.
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def adapter_width(self):
        return self.feedforward.output_dense.units

    def _add_and_norm(self, place, residual, x, norm, training):
        """`residual + x`, normalised after the add in a post-LN block.

        Adapters that `keras_ctx.peft.add_adapter` put at `place` ("attention",
        "cross_attention", "feedforward") insert themselves here
        (`keras_ctx.layers.adapters.add_and_norm`): Houlsby's on `x` before the
        add, Pfeiffer's (MAD-X Eq. 1) on the sum.
        """
        return add_and_norm(self, place, residual, x, norm, self.normalize_first, training)

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_size": self.intermediate_size,
                "hidden_size": self.hidden_size,
                "activation": self.activation,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "normalize_first": self.normalize_first,
                "normalization": self.normalization,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "use_bias": self.use_bias,
                "gated_feedforward": self.gated_feedforward,
                "feedforward_dropout": self.feedforward_dropout,
                "attention_scale": self.attention_scale,
                "head_size": self.head_size,
                "use_qkv_bias": self.use_qkv_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "output_kernel_initializer": keras.initializers.serialize(
                    self.output_kernel_initializer
                ),
            }
        )
        return config


_BLOCK_DOC_ARGS = """
    Args:
        num_heads: attention heads; the hidden size must be divisible by it.
        intermediate_size: feed-forward inner width.
        hidden_size: optional; when given, checked at construction against
            num_heads and at build against the input.
        activation: feed-forward activation ("gelu" BERT/GPT-2, "relu" T5).
        dropout: after attention and feed-forward outputs (residual dropout).
        attention_dropout: on attention probabilities; defaults to dropout.
        normalize_first: False = post-LN (BERT, GPT), True = pre-LN (GPT-2, T5).
        normalization: "layer_norm" or "rms_norm" (T5).
        layer_norm_epsilon: 1e-12 BERT, 1e-5 GPT-2, 1e-6 T5.
        use_bias: biases in attention and feed-forward (T5: False).
        gated_feedforward: gated (GLU) feed-forward (T5 v1.1).
        feedforward_dropout: dropout after the feed-forward activation (T5).
        attention_scale: score multiplier; None = 1/sqrt(head size), T5 and
            GPT-Neo = 1.0.
        head_size: per-head width; defaults to hidden / num_heads (GPT-3's
            Table 2.1 has rows where heads * head_size != hidden).
        use_qkv_bias: biases on the query/key/value projections; defaults to
            use_bias (GPT-Neo: False).
        kernel_initializer, output_kernel_initializer: the latter for the
            projections that write into the residual stream (GPT-2 scales it).
"""


@keras.saving.register_keras_serializable(package="keras_ctx")
class TransformerEncoderBlock(_TransformerBlock):
    __doc__ = (
        """A bidirectional Transformer block (BERT, RoBERTa, ALBERT, T5 encoder).
"""
        + _BLOCK_DOC_ARGS
        + """
    Call arguments:
        inputs: (batch, time, hidden).
        padding_mask: (batch, time), 1 for real tokens.
        attention_mask: (batch, time, time), 1 where i may attend j.
        attention_bias: additive bias broadcastable to (batch, heads, time, time).
        query_positions: optional (batch, P) int: compute the output at these
            positions only, (batch, P, hidden), attending over every position.
            Equal to gathering the full output there, for the cost of P rows
            (a masked LM's last layer needs only its masked positions).

    Example:
    >>> block = keras_ctx.layers.TransformerEncoderBlock(num_heads=12, intermediate_size=3072)
    >>> y = block(x, padding_mask=mask)   # x: (batch, time, 768)

    References:
        Vaswani et al. 2017; Devlin et al. 2019 (post-LN); Radford et al. 2019
        (pre-LN); Raffel et al. 2020 (RMS norm, no biases).
    """
    )

    def call(self, inputs, padding_mask=None, attention_mask=None, attention_bias=None,
             query_positions=None, training=None):
        if query_positions is not None:
            if attention_bias is not None:
                raise ValueError(
                    "`query_positions` cannot be combined with `attention_bias`; "
                    "compute the full output and gather it instead.")
            if attention_mask is not None:  # the rows of the queries that remain
                attention_mask = gather_positions(attention_mask, query_positions)

        # Self-attention. Post-LN (BERT): x = norm(x + attention(x));
        # pre-LN (GPT-2, T5): x = x + attention(norm(x)).
        residual = inputs
        x = self.self_attention_norm(inputs) if self.normalize_first else inputs
        context = None
        if query_positions is not None:  # those rows query, the whole sequence answers
            residual = gather_positions(residual, query_positions)
            x, context = gather_positions(x, query_positions), x
        x = self.self_attention(
            x,
            context,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            attention_bias=attention_bias,
            training=training,
        )
        x = self.dropout_layer(x, training=training)
        x = self._add_and_norm("attention", residual, x, self.self_attention_norm, training)

        # Feed-forward, the same way.
        residual = x
        if self.normalize_first:
            x = self.feedforward_norm(x)
        x = self.feedforward(x, training=training)
        x = self.dropout_layer(x, training=training)
        return self._add_and_norm("feedforward", residual, x, self.feedforward_norm, training)

    def compute_output_spec(self, inputs, *args, query_positions=None, **kwargs):
        shape = inputs.shape
        if query_positions is not None:
            shape = (shape[0], query_positions.shape[1], shape[-1])
        return keras.KerasTensor(shape, dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_ctx")
class TransformerDecoderBlock(_TransformerBlock):
    __doc__ = (
        """A causal Transformer block, with cross-attention for seq2seq (GPT-2, T5, BART).
"""
        + _BLOCK_DOC_ARGS
        + """        use_cross_attention: add a cross-attention sublayer over an
            encoder's output (T5, BART decoders); False for GPT-style decoders.
        window_size: None = dense causal self-attention; an int w = GPT-3's
            locally banded self-attention, position i attending i - w < j <= i
            (see `keras_ctx.layers.banded_attention`).

    Call arguments:
        inputs: decoder sequence (batch, time, hidden).
        encoder_sequence: (batch, source_time, hidden) when use_cross_attention.
        padding_mask: decoder padding (batch, time).
        attention_mask: extra (batch, time, time) mask, combined with causal.
        attention_bias: additive self-attention bias (T5 relative positions).
        encoder_padding_mask: (batch, source_time).
        cross_attention_bias: additive cross-attention bias.
        self_attention_cache: (batch, 2, max_length, heads, head_size) with
            `cache_update_index`, for step-by-step decoding.
        cross_attention_cache: precomputed from `compute_cross_attention_cache`.

    Returns:
        The output; with caches, `(output, self_attention_cache)` or
        `(output, self_attention_cache, cross_attention_cache)`.

    Example:
    >>> block = keras_ctx.layers.TransformerDecoderBlock(
    ...     num_heads=8, intermediate_size=2048, normalize_first=True,
    ...     use_cross_attention=True)
    >>> y = block(decoder_x, encoder_sequence=encoder_x)
    """
    )

    def __init__(self, *args, use_cross_attention=False, window_size=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.use_cross_attention = bool(use_cross_attention)
        self.window_size = _checks.optional_positive_int("window_size", window_size)

    def build(self, inputs_shape, encoder_sequence_shape=None):
        super().build(inputs_shape)
        if self.use_cross_attention:
            hidden = inputs_shape[-1]
            encoder_shape = encoder_sequence_shape or inputs_shape
            self.cross_attention = self._attention("cross_attention", hidden)
            self.cross_attention.build(inputs_shape, encoder_shape)
            self.cross_attention_norm = self._norm("cross_attention_norm")
            self.cross_attention_norm.build(inputs_shape)
        self.built = True

    def compute_cross_attention_cache(self, encoder_sequence):
        """Keys and values of the encoder output, computed once per source."""
        return self.cross_attention.compute_key_value_cache(encoder_sequence)

    def call(
        self,
        inputs,
        encoder_sequence=None,
        padding_mask=None,
        attention_mask=None,
        attention_bias=None,
        encoder_padding_mask=None,
        cross_attention_bias=None,
        self_attention_cache=None,
        cache_update_index=None,
        cross_attention_cache=None,
        training=None,
    ):
        if self.use_cross_attention and encoder_sequence is None and cross_attention_cache is None:
            raise ValueError(
                "This block has use_cross_attention=True: pass `encoder_sequence` "
                "(or a `cross_attention_cache`)."
            )

        # Causal self-attention (post-LN: x = norm(x + attention(x)); pre-LN:
        # x = x + attention(norm(x))); with a cache it also returns the updated cache.
        residual = inputs
        x = self.self_attention_norm(inputs) if self.normalize_first else inputs
        x = self.self_attention(
            x,
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            attention_bias=attention_bias,
            use_causal_mask=True,
            cache=self_attention_cache,
            cache_update_index=cache_update_index,
            training=training,
        )
        if self_attention_cache is not None:
            x, self_attention_cache = x
        x = self.dropout_layer(x, training=training)
        x = self._add_and_norm("attention", residual, x, self.self_attention_norm, training)

        # Cross-attention over the encoder's output (T5, BART), the same way.
        if self.use_cross_attention:
            residual = x
            if self.normalize_first:
                x = self.cross_attention_norm(x)
            x = self.cross_attention(
                x,
                encoder_sequence,
                padding_mask=encoder_padding_mask,
                attention_bias=cross_attention_bias,
                cache=cross_attention_cache,
                training=training,
            )
            if cross_attention_cache is not None:
                x, _ = x  # the keys and values of the encoder output, unchanged
            x = self.dropout_layer(x, training=training)
            x = self._add_and_norm("cross_attention", residual, x, self.cross_attention_norm,
                                   training)

        # Feed-forward.
        residual = x
        if self.normalize_first:
            x = self.feedforward_norm(x)
        x = self.feedforward(x, training=training)
        x = self.dropout_layer(x, training=training)
        x = self._add_and_norm("feedforward", residual, x, self.feedforward_norm, training)

        if self_attention_cache is None:
            return x
        if cross_attention_cache is None:
            return x, self_attention_cache
        return x, self_attention_cache, cross_attention_cache

    def compute_output_spec(self, inputs, *args, self_attention_cache=None,
                            cross_attention_cache=None, **kwargs):
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if self_attention_cache is None:
            return output
        caches = (keras.KerasTensor(self_attention_cache.shape, self_attention_cache.dtype),)
        if cross_attention_cache is not None:
            caches += (keras.KerasTensor(cross_attention_cache.shape, cross_attention_cache.dtype),)
        return (output,) + caches

    def get_config(self):
        config = super().get_config()
        config["use_cross_attention"] = self.use_cross_attention
        config["window_size"] = self.window_size
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class TransformerEncoderStack(keras.layers.Layer):
    """`num_layers` encoder blocks, each with its own weights.

    (ALBERT's cross-layer sharing is `keras_ctx.models.albert.backbone.AlbertEncoderStack`,
    which calls one block again.)

    Args:
        num_layers: depth.
        block_config: keyword arguments of `TransformerEncoderBlock`.

    Call arguments:
        inputs, padding_mask, attention_mask, attention_bias: as for the block.
        last_layer_positions: optional (batch, P) int: the last block computes
            its output at these positions only (`query_positions`), so the
            last output is (batch, P, hidden).

    Returns:
        A list of the num_layers outputs, first layer first.

    Example:
    >>> stack = keras_ctx.layers.TransformerEncoderStack(
    ...     12, {"num_heads": 12, "intermediate_size": 3072})
    >>> hidden_states = stack(x, padding_mask=mask)   # 12 tensors
    """

    def __init__(self, num_layers, block_config, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = _checks.positive_int("num_layers", num_layers)
        self.block_config = dict(block_config)
        # Fail now, not at build, on a bad block configuration.
        TransformerEncoderBlock(**self.block_config)

    def _new_block(self, index):
        return TransformerEncoderBlock(
            **self.block_config, dtype=self.dtype_policy, name=f"block_{index}"
        )

    def _make_blocks(self, input_shape):
        """The num_layers blocks, built (subclasses may repeat or share blocks)."""
        blocks = []
        for index in range(self.num_layers):  # made and built in turn (the seed order)
            blocks.append(self._new_block(index))
            blocks[-1].build(input_shape)
        return blocks

    def build(self, input_shape):
        self.blocks = self._make_blocks(input_shape)
        self.built = True

    def call(self, inputs, padding_mask=None, attention_mask=None, attention_bias=None,
             last_layer_positions=None, training=None):
        outputs = []
        # Invertible adapters (MAD-X) on the embedding output, when added.
        slot = getattr(self, "input_adapters", None)
        x = inputs if slot is None else slot(inputs)
        for index, block in enumerate(self.blocks):
            last = index == len(self.blocks) - 1
            x = block(
                x,
                padding_mask=padding_mask,
                attention_mask=attention_mask,
                attention_bias=attention_bias,
                query_positions=last_layer_positions if last else None,
                training=training,
            )
            outputs.append(x)
        return outputs

    def compute_output_spec(self, inputs, *args, last_layer_positions=None, **kwargs):
        shapes = [inputs.shape] * self.num_layers
        if last_layer_positions is not None:
            shapes[-1] = (inputs.shape[0], last_layer_positions.shape[1], inputs.shape[-1])
        return [keras.KerasTensor(shape, dtype=self.compute_dtype) for shape in shapes]

    def get_config(self):
        config = super().get_config()
        config.update({"num_layers": self.num_layers, "block_config": self.block_config})
        return config
