"""Multi-head scaled dot-product attention (Vaswani et al., 2017)."""

import keras
from keras import ops

from keras_ctx.layers import _checks, banded_attention
from keras_ctx.backend import fused_attention, update_positions
from keras_ctx.layers.dropout import Dropout
from keras_ctx.layers.masking import MASK_VALUE


def merge_attention_masks(
    query_length,
    key_length,
    padding_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    query_offset=0,
):
    """Combines the kinds of mask into one boolean (batch or 1, q, k) mask, or None.

    Args:
        padding_mask: (batch, k); true/1 for real key tokens.
        attention_mask: (batch, q, k); true/1 where query i may attend key j.
        use_causal_mask: query i (at absolute position `query_offset + i`) sees
            keys j <= query_offset + i only.
    """
    mask = None
    if padding_mask is not None:
        mask = ops.cast(padding_mask, "bool")[:, None, :]
    if attention_mask is not None:
        attention_mask = ops.cast(attention_mask, "bool")
        mask = attention_mask if mask is None else ops.logical_and(mask, attention_mask)
    if use_causal_mask:
        rows = ops.arange(query_length)[:, None] + query_offset
        cols = ops.arange(key_length)[None, :]
        causal = (cols <= rows)[None, :, :]
        mask = causal if mask is None else ops.logical_and(mask, causal)
    return mask


def masked_softmax(scores, mask=None, bias=None):
    """Softmax over the last axis in float32, whatever the compute dtype.

    `scores` (batch, heads, q, k); `mask` broadcastable to (batch, q, k);
    `bias` broadcastable to scores, added before masking.
    """
    scores = ops.cast(scores, "float32")
    if bias is not None:
        scores = scores + ops.cast(bias, "float32")
    if mask is not None:
        scores = ops.where(mask[:, None, :, :], scores, MASK_VALUE)
    return ops.softmax(scores, axis=-1)


