"""GPT (Radford et al., 2018), GPT-2 (Radford et al., 2019) and GPT-3 (Brown et al., 2020).

    h_0 = W_e[tokens] + W_p[positions]
    h_l = block(h_{l-1})             l = 1..N, causal self-attention
    GPT:   post-LN blocks (norm(x + f(x))), no final norm.
    GPT-2: pre-LN blocks (x + f(norm(x))), a final layer norm, and the residual
           projections initialised with stddev 0.02 / sqrt(N_residual).
    GPT-3: GPT-2's blocks, with layers alternating dense and locally banded
           causal attention (position i attends i - w < j <= i), 2048 positions.
    logits = h_N W_e^T               (output layer tied to the token embedding)
"""

import math

import keras
from keras import ops

from keras_ctx.layers import Dropout, PositionEmbedding, TokenEmbedding, TransformerDecoderBlock
from keras_ctx.models.backbone import Backbone, BackbonePreset

ATTENTION_TYPES = ("dense", "local")


def attention_types(attention_pattern, num_layers):
    """Per-layer attention types of a pattern: "dense" (every layer), "alternating"
    (GPT-3: dense, local, dense, ...; Brown et al. 2020, Sec. 2.1) or a list of
    "dense"/"local" with one entry per layer."""
    if attention_pattern == "dense":
        return ["dense"] * num_layers
    if attention_pattern == "alternating":
        return [ATTENTION_TYPES[i % 2] for i in range(num_layers)]
    if isinstance(attention_pattern, str) or not hasattr(attention_pattern, "__len__"):
        raise ValueError(f"`attention_pattern` must be \"dense\", \"alternating\" or a "
                         f"list of \"dense\"/\"local\" per layer, got {attention_pattern!r}.")
    types = list(attention_pattern)
    if len(types) != num_layers or any(t not in ATTENTION_TYPES for t in types):
        raise ValueError(f"`attention_pattern` needs one of {ATTENTION_TYPES} per layer "
                         f"({num_layers} layers), got {types!r}.")
    return types


