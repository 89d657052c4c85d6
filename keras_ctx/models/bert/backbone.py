"""BERT (Devlin et al. 2019), and RoBERTa / SpanBERT, which share its architecture.

    x_0 = LayerNorm(E_token[t] + E_pos[i] + E_segment[s]),  dropout
    x_l = TransformerEncoderBlock_l(x_{l-1})   (post-LN, GeLU FFN), l = 1..L
    pooled = tanh(W x_L[CLS] + b)

RoBERTa (Liu et al. 2019) is the same network with type_vocab_size=1 (one
segment embedding row, always segment 0) and 514 position rows: the Hugging
Face / fairseq checkpoint reserves rows 0 and 1 (padding_idx + 1 offset);
here positions always start at row 0, so an importer drops those two rows
(or keeps them and leaves them unused; the preset keeps 514 rows so that
parameter counts match the released model). SpanBERT (Joshi et al. 2020)
uses BERT's shapes and cased vocabulary (28996 tokens).
"""

import keras


from keras_ctx.layers import PositionEmbedding, TokenEmbedding, TransformerEncoderStack
from keras_ctx.layers import Dropout, _checks
from keras_ctx.models.backbone import Backbone, BackbonePreset
from keras_ctx.models.encoder import cls_pooler, encoder_inputs, post_ln_block_config


