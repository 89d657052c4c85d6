"""XLNet (Yang et al., 2019): two-stream relative attention with Transformer-XL memory.

Notation of the paper and its code: `h` is the content stream, `g` the query
stream, `mems` the cached content states of the previous segment.

    h_0 = dropout(E[x]),   g_0 = dropout(w)           (w: the learned `mask_emb`)
    for l = 1..L (XLNetBlock, shared weights for both streams):
        a_h, a_g = TwoStreamRelativeAttention(h_{l-1}, g_{l-1}, mems_{l-1}, r, masks)
        h' = LayerNorm(h_{l-1} + dropout(a_h))       (XLNet `post_attention`)
        h_l = LayerNorm(h' + dropout(FFN(h')))        (XLNet `positionwise_ffn`)
        (the same for g)
    new mems_{l-1} = SG([mems_{l-1}; h_{l-1}])[-mem_len:]

The functional graph (what `backbone(inputs)`, fine-tuning and export run) is
the content stream only, from the standard three inputs. Pretraining runs both
streams and the memory with `backbone.forward(inputs, memory=...)`, which calls
the same layers with the extra XLNet inputs:

- `perm_mask` (batch, T, T), XLNet's convention: 1 where position i may NOT
  attend to position j (the query stream of i; the content stream of i always
  sees itself). `keras_ctx.data.permutation` builds it.
- `target_mapping` (batch, P, T): one-hot rows, the P positions the query
  stream predicts.
- `memory`: a list of L tensors (batch, M, hidden), the input of each layer
  on the previous segment (`forward` returns the next one).
"""

import keras
from keras import ops

from keras_ctx.layers import FeedForward, TokenEmbedding, TwoStreamRelativeAttention
from keras_ctx.layers import Dropout, _checks
from keras_ctx.layers.adapters import add_and_norm
from keras_ctx.layers.relative_attention import relative_positional_encoding
from keras_ctx.models.backbone import Backbone
from keras_ctx.models.presets import register_preset


def _xlnet_initializer(stddev=0.02):
    # XLNet draws every weight from N(0, 0.02) (`initializer_range`).
    return keras.initializers.RandomNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="keras_ctx")
