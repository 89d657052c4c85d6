"""XLNet's two-stream relative attention (Yang et al., 2019; Dai et al., 2019).

Everything is batch-major: (batch, time, ...). Notation follows the XLNet
paper and code: `h` is the content stream, `g` the query stream, `r` the
relative positional encoding, `mems` the cached states of the previous segment.
"""

import keras
from keras import ops

from keras_ctx.common import validation
from keras_ctx.layers import _checks
from keras_ctx.layers.attention import masked_softmax
from keras_ctx.layers.dropout import Dropout


def even_hidden_size(hidden_size):
    """`hidden_size` when the sinusoids fit it: half sine, half cosine features."""
    return validation.even_positive_int("hidden_size", hidden_size,
                                        "half sine, half cosine features")


def relative_positional_encoding(
    query_length,
    key_length,
    hidden_size,
    bidirectional=True,
    clamp_length=-1,
    reverse=False,
    dtype="float32",
):
    """Sinusoidal relative positional encodings, (1, positions, hidden_size).

    Row `p` encodes the relative distance `pos_seq[p]`, where `pos_seq` is
    `key_length, key_length - 1, ..., -query_length + 1` (bidirectional,
    `key_length + query_length` rows) or `key_length, ..., 0` (unidirectional,
    `key_length + 1` rows). A query at absolute position `i + memory_length`
    and a key at position `j` are `(i + memory_length) - j` apart.

    Args:
        query_length: T, the number of query (content stream) positions.
        key_length: K = memory length + T.
        hidden_size: D, the model width (even).
        bidirectional: whether negative distances (keys after the query) get
            rows; `False` is only valid with a causal mask.
        clamp_length: if > 0, distances are clipped to
            `[-clamp_length, clamp_length]` (XLNet's `clamp_len`).
        reverse: encode the negated distances `-pos_seq[p]`: XLNet's
            `bi_data` rows that read the text backwards (its `bwd_pos_seq`).
        dtype: dtype of the result.

    Returns:
        A (1, key_length + query_length, hidden_size) tensor (or
        (1, key_length + 1, hidden_size) when not bidirectional).

    Example:
    >>> relative_positional_encoding(4, 6, 8).shape
    TensorShape([1, 10, 8])
    """
    even_hidden_size(hidden_size)
    # Transformer-XL (Dai et al., 2019, section 3.3) / XLNet
    # `relative_positional_encoding`: pos_seq = klen, ..., -qlen + 1 and
    # inv_freq = 1 / 10000^(2k / d), the sinusoids of Vaswani et al. (2017).
    end = -query_length if bidirectional else -1
    pos_seq = ops.arange(key_length, end, -1, dtype="float32")
    if reverse:
        pos_seq = -pos_seq
    if clamp_length > 0:
        pos_seq = ops.clip(pos_seq, -float(clamp_length), float(clamp_length))
    inv_freq = 1.0 / (
        10000.0 ** (ops.arange(0, hidden_size, 2, dtype="float32") / hidden_size)
    )
    sinusoid = pos_seq[:, None] * inv_freq[None, :]
    pos_emb = ops.concatenate([ops.sin(sinusoid), ops.cos(sinusoid)], axis=-1)
    return ops.cast(pos_emb[None, :, :], dtype)


