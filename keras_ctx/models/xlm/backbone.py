"""XLM (Lample & Conneau 2019): a BERT-like encoder with language embeddings and explicit positions.

    x_0 = LayerNorm(E_token[t] + E_pos[p] + E_lang[l]) * mask,  dropout
    x_l = TransformerEncoderBlock_l(x_{l-1})   (post-LN, GeLU FFN), l = 1..L

Positions are an input (`position_ids`) because translation LM restarts them
at the second sentence of a pair, and every token carries a language id
(`language_ids`), which selects its language embedding. CLM models
(`causal=True`) attend to the left only. There is no pooler: classifiers
read the first token (XLM's sequence summary).
"""

import keras
from keras import ops

from keras_ctx.layers import Dropout, TokenEmbedding, TransformerEncoderStack, _checks
from keras_ctx.models.backbone import Backbone, BackbonePreset

INPUTS = ("token_ids", "padding_mask", "position_ids", "language_ids")


@keras.saving.register_keras_serializable(package="keras_ctx")
class CausalMask(keras.layers.Layer):
    """(batch, time, time) int32 lower-triangular ones from ids: i attends to j <= i."""

    def call(self, token_ids):
        shape = ops.shape(token_ids)
        ones = ops.ones((shape[0], shape[1], shape[1]), "int32")
        return ops.cast(ops.tril(ones), "int32")

    def compute_output_spec(self, token_ids):
        batch, time = token_ids.shape
        return keras.KerasTensor((batch, time, time), dtype="int32")


@keras.saving.register_keras_serializable(package="keras_ctx")
class XLMBackbone(Backbone):
    """XLM encoder (functional keras.Model).

    Args:
        vocabulary_size: V (shared BPE over all languages).
        num_layers, num_heads, hidden_size: L, A, H.
        intermediate_size: FFN width (4H in every released XLM).
        num_languages: rows of the language embedding.
        use_language_embeddings: False for XLM-17 / XLM-100, which infer the
            language from context (their checkpoints have no language table).
        causal: left-to-right attention (CLM models).
        dropout, attention_dropout: 0.1 in the released models.
        max_sequence_length: rows of the position table (512).
        layer_norm_epsilon: 1e-12.
        activation: FFN activation ("gelu").
        languages: the language code of each language id, in id order (XLM's
            `params.id2lang`, sorted codes; transformers' `config.id2lang`), at most
            `num_languages`; None: the model names none. Text in a language gets its
            row (`keras_ctx.preprocessing.TextPreprocessor(language=...)`).

    Inputs: dict of int32 (batch, time) `token_ids`, `padding_mask`,
    `position_ids`, `language_ids` (`keras_ctx.data.multilingual` makes them).
    Outputs: `sequence_output` (batch, time, H) and `hidden_states`
    (L + 1 tensors, embeddings first).

    Example:
    >>> xlm = keras_ctx.models.XLMBackbone.from_preset("xlm-mlm-enfr-1024")

    References:
        Lample & Conneau 2019, Cross-lingual Language Model Pretraining.
    """

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_size,
                 intermediate_size, num_languages=1, use_language_embeddings=True,
                 causal=False, dropout=0.1, attention_dropout=0.1, max_sequence_length=512,
                 layer_norm_epsilon=1e-12, activation="gelu", languages=None, dtype=None,
                 **kwargs):
        _checks.positive_int("vocabulary_size", vocabulary_size)
        _checks.positive_int("num_languages", num_languages)
        languages = _language_codes(languages, num_languages)
        _checks.positive_int("max_sequence_length", max_sequence_length)
        _checks.divisible("hidden_size", hidden_size, "num_heads", num_heads)
        inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in INPUTS}
        # XLM initialises embeddings with N(0, H^-1/2).
        init = keras.initializers.RandomNormal(stddev=hidden_size ** -0.5)
        token_embedding = TokenEmbedding(vocabulary_size, hidden_size,
                                         embeddings_initializer=init, dtype=dtype,
                                         name="token_embedding")
        parts = [token_embedding(inputs["token_ids"]),
                 TokenEmbedding(max_sequence_length, hidden_size, embeddings_initializer=init,
                                dtype=dtype, name="position_embedding")(inputs["position_ids"])]
        if use_language_embeddings and num_languages > 1:
            parts.append(TokenEmbedding(num_languages, hidden_size, embeddings_initializer=init,
                                        dtype=dtype, name="language_embedding")(
                inputs["language_ids"]))
        x = keras.layers.Add(dtype=dtype, name="embeddings_add")(parts)
        x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype,
                                             name="embeddings_norm")(x)
        x = Dropout(dropout, dtype=dtype, name="embeddings_dropout")(x)
        x = x * ops.cast(inputs["padding_mask"], x.dtype)[:, :, None]  # XLM zeroes padding
        block_config = {
            "num_heads": num_heads, "hidden_size": hidden_size,
            "intermediate_size": intermediate_size, "activation": activation,
            "dropout": dropout, "attention_dropout": attention_dropout,
            "layer_norm_epsilon": layer_norm_epsilon, "normalize_first": False,
            "kernel_initializer": {"class_name": "TruncatedNormal",
                                   "config": {"stddev": 0.02}, "module": "keras.initializers"},
        }
        stack = TransformerEncoderStack(num_layers, block_config, dtype=dtype, name="encoder")
        attention_mask = CausalMask(name="causal_mask")(inputs["token_ids"]) if causal else None
        layers = stack(x, padding_mask=inputs["padding_mask"], attention_mask=attention_mask)
        outputs = {"sequence_output": layers[-1], "hidden_states": [x] + list(layers)}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self._token_embedding = token_embedding
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_languages = num_languages
        self.use_language_embeddings = use_language_embeddings
        self.causal = causal
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_sequence_length = max_sequence_length
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = activation
        self.languages = languages

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_languages": self.num_languages,
            "use_language_embeddings": self.use_language_embeddings,
            "causal": self.causal,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "max_sequence_length": self.max_sequence_length,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "activation": self.activation,
            "languages": None if self.languages is None else list(self.languages),
        })
        return config

    @classmethod
    def analytic_parameter_count(cls, vocabulary_size, num_layers, hidden_size,
                                 intermediate_size, num_languages=1,
                                 use_language_embeddings=True, max_sequence_length=512,
                                 **unused):
        """Closed-form parameter count of an XLMBackbone config."""
        del unused
        h, f = hidden_size, intermediate_size
        languages = num_languages if use_language_embeddings and num_languages > 1 else 0
        embeddings = (vocabulary_size + max_sequence_length + languages) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h + (h * f + f) + (f * h + h) + 2 * h
        return embeddings + num_layers * layer


