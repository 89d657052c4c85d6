"""The XLNet layer (Yang et al., 2019): two-stream relative attention, then the FFN."""

import keras

from keras_ctx.layers import _checks
from keras_ctx.layers.dropout import Dropout
from keras_ctx.layers.adapters import AdapterHost, add_and_norm
from keras_ctx.layers.relative_attention import TwoStreamRelativeAttention
from keras_ctx.layers.transformer import FeedForward


def xlnet_initializer(stddev=0.02):
    # XLNet draws every weight from N(0, 0.02) (`initializer_range`).
    return keras.initializers.RandomNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="keras_ctx")
class XLNetBlock(AdapterHost, keras.layers.Layer):
    """One XLNet layer: two-stream relative attention, then the position-wise FFN.

    Both streams share every weight (XLNet's `two_stream_rel_attn`,
    `post_attention` and `positionwise_ffn`):

        x' = LayerNorm(x + dropout(attention(x)))
        y  = LayerNorm(x' + dropout(FFN(x')))       FFN = W_2 dropout(act(W_1 x'))

    Args:
        num_heads: attention heads (`n_head`).
        intermediate_size: FFN width (`d_inner`).
        dropout: dropout after the attention output and the FFN (and inside it).
        attention_dropout: dropout on the attention probabilities (`dropatt`).
        activation: FFN activation ("gelu").
        layer_norm_epsilon: 1e-12 in XLNet.
        initializer_range: stddev of the normal initializer of every weight.

    Call arguments: those of `TwoStreamRelativeAttention` (content_stream,
    position_encoding, content_attention_mask, query_stream,
    query_attention_mask, segment_matrix, memory, target_mapping,
    position_index, training).

    Returns:
        `(content_output, query_output)` with a query stream, else the content
        output alone.

    Example:
    >>> block = XLNetBlock(num_heads=2, intermediate_size=64)
    >>> h = block(np.zeros((1, 4, 16)), relative_positional_encoding(4, 4, 16))
    """

    def __init__(
        self,
        num_heads,
        intermediate_size,
        dropout=0.0,
        attention_dropout=0.0,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _checks.positive_int("num_heads", num_heads)
        self.intermediate_size = _checks.positive_int("intermediate_size", intermediate_size)
        self.dropout = _checks.rate("dropout", dropout)
        self.attention_dropout = _checks.rate("attention_dropout", attention_dropout)
        self.activation = activation
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)
        self.supports_masking = False

    def build(self, content_stream_shape):
        hidden_size = content_stream_shape[-1]
        _checks.divisible("hidden_size", hidden_size, "num_heads", self.num_heads)
        initializer = xlnet_initializer(self.initializer_range)
        self.attention = TwoStreamRelativeAttention(
            num_heads=self.num_heads,
            head_size=hidden_size // self.num_heads,
            dropout=self.attention_dropout,
            kernel_initializer=initializer,
            bias_initializer=initializer,
            dtype=self.dtype_policy,
            name="attention",
        )
        self.attention.build(content_stream_shape)
        self.attention_dropout_layer = Dropout(
            self.dropout, dtype=self.dtype_policy, name="attention_output_dropout"
        )
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="attention_norm"
        )
        self.attention_norm.build(content_stream_shape)
        self.feed_forward = FeedForward(
            self.intermediate_size,
            activation=self.activation,
            dropout=self.dropout,
            kernel_initializer=initializer,
            dtype=self.dtype_policy,
            name="feed_forward",
        )
        self.feed_forward.build(content_stream_shape)
        self.feed_forward_dropout = Dropout(
            self.dropout, dtype=self.dtype_policy, name="feed_forward_dropout"
        )
        self.feed_forward_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="feed_forward_norm"
        )
        self.feed_forward_norm.build(content_stream_shape)
        self.built = True

    def adapter_width(self):
        return self.feed_forward.output_dense.units

    def _post_attention(self, stream, attention_output, training):
        # norm(x + y) twice, through adapters when keras_ctx.peft added some.
        y = self.attention_dropout_layer(attention_output, training=training)
        x = add_and_norm(self, "attention", stream, y, self.attention_norm, training=training)
        y = self.feed_forward_dropout(self.feed_forward(x, training=training), training=training)
        return add_and_norm(self, "feedforward", x, y, self.feed_forward_norm, training=training)

    def call(
        self,
        content_stream,
        position_encoding,
        content_attention_mask=None,
        query_stream=None,
        query_attention_mask=None,
        segment_matrix=None,
        memory=None,
        target_mapping=None,
        position_index=None,
        training=None,
    ):
        outputs = self.attention(
            content_stream,
            position_encoding,
            content_attention_mask=content_attention_mask,
            query_stream=query_stream,
            query_attention_mask=query_attention_mask,
            segment_matrix=segment_matrix,
            memory=memory,
            target_mapping=target_mapping,
            position_index=position_index,
            training=training,
        )
        if query_stream is None:
            return self._post_attention(content_stream, outputs, training)
        attention_h, attention_g = outputs
        return (
            self._post_attention(content_stream, attention_h, training),
            self._post_attention(query_stream, attention_g, training),
        )

    def compute_output_spec(self, content_stream, position_encoding, *args,
                            query_stream=None, **kwargs):
        content = keras.KerasTensor(content_stream.shape, dtype=self.compute_dtype)
        if query_stream is None:
            return content
        return content, keras.KerasTensor(query_stream.shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_size": self.intermediate_size,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range,
            }
        )
        return config
