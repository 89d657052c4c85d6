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
streams and the memory with `backbone.forward_pass(inputs, memory=...)`, which calls
the same layers with the extra XLNet inputs:

- `perm_mask` (batch, T, T), XLNet's convention: 1 where position i may NOT
  attend to position j (the query stream of i; the content stream of i always
  sees itself). `keras_ctx.data.permutation` builds it.
- `target_mapping` (batch, P, T): one-hot rows, the P positions the query
  stream predicts.
- `memory`: a list of L tensors (batch, M, hidden), the input of each layer
  on the previous segment (`forward_pass` returns the next one).
"""

import keras
from keras import ops

from keras_ctx.common import validation
from keras_ctx.layers import TokenEmbedding, XLNetBlock
from keras_ctx.layers import Dropout, _checks
from keras_ctx.layers.relative_attention import even_hidden_size, relative_positional_encoding
from keras_ctx.layers.xlnet_block import xlnet_initializer
from keras_ctx.models.backbone import Backbone, BackbonePreset


def causal_attention_mask(query_length, memory_length=0, same_length=False):
    """XLNet's `attn_type="uni"` mask, true = may attend: (T, M + T), memory first.

    Query i (absolute position M + i) sees the memory and the current tokens
    up to itself (XLNet `_create_mask`). With `same_length` it also loses the
    first i columns, so every query sees exactly M + 1 keys (the same number
    of previous tokens; Transformer-XL's evaluation setting).
    """
    row = ops.arange(query_length)[:, None]
    column = ops.arange(memory_length + query_length)[None, :]
    allowed = column <= row + memory_length
    if same_length:
        allowed = ops.logical_and(allowed, column >= row)
    return allowed


def xlnet_attention_inputs(padding_mask, segment_ids, perm_mask=None, memory_length=0,
                           causal=False, same_length=False):
    """XLNet's masks and relative segment matrix, memory columns first.

    Args:
        padding_mask: (batch, T), true/1 for real tokens.
        segment_ids: (batch, T) int.
        perm_mask: (batch, T, T) or None; 1 where i may NOT attend j (XLNet).
        memory_length: M, the number of memory columns (visible unless the
            causal mask hides them; their segment id is 0, as XLNet's `mem_pad`).
        causal: XLNet's `attn_type="uni"`: `causal_attention_mask` on top.
        same_length: see `causal_attention_mask` (only with `causal`).

    Returns:
        `(content_mask, query_mask, segment_matrix)`, boolean (batch, T, M + T),
        true = may attend / different segment; `query_mask` is None without
        `perm_mask`. The content stream always sees itself (XLNet's
        `non_tgt_mask`); both streams see real keys only.
    """
    batch, length = ops.shape(padding_mask)[0], ops.shape(padding_mask)[1]
    allowed = ops.broadcast_to(ops.cast(padding_mask, "bool")[:, None, :],
                               (batch, length, length))
    if perm_mask is not None:
        allowed = ops.logical_and(allowed, ops.logical_not(ops.cast(perm_mask, "bool")))
    segment_ids = ops.cast(segment_ids, "int32")
    key_segments = segment_ids
    if memory_length:
        visible = ops.ones((batch, length, memory_length), "bool")
        allowed = ops.concatenate([visible, allowed], axis=-1)
        key_segments = ops.concatenate(
            [ops.zeros((batch, memory_length), "int32"), segment_ids], axis=-1
        )
    if causal:
        allowed = ops.logical_and(
            allowed, causal_attention_mask(length, memory_length, same_length)[None])
    # XLNet `non_tgt_mask`: the content stream of i always sees i itself.
    itself = ops.equal(ops.arange(memory_length + length)[None, :],
                       ops.arange(length)[:, None] + memory_length)
    content_mask = ops.logical_or(allowed, itself[None])
    query_mask = None if perm_mask is None else allowed
    segment_matrix = ops.not_equal(segment_ids[:, :, None], key_segments[:, None, :])
    return content_mask, query_mask, segment_matrix


def xlnet_position_encoding(query_length, key_length, hidden_size, clamp_length=-1,
                            causal=False, bi_data=False, dtype="float32"):
    """XLNet `relative_positional_encoding`: (1, R, hidden), or (2, R, hidden) with `bi_data`.

    With `bi_data`, encoding 0 is the forward one and encoding 1 has the
    distances negated, for rows that read the text backwards (XLNet's
    `bwd_pos_seq`); `TwoStreamRelativeAttention(position_index=...)` picks
    one per row.
    """
    def encoding(reverse):
        return relative_positional_encoding(
            query_length, key_length, hidden_size, bidirectional=not causal,
            clamp_length=clamp_length, reverse=reverse, dtype=dtype)

    if not bi_data:
        return encoding(False)
    return ops.concatenate([encoding(False), encoding(True)], axis=0)


class _ContentAttentionInputs(keras.layers.Layer):
    """Functional-graph wrapper: content mask, segment matrix, position encoding."""

    def __init__(self, hidden_size, clamp_length, causal=False, same_length=False, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.clamp_length = clamp_length
        self.causal = causal
        self.same_length = same_length

    def call(self, padding_mask, segment_ids):
        content_mask, _, segment_matrix = xlnet_attention_inputs(
            padding_mask, segment_ids, causal=self.causal, same_length=self.same_length)
        length = ops.shape(padding_mask)[1]
        position = xlnet_position_encoding(
            length, length, self.hidden_size, clamp_length=self.clamp_length,
            causal=self.causal, dtype=self.compute_dtype,
        )
        return content_mask, segment_matrix, position

    def compute_output_spec(self, padding_mask, segment_ids):
        batch, length = padding_mask.shape
        rows = None if length is None else (length + 1 if self.causal else 2 * length)
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
            initializer=xlnet_initializer(self.initializer_range),
        )
        self.built = True

    def call(self, reference):
        """(batch, P, hidden) copies of `mask_emb`, P = reference.shape[1]."""
        shape = ops.shape(reference)
        w = ops.cast(self.mask_emb, self.compute_dtype)
        return ops.broadcast_to(w[None, None, :], (shape[0], shape[1], self.hidden_size))


ATTENTION_TYPES = ("bi", "uni")  # XLNet's attn_type: bidirectional, or causal


@keras.saving.register_keras_serializable(package="keras_ctx")
class XLNetBackbone(Backbone):
    """XLNet encoder (functional keras.Model), plus the two-stream `forward_pass`.

    Args:
        vocabulary_size: V (32000 SentencePiece pieces in the released models).
        num_layers: L.
        num_heads: attention heads; head size is hidden_size / num_heads.
        hidden_size: d_model.
        intermediate_size: FFN width (d_inner).
        dropout: 0.1 in XLNet (embeddings, attention output, FFN).
        attention_dropout: `dropatt`, 0.1 in XLNet.
        activation: FFN activation ("gelu").
        mem_len: length M of the memory `forward_pass` returns (0: no memory).
        clamp_length: clip relative distances to [-c, c] (-1: no clipping).
        attention_type: "bi" (XLNet: every position may attend every other,
            as the permutation masks allow) or "uni" (Transformer-XL's causal
            attention, XLNet's `attn_type`).
        same_length: with "uni", every token attends the same number
            (mem_len + 1) of keys (XLNet `_create_mask`'s `same_length`).
        layer_norm_epsilon: 1e-12 in XLNet.
        initializer_range: stddev of the normal initializer, 0.02.
        lookup: "gather" or "one_hot" embedding lookup (see TokenEmbedding).

    Inputs (functional call, fine-tuning): dict of int32 (batch, T)
    `token_ids`, `padding_mask` (1 = real token), `segment_ids`. Every
    position attends every real token (content stream only, no memory).

    Outputs: dict with `sequence_output` (batch, T, hidden) and
    `hidden_states` (L + 1 tensors, embeddings first).

    Pretraining: `forward_pass(inputs, memory=None, training=None)`, see its
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
        attention_type="bi",
        same_length=False,
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
        even_hidden_size(hidden_size)  # its relative positions' sinusoids
        _checks.non_negative_int("mem_len", mem_len, why="0 = no memory")
        # XLNet's clamp_len: -1 (or 0) clips nothing.
        _checks.positive_int("clamp_length", clamp_length, least=-1, why="-1 = no clipping")
        _checks.one_of("attention_type", attention_type, ATTENTION_TYPES)
        if same_length and attention_type != "uni":
            raise ValueError(
                "`same_length=True` only applies to causal attention (XLNet applies it "
                "with attn_type='uni' only): pass attention_type='uni' or same_length=False."
            )
        # === Layers === (assigned after Model.__init__: torch's Module forbids it before)
        token_embedding = TokenEmbedding(
            vocabulary_size, hidden_size, lookup=lookup,
            embeddings_initializer=xlnet_initializer(initializer_range),
            dtype=dtype, name="token_embedding",
        )
        mask_embedding = _MaskEmbedding(
            hidden_size, initializer_range, dtype=dtype, name="mask_embedding"
        )
        mask_embedding.build()
        embeddings_dropout = Dropout(
            dropout, dtype=dtype, name="embeddings_dropout"
        )
        query_dropout = Dropout(dropout, dtype=dtype, name="query_dropout")
        position_dropout = Dropout(
            dropout, dtype=dtype, name="position_dropout"
        )
        blocks = [
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
        h = embeddings_dropout(token_embedding(inputs["token_ids"]))
        content_mask, segment_matrix, position = _ContentAttentionInputs(
            hidden_size, clamp_length, causal=attention_type == "uni",
            same_length=same_length, dtype=dtype, name="attention_inputs"
        )(inputs["padding_mask"], inputs["segment_ids"])
        position = position_dropout(position)
        hidden_states = [h]
        for block in blocks:
            h = block(h, position, content_attention_mask=content_mask,
                      segment_matrix=segment_matrix)
            hidden_states.append(h)
        outputs = {"sequence_output": h, "hidden_states": hidden_states}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self._token_embedding = token_embedding
        self.mask_embedding = mask_embedding
        self.embeddings_dropout = embeddings_dropout
        self.query_dropout = query_dropout
        self.position_dropout = position_dropout
        self.blocks = blocks
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation = activation
        self.mem_len = mem_len
        self.clamp_length = clamp_length
        self.attention_type = attention_type
        self.same_length = same_length
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
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
            "attention_dropout": self.attention_dropout,
            "activation": self.activation,
            "mem_len": self.mem_len,
            "clamp_length": self.clamp_length,
            "attention_type": self.attention_type,
            "same_length": self.same_length,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "initializer_range": self.initializer_range,
            "lookup": self.lookup,
        })
        return config

    @classmethod
    def analytic_parameter_count(cls, vocabulary_size, num_layers, num_heads, hidden_size,
                                 intermediate_size, **unused):
        """Closed-form parameter count of an XLNetBackbone config."""
        del num_heads, unused
        d, f = hidden_size, intermediate_size
        # q, k, v, r, o projections (no biases); r_w, r_r, r_s biases; seg_embed (2 rows).
        attention = 5 * d * d + 3 * d + 2 * d
        layer = attention + 2 * d + (d * f + f) + (f * d + d) + 2 * d
        return vocabulary_size * d + d + num_layers * layer  # + mask_emb

    def initial_memory(self, batch_size):
        """Zero memory (XLNet starts its `mems` at zeros): L x (batch, mem_len, hidden)."""
        return [
            ops.zeros((batch_size, self.mem_len, self.hidden_size), self.compute_dtype)
            for _ in range(self.num_layers)
        ]

    def forward_pass(self, inputs, memory=None, training=None, reuse_len=None):
        """The full XLNet pass: content stream, query stream and memory.

        Args:
            inputs: dict of `token_ids`, `padding_mask`, `segment_ids`
                (batch, T), and optionally
                `perm_mask` (batch, T, T): 1 where position i may NOT attend
                position j (XLNet's convention). With it the query stream runs;
                without it only the content stream (every real token visible).
                `target_mapping` (batch, P, T) float one-hot rows: the query
                stream is computed for those P positions only (needs perm_mask).
                `is_backward` (batch,) int: 1 for rows that read their text
                backwards (XLNet's `bi_data`): their relative distances are
                negated (`two_segment_stream` makes it).
            memory: None, or a list of `num_layers` tensors (batch, M, hidden):
                the states of the previous segment (memory columns are visible
                to every position; no gradient flows into them).
            training: dropout on or off.
            reuse_len: only the first `reuse_len` positions go into the next
                memory (XLNet `_cache_mem`): the part of the example that the
                next batch continues (`keras_ctx.data.xlnet_stream`'s two-segment
                examples). None: all T positions.

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
                f"as `forward_pass` returns in outputs['memory']), got {len(memory)}."
            )
        length = ops.shape(token_ids)[1]
        memory_length = 0 if memory is None else int(memory[0].shape[1])
        backward = inputs.get("is_backward")
        position_index = None if backward is None else ops.cast(
            ops.not_equal(backward, 0), "int32")
        known_length = token_ids.shape[1]
        if validation.optional_positive_int("reuse_len", reuse_len) and known_length and (
                reuse_len > known_length):
            validation.refuse("reuse_len", f"at most the sequence length {known_length}",
                              reuse_len)
        causal = self.attention_type == "uni"

        h = self.embeddings_dropout(self._token_embedding(token_ids), training=training)
        g = None
        if perm_mask is not None:
            reference = token_ids if target_mapping is None else target_mapping
            g = self.query_dropout(self.mask_embedding(reference), training=training)
        content_mask, query_mask, segment_matrix = xlnet_attention_inputs(
            padding_mask, segment_ids, perm_mask, memory_length, causal=causal,
            same_length=self.same_length,
        )
        position = xlnet_position_encoding(
            length, length + memory_length, self.hidden_size,
            clamp_length=self.clamp_length, causal=causal, bi_data=backward is not None,
            dtype=self.compute_dtype,
        )
        position = self.position_dropout(position, training=training)

        hidden_states = [h]
        new_memory = []
        for i, block in enumerate(self.blocks):
            layer_memory = None if memory is None else memory[i]
            if self.mem_len:
                new_memory.append(self._cache(h, layer_memory, reuse_len))
            outputs = block(
                h, position, content_attention_mask=content_mask, query_stream=g,
                query_attention_mask=query_mask, segment_matrix=segment_matrix,
                memory=layer_memory, target_mapping=target_mapping,
                position_index=position_index, training=training,
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

    def _cache(self, h, memory, reuse_len=None):
        # XLNet `_cache_mem`: the last mem_len states of [mems; h[:reuse_len]],
        # stop-gradient.
        if reuse_len is not None:
            h = h[:, :reuse_len]
        states = h if memory is None else ops.concatenate(
            [ops.cast(memory, h.dtype), h], axis=1
        )
        known = states.shape[1]
        if known is not None and known < self.mem_len:
            pad = ops.zeros((ops.shape(h)[0], self.mem_len - known, self.hidden_size), h.dtype)
            states = ops.concatenate([pad, states], axis=1)
        return ops.stop_gradient(states[:, -self.mem_len:, :])


XLNET_PRESETS = {
    # Yang et al. (2019), section 3.1: XLNet-Base has BERT-Base's shape, XLNet-Large
    # BERT-Large's; 32000 SentencePiece pieces, d_inner = 4 d_model, d_head = 64.
    "xlnet-base": BackbonePreset(
        dict(vocabulary_size=32000, num_layers=12, num_heads=12, hidden_size=768,
             intermediate_size=3072),
        "XLNet-Base cased (Yang et al. 2019)", 116_718_336),
    "xlnet-large": BackbonePreset(
        dict(vocabulary_size=32000, num_layers=24, num_heads=16, hidden_size=1024,
             intermediate_size=4096),
        "XLNet-Large cased (Yang et al. 2019)", 360_268_800),
}