@keras.saving.register_keras_serializable(package="keras_ctx")
class BertBackbone(Backbone):
    """BERT / RoBERTa / SpanBERT encoder (functional keras.Model).

    Args:
        vocabulary_size: V.
        num_layers: L.
        num_heads: A.
        hidden_size: H.
        intermediate_size: FFN width (4H).
        dropout: 0.1 in every released model.
        max_sequence_length: rows of the position table (512; RoBERTa 514).
        type_vocab_size: segment embedding rows (2; RoBERTa 1).
        layer_norm_epsilon: 1e-12 (BERT), 1e-5 (RoBERTa).
        activation: FFN activation ("gelu").
        lookup: "gather" or "one_hot" embedding lookup (see TokenEmbedding).

    Inputs: dict of int32 (batch, time) `token_ids`, `padding_mask` and, when
    type_vocab_size > 1, `segment_ids`.
    Outputs: dict with `sequence_output` (batch, time, H), `hidden_states`
    (L + 1 tensors, embeddings first) and `pooled_output` (batch, H).

    Example:
    >>> backbone = keras_ctx.models.BertBackbone.from_preset("bert-tiny")
    >>> out = backbone({"token_ids": ids, "segment_ids": seg, "padding_mask": mask})
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_size,
        intermediate_size,
        dropout=0.1,
        max_sequence_length=512,
        type_vocab_size=2,
        layer_norm_epsilon=1e-12,
        activation="gelu",
        lookup="gather",
        dtype=None,
        **kwargs,
    ):
        _checks.positive_int("vocabulary_size", vocabulary_size)
        _checks.positive_int("hidden_size", hidden_size)
        _checks.divisible("hidden_size", hidden_size, "num_heads", num_heads)
        _checks.positive_int("type_vocab_size", type_vocab_size)
        _checks.positive_int("max_sequence_length", max_sequence_length)
        # One segment row (RoBERTa): every token is segment 0, so the
        # backbone takes no segment_ids (as keras-hub's RobertaBackbone).
        inputs = encoder_inputs(with_segments=type_vocab_size > 1)
        token_embedding = TokenEmbedding(vocabulary_size, hidden_size, lookup=lookup,
                                         dtype=dtype, name="token_embedding")
        x = token_embedding(inputs["token_ids"])
        positions = PositionEmbedding(max_sequence_length, dtype=dtype,
                                      name="position_embedding")(x)
        segment_ids = inputs.get("segment_ids")
        if segment_ids is None:
            segment_ids = keras.ops.zeros_like(inputs["token_ids"])
        segments = TokenEmbedding(type_vocab_size, hidden_size, lookup=lookup, dtype=dtype,
                                  name="segment_embedding")(segment_ids)
        x = keras.layers.Add(dtype=dtype, name="embeddings_add")([x, positions, segments])
        x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype,
                                             name="embeddings_norm")(x)
        x = Dropout(dropout, dtype=dtype, name="embeddings_dropout")(x)
        stack = TransformerEncoderStack(
            num_layers,
            post_ln_block_config(num_heads, hidden_size, intermediate_size, activation, dropout,
                                 layer_norm_epsilon),
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
        self._token_embedding = token_embedding
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
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
                                 intermediate_size, max_sequence_length=512, type_vocab_size=2,
                                 **unused):
        """Closed-form parameter count of a BertBackbone config (pooler included)."""
        del num_heads, unused
        h, f = hidden_size, intermediate_size
        embeddings = (vocabulary_size + max_sequence_length + type_vocab_size) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h + (h * f + f) + (f * h + h) + 2 * h
        return embeddings + num_layers * layer + h * h + h


@keras.saving.register_keras_serializable(package="keras_ctx")
class RobertaBackbone(BertBackbone):
    """RoBERTa (Liu et al. 2019): BERT's network with one segment row and 514 positions.

    Takes `token_ids` and `padding_mask` only (no segments), as keras-hub's
    RobertaBackbone; the arguments and outputs are BertBackbone's.

    Example:
    >>> backbone = keras_ctx.models.RobertaBackbone.from_preset("roberta-base")
    >>> out = backbone({"token_ids": ids, "padding_mask": mask})
    """

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_size,
                 intermediate_size, max_sequence_length=514, type_vocab_size=1,
                 layer_norm_epsilon=1e-5, **kwargs):
        super().__init__(vocabulary_size, num_layers, num_heads, hidden_size,
                         intermediate_size, max_sequence_length=max_sequence_length,
                         type_vocab_size=type_vocab_size,
                         layer_norm_epsilon=layer_norm_epsilon, **kwargs)


def _bert(num_layers, hidden_size, vocabulary_size=30522, **overrides):
    # Devlin et al. 2019 (and Turc et al. 2019 for tiny/mini/small/medium):
    # A = H / 64, FFN = 4H, 512 positions, 2 segments, uncased 30522 WordPiece.
    config = dict(vocabulary_size=vocabulary_size, num_layers=num_layers,
                  num_heads=hidden_size // 64, hidden_size=hidden_size,
                  intermediate_size=4 * hidden_size)
    config.update(overrides)
    return config


def _roberta(num_layers, hidden_size):
    # Liu et al. 2019: BPE vocabulary 50265, 514 position rows, one segment row.
    return _bert(num_layers, hidden_size, vocabulary_size=50265, max_sequence_length=514,
                 type_vocab_size=1, layer_norm_epsilon=1e-5)


BERT_PRESETS = {
    "bert-tiny": BackbonePreset(_bert(2, 128), "BERT L=2 H=128 (Turc et al. 2019)", 4_385_920),
    "bert-mini": BackbonePreset(_bert(4, 256), "BERT L=4 H=256 (Turc et al. 2019)", 11_170_560),
    "bert-small": BackbonePreset(_bert(4, 512), "BERT L=4 H=512 (Turc et al. 2019)", 28_763_648),
    "bert-medium": BackbonePreset(_bert(8, 512), "BERT L=8 H=512 (Turc et al. 2019)", 41_373_184),
    "bert-base": BackbonePreset(
        _bert(12, 768),
        "BERT-base uncased (Devlin et al. 2019)", 109_482_240),
    "bert-large": BackbonePreset(
        _bert(24, 1024),
        "BERT-large uncased (Devlin et al. 2019)", 335_141_888),
}

ROBERTA_PRESETS = {
    "roberta-base": BackbonePreset(
        _roberta(12, 768),
        "RoBERTa-base (Liu et al. 2019)", 124_645_632),
    "roberta-large": BackbonePreset(
        _roberta(24, 1024),
        "RoBERTa-large (Liu et al. 2019)", 355_359_744),
}

SPANBERT_PRESETS = {
    # SpanBERT (Joshi et al. 2020): BERT shapes, cased 28996-token vocabulary.
    "spanbert-base": BackbonePreset(
        _bert(12, 768, vocabulary_size=28996),
        "SpanBERT-base cased", 108_310_272),
    "spanbert-large": BackbonePreset(
        _bert(24, 1024, vocabulary_size=28996),
        "SpanBERT-large cased", 333_579_264),
}

MBERT_PRESETS = {
    # mBERT (Devlin et al., multilingual/README.md): BERT-base over 104 languages,
    # pretrained as BERT is (MLM + NSP), not as SpanBERT.
    "bert-base-multilingual-cased": BackbonePreset(
        _bert(12, 768, vocabulary_size=119547),
        "mBERT cased, 104 languages", 177_853_440),
    "bert-base-multilingual-uncased": BackbonePreset(
        _bert(12, 768, vocabulary_size=105879),
        "mBERT uncased, 102 languages", 167_356_416),
}


__all__ = ["BertBackbone", "RobertaBackbone", "BERT_PRESETS", "ROBERTA_PRESETS",
           "SPANBERT_PRESETS", "MBERT_PRESETS"]

