"""ALBERT (Lan et al. 2020): BERT with factorized embeddings and cross-layer sharing.

    e_0 = LayerNorm(E_token[t] + E_pos[i] + E_segment[s])        (size E = 128)
    x_0 = e_0 W_proj + b                                         (E -> H)
    x_l = Block(x_{l-1}), the same block every layer (sharing="all")
    pooled = tanh(W x_L[CLS] + b)

Embedding parameters drop from V*H to V*E + E*H. `sharing` also takes
"attention" or "ffn" (Lan et al. 2020, Table 4 ablations) and "none".
"""

import keras

from keras_ctx.layers import FactorizedEmbedding, PositionEmbedding, TokenEmbedding
from keras_ctx.layers import TransformerEncoderBlock, TransformerEncoderStack
from keras_ctx.layers import Dropout, _checks
from keras_ctx.models.backbone import Backbone, BackbonePreset
from keras_ctx.models.encoder import cls_pooler, encoder_inputs, post_ln_block_config

# Lan et al. 2020: "all" (ALBERT), and Table 4's ablations sharing only the
# attention or only the feed-forward sublayer (each with its normalisation).
SHARING = ("all", "attention", "ffn", "none")


class _PartlySharedBlock(TransformerEncoderBlock):
    """An encoder block whose attention or feed-forward sublayer (and its norm) is
    `first`'s: the same layer object, so the same weights."""

    def __init__(self, first, part, **kwargs):
        super().__init__(**kwargs)
        # Untracked: the first block owns these weights; this one only calls them.
        object.__setattr__(self, "_first", first)
        self._part = part

    def _attention(self, name, hidden, window_size=None):
        if self._part == "attention":
            return self._first.self_attention
        return super()._attention(name, hidden, window_size)

    def _feedforward(self):
        return self._first.feedforward if self._part == "ffn" else super()._feedforward()

    def _norm(self, name):
        shared = {"attention": "self_attention_norm", "ffn": "feedforward_norm"}[self._part]
        return getattr(self._first, name) if name == shared else super()._norm(name)


@keras.saving.register_keras_serializable(package="keras_ctx")
class AlbertEncoderStack(TransformerEncoderStack):
    """ALBERT's encoder: one block called again at every layer (cross-layer sharing).

    Args:
        num_layers, block_config: as `TransformerEncoderStack`.
        sharing: "all" (ALBERT: `blocks` is one block num_layers times);
            "attention" or "ffn" (only that sublayer and its normalisation
            shared, Lan et al. 2020, Table 4); "none" (BERT's stack).

    Call arguments and returns: as `TransformerEncoderStack`.
    """

    def __init__(self, num_layers, block_config, sharing="all", **kwargs):
        super().__init__(num_layers, block_config, **kwargs)
        self.sharing = _checks.one_of("sharing", sharing, SHARING)

    def _make_blocks(self, input_shape):
        if self.sharing == "none":
            return super()._make_blocks(input_shape)
        first = self._new_block(0)
        first.build(input_shape)
        if self.sharing == "all":
            return [first] * self.num_layers
        blocks = [first]
        for index in range(1, self.num_layers):
            block = _PartlySharedBlock(first, self.sharing, **self.block_config,
                                       dtype=self.dtype_policy, name=f"block_{index}")
            block.build(input_shape)
            blocks.append(block)
        return blocks

    def get_config(self):
        return dict(super().get_config(), sharing=self.sharing)


