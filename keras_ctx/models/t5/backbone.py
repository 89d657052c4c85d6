"""T5 (Raffel et al., 2020): a pre-LN encoder-decoder with relative position buckets.

    encoder: x = dropout(E[src]);  b_enc = RelPosBias_bidirectional(x)  (first layer, shared)
             x = block_l(x, attention_bias=b_enc)   l = 1..N   (RMS norm, no biases,
             scores not scaled by 1/sqrt(d)); x = dropout(rms_norm(x))
    decoder: y = dropout(E[tgt]);  b_dec = RelPosBias_causal(y)  (first layer, shared)
             y = block_l(y, x, attention_bias=b_dec)   (causal self-, then cross-attention)
             y = dropout(rms_norm(y))
    logits = (y * d_model^-0.5) E^T     (v1.0: output tied to the shared embedding)
    logits = y W_out                    (v1.1 / mT5: untied, no rescale)

T5 v1.1 (the released t5.1.1 gin configs) and mT5 (Xue et al. 2021) change
three things: a gated-GELU feed-forward FFN(x) = (gelu(x W_0) * x W_1) W_o
(Shazeer 2020), an output projection W_out separate from the embedding, and
no dropout in pretraining. T5-3B/11B (and v1.1 small) have
num_heads * head_size != d_model.
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
    BackbonePreset,
    encoder_decoder_inputs,
    encoder_decoder_outputs,
)


@keras.saving.register_keras_serializable(package="keras_ctx")
class T5Backbone(Backbone):
    """The T5 encoder-decoder: v1.0 (ReLU, tied output) or v1.1 / mT5 (gated GELU, untied).

    Args:
        vocabulary_size: 32128 (32000 SentencePiece pieces, 100 sentinels
            <extra_id_i> = 32099 - i, padding).
        num_layers: encoder blocks (and decoder blocks unless
            `num_decoder_layers` is given).
        num_heads: attention heads.
        hidden_size: d_model.
        intermediate_size: d_ff.
        num_decoder_layers: decoder depth; defaults to num_layers.
        dropout: 0.1 in T5 v1.0 (embeddings, residuals, feed-forward, final);
            0 in v1.1 / mT5 pretraining (raise it for fine-tuning).
        activation: "relu" (T5 v1.0), "gelu", or "gelu_approximate" (the
            tanh GELU of Mesh TensorFlow, T5 v1.1's gated GELU).
        head_size: d_kv, the per-head width; defaults to hidden_size /
            num_heads (T5-3B/11B: 128 with 32/128 heads of a 1024 d_model).
        gated_feedforward: act(x W_0) * (x W_1) feed-forward (T5 v1.1, mT5).
        tie_embeddings: the output layer is the shared embedding (v1.0);
            False: a separate `lm_head` projection (v1.1, mT5).
        scale_decoder_outputs: multiply the decoder output by d_model^-0.5
            before the output layer (Mesh TensorFlow's v1.0 with its tied
            output; transformers 5 records it apart from tying, e.g. an mT5 it
            ties but never rescales). None: as `tie_embeddings`.
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
        head_size=None,
        gated_feedforward=False,
        tie_embeddings=True,
        scale_decoder_outputs=None,
        dtype=None,
        **kwargs,
    ):
        num_decoder_layers = num_decoder_layers or num_layers
        if head_size is None:
            if hidden_size % num_heads:
                raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads "
                                 f"{num_heads}; pass head_size (T5's d_kv).")
            head_size = hidden_size // num_heads
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
            gated_feedforward=gated_feedforward,
            head_size=head_size,
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
        self.lm_head = None
        if not tie_embeddings:
            # Mesh TF's dense default (fan-in variance scaling) for the
            # untied "logits" projection of T5 v1.1 / mT5.
            self.lm_head = keras.layers.Dense(
                vocabulary_size, use_bias=False, dtype=dtype, name="lm_head",
                kernel_initializer=keras.initializers.RandomNormal(stddev=hidden_size**-0.5))
            self.lm_head.build((None, None, hidden_size))
        self.encoder_blocks = encoder_blocks
        self.decoder_blocks = decoder_blocks
        self.encoder_bias = encoder_bias
        self.decoder_bias = decoder_bias
        self.encoder_norm = encoder_norm
        self.decoder_norm = decoder_norm
        scale_decoder_outputs = (bool(tie_embeddings) if scale_decoder_outputs is None
                                 else bool(scale_decoder_outputs))
        self._token_embedding = token_embedding
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_decoder_layers = num_decoder_layers
        self.dropout = dropout
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.lookup = lookup
        self.head_size = head_size
        self.gated_feedforward = gated_feedforward
        self.tie_embeddings = tie_embeddings
        self.scale_decoder_outputs = scale_decoder_outputs

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_decoder_layers": self.num_decoder_layers,
            "dropout": self.dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "lookup": self.lookup,
            "head_size": self.head_size,
            "gated_feedforward": self.gated_feedforward,
            "tie_embeddings": self.tie_embeddings,
            "scale_decoder_outputs": self.scale_decoder_outputs,
        })
        return config

    @classmethod
    def analytic_parameter_count(cls, vocabulary_size, num_layers, num_heads, hidden_size,
                                 intermediate_size, num_decoder_layers=None, num_buckets=32,
                                 head_size=None, gated_feedforward=False, tie_embeddings=True,
                                 **unused):
        """Parameters of a T5Backbone config, counted analytically (no weights built)."""
        h, f = hidden_size, intermediate_size
        inner = num_heads * (head_size or h // num_heads)
        num_decoder_layers = num_decoder_layers or num_layers
        attention, feedforward = 4 * h * inner, (3 if gated_feedforward else 2) * h * f
        encoder = num_layers * (attention + feedforward + 2 * h) + num_buckets * num_heads + h
        decoder = (num_decoder_layers * (2 * attention + feedforward + 3 * h)
                   + num_buckets * num_heads + h)
        embeddings = vocabulary_size * h * (1 if tie_embeddings else 2)
        return embeddings + encoder + decoder

    def logits(self, hidden):
        if self.scale_decoder_outputs:
            # Mesh TensorFlow T5 v1.0 rescales the decoder output by d_model^-0.5
            # before its tied output embedding; v1.1 and mT5 do not.
            hidden = ops.multiply(hidden, ops.cast(self.hidden_size**-0.5, hidden.dtype))
        if self.lm_head is not None:
            return self.lm_head(hidden)
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
        self_cache = ops.zeros(
            (batch, len(self.decoder_blocks), 2, max_length, self.num_heads, self.head_size),
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


def _v1_1(vocabulary_size, hidden_size, num_layers, num_heads, intermediate_size):
    # t5.1.1 / mT5 gin: d_kv 64, gated GELU ("gelu", "linear"), untied
    # softmax, dropout_rate 0.0 in pretraining.
    return dict(vocabulary_size=vocabulary_size, num_layers=num_layers, num_heads=num_heads,
                hidden_size=hidden_size, intermediate_size=intermediate_size, head_size=64,
                gated_feedforward=True, activation="gelu_approximate", tie_embeddings=False,
                dropout=0.0)


T5_VOCABULARY = 32128  # 32000 pieces + 100 sentinels, rounded up to a multiple of 128
MT5_VOCABULARY = 250112  # mT5's 250k SentencePiece vocabulary, rounded to 128s (t5x gin)

T5_PRESETS = {
    # T5 v1.0: Raffel et al. 2020, Sec. 3.7 / Table 14; 3B and 11B from the
    # released bi_v1_3B.gin / bi_v1_11B.gin (d_kv 128, heads * d_kv != d_model).
    # Parameter counts as HF T5ForConditionalGeneration counts them (tied).
    "t5-small": BackbonePreset(
        dict(vocabulary_size=T5_VOCABULARY, num_layers=6, num_heads=8, hidden_size=512,
             intermediate_size=2048),
        "T5 small", 60_506_624),
    "t5-base": BackbonePreset(
        dict(vocabulary_size=T5_VOCABULARY, num_layers=12, num_heads=12,
             hidden_size=768, intermediate_size=3072),
        "T5 base", 222_903_552),
    "t5-large": BackbonePreset(
        dict(vocabulary_size=T5_VOCABULARY, num_layers=24, num_heads=16,
             hidden_size=1024, intermediate_size=4096),
        "T5 large", 737_668_096),
    "t5-3b": BackbonePreset(
        dict(vocabulary_size=T5_VOCABULARY, num_layers=24, num_heads=32, hidden_size=1024,
             intermediate_size=16384, head_size=128),
        "T5 3B", 2_851_598_336),
    "t5-11b": BackbonePreset(
        dict(vocabulary_size=T5_VOCABULARY, num_layers=24, num_heads=128,
             hidden_size=1024, intermediate_size=65536, head_size=128),
        "T5 11B", 11_307_321_344),
    # T5 v1.1: the released t5.1.1.{small,base,large,xl,xxl}.gin.
    "t5.1.1-small": BackbonePreset(
        _v1_1(T5_VOCABULARY, 512, 8, 6, 1024),
        "T5 v1.1 small", 76_961_152),
    "t5.1.1-base": BackbonePreset(
        _v1_1(T5_VOCABULARY, 768, 12, 12, 2048),
        "T5 v1.1 base", 247_577_856),
    "t5.1.1-large": BackbonePreset(
        _v1_1(T5_VOCABULARY, 1024, 24, 16, 2816),
        "T5 v1.1 large", 783_150_080),
    "t5.1.1-xl": BackbonePreset(
        _v1_1(T5_VOCABULARY, 2048, 24, 32, 5120),
        "T5 v1.1 XL", 2_849_757_184),
    "t5.1.1-xxl": BackbonePreset(
        _v1_1(T5_VOCABULARY, 4096, 24, 64, 10240),
        "T5 v1.1 XXL", 11_135_332_352),
    # mT5 (Xue et al. 2021): the T5 v1.1 shapes with a 250k vocabulary
    # (t5x/examples/t5/mt5/*.gin; base as HF google/mt5-base).
    "mt5-small": BackbonePreset(_v1_1(MT5_VOCABULARY, 512, 8, 6, 1024), "mT5 small", 300_176_768),
    "mt5-base": BackbonePreset(_v1_1(MT5_VOCABULARY, 768, 12, 12, 2048), "mT5 base", 582_401_280),
    "mt5-large": BackbonePreset(
        _v1_1(MT5_VOCABULARY, 1024, 24, 16, 2816),
        "mT5 large", 1_229_581_312),
    "mt5-xl": BackbonePreset(_v1_1(MT5_VOCABULARY, 2048, 24, 32, 5120), "mT5 XL", 3_742_619_648),
    "mt5-xxl": BackbonePreset(
        _v1_1(MT5_VOCABULARY, 4096, 24, 64, 10240),
        "mT5 XXL", 12_921_057_280),
}
