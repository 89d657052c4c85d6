"""Locally banded causal attention, computed block by block in O(T * w).

GPT-3 (Brown et al. 2020, Sec. 2.1) alternates "dense and locally banded
sparse attention patterns in the layers of the transformer, similar to the
Sparse Transformer" (Child et al. 2019). The band is defined exactly as
GPT-Neo's local attention (Hugging Face `gpt_neo`, whose causal buffer is
`tril(ones) XOR tril(ones, -window_size)`): query position i attends key
position j when

    i - window_size < j <= i

i.e. to itself and the window_size - 1 positions before it.

Blocked computation: the sequence is padded to a multiple of the block size
B = window_size and cut into blocks; query block c attends to key blocks c - 1
and c (2B keys), which contain its whole band, and the exact band is then
masked in. Scores are (batch, heads, T/B, B, 2B): time and memory grow as
O(T * w), not O(T^2), with static shapes when T is static (XLA compiles it).
"""

from keras import ops

from keras_ctx.layers.masking import MASK_VALUE


def band_mask(query_positions, key_positions, window_size):
    """(q, k) boolean: key j is in the causal band of width `window_size` of query i.

    `query_positions` (q,) and `key_positions` (k,) are absolute positions.
    """
    rows = ops.convert_to_tensor(query_positions)[:, None]
    cols = ops.convert_to_tensor(key_positions)[None, :]
    return ops.logical_and(cols <= rows, cols > rows - window_size)


def _blocks(x, block, padding):
    """(batch, t, ...) -> (batch, blocks, block, ...), zero-padded at the end."""
    pad = [[0, 0], [0, padding]] + [[0, 0]] * (len(x.shape) - 2)
    x = ops.pad(x, pad)
    return ops.reshape(x, (ops.shape(x)[0], -1, block) + tuple(ops.shape(x)[2:]))


def _with_previous_block(x):
    """(batch, blocks, block, ...) -> (batch, blocks, 2 * block, ...): block c-1 then c.

    Block -1 (before the sequence) is zeros; for keys it is masked out.
    """
    pad = [[0, 0], [1, 0]] + [[0, 0]] * (len(x.shape) - 2)
    previous = ops.pad(x, pad)[:, :-1]
    return ops.concatenate([previous, x], axis=2)


def blocked_band_attention(query, key, value, window_size, padding_mask=None,
                           dropout=None):
    """Causal self-attention restricted to the band, in blocks of `window_size`.

    Args:
        query, key, value: (batch, t, heads, size) projections of the same t
            positions, the query already multiplied by the score scale.
        window_size: the band's width w (see the module docstring).
        padding_mask: (batch, t), 1 for real key tokens.
        dropout: optional callable applied to the attention probabilities.

    Returns:
        The context (batch, t, heads, value size). A query row with no key
        to attend (a padded position whose whole band is padding) gets a
        uniform average over its 2w block keys, not NaN; compare real rows.
    """
    block = int(window_size)
    length = ops.shape(query)[1]
    padding = (-length) % block
    q = _blocks(query, block, padding)
    k = _with_previous_block(_blocks(key, block, padding))
    v = _with_previous_block(_blocks(value, block, padding))
    if padding_mask is None:
        valid = ops.ones((1, length), "bool")
    else:
        valid = ops.cast(padding_mask, "bool")
    # Keys past the end and the block before the first are padding: invalid.
    valid = _with_previous_block(_blocks(ops.cast(valid, "int32"), block, padding))
    # Inside a (query block c, keys of blocks c-1 and c) pair, query i sits at
    # c*B + i and key j at (c-1)*B + j: the band i - B < j - B <= i.
    i = ops.arange(block)[:, None]
    j = ops.arange(2 * block)[None, :]
    band = ops.logical_and(j > i, j <= i + block)
    mask = ops.logical_and(ops.cast(valid, "bool")[:, :, None, :], band[None, None])

    scores = ops.einsum("bcqnh,bcknh->bncqk", q, k)
    scores = ops.where(mask[:, None], ops.cast(scores, "float32"),
                       MASK_VALUE)
    probabilities = ops.softmax(scores, axis=-1)
    if dropout is not None:
        probabilities = dropout(probabilities)
    context = ops.einsum("bncqk,bcknh->bcqnh", ops.cast(probabilities, v.dtype), v)
    shape = ops.shape(context)
    context = ops.reshape(context, (shape[0], -1, shape[3], shape[4]))
    return context[:, :length]


def band_window(cache_length, query_length, window_size, cache_update_index):
    """(start, span) of the cache slice that holds every key a decoding step needs.

    Queries at positions index .. index + q - 1 need keys index - w + 1 ..
    index + q - 1: a static span of w + q - 1 positions, so one decoding step
    costs O(w) whatever the cache length. When the cache is not longer than
    that, the whole cache is used.
    """
    span = window_size + query_length - 1
    if cache_length is None or cache_length <= span:
        return 0, cache_length
    index = ops.cast(cache_update_index, "int32")
    start = ops.clip(index - window_size + 1, 0, cache_length - span)
    return start, span