class XLNetBlock(keras.layers.Layer):
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
    query_attention_mask, segment_matrix, memory, target_mapping, training).

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
        initializer = _xlnet_initializer(self.initializer_range)
        self.attention = TwoStreamRelativeAttention(
            num_heads=self.num_heads,
            key_dim=hidden_size // self.num_heads,
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

    def _post_attention(self, stream, attention_output, training):
        # norm(x + y) twice, through adapters when keras_ctx.adapters added some.
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


def xlnet_attention_inputs(padding_mask, segment_ids, perm_mask=None, memory_length=0):
    """XLNet's masks and relative segment matrix, memory columns first.

    Args:
        padding_mask: (batch, T), true/1 for real tokens.
        segment_ids: (batch, T) int.
        perm_mask: (batch, T, T) or None; 1 where i may NOT attend j (XLNet).
        memory_length: M, the number of memory columns (always visible;
            their segment id is 0, as in XLNet's `mem_pad`).

    Returns:
        `(content_mask, query_mask, segment_matrix)`, boolean (batch, T, M + T),
        true = may attend / different segment; `query_mask` is None without
        `perm_mask`. The content stream always sees itself (XLNet's
        `non_tgt_mask`); both streams see real keys only.
    """
    keys = ops.cast(padding_mask, "bool")[:, None, :]  # (batch, 1, T)
    length = ops.shape(padding_mask)[1]
    eye = ops.cast(ops.eye(length), "bool")[None]
    if perm_mask is None:
        query_mask = None
        content_mask = ops.logical_or(keys, eye)
    else:
        query_mask = ops.logical_and(keys, ops.logical_not(ops.cast(perm_mask, "bool")))
        content_mask = ops.logical_or(query_mask, eye)
    segment_ids = ops.cast(segment_ids, "int32")
    key_segments = segment_ids
    if memory_length:
        batch = ops.shape(padding_mask)[0]
        visible = ops.ones((batch, length, memory_length), "bool")
        content_mask = ops.concatenate([visible, content_mask], axis=-1)
        if query_mask is not None:
            query_mask = ops.concatenate([visible, query_mask], axis=-1)
        key_segments = ops.concatenate(
            [ops.zeros((batch, memory_length), "int32"), segment_ids], axis=-1
        )
    segment_matrix = ops.not_equal(segment_ids[:, :, None], key_segments[:, None, :])
    return content_mask, query_mask, segment_matrix


class _ContentAttentionInputs(keras.layers.Layer):
    """Functional-graph wrapper: content mask, segment matrix, position encoding."""

    def __init__(self, hidden_size, clamp_length, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.clamp_length = clamp_length

    def call(self, padding_mask, segment_ids):
        content_mask, _, segment_matrix = xlnet_attention_inputs(padding_mask, segment_ids)
        length = ops.shape(padding_mask)[1]
        position = relative_positional_encoding(
            length, length, self.hidden_size, clamp_length=self.clamp_length,
            dtype=self.compute_dtype,
        )
        return content_mask, segment_matrix, position

    def compute_output_spec(self, padding_mask, segment_ids):
        batch, length = padding_mask.shape
        rows = None if length is None else 2 * length
        return (
            keras.KerasTensor((batch, length, length), dtype="bool"),
            keras.KerasTensor((batch, length, length), dtype="bool"),
            keras.KerasTensor((1, rows, self.hidden_size), dtype=self.compute_dtype),
        )


class _MaskEmbedding(keras.layers.Layer):
    """XLNet's `mask_emb`: the learned start `w` of the query stream."""

    def __init__(self, hidden_size, initializer_range, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range

    def build(self, input_shape=None):
        self.mask_emb = self.add_weight(
            name="mask_emb",
            shape=(self.hidden_size,),
            initializer=_xlnet_initializer(self.initializer_range),
        )
        self.built = True

    def call(self, reference):
        """(batch, P, hidden) copies of `mask_emb`, P = reference.shape[1]."""
        shape = ops.shape(reference)
        w = ops.cast(self.mask_emb, self.compute_dtype)
        return ops.broadcast_to(w[None, None, :], (shape[0], shape[1], self.hidden_size))


@keras.saving.register_keras_serializable(package="keras_ctx")
class XLNetBackbone(Backbone):
    """XLNet encoder (functional keras.Model), plus the two-stream `forward`.

    Args:
        vocabulary_size: V (32000 SentencePiece pieces in the released models).
        num_layers: L.
        num_heads: attention heads; head size is hidden_size / num_heads.
        hidden_size: d_model.
        intermediate_size: FFN width (d_inner).
        dropout: 0.1 in XLNet (embeddings, attention output, FFN).
        attention_dropout: `dropatt`, 0.1 in XLNet.
        activation: FFN activation ("gelu").
        mem_len: length M of the memory `forward` returns (0: no memory).
        clamp_length: clip relative distances to [-c, c] (-1: no clipping).
        layer_norm_epsilon: 1e-12 in XLNet.
        initializer_range: stddev of the normal initializer, 0.02.
        lookup: "gather" or "one_hot" embedding lookup (see TokenEmbedding).

    Inputs (functional call, fine-tuning): dict of int32 (batch, T)
    `token_ids`, `padding_mask` (1 = real token), `segment_ids`. Every
    position attends every real token (content stream only, no memory).

    Outputs: dict with `sequence_output` (batch, T, hidden) and
    `hidden_states` (L + 1 tensors, embeddings first).

    Pretraining: `forward(inputs, memory=None, training=None)`, see its
    docstring: adds `perm_mask`, `target_mapping` and the memory.

    Example:
    >>> backbone = keras_ctx.models.XLNetBackbone.from_preset("xlnet-base")
    >>> out = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": seg})
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_size,
        intermediate_size,
        dropout=0.1,
        attention_dropout=0.1,
        activation="gelu",
        mem_len=0,
        clamp_length=-1,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        lookup="gather",
        dtype=None,
        **kwargs,
    ):
        _checks.positive_int("vocabulary_size", vocabulary_size)
        _checks.positive_int("num_layers", num_layers)
        _checks.positive_int("hidden_size", hidden_size)
        _checks.divisible("hidden_size", hidden_size, "num_heads", num_heads)
        if hidden_size % 2:
            raise ValueError(
                f"`hidden_size` must be even (sinusoidal relative positions), got {hidden_size}."
            )
        if isinstance(mem_len, bool) or not isinstance(mem_len, int) or mem_len < 0:
            raise ValueError(
                f"`mem_len` must be a non-negative integer (0 = no memory), got {mem_len!r}."
            )
        # === Layers ===
        self._token_embedding = TokenEmbedding(
            vocabulary_size, hidden_size, lookup=lookup,
            embeddings_initializer=_xlnet_initializer(initializer_range),
            dtype=dtype, name="token_embedding",
        )
        self.mask_embedding = _MaskEmbedding(
            hidden_size, initializer_range, dtype=dtype, name="mask_embedding"
        )
        self.mask_embedding.build()
        self.embeddings_dropout = Dropout(
            dropout, dtype=dtype, name="embeddings_dropout"
        )
        self.query_dropout = Dropout(dropout, dtype=dtype, name="query_dropout")
        self.position_dropout = Dropout(
            dropout, dtype=dtype, name="position_dropout"
        )
        self.blocks = [
            XLNetBlock(
                num_heads, intermediate_size, dropout=dropout,
                attention_dropout=attention_dropout, activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                initializer_range=initializer_range, dtype=dtype, name=f"block_{i}",
            )
            for i in range(num_layers)
        ]
        # === Functional graph: content stream only (fine-tuning, export) ===
        inputs = {
            "token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
            "padding_mask": keras.Input((None,), dtype="int32", name="padding_mask"),
            "segment_ids": keras.Input((None,), dtype="int32", name="segment_ids"),
        }
        h = self.embeddings_dropout(self._token_embedding(inputs["token_ids"]))
        content_mask, segment_matrix, position = _ContentAttentionInputs(
            hidden_size, clamp_length, dtype=dtype, name="attention_inputs"
        )(inputs["padding_mask"], inputs["segment_ids"])
        position = self.position_dropout(position)
        hidden_states = [h]
        for block in self.blocks:
            h = block(h, position, content_attention_mask=content_mask,
                      segment_matrix=segment_matrix)
            hidden_states.append(h)
        outputs = {"sequence_output": h, "hidden_states": hidden_states}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self._config = {
            "vocabulary_size": vocabulary_size,
            "num_layers": num_layers,
            "num_heads": num_heads,
            "hidden_size": hidden_size,
            "intermediate_size": intermediate_size,
            "dropout": dropout,
            "attention_dropout": attention_dropout,
            "activation": activation,
            "mem_len": mem_len,
            "clamp_length": clamp_length,
            "layer_norm_epsilon": layer_norm_epsilon,
            "initializer_range": initializer_range,
            "lookup": lookup,
        }
        for key, value in self._config.items():
            setattr(self, key, value)

    @property
    def token_embedding(self):
        return self._token_embedding

    def initial_memory(self, batch_size):
        """Zero memory (XLNet starts its `mems` at zeros): L x (batch, mem_len, hidden)."""
        return [
            ops.zeros((batch_size, self.mem_len, self.hidden_size), self.compute_dtype)
            for _ in range(self.num_layers)
        ]

    def forward(self, inputs, memory=None, training=None):
        """The full XLNet pass: content stream, query stream and memory.

        Args:
            inputs: dict of `token_ids`, `padding_mask`, `segment_ids`
                (batch, T), and optionally
                `perm_mask` (batch, T, T): 1 where position i may NOT attend
                position j (XLNet's convention). With it the query stream runs;
                without it only the content stream (every real token visible).
                `target_mapping` (batch, P, T) float one-hot rows: the query
                stream is computed for those P positions only (needs perm_mask).
            memory: None, or a list of `num_layers` tensors (batch, M, hidden):
                the states of the previous segment (memory columns are visible
                to every position; no gradient flows into them).
            training: dropout on or off.

        Returns:
            dict with `sequence_output` (content stream, (batch, T, hidden)),
            `hidden_states` (L + 1, embeddings first), `query_output`
            ((batch, P or T, hidden), only with `perm_mask`) and, when
            `mem_len > 0`, `memory`: the next memory, L tensors
            (batch, mem_len, hidden) = SG([memory; layer input])[-mem_len:].
        """
        token_ids = ops.convert_to_tensor(inputs["token_ids"], "int32")
        padding_mask = inputs["padding_mask"]
        segment_ids = inputs.get("segment_ids")
        if segment_ids is None:
            segment_ids = ops.zeros_like(token_ids)
        perm_mask = inputs.get("perm_mask")
        target_mapping = inputs.get("target_mapping")
        if target_mapping is not None and perm_mask is None:
            raise ValueError(
                "`target_mapping` needs a `perm_mask`: the query stream only runs "
                "under a permutation mask. Build both with "
                "keras_ctx.data.permutation.permutation_masks."
            )
        if memory is not None and len(memory) != self.num_layers:
            raise ValueError(
                f"`memory` must be a list of {self.num_layers} tensors (one per layer, "
                f"as `forward` returns in outputs['memory']), got {len(memory)}."
            )
        length = ops.shape(token_ids)[1]
        memory_length = 0 if memory is None else int(memory[0].shape[1])

        h = self.embeddings_dropout(self._token_embedding(token_ids), training=training)
        g = None
        if perm_mask is not None:
            reference = token_ids if target_mapping is None else target_mapping
            g = self.query_dropout(self.mask_embedding(reference), training=training)
        content_mask, query_mask, segment_matrix = xlnet_attention_inputs(
            padding_mask, segment_ids, perm_mask, memory_length
        )
        position = relative_positional_encoding(
            length, length + memory_length, self.hidden_size,
            clamp_length=self.clamp_length, dtype=self.compute_dtype,
        )
        position = self.position_dropout(position, training=training)

        hidden_states = [h]
        new_memory = []
        for i, block in enumerate(self.blocks):
            layer_memory = None if memory is None else memory[i]
            if self.mem_len:
                new_memory.append(self._cache(h, layer_memory))
            outputs = block(
                h, position, content_attention_mask=content_mask, query_stream=g,
                query_attention_mask=query_mask, segment_matrix=segment_matrix,
                memory=layer_memory, target_mapping=target_mapping, training=training,
            )
            if g is None:
                h = outputs
            else:
                h, g = outputs
            hidden_states.append(h)
        result = {"sequence_output": h, "hidden_states": hidden_states}
        if g is not None:
            result["query_output"] = g
        if self.mem_len:
            result["memory"] = new_memory
        return result

    def _cache(self, h, memory):
        # XLNet `_cache_mem`: the last mem_len states of [mems; h], stop-gradient.
        states = h if memory is None else ops.concatenate(
            [ops.cast(memory, h.dtype), h], axis=1
        )
        known = states.shape[1]
        if known is not None and known < self.mem_len:
            pad = ops.zeros((ops.shape(h)[0], self.mem_len - known, self.hidden_size), h.dtype)
            states = ops.concatenate([pad, states], axis=1)
        return ops.stop_gradient(states[:, -self.mem_len:, :])


def xlnet_parameter_count(vocabulary_size, num_layers, num_heads, hidden_size,
                          intermediate_size, **unused):
    """Closed-form parameter count of an XLNetBackbone config."""
    del num_heads, unused
    d, f = hidden_size, intermediate_size
    # q, k, v, r, o projections (no biases); r_w, r_r, r_s biases; seg_embed (2 rows).
    attention = 5 * d * d + 3 * d + 2 * d
    layer = attention + 2 * d + (d * f + f) + (f * d + d) + 2 * d
    return vocabulary_size * d + d + num_layers * layer  # + mask_emb


XLNET_PRESETS = {
    # Yang et al. (2019), section 3.1: XLNet-Base has BERT-Base's shape, XLNet-Large
    # BERT-Large's; 32000 SentencePiece pieces, d_inner = 4 d_model, d_head = 64.
    "xlnet-base": (
        dict(vocabulary_size=32000, num_layers=12, num_heads=12, hidden_size=768,
             intermediate_size=3072),
        "XLNet-Base cased (Yang et al. 2019), 116.7M",
    ),
    "xlnet-large": (
        dict(vocabulary_size=32000, num_layers=24, num_heads=16, hidden_size=1024,
             intermediate_size=4096),
        "XLNet-Large cased (Yang et al. 2019), 360.3M",
    ),
}

for _name, (_config, _description) in XLNET_PRESETS.items():
    register_preset(_name, XLNetBackbone, _config, _description)


# Lets `list_presets` count without building (keras_ctx.models.presets).
XLNetBackbone.analytic_parameter_count = staticmethod(xlnet_parameter_count)
