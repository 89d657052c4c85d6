"""ELECTRA (Clark et al. 2020) backbones: BERT's encoder with an embedding projection.

    e_0 = LayerNorm(E_token[t] + E_pos[i] + E_segment[s])        (size E)
    x_0 = e_0 W_proj + b       only when E != H  (ELECTRA-small: E=128, H=256)
    x_l = TransformerEncoderBlock_l(x_{l-1})   (post-LN, GeLU FFN), l = 1..L

There is no pooler: the released discriminators have none (fine-tuning heads
read x_L[CLS]), so the outputs are `sequence_output` and `hidden_states`.

The generator and the discriminator share the embedding block (token,
position and segment tables and their LayerNorm: the released code builds
both under one "electra/embeddings" variable scope); each network keeps its
own E -> H projection. `ElectraBackbone(..., shared_embeddings=discriminator)`
builds a network on another's embedding layers (the same variables), and
`electra_generator(discriminator, hidden_fraction)` builds the small MLM
generator that way, sized as the released code does: H_g = round(H * fraction),
A_g = max(1, H_g // 64), FFN_g = 4 H_g, same depth.
"""

import keras

from keras_ctx.common import validation
from keras_ctx.layers import PositionEmbedding, TokenEmbedding, TransformerEncoderStack
from keras_ctx.layers import Dropout, _checks
from keras_ctx.models.backbone import Backbone, BackbonePreset
from keras_ctx.models.encoder import encoder_inputs, post_ln_block_config

EMBEDDING_LAYERS = ("token_embedding", "position_embedding", "segment_embedding",
                    "embeddings_norm")


