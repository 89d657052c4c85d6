"""T5 (Raffel et al., 2020): a pre-LN encoder-decoder with relative position buckets.

    encoder: x = dropout(E[src]);  b_enc = RelPosBias_bidirectional(x)  (first layer, shared)
             x = block_l(x, attention_bias=b_enc)   l = 1..N   (RMS norm, no biases,
             scores not scaled by 1/sqrt(d)); x = dropout(rms_norm(x))
    decoder: y = dropout(E[tgt]);  b_dec = RelPosBias_causal(y)  (first layer, shared)
             y = block_l(y, x, attention_bias=b_dec)   (causal self-, then cross-attention)
             y = dropout(rms_norm(y))
    logits = (y * d_model^-0.5) E^T     (output tied to the shared embedding)
"""

import keras
from keras import ops

from keras_ctx.layers import (
    Dropout,
    RelativePositionBias,
    TokenEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from keras_ctx.models.backbone import (
    ENCODER_DECODER_INPUTS,
    Backbone,
    encoder_decoder_inputs,
    encoder_decoder_outputs,
)


@keras.saving.register_keras_serializable(package="keras_ctx")
class T5Backbone(Backbone):
    """The T5 encoder-decoder (v1.0: ReLU feed-forward, tied embeddings).

    Args:
        vocabulary_size: 32128 (32000 SentencePiece pieces, 100 sentinels
            <extra_id_i> = 32099 - i, padding).
        num_layers: encoder blocks (and decoder blocks unless
            `num_decoder_layers` is given).
        num_heads: attention heads (head size = hidden_size / num_heads).
        hidden_size: d_model.
        intermediate_size: d_ff.
        num_decoder_layers: decoder depth; defaults to num_layers.
        dropout: 0.1 in T5 (embeddings, residuals, feed-forward, final).
        activation: "relu" (T5 v1.0) or "gelu".
        layer_norm_epsilon: 1e-6.
        num_buckets, max_distance: relative position buckets (32, 128).
        lookup: "gather" or "one_hot" token lookup.

    Inputs: `encoder_token_ids`, `encoder_padding_mask`, `decoder_token_ids`,
    `decoder_padding_mask`. Outputs: `encoder_sequence_output`,
    `decoder_sequence_output`, `encoder_hidden_states`, `decoder_hidden_states`.

    Example:
    >>> t5 = keras_ctx.models.T5Backbone.from_preset("t5-small")
    >>> out = t5({"encoder_token_ids": x, "encoder_padding_mask": xm,
    ...           "decoder_token_ids": y, "decoder_padding_mask": ym})
    >>> logits = t5.logits(out["decoder_sequence_output"])

    References:
        Raffel et al., "Exploring the Limits of Transfer Learning with a
        Unified Text-to-Text Transformer", JMLR 2020.
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_size,
        intermediate_size,
        num_decoder_layers=None,
        dropout=0.1,
        activation="relu",
        layer_norm_epsilon=1e-6,
        num_buckets=32,
        max_distance=128,
        lookup="gather",
        dtype=None,
        **kwargs,
    ):
        num_decoder_layers = num_decoder_layers or num_layers
        # Mesh TensorFlow T5 initialises the shared embedding from N(0, 1).
        token_embedding = TokenEmbedding(
            vocabulary_size, hidden_size, lookup=lookup,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0),
            dtype=dtype, name="token_embedding",
        )
        block_args = dict(
            num_heads=num_heads,
            intermediate_size=intermediate_size,
            hidden_size=hidden_size,
            activation=activation,
            dropout=dropout,
            normalize_first=True,
            normalization="rms_norm",
            layer_norm_epsilon=layer_norm_epsilon,
            use_bias=False,
            feedforward_dropout=dropout,
            attention_scale=1.0,  # T5 folds 1/sqrt(d) into the initialisation.
            kernel_initializer=keras.initializers.RandomNormal(stddev=hidden_size**-0.5),
            dtype=dtype,
        )
        encoder_blocks = [TransformerEncoderBlock(**block_args, name=f"encoder_block_{i}")
                          for i in range(num_layers)]
        decoder_blocks = [TransformerDecoderBlock(**block_args, use_cross_attention=True,
                                                  name=f"decoder_block_{i}")
                          for i in range(num_decoder_layers)]
        encoder_bias = RelativePositionBias(num_heads, num_buckets, max_distance,
                                            bidirectional=True, dtype=dtype,
                                            name="encoder_relative_position_bias")
        decoder_bias = RelativePositionBias(num_heads, num_buckets, max_distance,
                                            bidirectional=False, dtype=dtype,
                                            name="decoder_relative_position_bias")

        def norm(name):
            return keras.layers.RMSNormalization(epsilon=layer_norm_epsilon, dtype=dtype,
                                                 name=name)

        encoder_norm, decoder_norm = norm("encoder_final_norm"), norm("decoder_final_norm")
        dropout_layer = Dropout(dropout, dtype=dtype, name="dropout")

        inputs = encoder_decoder_inputs()
        encoder_token_ids, encoder_padding_mask, decoder_token_ids, decoder_padding_mask = (
            inputs[name] for name in ENCODER_DECODER_INPUTS)

        x = dropout_layer(token_embedding(encoder_token_ids))
        bias = encoder_bias(x)  # computed once, shared by every layer (as T5 does)
        encoder_states = [x]
        for block in encoder_blocks:
            x = block(x, padding_mask=encoder_padding_mask, attention_bias=bias)
            encoder_states.append(x)
        x = dropout_layer(encoder_norm(x))

        y = dropout_layer(token_embedding(decoder_token_ids))
        bias = decoder_bias(y)
        decoder_states = [y]
        for block in decoder_blocks:
            y = block(y, encoder_sequence=x, padding_mask=decoder_padding_mask,
                      attention_bias=bias, encoder_padding_mask=encoder_padding_mask)
            decoder_states.append(y)
        y = dropout_layer(decoder_norm(y))

        super().__init__(
            inputs=inputs,
            outputs=encoder_decoder_outputs(x, y, encoder_states, decoder_states),
            dtype=dtype,
            **kwargs,
        )
        self._token_embedding = token_embedding
        self.encoder_blocks = encoder_blocks
        self.decoder_blocks = decoder_blocks
        self.encoder_bias = encoder_bias
        self.decoder_bias = decoder_bias
        self.encoder_norm = encoder_norm
        self.decoder_norm = decoder_norm
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self._config = {
            "vocabulary_size": vocabulary_size,
            "num_layers": num_layers,
            "num_heads": num_heads,
            "hidden_size": hidden_size,
            "intermediate_size": intermediate_size,
            "num_decoder_layers": num_decoder_layers,
            "dropout": dropout,
            "activation": activation,
            "layer_norm_epsilon": layer_norm_epsilon,
            "num_buckets": num_buckets,
            "max_distance": max_distance,
            "lookup": lookup,
        }

    @property
    def token_embedding(self):
        return self._token_embedding

    @classmethod
    def analytic_parameter_count(cls, **config):
        """Parameter count of a config without building weights (for big presets)."""
        return t5_parameter_count(**config)

    def logits(self, hidden):
        # Mesh TensorFlow T5 rescales the decoder output by d_model^-0.5
        # before the tied output embedding.
        hidden = hidden * ops.cast(self.hidden_size**-0.5, hidden.dtype)
        return self._token_embedding.reverse(hidden)

    # -- decoding (used by keras_ctx.generation) --------------------------------

    def encode(self, encoder_token_ids, encoder_padding_mask):
        x = self._token_embedding(encoder_token_ids)
        bias = self.encoder_bias(x)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=encoder_padding_mask, attention_bias=bias)
        return self.encoder_norm(x)

    def build_decoder_cache(self, encoder_output, max_length):
        """(self-attention caches of zeros, precomputed cross-attention caches)."""
        batch = ops.shape(encoder_output)[0]
        head_size = self.hidden_size // self.num_heads
        self_cache = ops.zeros(
            (batch, len(self.decoder_blocks), 2, max_length, self.num_heads, head_size),
            dtype=self.compute_dtype,
        )
        cross_cache = ops.stack(
            [b.compute_cross_attention_cache(encoder_output) for b in self.decoder_blocks],
            axis=1,
        )
        return self_cache, cross_cache

    def decode_with_cache(self, decoder_token_ids, cache, cache_update_index,
                          encoder_padding_mask):
        self_cache, cross_cache = cache
        y = self._token_embedding(decoder_token_ids)
        # Buckets of (key - query) for queries at cache_update_index.. over the cache.
        bias = self.decoder_bias(y, self_cache[:, 0, 0], query_offset=cache_update_index)
        caches = []
        for i, block in enumerate(self.decoder_blocks):
            y, layer_cache, _ = block(
                y,
                attention_bias=bias,
                encoder_padding_mask=encoder_padding_mask,
                self_attention_cache=self_cache[:, i],
                cache_update_index=cache_update_index,
                cross_attention_cache=cross_cache[:, i],
            )
            caches.append(layer_cache)
        return self.decoder_norm(y), (ops.stack(caches, axis=1), cross_cache)


def t5_parameter_count(vocabulary_size, num_layers, num_heads, hidden_size, intermediate_size,
                       num_decoder_layers=None, num_buckets=32, **unused):
    """Parameters of a T5Backbone config, counted analytically (no weights built)."""
    h, f = hidden_size, intermediate_size
    num_decoder_layers = num_decoder_layers or num_layers
    attention, feedforward = 4 * h * h, 2 * h * f
    encoder = num_layers * (attention + feedforward + 2 * h) + num_buckets * num_heads + h
    decoder = (num_decoder_layers * (2 * attention + feedforward + 3 * h)
               + num_buckets * num_heads + h)
    return vocabulary_size * h + encoder + decoder


# Raffel et al. 2020, Sec. 3.7 / Table 14 sizes.
T5_PRESETS = {
    "t5-small": (dict(vocabulary_size=32128, num_layers=6, num_heads=8, hidden_size=512,
                      intermediate_size=2048), "T5 small, 60.5M parameters"),
    "t5-base": (dict(vocabulary_size=32128, num_layers=12, num_heads=12, hidden_size=768,
                     intermediate_size=3072), "T5 base, 222.9M parameters"),
}