@keras.saving.register_keras_serializable(package="keras_ctx")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with masks, additive bias and a key/value cache.

    `softmax(Q K^T * scale + bias + mask) V` per head, then an output projection.
    Scores and softmax are computed in float32 under mixed precision. The
    attention core is plain einsums on TensorFlow, as fast there as
    `keras.ops.dot_product_attention`, which lowers to the same ops (see
    benchmarks/attention.py); on JAX plain attention (no bias, band, returned
    scores or dropout in training) runs `keras.ops.dot_product_attention`,
    cuDNN's flash attention on a GPU under bf16.

    Args:
        num_heads: number of attention heads.
        head_size: size of each head for queries and keys.
        value_head_size: size of each head for values; defaults to `head_size`.
        hidden_size: size of the output; defaults to the query's last dimension.
        dropout: dropout rate on the attention probabilities.
        use_bias: whether the projections have biases (T5 has none).
        scale: multiplier of the scores; defaults to 1/sqrt(head_size) (T5 uses 1).
        kernel_initializer, bias_initializer: for all projections.
        output_kernel_initializer: for the output projection only; defaults to
            `kernel_initializer` (GPT-2 scales it by 1/sqrt(2 * layers)).
        use_qkv_bias: biases on the query/key/value projections; defaults to
            `use_bias` (GPT-Neo: False, with a bias on the output only).
        window_size: None for dense attention; an int w for GPT-3's locally
            banded causal attention: query i attends key j when
            i - w < j <= i (GPT-Neo's local attention). Self-attention is
            then computed in blocks of w, in O(T * w) time and memory (see
            `keras_ctx.layers.banded_attention`), and a cached decoding step
            reads only the last w keys. Requires `use_causal_mask=True`.

    Call arguments:
        query: (batch, q, dim).
        value: (batch, k, dim); defaults to `query` (self-attention).
        key: (batch, k, dim); defaults to `value`.
        padding_mask: (batch, k), 1 for real key tokens.
        attention_mask: (batch, q, k), 1 where query i may attend key j.
        attention_bias: added to the scores, broadcastable to
            (batch, heads, q, k) (relative position schemes).
        use_causal_mask: forbid attending to later positions.
        cache: (batch, 2, max_length, heads, head_dim) keys and values. With
            `cache_update_index`, the new keys/values of `query` are written at
            that index and attention runs over the whole cache (decoding);
            without it the cache is used as is (precomputed cross-attention).
        cache_update_index: int scalar position of `query`'s first token.
        return_attention_scores: also return the (batch, heads, q, k)
            probabilities.

    Returns:
        The output (batch, q, hidden_size); with a cache, `(output, cache)`;
        with `return_attention_scores`, the scores appended.

    Example:
    >>> layer = keras_ctx.layers.MultiHeadAttention(num_heads=4, head_size=16)
    >>> x = np.random.rand(2, 10, 64).astype("float32")
    >>> layer(x, padding_mask=np.ones((2, 10)), use_causal_mask=True).shape
    (2, 10, 64)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
    """

    def __init__(
        self,
        num_heads,
        head_size,
        value_head_size=None,
        hidden_size=None,
        dropout=0.0,
        use_bias=True,
        scale=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        output_kernel_initializer=None,
        use_qkv_bias=None,
        window_size=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.use_qkv_bias = use_bias if use_qkv_bias is None else bool(use_qkv_bias)
        self.window_size = _checks.optional_positive_int("window_size", window_size)
        self.num_heads = _checks.positive_int("num_heads", num_heads)
        self.head_size = _checks.positive_int("head_size", head_size)
        self.value_head_size = _checks.optional_positive_int("value_head_size", value_head_size)
        self.hidden_size = _checks.optional_positive_int("hidden_size", hidden_size)
        self.dropout = _checks.rate("dropout", dropout)
        self.use_bias = use_bias
        self.scale = scale
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.output_kernel_initializer = keras.initializers.get(
            output_kernel_initializer or kernel_initializer
        )
        self.supports_masking = False

    def _projection(self, name, head_size):
        return keras.layers.EinsumDense(
            "btd,dnh->btnh",
            output_shape=(None, self.num_heads, head_size),
            bias_axes="nh" if self.use_qkv_bias else None,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        value_head_size = self.value_head_size or self.head_size
        hidden_size = self.hidden_size or query_shape[-1]
        self.query_dense = self._projection("query", self.head_size)
        self.query_dense.build(query_shape)
        self.key_dense = self._projection("key", self.head_size)
        self.key_dense.build(key_shape)
        self.value_dense = self._projection("value", value_head_size)
        self.value_dense.build(value_shape)
        self.output_dense = keras.layers.EinsumDense(
            "btnh,nhd->btd",
            output_shape=(None, hidden_size),
            bias_axes="d" if self.use_bias else None,
            kernel_initializer=self.output_kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="attention_output",
        )
        self.output_dense.build(
            tuple(query_shape[:-1]) + (self.num_heads, value_head_size)
        )
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def compute_key_value_cache(self, value, key=None):
        """Projected keys and values of `value` as a (batch, 2, k, heads, size) cache.

        For cross-attention during decoding: computed once per source sequence,
        then passed as `cache` (without `cache_update_index`).
        """
        key = value if key is None else key
        return ops.stack([self.key_dense(key), self.value_dense(value)], axis=1)

    def call(
        self,
        query,
        value=None,
        key=None,
        padding_mask=None,
        attention_mask=None,
        attention_bias=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        return_attention_scores=False,
        training=None,
    ):
        value = query if value is None else value
        key = value if key is None else key
        if self.window_size is not None and not use_causal_mask:
            raise ValueError("A banded layer (window_size set) is causal: call it with "
                             "use_causal_mask=True, or build it with window_size=None.")
        q = self.query_dense(query)
        query_offset = 0
        key_positions = None
        if cache is not None and cache_update_index is None:
            k, v = cache[:, 0], cache[:, 1]
        else:
            k = self.key_dense(key)
            v = self.value_dense(value)
            if cache is not None:
                # Core ops outside XLA: a served generation graph (export.py) runs it.
                k = update_positions(cache[:, 0], cache_update_index, k)
                v = update_positions(cache[:, 1], cache_update_index, v)
                cache = ops.stack([k, v], axis=1)
                query_offset = cache_update_index
        scale = self.scale if self.scale is not None else self.head_size**-0.5
        q = q * ops.cast(scale, q.dtype)

        if self._use_blocked_band(q, k, cache, attention_mask, attention_bias,
                                  return_attention_scores):
            context = banded_attention.blocked_band_attention(
                q, k, v, self.window_size, padding_mask=padding_mask,
                dropout=lambda p: self.dropout_layer(p, training=training))
            return self._results(self.output_dense(context), cache, None,
                                 return_attention_scores)

        if self.window_size is not None and cache is not None and not return_attention_scores:
            # Decoding: only the last w (+ new) keys of the cache can be in band.
            start, span = banded_attention.band_window(
                k.shape[1], q.shape[1], self.window_size, query_offset)
            if span is not None and span < k.shape[1]:
                k = ops.slice(k, [0, start, 0, 0], [ops.shape(k)[0], span] + list(k.shape[2:]))
                v = ops.slice(v, [0, start, 0, 0], [ops.shape(v)[0], span] + list(v.shape[2:]))
                if padding_mask is not None:
                    padding_mask = ops.slice(padding_mask, [0, start],
                                             [ops.shape(padding_mask)[0], span])
                key_positions = ops.arange(span) + start
        mask = merge_attention_masks(
            ops.shape(q)[1],
            ops.shape(k)[1],
            padding_mask=padding_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask and self.window_size is None,
            query_offset=query_offset,
        )
        if self.window_size is not None:
            if key_positions is None:
                key_positions = ops.arange(ops.shape(k)[1])
            band = banded_attention.band_mask(
                ops.arange(ops.shape(q)[1]) + query_offset, key_positions,
                self.window_size)[None]
            mask = band if mask is None else ops.logical_and(mask, band)
        if (fused_attention(q.dtype) and attention_bias is None and not return_attention_scores
                and self.window_size is None and (self.dropout == 0.0 or not training)):
            # Plain attention (no relative bias, band or dropped probabilities):
            # keras' fused kernel; q is already scaled, softmax runs in float32.
            context = ops.dot_product_attention(
                q, k, v, mask=None if mask is None else mask[:, None], scale=1.0)
            return self._results(self.output_dense(context), cache, None, False)
        scores = ops.einsum("bqnh,bknh->bnqk", q, k)
        probabilities = masked_softmax(scores, mask, attention_bias)
        dropped = self.dropout_layer(probabilities, training=training)
        context = ops.einsum(
            "bnqk,bknh->bqnh", ops.cast(dropped, v.dtype), v
        )
        return self._results(self.output_dense(context), cache, probabilities,
                             return_attention_scores)

    def _use_blocked_band(self, q, k, cache, attention_mask, attention_bias,
                          return_attention_scores):
        """Whether the O(T * w) blocked path applies (else: dense scores, band mask)."""
        if self.window_size is None or cache is not None:
            return False
        if attention_mask is not None or attention_bias is not None or return_attention_scores:
            return False  # these need the full (q, k) matrix anyway
        length = q.shape[1]
        if length != k.shape[1]:
            return False  # not self-attention over the same positions
        # Up to w positions the band is the causal mask: dense is as cheap.
        return length is None or length > self.window_size

    def _results(self, output, cache, probabilities, return_attention_scores):
        results = (output,)
        if cache is not None:
            results += (cache,)
        if return_attention_scores:
            results += (probabilities,)
        return results[0] if len(results) == 1 else results

    def compute_output_spec(self, query, value=None, key=None, cache=None,
                            return_attention_scores=False, **kwargs):
        hidden_size = self.hidden_size or query.shape[-1]
        output = keras.KerasTensor(
            tuple(query.shape[:-1]) + (hidden_size,), dtype=self.compute_dtype
        )
        results = (output,)
        if cache is not None:
            results += (keras.KerasTensor(cache.shape, dtype=cache.dtype),)
        if return_attention_scores:
            key_length = (cache.shape[2] if cache is not None
                          else (key if key is not None else (value if value is not None else query)).shape[1])
            results += (keras.KerasTensor(
                (query.shape[0], self.num_heads, query.shape[1], key_length),
                dtype="float32"),)
        return results[0] if len(results) == 1 else results

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "head_size": self.head_size,
                "value_head_size": self.value_head_size,
                "hidden_size": self.hidden_size,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "scale": self.scale,
                "use_qkv_bias": self.use_qkv_bias,
                "window_size": self.window_size,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "output_kernel_initializer": keras.initializers.serialize(
                    self.output_kernel_initializer
                ),
            }
        )
        return config