@keras.saving.register_keras_serializable(package="keras_ctx")
class AlbertBackbone(Backbone):
    """ALBERT encoder (functional keras.Model).

    Args:
        vocabulary_size: V (30000 SentencePiece pieces in the released models).
        num_layers, num_heads, hidden_size, intermediate_size: as BERT.
        embedding_size: E (128 in every ALBERT size).
        sharing: "all" (ALBERT), "attention", "ffn" or "none".
        dropout: 0 in ALBERT v2; 0.1 default here as v1.
        max_sequence_length, type_vocab_size: as BERT.
        layer_norm_epsilon, activation, lookup: as BERT.

    Inputs/outputs: as `BertBackbone`. `token_embedding` is the
    `FactorizedEmbedding`, whose `.reverse` reads the V x E table.

    Example:
    >>> backbone = keras_ctx.models.AlbertBackbone.from_preset("albert-base")
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_size,
        intermediate_size,
        embedding_size=128,
        sharing="all",
        dropout=0.1,
        max_sequence_length=512,
        type_vocab_size=2,
        layer_norm_epsilon=1e-12,
        activation="gelu",
        lookup="gather",
        dtype=None,
        **kwargs,
    ):
        _checks.divisible("hidden_size", hidden_size, "num_heads", num_heads)
        inputs = encoder_inputs(with_segments=True)
        embedding = FactorizedEmbedding(vocabulary_size, embedding_size, hidden_size,
                                        lookup=lookup, dtype=dtype, name="token_embedding")
        embedding.build()
        # The E-sized sum and norm sit between lookup and projection, so the
        # factorized layer's two halves are used separately here.
        x = embedding.token_embedding(inputs["token_ids"])
        positions = PositionEmbedding(max_sequence_length, dtype=dtype,
                                      name="position_embedding")(x)
        segments = TokenEmbedding(type_vocab_size, embedding_size, lookup=lookup, dtype=dtype,
                                  name="segment_embedding")(inputs["segment_ids"])
        x = keras.layers.Add(dtype=dtype, name="embeddings_add")([x, positions, segments])
        x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype,
                                             name="embeddings_norm")(x)
        x = Dropout(dropout, dtype=dtype, name="embeddings_dropout")(x)
        x = embedding.projection(x)
        stack = AlbertEncoderStack(
            num_layers,
            post_ln_block_config(num_heads, hidden_size, intermediate_size, activation, dropout,
                                 layer_norm_epsilon),
            sharing=sharing,
            dtype=dtype,
            name="encoder",
        )
        layers = stack(x, padding_mask=inputs["padding_mask"])
        pooler = cls_pooler(hidden_size, dtype)
        outputs = {
            "sequence_output": layers[-1],
            "hidden_states": [x] + list(layers),
            "pooled_output": pooler(layers[-1][:, 0, :]),
        }
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self._expose_encoder(inputs, x, stack, pooler)
        self._token_embedding = embedding
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.embedding_size = embedding_size
        self.sharing = sharing
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.type_vocab_size = type_vocab_size
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = activation
        self.lookup = lookup

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "embedding_size": self.embedding_size,
            "sharing": self.sharing,
            "dropout": self.dropout,
            "max_sequence_length": self.max_sequence_length,
            "type_vocab_size": self.type_vocab_size,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "activation": self.activation,
            "lookup": self.lookup,
        })
        return config

    @classmethod
    def analytic_parameter_count(cls, vocabulary_size, num_layers, num_heads, hidden_size,
                                 intermediate_size, embedding_size=128, sharing="all",
                                 max_sequence_length=512, type_vocab_size=2, **unused):
        """Closed-form parameter count of an AlbertBackbone config (pooler included)."""
        del num_heads, unused
        h, f, e = hidden_size, intermediate_size, embedding_size
        embeddings = (vocabulary_size + max_sequence_length + type_vocab_size) * e + 2 * e
        projection = e * h + h
        attention = 4 * (h * h + h) + 2 * h
        ffn = (h * f + f) + (f * h + h) + 2 * h
        distinct_attention = 1 if sharing in ("all", "attention") else num_layers
        distinct_ffn = 1 if sharing in ("all", "ffn") else num_layers
        layers = distinct_attention * attention + distinct_ffn * ffn
        return embeddings + projection + layers + h * h + h


def _albert(num_layers, hidden_size, num_heads, intermediate_size):
    # Lan et al. 2020, Table 1: V=30000 SentencePiece, E=128, all layers shared.
    return dict(vocabulary_size=30000, num_layers=num_layers, num_heads=num_heads,
                hidden_size=hidden_size, intermediate_size=intermediate_size,
                embedding_size=128, sharing="all")


ALBERT_PRESETS = {
    "albert-base": BackbonePreset(
        _albert(12, 768, 12, 3072),
        "ALBERT-base (Lan et al. 2020)", 11_683_584),
    "albert-large": BackbonePreset(
        _albert(24, 1024, 16, 4096),
        "ALBERT-large (Lan et al. 2020)", 17_683_968),
    "albert-xlarge": BackbonePreset(
        _albert(24, 2048, 16, 8192),
        "ALBERT-xlarge (Lan et al. 2020)", 58_724_864),
    "albert-xxlarge": BackbonePreset(
        _albert(12, 4096, 64, 16384),
        "ALBERT-xxlarge (Lan et al. 2020)", 222_595_584),
}


__all__ = ["AlbertBackbone", "AlbertEncoderStack", "ALBERT_PRESETS"]