def _language_codes(languages, num_languages):
    """`languages` as a tuple of distinct non-empty codes, at most one per language id."""
    if languages is None:
        return None
    if isinstance(languages, str) or not all(isinstance(c, str) and c for c in languages):
        raise ValueError(f"`languages` lists language codes in id order (['en', 'fr']), got "
                         f"{languages!r}.")
    languages = tuple(languages)
    if len(set(languages)) != len(languages):
        raise ValueError(f"`languages` names a language twice: {list(languages)}.")
    if len(languages) > num_languages:
        raise ValueError(f"num_languages={num_languages} language ids cannot hold the "
                         f"{len(languages)} languages {list(languages)} (one id each): raise "
                         "num_languages or name fewer languages.")
    return languages


def _xlm(vocabulary_size, num_layers, hidden_size, num_heads, num_languages, **extra):
    # Lample & Conneau 2019 / facebookresearch/XLM releases: FFN 4H, 512 positions,
    # GeLU, dropout 0.1; sizes as in the released configs.
    return dict(vocabulary_size=vocabulary_size, num_layers=num_layers,
                hidden_size=hidden_size, num_heads=num_heads,
                intermediate_size=4 * hidden_size, num_languages=num_languages, **extra)


XLM_PRESETS = {
    "xlm-mlm-en-2048": BackbonePreset(_xlm(30145, 12, 2048, 16, 1), "XLM MLM English", 667_088_896),
    "xlm-mlm-ende-1024": BackbonePreset(
        _xlm(64699, 6, 1024, 8, 2),
        "XLM MLM English-German", 142_357_504),
    "xlm-mlm-enfr-1024": BackbonePreset(
        _xlm(64139, 6, 1024, 8, 2),
        "XLM MLM English-French", 141_784_064),
    "xlm-mlm-enro-1024": BackbonePreset(
        _xlm(64592, 6, 1024, 8, 2),
        "XLM MLM English-Romanian", 142_247_936),
    "xlm-mlm-xnli15-1024": BackbonePreset(
        _xlm(95000, 12, 1024, 8, 15),
        "XLM MLM, 15 XNLI languages", 248_976_384),
    "xlm-mlm-tlm-xnli15-1024": BackbonePreset(
        _xlm(95000, 12, 1024, 8, 15),
        "XLM MLM+TLM, 15 XNLI languages", 248_976_384),
    "xlm-clm-enfr-1024": BackbonePreset(
        _xlm(64139, 6, 1024, 8, 2, causal=True),
        "XLM CLM English-French", 141_784_064),
    "xlm-clm-ende-1024": BackbonePreset(
        _xlm(64699, 6, 1024, 8, 2, causal=True),
        "XLM CLM English-German", 142_357_504),
    "xlm-mlm-17-1280": BackbonePreset(
        _xlm(200000, 16, 1280, 16, 17, use_language_embeddings=False),
        "XLM MLM, 17 languages", 571_496_960),
    "xlm-mlm-100-1280": BackbonePreset(
        _xlm(200000, 16, 1280, 16, 100, use_language_embeddings=False),
        "XLM MLM, 100 languages", 571_496_960),
}


__all__ = ["XLMBackbone", "XLM_PRESETS"]
