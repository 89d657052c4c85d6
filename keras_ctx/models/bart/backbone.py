"""BART (Lewis et al., 2020): a post-LN Transformer encoder-decoder trained to denoise.

    encoder: x = dropout(LN(E[src] + P_enc[positions]));  x = block_l(x)   (bidirectional)
    decoder: y = dropout(LN(E[tgt] + P_dec[positions]));  y = block_l(y, x) (causal + cross)
    logits = y E^T + b      (one token embedding shared by encoder, decoder and output;
                             b: HF BartForConditionalGeneration's `final_logits_bias`)

The noising functions that make BART's inputs are in `keras_ctx.data.noise`.
"""

import keras
from keras import ops

from keras_ctx.layers import (
    Dropout,
    PositionEmbedding,
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
class BartBackbone(Backbone):
    """The BART encoder-decoder.

    Args:
        vocabulary_size: 50265 (GPT-2's byte-level BPE + <s>, <pad>, </s>, <unk>, <mask>).
        num_layers: encoder blocks (and decoder blocks unless `num_decoder_layers`).
        num_heads: attention heads.
        hidden_size: model width.
        intermediate_size: feed-forward width.
        num_decoder_layers: defaults to num_layers.
        max_sequence_length: learned positions of each stack (1024).
        dropout: 0.1.
        layer_norm_epsilon: 1e-5.
        lookup: "gather" or "one_hot" token lookup.

    Inputs/outputs: as T5Backbone (`encoder_token_ids`, ... ->
    `encoder_sequence_output`, `decoder_sequence_output`, hidden states).
    `logits(hidden)` is the LM head: the tied embedding plus
    `final_logits_bias`, a non-trainable (vocabulary_size,) bias (zeros, as in
    fairseq's BART; Hugging Face keeps it as a buffer that fine-tuned
    checkpoints may fill).

    Example:
    >>> bart = keras_ctx.models.BartBackbone.from_preset("bart-base")

    References:
        Lewis et al., "BART: Denoising Sequence-to-Sequence Pre-training for
        Natural Language Generation, Translation, and Comprehension", ACL 2020.
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_size,
        intermediate_size,
        num_decoder_layers=None,
        max_sequence_length=1024,
        dropout=0.1,
        layer_norm_epsilon=1e-5,
        lookup="gather",
        dtype=None,
        **kwargs,
    ):
        num_decoder_layers = num_decoder_layers or num_layers
        init = keras.initializers.RandomNormal(stddev=0.02)  # BART's init_std
        token_embedding = TokenEmbedding(vocabulary_size, hidden_size, lookup=lookup,
                                         embeddings_initializer=init, dtype=dtype,
                                         name="token_embedding")
        encoder_positions = PositionEmbedding(max_sequence_length, initializer=init,
                                              dtype=dtype, name="encoder_position_embedding")
        decoder_positions = PositionEmbedding(max_sequence_length, initializer=init,
                                              dtype=dtype, name="decoder_position_embedding")
        encoder_embedding_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="encoder_embedding_norm")
        decoder_embedding_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="decoder_embedding_norm")
        block_args = dict(
            num_heads=num_heads, intermediate_size=intermediate_size, hidden_size=hidden_size,
            activation="gelu", dropout=dropout, normalize_first=False,
            layer_norm_epsilon=layer_norm_epsilon, kernel_initializer=init, dtype=dtype,
        )
        encoder_blocks = [TransformerEncoderBlock(**block_args, name=f"encoder_block_{i}")
                          for i in range(num_layers)]
        decoder_blocks = [TransformerDecoderBlock(**block_args, use_cross_attention=True,
                                                  name=f"decoder_block_{i}")
                          for i in range(num_decoder_layers)]
        dropout_layer = Dropout(dropout, dtype=dtype, name="dropout")

        inputs = encoder_decoder_inputs()
        encoder_token_ids, encoder_padding_mask, decoder_token_ids, decoder_padding_mask = (
            inputs[name] for name in ENCODER_DECODER_INPUTS)

        tokens = token_embedding(encoder_token_ids)
        x = dropout_layer(encoder_embedding_norm(tokens + encoder_positions(tokens)))
        encoder_states = [x]
        for block in encoder_blocks:
            x = block(x, padding_mask=encoder_padding_mask)
            encoder_states.append(x)

        tokens = token_embedding(decoder_token_ids)
        y = dropout_layer(decoder_embedding_norm(tokens + decoder_positions(tokens)))
        decoder_states = [y]
        for block in decoder_blocks:
            y = block(y, encoder_sequence=x, padding_mask=decoder_padding_mask,
                      encoder_padding_mask=encoder_padding_mask)
            decoder_states.append(y)

        super().__init__(
            inputs=inputs,
            outputs=encoder_decoder_outputs(x, y, encoder_states, decoder_states),
            dtype=dtype,
            **kwargs,
        )
        # HF BartForConditionalGeneration's registered buffer: not trained.
        self.final_logits_bias = self.add_weight(
            name="final_logits_bias", shape=(vocabulary_size,), initializer="zeros",
            trainable=False)
        self.encoder_positions = encoder_positions
        self.decoder_positions = decoder_positions
        self.encoder_embedding_norm = encoder_embedding_norm
        self.decoder_embedding_norm = decoder_embedding_norm
        self.encoder_blocks = encoder_blocks
        self.decoder_blocks = decoder_blocks
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.max_sequence_length = max_sequence_length
        self._token_embedding = token_embedding
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_decoder_layers = num_decoder_layers
        self.max_sequence_length = max_sequence_length
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.lookup = lookup

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_decoder_layers": self.num_decoder_layers,
            "max_sequence_length": self.max_sequence_length,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "lookup": self.lookup,
        })
        return config

    @classmethod
    def analytic_parameter_count(cls, vocabulary_size, num_layers, hidden_size,
                                 intermediate_size, num_decoder_layers=None,
                                 max_sequence_length=1024, **unused):
        """Parameters of a BartBackbone config, counted analytically (no weights built).

        Includes the non-trainable final_logits_bias (vocabulary_size).
        """
        h, f = hidden_size, intermediate_size
        num_decoder_layers = num_decoder_layers or num_layers
        attention = 4 * h * h + 4 * h
        feedforward = 2 * h * f + f + h
        encoder = num_layers * (attention + feedforward + 4 * h)
        decoder = num_decoder_layers * (2 * attention + feedforward + 6 * h)
        embeddings = vocabulary_size * (h + 1) + 2 * (max_sequence_length * h + 2 * h)
        return embeddings + encoder + decoder

    def logits(self, hidden):
        logits = self._token_embedding.reverse(hidden)
        return logits + ops.cast(self.final_logits_bias, logits.dtype)

    # -- decoding (used by keras_ctx.generation) --------------------------------

    def encode(self, encoder_token_ids, encoder_padding_mask):
        tokens = self._token_embedding(encoder_token_ids)
        x = self.encoder_embedding_norm(tokens + self.encoder_positions(tokens))
        for block in self.encoder_blocks:
            x = block(x, padding_mask=encoder_padding_mask)
        return x

    def build_decoder_cache(self, encoder_output, max_length):
        """(self-attention caches of zeros, precomputed cross-attention caches)."""
        if max_length > self.max_sequence_length:
            raise ValueError(
                f"max_length {max_length} exceeds max_sequence_length "
                f"{self.max_sequence_length}; generate fewer tokens."
            )
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
        tokens = self._token_embedding(decoder_token_ids)
        y = self.decoder_embedding_norm(
            tokens + self.decoder_positions(tokens, start_index=cache_update_index))
        caches = []
        for i, block in enumerate(self.decoder_blocks):
            y, layer_cache, _ = block(
                y,
                encoder_padding_mask=encoder_padding_mask,
                self_attention_cache=self_cache[:, i],
                cache_update_index=cache_update_index,
                cross_attention_cache=cross_cache[:, i],
            )
            caches.append(layer_cache)
        return y, (ops.stack(caches, axis=1), cross_cache)


# Lewis et al. 2020: base 6+6 layers, 768 wide; large 12+12 layers, 1024 wide.
BART_PRESETS = {
    "bart-base": BackbonePreset(
        dict(vocabulary_size=50265, num_layers=6, num_heads=12, hidden_size=768,
             intermediate_size=3072),
        "BART base", 139_467_609),
    "bart-large": BackbonePreset(
        dict(vocabulary_size=50265, num_layers=12, num_heads=16, hidden_size=1024,
             intermediate_size=4096),
        "BART large", 406_337_625),
}