def two_stream_masks(order, memory_length=0):
    """Content and query stream masks for one factorization order per row.

    XLNet (Yang et al., 2019, section 2.3) samples a permutation `z` of the
    positions and predicts `x_{z_t}` from `x_{z_<t}`. With `rank(j)` the step
    at which position j is predicted:

    - content stream `h_i` may see position j iff `rank(j) <= rank(i)`
      (itself included);
    - query stream `g_i` may see position j iff `rank(j) < rank(i)` (not its
      own content).

    Args:
        order: int (batch, T) (or (T,)); `order[b, r]` is the position
            predicted at step r, a permutation of `0..T-1` per row.
        memory_length: M; that many always-visible memory columns are put in
            front, so the masks fit a layer called with `memory`.

    Returns:
        `(content_mask, query_mask)`, boolean (batch, T, M + T) tensors
        (true = may attend), ready for `TwoStreamRelativeAttention`.

    Example:
    >>> content, query = two_stream_masks(np.array([[2, 1, 3, 0]]))
    >>> np.asarray(query)[0, 1].tolist()  # position 1 (step 1) sees position 2
    [False, False, True, False]
    """
    order = ops.convert_to_tensor(order)
    # rank[order[r]] = r, i.e. the inverse permutation.
    rank = ops.argsort(order, axis=-1)
    rank_i = ops.expand_dims(rank, -1)
    rank_j = ops.expand_dims(rank, -2)
    content_mask = rank_j <= rank_i
    query_mask = rank_j < rank_i
    if memory_length:
        visible = ops.ones_like(content_mask[..., :1])
        visible = ops.repeat(visible, memory_length, axis=-1)
        content_mask = ops.concatenate([visible, content_mask], axis=-1)
        query_mask = ops.concatenate([visible, query_mask], axis=-1)
    return content_mask, query_mask


def rel_shift(x, key_length):
    """Transformer-XL's relative shift (Dai et al., 2019, appendix B).

    `x` (batch, heads, T, R) holds scores of every query against every row of
    the positional encoding; returns (batch, heads, T, key_length) with
    `out[..., i, j] = x[..., i, T - i + j]`, the row whose distance is
    `(i + M) - j` (M = key_length - T). Reshape and slice only, no gather.
    `ops.slice`, not `x[...]`: TensorFlow's gradient of a strided slice
    (StridedSliceGrad) took 99 of XLNet-mini's 527 ms step without XLA; a
    slice's gradient is a pad.
    """
    batch, heads, q_len, r_len = ops.shape(x)
    x = ops.reshape(x, (batch, heads, r_len, q_len))
    x = ops.slice(x, (0, 0, 1, 0), (batch, heads, r_len - 1, q_len))
    x = ops.reshape(x, (batch, heads, q_len, r_len - 1))
    return ops.slice(x, (0, 0, 0, 0), (batch, heads, q_len, key_length))


def _dims(tensor):
    # Static sizes only: None where a size is unknown or symbolic (jax2tf's batch when
    # a JAX model is exported, which int() cannot read).
    return None if tensor is None else tuple(
        d if isinstance(d, int) else None for d in tensor.shape
    )


def _differ(a, b):
    return a is not None and b is not None and a != b


def _plus(a, b):
    return None if a is None or b is None else a + b