@keras.saving.register_keras_serializable(package="keras_ctx")
class GPTBackbone(Backbone):
    """A GPT / GPT-2 decoder stack with learned positions and tied output embeddings.

    Args:
        vocabulary_size: token ids (40478 GPT's BPE, 50257 GPT-2's byte-level BPE).
        num_layers: decoder blocks N.
        num_heads: attention heads.
        hidden_size: model width.
        intermediate_size: feed-forward width (4 * hidden_size in both papers).
        max_sequence_length: learned positions (512 GPT, 1024 GPT-2).
        dropout: embedding, residual and attention dropout (0.1 in both papers).
        normalize_first: False = GPT (post-LN), True = GPT-2 (pre-LN + final norm).
        layer_norm_epsilon: 1e-5.
        scale_residual_init: GPT-2's init of the residual projections,
            stddev 0.02 / sqrt(2 N) (two residual layers per block); defaults
            to `normalize_first`.
        activation: feed-forward activation; both papers' code uses the tanh
            GELU ("gelu_approximate", Hugging Face's "gelu_new").
        lookup: "gather" or "one_hot" token lookup (see TokenEmbedding).
        head_size: per-head width; defaults to hidden_size / num_heads (GPT-3's
            Table 2.1 lists it separately: its XL row has 24 heads of 128 on a
            2048-wide model).
        attention_pattern: "dense" (GPT, GPT-2), "alternating" (GPT-3: even
            layers dense, odd layers locally banded) or a per-layer list of
            "dense"/"local".
        window_size: the band width w of "local" layers: position i attends
            keys i - w < j <= i, as GPT-Neo's local attention (256). GPT-3's
            paper does not give its band width; its presets use GPT-Neo's.
        attention_scale: score multiplier; None = 1/sqrt(head_size). GPT-Neo
            does not scale its scores: 1.0.
        use_qkv_bias: biases on the query/key/value projections (GPT-Neo has
            none; its output projection keeps one).

    Inputs: `token_ids`, `padding_mask` (batch, time).
    Outputs: `sequence_output` (batch, time, hidden), `hidden_states`
    (embeddings, then every block's output).

    Decoding: `build_cache`, `call_with_cache` and `logits` are what
    `keras_ctx.generation` uses.

    Example:
    >>> backbone = keras_ctx.models.GPTBackbone.from_preset("gpt2")
    >>> gpt3 = keras_ctx.models.GPTBackbone.from_preset("gpt3-small")  # alternating
    >>> out = backbone({"token_ids": ids, "padding_mask": mask})
    >>> logits = backbone.logits(out["sequence_output"])

    References:
        Radford et al., "Improving Language Understanding by Generative
        Pre-Training", 2018. Radford et al., "Language Models are
        Unsupervised Multitask Learners", 2019. Brown et al., "Language
        Models are Few-Shot Learners", 2020. Child et al., "Generating Long
        Sequences with Sparse Transformers", 2019.
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_size,
        intermediate_size,
        max_sequence_length=1024,
        dropout=0.1,
        normalize_first=True,
        layer_norm_epsilon=1e-5,
        scale_residual_init=None,
        activation="gelu_approximate",
        lookup="gather",
        head_size=None,
        attention_pattern="dense",
        window_size=256,
        attention_scale=None,
        use_qkv_bias=True,
        dtype=None,
        **kwargs,
    ):
        layer_types = attention_types(attention_pattern, num_layers)
        if scale_residual_init is None:
            scale_residual_init = normalize_first
        # GPT and GPT-2 both initialise weights from N(0, 0.02).
        init = keras.initializers.RandomNormal(stddev=0.02)
        output_init = init
        if scale_residual_init:
            # GPT-2 (Radford et al., 2019, Sec. 2.3): residual-layer weights scaled
            # by 1/sqrt(N), N = number of residual layers = 2 per block.
            output_init = keras.initializers.RandomNormal(
                stddev=0.02 / math.sqrt(2 * num_layers)
            )

        token_embedding = TokenEmbedding(
            vocabulary_size, hidden_size, lookup=lookup, embeddings_initializer=init,
            dtype=dtype, name="token_embedding",
        )
        position_embedding = PositionEmbedding(
            max_sequence_length, initializer=keras.initializers.RandomNormal(stddev=0.01),
            dtype=dtype, name="position_embedding",
        )
        embedding_dropout = Dropout(dropout, dtype=dtype, name="embedding_dropout")
        blocks = [
            TransformerDecoderBlock(
                num_heads=num_heads,
                intermediate_size=intermediate_size,
                hidden_size=hidden_size,
                activation=activation,
                dropout=dropout,
                normalize_first=normalize_first,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=init,
                output_kernel_initializer=output_init,
                head_size=head_size,
                use_qkv_bias=use_qkv_bias,
                attention_scale=attention_scale,
                window_size=window_size if layer_type == "local" else None,
                dtype=dtype,
                name=f"decoder_block_{i}",
            )
            for i, layer_type in enumerate(layer_types)
        ]
        final_norm = None
        if normalize_first:
            final_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="final_norm"
            )

        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        tokens = token_embedding(token_ids)
        x = embedding_dropout(tokens + position_embedding(tokens))
        hidden_states = [x]
        for block in blocks:
            x = block(x, padding_mask=padding_mask)
            hidden_states.append(x)
        if final_norm is not None:
            x = final_norm(x)
        super().__init__(
            inputs={"token_ids": token_ids, "padding_mask": padding_mask},
            outputs={"sequence_output": x, "hidden_states": hidden_states},
            dtype=dtype,
            **kwargs,
        )
        self.position_embedding = position_embedding
        self.embedding_dropout = embedding_dropout
        self.blocks = blocks
        self.final_norm = final_norm
        self.attention_types = layer_types
        head_size = head_size or hidden_size // num_heads
        self._token_embedding = token_embedding
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.max_sequence_length = max_sequence_length
        self.dropout = dropout
        self.normalize_first = normalize_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.scale_residual_init = scale_residual_init
        self.activation = activation
        self.lookup = lookup
        self.head_size = head_size
        self.attention_pattern = attention_pattern
        self.window_size = window_size
        self.attention_scale = attention_scale
        self.use_qkv_bias = use_qkv_bias

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "max_sequence_length": self.max_sequence_length,
            "dropout": self.dropout,
            "normalize_first": self.normalize_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "scale_residual_init": self.scale_residual_init,
            "activation": self.activation,
            "lookup": self.lookup,
            "head_size": self.head_size,
            "attention_pattern": self.attention_pattern,
            "window_size": self.window_size,
            "attention_scale": self.attention_scale,
            "use_qkv_bias": self.use_qkv_bias,
        })
        return config

    @classmethod
    def analytic_parameter_count(cls, vocabulary_size, num_layers, hidden_size,
                                 intermediate_size, max_sequence_length=1024,
                                 normalize_first=True, num_heads=None, head_size=None,
                                 use_qkv_bias=True, **unused):
        """Parameters of a GPTBackbone config, counted analytically (no weights built)."""
        h, f = hidden_size, intermediate_size
        a = num_heads * head_size if head_size else h  # the attention's inner width
        attention = 3 * h * a + a * h + h + (3 * a if use_qkv_bias else 0)
        feedforward = 2 * h * f + f + h
        norms = 2 * 2 * h
        total = vocabulary_size * h + max_sequence_length * h
        total += num_layers * (attention + feedforward + norms)
        if normalize_first:
            total += 2 * h
        return total

    def logits(self, hidden):
        """Next-token logits from hidden states, tied to the input embeddings."""
        return self._token_embedding.reverse(hidden)

    def build_cache(self, batch_size, max_length):
        """Zero key/value cache (batch, layers, 2, max_length, heads, head_dim)."""
        if max_length > self.max_sequence_length:
            raise ValueError(
                f"max_length {max_length} exceeds the backbone's "
                f"max_sequence_length {self.max_sequence_length}; generate fewer tokens."
            )
        return ops.zeros(
            (batch_size, self.num_layers, 2, max_length, self.num_heads, self.head_size),
            dtype=self.compute_dtype,
        )

    def call_with_cache(self, token_ids, cache, cache_update_index):
        """Runs `token_ids` (batch, t) at positions cache_update_index.. with the cache.

        Local (banded) layers read only the last window_size keys of their
        cache at each step. Returns `(sequence_output, cache)` with the new keys/values written.
        """
        tokens = self._token_embedding(token_ids)
        x = tokens + self.position_embedding(tokens, start_index=cache_update_index)
        caches = []
        for i, block in enumerate(self.blocks):
            x, layer_cache = block(
                x, self_attention_cache=cache[:, i], cache_update_index=cache_update_index
            )
            caches.append(layer_cache)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, ops.stack(caches, axis=1)


def _gpt2(num_layers, num_heads, hidden_size):
    return dict(vocabulary_size=50257, num_layers=num_layers, num_heads=num_heads,
                hidden_size=hidden_size, intermediate_size=4 * hidden_size,
                max_sequence_length=1024, normalize_first=True)


GPT_PRESETS = {
    # Radford et al. 2018: 12 layers, 768 wide, 12 heads, 3072 FFN, 512 positions,
    # a 40,000-merge BPE vocabulary (40478 ids).
    "gpt": BackbonePreset(
        dict(vocabulary_size=40478, num_layers=12, num_heads=12, hidden_size=768,
             intermediate_size=3072, max_sequence_length=512, normalize_first=False),
        "GPT (Radford et al., 2018)", 116_534_784),
}

GPT2_PRESETS = {
    # Radford et al. 2019, Table 2.
    "gpt2": BackbonePreset(_gpt2(12, 12, 768), "GPT-2 small", 124_439_808),
    "gpt2-medium": BackbonePreset(_gpt2(24, 16, 1024), "GPT-2 medium", 354_823_168),
    "gpt2-large": BackbonePreset(_gpt2(36, 20, 1280), "GPT-2 large", 774_030_080),
    "gpt2-xl": BackbonePreset(_gpt2(48, 25, 1600), "GPT-2 XL", 1_557_611_200),
}


def _gpt3(num_layers, hidden_size, num_heads, head_size):
    # Brown et al. 2020: GPT-2's model (pre-LN, modified init) with alternating
    # dense / locally banded attention, n_ctx = 2048, d_ff = 4 * d_model, and
    # GPT-2's 50257-token byte-level BPE.
    return dict(vocabulary_size=50257, num_layers=num_layers, num_heads=num_heads,
                hidden_size=hidden_size, intermediate_size=4 * hidden_size,
                head_size=head_size, max_sequence_length=2048, normalize_first=True,
                attention_pattern="alternating", window_size=256)


# Brown et al. 2020, Table 2.1: (n_layers, d_model, n_heads, d_head); the paper's
# rounded n_params are in tests/models/test_gpt3.py, beside these exact counts.
GPT3_PRESETS = {
    "gpt3-small": BackbonePreset(
        _gpt3(12, 768, 12, 64),
        "GPT-3 Small (Brown et al. 2020)", 125_226_240),
    "gpt3-medium": BackbonePreset(
        _gpt3(24, 1024, 16, 64),
        "GPT-3 Medium (Brown et al. 2020)", 355_871_744),
    "gpt3-large": BackbonePreset(
        _gpt3(24, 1536, 16, 96),
        "GPT-3 Large (Brown et al. 2020)", 760_300_032),
    # The row is inconsistent: 24 heads x 128 = 3072 != d_model 2048. Taken
    # literally (as here) it counts 1.52B; 16 heads of 128 would give 1.32B.
    "gpt3-xl": BackbonePreset(
        _gpt3(24, 2048, 24, 128),
        "GPT-3 XL (Brown et al. 2020)", 1_517_123_584),
    "gpt3-2.7b": BackbonePreset(
        _gpt3(32, 2560, 32, 80),
        "GPT-3 2.7B (Brown et al. 2020)", 2_651_553_280),
    "gpt3-6.7b": BackbonePreset(
        _gpt3(32, 4096, 32, 128),
        "GPT-3 6.7B (Brown et al. 2020)", 6_658_404_352),
    "gpt3-13b": BackbonePreset(
        _gpt3(40, 5140, 40, 128),
        "GPT-3 13B (Brown et al. 2020)", 12_936_488_380),
    "gpt3-175b": BackbonePreset(
        _gpt3(96, 12288, 96, 128),
        "GPT-3 175B (Brown et al. 2020)", 174_604_259_328),
}


def _gpt_neo(num_layers, hidden_size, num_heads):
    # EleutherAI's GPT-Neo (Hugging Face gpt_neo configs): attention_types
    # [[["global", "local"], n/2]], window_size 256, 2048 positions, no dropout,
    # unscaled attention scores, no query/key/value biases.
    return dict(vocabulary_size=50257, num_layers=num_layers, num_heads=num_heads,
                hidden_size=hidden_size, intermediate_size=4 * hidden_size,
                max_sequence_length=2048, dropout=0.0, normalize_first=True,
                scale_residual_init=False, attention_pattern="alternating",
                window_size=256, attention_scale=1.0, use_qkv_bias=False)


GPT_NEO_PRESETS = {
    "gpt-neo-125m": BackbonePreset(_gpt_neo(12, 768, 12), "GPT-Neo 125M (EleutherAI)", 125_198_592),
    "gpt-neo-1.3b": BackbonePreset(
        _gpt_neo(24, 2048, 16),
        "GPT-Neo 1.3B (EleutherAI)", 1_315_575_808),
    "gpt-neo-2.7b": BackbonePreset(
        _gpt_neo(32, 2560, 20),
        "GPT-Neo 2.7B (EleutherAI)", 2_651_307_520),
}
