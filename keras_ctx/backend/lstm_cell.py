"""One LSTMP step in keras.ops: the math every backend's recurrence runs (layers/lstm.py)."""

from keras import ops


def _matmul(a, b):
    """float32 `a` times `b` in b's dtype (the compute dtype), back in float32."""
    return ops.cast(ops.matmul(ops.cast(a, b.dtype), b), "float32")


def cell(h, c, xw_t, m_t, u, p, cell_clip, projection_clip):
    """One LSTMP step (layers/lstm.py's docstring): the new (h, c), masked steps keeping
    the state, and what a hand-written backward pass needs: the activated gates
    [i, f, g, o], the cell and the projection before their clips."""
    z = xw_t + _matmul(h, u)
    i, f, g, o = ops.split(z, 4, axis=-1)
    i, f, g, o = ops.sigmoid(i), ops.sigmoid(f), ops.tanh(g), ops.sigmoid(o)
    c_raw = f * c + i * g
    new_c = c_raw if cell_clip is None else ops.clip(c_raw, -cell_clip, cell_clip)
    new_h = h_raw = o * ops.tanh(new_c)
    if p is not None:
        h_raw = _matmul(new_h, p)
        new_h = h_raw if projection_clip is None else ops.clip(
            h_raw, -projection_clip, projection_clip)
    return (m_t * new_h + (1.0 - m_t) * h, m_t * new_c + (1.0 - m_t) * c,
            ops.concatenate([i, f, g, o], axis=-1), c_raw, h_raw)