@keras.saving.register_keras_serializable(package="keras_ctx")
class TwoStreamRelativeAttention(keras.layers.Layer):
    """XLNet's two-stream attention with Transformer-XL relative positions.

    For a content stream `h` (and memory `mems` of the previous segment) and a
    query stream `g`, per head (XLNet, Yang et al., 2019; Transformer-XL, Dai
    et al., 2019):

        q = h W_q  (or g W_q),  k = [mems; h] W_k,  v = [mems; h] W_v,
        k_r = r W_r
        ac = (q + r_w_bias) . k_j
        bd = (q + r_r_bias) . k_r[distance (i + M) - j]
        ef = (q + r_s_bias) . seg_embed[segment_matrix[i, j]]
        a  = softmax((ac + bd + ef) / sqrt(head_size) + mask)
        out = (a v) W_o

    Both streams share all weights; queries come from their own stream, keys
    and values always from the content stream (plus memory). The projections
    have no biases, as in XLNet. Scores and softmax are float32 under mixed
    precision (the einsums run in the compute dtype). The residual connection,
    output dropout and layer normalization of the XLNet block are NOT part of
    this layer; the block adds them around it.

    Args:
        num_heads: number of attention heads.
        head_size: size of each head (XLNet's `d_head`).
        dropout: dropout rate on the attention probabilities.
        kernel_initializer: for the q, k, v, r and output projections.
        bias_initializer: for `r_w_bias`, `r_r_bias`, `r_s_bias` and
            `seg_embed`. XLNet draws every weight from a normal with stddev
            0.02: pass `keras.initializers.RandomNormal(stddev=0.02)` for both
            initializers to reproduce it.

    Call arguments:
        content_stream: h, (batch, T, hidden).
        position_encoding: (G, K + T, hidden), from
            `relative_positional_encoding(T, K, hidden)` with K = M + T; a
            unidirectional (K + 1 rows) encoding also works when every key
            after the query is masked. G is 1 (one for all rows), the batch
            (one per row), or any number with `position_index`.
        content_attention_mask: (batch, T, K), true/1 where content position i
            may attend key j (memory keys first). None: attend everywhere.
        query_stream: g, (batch, T, hidden), or (batch, P, hidden) with
            `target_mapping`. None: content stream only.
        query_attention_mask: (batch, T, K) mask of the query stream (see
            `two_stream_masks`). None: attend everywhere.
        segment_matrix: (batch, T, K), true/1 where query i and key j are in
            different segments (XLNet's relative segment encoding). None: no
            segment term.
        memory: mems, (batch, M, hidden), prepended to the keys and values;
            no gradient flows into it.
        target_mapping: (batch, P, T), one-hot rows mapping each of the P
            predictions to its position, as in XLNet: the query stream is
            mapped onto the T positions before attention and back after.
        position_index: (batch,) int: row b reads encoding
            `position_index[b]` of the G (XLNet's `bi_data`: 0 forward,
            1 backward). The G encodings are projected once.
        training: whether attention dropout is active.

    Returns:
        With a query stream, `(content_output, query_output)`: (batch, T,
        hidden) and (batch, T or P, hidden). Without one, `content_output`
        alone (like `MultiHeadAttention`, one result is returned bare: a Keras
        functional model cannot carry a None output). In the compute dtype.

    Example:
    >>> layer = TwoStreamRelativeAttention(num_heads=2, head_size=8)
    >>> h = np.random.rand(2, 4, 16).astype("float32")
    >>> r = relative_positional_encoding(4, 4, 16)
    >>> content_mask, query_mask = two_stream_masks(np.array([[2, 1, 3, 0]] * 2))
    >>> h_out, g_out = layer(h, r, content_mask, query_stream=h,
    ...                      query_attention_mask=query_mask)
    >>> h_out.shape, g_out.shape
    (TensorShape([2, 4, 16]), TensorShape([2, 4, 16]))

    References:
        Yang et al., "XLNet: Generalized Autoregressive Pretraining for
        Language Understanding", 2019.
        Dai et al., "Transformer-XL: Attentive Language Models Beyond a
        Fixed-Length Context", 2019.
    """

    def __init__(
        self,
        num_heads,
        head_size,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = _checks.positive_int("num_heads", num_heads)
        self.head_size = _checks.positive_int("head_size", head_size)
        self.dropout = _checks.rate("dropout", dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = False

    def _projection(self, name):
        return keras.layers.EinsumDense(
            "btd,dnh->btnh",
            output_shape=(None, self.num_heads, self.head_size),
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def _head_weight(self, name, shape):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=self.bias_initializer,
            dtype=self.variable_dtype,
        )

    def build(self, content_stream_shape):
        hidden_size = content_stream_shape[-1]
        self.query_dense = self._projection("query")
        self.key_dense = self._projection("key")
        self.value_dense = self._projection("value")
        self.position_dense = self._projection("position")  # XLNet's `r`
        for projection in (self.query_dense, self.key_dense, self.value_dense,
                           self.position_dense):
            projection.build((None, None, hidden_size))
        self.output_dense = keras.layers.EinsumDense(
            "btnh,nhd->btd",
            output_shape=(None, hidden_size),
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="attention_output",
        )
        self.output_dense.build((None, None, self.num_heads, self.head_size))
        heads = (self.num_heads, self.head_size)
        self.r_w_bias = self._head_weight("r_w_bias", heads)
        self.r_r_bias = self._head_weight("r_r_bias", heads)
        self.r_s_bias = self._head_weight("r_s_bias", heads)
        self.seg_embed = self._head_weight("seg_embed", (2,) + heads)
        self.dropout_layer = Dropout(
            self.dropout, dtype=self.dtype_policy
        )
        self.built = True

    def _check_shapes(self, content, position, content_mask, query, query_mask,
                      segment_matrix, memory, target_mapping, grouped=False):
        """Static shape checks; unknown (None) sizes are not checked."""
        if content is None or len(content) != 3:
            raise ValueError(
                "`content_stream` must be (batch, length, hidden), got shape "
                f"{content}."
            )
        batch, length, hidden = content
        memory_length = 0
        if memory is not None:
            if len(memory) != 3 or _differ(memory[-1], hidden):
                raise ValueError(
                    f"`memory` must be (batch, memory_length, {hidden}) like "
                    f"`content_stream` {content}, got shape {memory}."
                )
            memory_length = memory[1]
        key_length = _plus(memory_length, length)
        if position is None or len(position) != 3:
            raise ValueError(
                "`position_encoding` must be (1 or batch, key_length + length, "
                f"hidden), got shape {position}."
            )
        rows = position[1]
        if _differ(position[-1], hidden) or (
            rows is not None and key_length is not None and length is not None
            and rows not in (key_length + length, key_length + 1)
        ) or (position[0] is not None and position[0] != 1 and not grouped
              and _differ(position[0], batch)):
            raise ValueError(
                f"`position_encoding` has shape {position} but must be (1 or "
                f"batch (any with position_index), key_length + length, hidden) = (1, "
                f"{_plus(key_length, length)}, "
                f"{hidden}) for content_stream {content} and memory {memory}; "
                f"build it with relative_positional_encoding({length}, "
                f"{key_length}, {hidden})."
            )
        for name, shape in (("content_attention_mask", content_mask),
                            ("query_attention_mask", query_mask),
                            ("segment_matrix", segment_matrix)):
            if shape is None:
                continue
            if len(shape) != 3 or _differ(shape[1], length) or _differ(
                shape[2], key_length
            ):
                raise ValueError(
                    f"`{name}` must be (batch, length, memory_length + length) = "
                    f"(batch, {length}, {key_length}), got shape {shape}; "
                    "memory columns come first."
                )
        if target_mapping is not None and query is None:
            raise ValueError("`target_mapping` needs a `query_stream`.")
        if query is not None:
            if len(query) != 3 or _differ(query[-1], hidden):
                raise ValueError(
                    f"`query_stream` must be (batch, length, {hidden}), got "
                    f"shape {query}."
                )
            if target_mapping is None and _differ(query[1], length):
                raise ValueError(
                    f"`query_stream` has length {query[1]} but `content_stream` "
                    f"has {length}; pass a `target_mapping` of shape (batch, "
                    f"{query[1]}, {length}) to predict a subset of positions."
                )
            if target_mapping is not None and (
                len(target_mapping) != 3
                or _differ(target_mapping[1], query[1])
                or _differ(target_mapping[2], length)
            ):
                raise ValueError(
                    "`target_mapping` must be (batch, num_predict, length) = "
                    f"(batch, {query[1]}, {length}), got shape {target_mapping}."
                )

    def _attention(self, q, k, v, k_r, segment_matrix, mask, training):
        """Relative attention of queries q (B, T, N, H) over k, v (B, K, N, H)."""
        dtype = q.dtype
        q_w = q + ops.cast(self.r_w_bias, dtype)
        q_r = q + ops.cast(self.r_r_bias, dtype)
        ac = ops.einsum("binh,bjnh->bnij", q_w, k)
        if k_r.shape[0] == 1:  # one encoding for the whole batch (the usual case)
            bd = ops.einsum("binh,pnh->bnip", q_r, k_r[0])
        else:
            k_r = ops.broadcast_to(k_r, (ops.shape(q)[0],) + tuple(ops.shape(k_r)[1:]))
            bd = ops.einsum("binh,bpnh->bnip", q_r, k_r)
        bd = rel_shift(ops.cast(bd, "float32"), ops.shape(k)[1])
        scores = ops.cast(ac, "float32") + bd
        if segment_matrix is not None:
            # ef_s = (q + r_s_bias) . seg_embed[s], s = 1 iff different segments.
            q_s = q + ops.cast(self.r_s_bias, dtype)
            ef = ops.einsum(
                "binh,snh->bnis", q_s, ops.cast(self.seg_embed, dtype)
            )
            ef = ops.cast(ef, "float32")
            different = ops.cast(segment_matrix, "bool")[:, None, :, :]
            scores = scores + ops.where(different, ef[..., 1:], ef[..., :1])
        scores = scores * (self.head_size**-0.5)
        if mask is not None:
            mask = ops.cast(mask, "bool")
        probabilities = masked_softmax(scores, mask)
        probabilities = self.dropout_layer(probabilities, training=training)
        return ops.einsum("bnij,bjnh->binh", ops.cast(probabilities, v.dtype), v)

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
        position_index=None,
        training=None,
    ):
        self._check_shapes(
            _dims(content_stream), _dims(position_encoding),
            _dims(content_attention_mask), _dims(query_stream),
            _dims(query_attention_mask), _dims(segment_matrix), _dims(memory),
            _dims(target_mapping), grouped=position_index is not None,
        )
        h = content_stream
        if memory is not None:
            # Transformer-XL: the cached segment is a constant (SG(m) in the paper).
            memory = ops.stop_gradient(ops.cast(memory, h.dtype))
            keys_in = ops.concatenate([memory, h], axis=1)
        else:
            keys_in = h
        k = self.key_dense(keys_in)
        v = self.value_dense(keys_in)
        k_r = self.position_dense(ops.cast(position_encoding, h.dtype))
        if position_index is not None:
            k_r = ops.take(k_r, ops.cast(position_index, "int32"), axis=0)

        q_h = self.query_dense(h)
        attn_h = self._attention(
            q_h, k, v, k_r, segment_matrix, content_attention_mask, training
        )
        content_output = self.output_dense(attn_h)

        query_output = None
        if query_stream is not None:
            q_g = self.query_dense(ops.cast(query_stream, h.dtype))
            if target_mapping is not None:
                mapping = ops.cast(target_mapping, q_g.dtype)
                q_g = ops.einsum("bpnh,bpt->btnh", q_g, mapping)
            attn_g = self._attention(
                q_g, k, v, k_r, segment_matrix, query_attention_mask, training
            )
            if target_mapping is not None:
                attn_g = ops.einsum("btnh,bpt->bpnh", attn_g, mapping)
            query_output = self.output_dense(attn_g)
            return content_output, query_output
        return content_output

    def compute_output_spec(self, content_stream, position_encoding,
                            content_attention_mask=None, query_stream=None,
                            query_attention_mask=None, segment_matrix=None,
                            memory=None, target_mapping=None, position_index=None,
                            **kwargs):
        self._check_shapes(
            _dims(content_stream), _dims(position_encoding),
            _dims(content_attention_mask), _dims(query_stream),
            _dims(query_attention_mask), _dims(segment_matrix), _dims(memory),
            _dims(target_mapping), grouped=position_index is not None,
        )
        content_output = keras.KerasTensor(
            content_stream.shape, dtype=self.compute_dtype
        )
        if query_stream is None:
            return content_output
        query_output = keras.KerasTensor(
            tuple(query_stream.shape[:-1]) + (content_stream.shape[-1],),
            dtype=self.compute_dtype,
        )
        return content_output, query_output

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "head_size": self.head_size,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
            }
        )
        return config