@keras.saving.register_keras_serializable(package="keras_ctx")
class ElectraBackbone(Backbone):
    """ELECTRA generator or discriminator encoder (functional keras.Model).

    Args:
        vocabulary_size: V (30522 uncased WordPiece).
        num_layers, num_heads, hidden_size, intermediate_size: L, A, H, FFN.
        embedding_size: E; None means E = H (ELECTRA-base/large); 128 for
            ELECTRA-small. When E != H a dense layer projects E -> H.
        dropout, max_sequence_length, type_vocab_size: as `BertBackbone`.
        layer_norm_epsilon, activation, lookup: as `BertBackbone`.
        shared_embeddings: another `ElectraBackbone` whose embedding block
            (token/position/segment tables + LayerNorm) this one reuses:
            the same variables, not copies. Not serialized: the ELECTRA
            pretrainer re-ties it when rebuilt. The table sizes come from it.

    Inputs: dict of int32 (batch, time) `token_ids`, `segment_ids`, `padding_mask`.
    Outputs: dict with `sequence_output` (batch, time, H) and `hidden_states`
    (L + 1 tensors, the projected embeddings first).

    Example:
    >>> discriminator = keras_ctx.models.ElectraBackbone.from_preset("electra-small")
    >>> generator = keras_ctx.models.electra_generator(discriminator, 0.25)
    >>> generator.token_embedding.embeddings is discriminator.token_embedding.embeddings
    True

    References:
        Clark et al., "ELECTRA: Pre-training Text Encoders as Discriminators
        Rather Than Generators", ICLR 2020.
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_size,
        intermediate_size,
        embedding_size=None,
        dropout=0.1,
        max_sequence_length=512,
        type_vocab_size=2,
        layer_norm_epsilon=1e-12,
        activation="gelu",
        lookup="gather",
        shared_embeddings=None,
        dtype=None,
        **kwargs,
    ):
        _checks.positive_int("vocabulary_size", vocabulary_size)
        _checks.positive_int("hidden_size", hidden_size)
        _checks.divisible("hidden_size", hidden_size, "num_heads", num_heads)
        _checks.positive_int("type_vocab_size", type_vocab_size)
        _checks.positive_int("max_sequence_length", max_sequence_length)
        embedding_size = _checks.optional_positive_int("embedding_size", embedding_size)
        if embedding_size is None:
            embedding_size = hidden_size
        if shared_embeddings is not None:
            layers = _embedding_layers_of(shared_embeddings)
            theirs = {
                "vocabulary_size": shared_embeddings.vocabulary_size,
                "embedding_size": shared_embeddings.embedding_size,
                "max_sequence_length": shared_embeddings.max_sequence_length,
                "type_vocab_size": shared_embeddings.type_vocab_size,
            }
            ours = {"vocabulary_size": vocabulary_size, "embedding_size": embedding_size,
                    "max_sequence_length": max_sequence_length,
                    "type_vocab_size": type_vocab_size}
            for key, value in theirs.items():
                if ours[key] != value:
                    raise ValueError(
                        f"`shared_embeddings` has {key}={value} but this backbone asks for "
                        f"{ours[key]}; give the same {key} (or leave out shared_embeddings)."
                    )
        else:
            layers = {
                "token_embedding": TokenEmbedding(vocabulary_size, embedding_size,
                                                  lookup=lookup, dtype=dtype,
                                                  name="token_embedding"),
                "position_embedding": PositionEmbedding(max_sequence_length, dtype=dtype,
                                                        name="position_embedding"),
                "segment_embedding": TokenEmbedding(type_vocab_size, embedding_size,
                                                    lookup=lookup, dtype=dtype,
                                                    name="segment_embedding"),
                "embeddings_norm": keras.layers.LayerNormalization(
                    epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_norm"),
            }
        inputs = encoder_inputs(with_segments=True)
        x = layers["token_embedding"](inputs["token_ids"])
        positions = layers["position_embedding"](x)
        segments = layers["segment_embedding"](inputs["segment_ids"])
        x = keras.layers.Add(dtype=dtype, name="embeddings_add")([x, positions, segments])
        x = layers["embeddings_norm"](x)
        x = Dropout(dropout, dtype=dtype, name="embeddings_dropout")(x)
        if embedding_size != hidden_size:
            # ELECTRA's "embeddings_project" (Clark et al. 2020, Sec. 3.2: the
            # generator is smaller than the shared embeddings).
            x = keras.layers.Dense(
                hidden_size, dtype=dtype, name="embeddings_projection",
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02))(x)
        stack = TransformerEncoderStack(
            num_layers,
            post_ln_block_config(num_heads, hidden_size, intermediate_size, activation, dropout,
                                 layer_norm_epsilon),
            dtype=dtype,
            name="encoder",
        )
        outputs_list = stack(x, padding_mask=inputs["padding_mask"])
        outputs = {
            "sequence_output": outputs_list[-1],
            "hidden_states": [x] + list(outputs_list),
        }
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self._expose_encoder(inputs, x, stack)
        self._embedding_layers = layers
        self._token_embedding = layers["token_embedding"]
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.embedding_size = embedding_size
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
                                 intermediate_size, embedding_size=None,
                                 max_sequence_length=512, type_vocab_size=2, **unused):
        """Closed-form parameter count of an ElectraBackbone config (no pooler, no head)."""
        del num_heads, unused
        h, f = hidden_size, intermediate_size
        e = embedding_size or h
        embeddings = (vocabulary_size + max_sequence_length + type_vocab_size) * e + 2 * e
        projection = (e * h + h) if e != h else 0
        layer = 4 * (h * h + h) + 2 * h + (h * f + f) + (f * h + h) + 2 * h
        return embeddings + projection + num_layers * layer

    @property
    def embedding_layers(self):
        """{name: layer} of the (shareable) embedding block."""
        return dict(self._embedding_layers)


def _embedding_layers_of(backbone):
    if not isinstance(backbone, ElectraBackbone):
        raise ValueError(
            "`shared_embeddings` must be an ElectraBackbone (the discriminator), got "
            f"{type(backbone).__name__}."
        )
    return backbone.embedding_layers


def generator_config(discriminator_config, hidden_fraction=0.25, layer_fraction=1.0):
    """The generator's config from a discriminator's, as ELECTRA's released code sizes it.

    H_g = round(H * hidden_fraction), L_g = round(L * layer_fraction),
    FFN_g = 4 H_g, A_g = max(1, H_g // 64) (google-research/electra,
    `get_generator_config`); the embedding size stays the discriminator's E.
    Clark et al. 2020, Table 6: hidden_fraction 1/4 (small), 1/3 (base), 1/4 (large).
    """
    hidden_fraction = validation.fraction("hidden_fraction", hidden_fraction)
    layer_fraction = validation.fraction("layer_fraction", layer_fraction)
    config = dict(discriminator_config)
    hidden = int(round(config["hidden_size"] * hidden_fraction))
    if hidden_fraction == 1.0:
        heads, ffn = config["num_heads"], config["intermediate_size"]
    else:
        heads, ffn = max(1, hidden // 64), 4 * hidden
    if hidden < 1 or hidden % heads:
        raise ValueError(
            f"hidden_fraction={hidden_fraction} gives a generator hidden size of {hidden}, "
            f"not divisible into {heads} heads; choose another fraction.")
    config.update(hidden_size=hidden, num_heads=heads, intermediate_size=ffn,
                  num_layers=max(1, int(round(config["num_layers"] * layer_fraction))))
    if config.get("embedding_size") is None:
        config["embedding_size"] = discriminator_config["hidden_size"]
    return config


def electra_generator(discriminator, hidden_fraction=0.25, layer_fraction=1.0, name=None):
    """A small MLM generator sharing `discriminator`'s embedding block (same variables)."""
    config = generator_config(discriminator.get_config(), hidden_fraction, layer_fraction)
    config.pop("trainable", None)
    config["name"] = name or f"{discriminator.name}_generator"
    return ElectraBackbone(shared_embeddings=discriminator, **config)


def _electra(num_layers, hidden_size, num_heads, embedding_size=None):
    # Clark et al. 2020, Table 6; BERT's uncased 30522 WordPiece, 512 positions,
    # 2 segments; FFN = 4H.
    return dict(vocabulary_size=30522, num_layers=num_layers, num_heads=num_heads,
                hidden_size=hidden_size, intermediate_size=4 * hidden_size,
                embedding_size=embedding_size)


# Discriminator parameter counts as released (Hugging Face ElectraModel: no
# pooler, no RTD head): 13.5M / 108.9M / 334.1M.
ELECTRA_PRESETS = {
    "electra-small": BackbonePreset(
        _electra(12, 256, 4, embedding_size=128),
        "ELECTRA-small discriminator (Clark et al. 2020), E=128", 13_483_008),
    "electra-base": BackbonePreset(
        _electra(12, 768, 12),
        "ELECTRA-base discriminator (Clark et al. 2020)", 108_891_648),
    "electra-large": BackbonePreset(
        _electra(24, 1024, 16),
        "ELECTRA-large discriminator (Clark et al. 2020)", 334_092_288),
}

# Generator hidden-size fraction per size (Clark et al. 2020, Table 6).
ELECTRA_GENERATOR_FRACTIONS = {"electra-small": 1 / 4, "electra-base": 1 / 3,
                               "electra-large": 1 / 4}


__all__ = ["ElectraBackbone", "ELECTRA_PRESETS", "ELECTRA_GENERATOR_FRACTIONS",
           "electra_generator", "generator_config"]

