"""The LSTMP recurrence on TensorFlow: one `tf.scan`, with a hand-written backward pass.

The weight gradients are one matrix product each over all steps, about 2x
faster than autodiff of the scan (benchmarks/RESULTS.md); the step's math is
`backend/lstm_cell.py`'s, shared with the other backends' autodiff scan.
"""

import tensorflow as tf

from keras_ctx.backend.lstm_cell import cell


def _shifted(sequence, first, reverse):
    """The state before each step: `first`, then the sequence without its last step."""
    if reverse:  # the loop runs from the end: step t follows step t + 1
        return tf.concat([sequence[1:], first[None]], axis=0)
    return tf.concat([first[None], sequence[:-1]], axis=0)


def _through_clip(value, clip):
    """Where the gradient passes `clip(value, -clip, clip)` (as tf.clip_by_value's)."""
    if clip is None:
        return 1.0
    return tf.cast((value >= -clip) & (value <= clip), tf.float32)


def _batched(a, b):
    """sum over time and batch of a_tb^T b_tb: one (T*B)-row matmul."""
    a = tf.reshape(a, (-1, tf.shape(a)[-1]))
    b = tf.reshape(b, (-1, tf.shape(b)[-1]))
    return tf.matmul(a, b, transpose_a=True)


def recurrence(xw, m, h0, c0, u, p, cell_clip, projection_clip, reverse):
    """The LSTMP recurrence over time-major `xw` = x W + b; returns every (h_t, c_t).

    xw (T, B, 4u) float32; m (T, B, 1) float32 mask (masked steps keep the
    state); h0 (B, out), c0 (B, u) float32; u (out, 4u) and p (u, proj) or
    None in the compute dtype. Returns hs (T, B, out) and cs (T, B, u).

    The forward pass is the recurrence of the module docstring, one `tf.scan`.
    The backward pass is written by hand: its loop runs only what is
    sequential (dz_t U^T, and dh_t P^T with a projection); the weight
    gradients dU = sum_t h_{t-1}^T dz_t and dP = sum_t m_t^T dh_t are then one
    matrix product each over all T * B rows, instead of a small product per
    step added into an accumulator (what autodiff of the scan does).
    """

    @tf.custom_gradient
    def run(xw, h0, c0, u, p_or_dummy):
        def step(state, inputs):
            return cell(state[0], state[1], inputs[0], inputs[1], u,
                        None if p is None else p_or_dummy, cell_clip, projection_clip)

        zeros_b = tf.zeros_like(xw[0])
        init = (h0, c0, zeros_b, tf.zeros_like(c0), tf.zeros_like(h0))
        hs, cs, gates, c_raws, h_raws = tf.scan(step, (xw, m), initializer=init,
                                                reverse=reverse)

        def grad(d_hs, d_cs):
            h_prev = _shifted(hs, h0, reverse)
            c_prev = _shifted(cs, c0, reverse)

            def back(carry, inputs):
                dh, dc = carry[0], carry[1]
                d_h_t, d_c_t, gate, c_raw, h_raw, c_before, m_t = inputs
                dh, dc = dh + d_h_t, dc + d_c_t
                i, f, g, o = tf.split(gate, 4, axis=-1)
                new_c = c_raw if cell_clip is None else tf.clip_by_value(
                    c_raw, -cell_clip, cell_clip)
                tanh_c = tf.tanh(new_c)
                d_new_h = m_t * dh
                d_h_raw = d_new_h
                if p is not None:
                    d_h_raw = d_new_h * _through_clip(h_raw, projection_clip)
                    d_new_h = tf.matmul(tf.cast(d_h_raw, p_or_dummy.dtype), p_or_dummy,
                                        transpose_b=True)
                    d_new_h = tf.cast(d_new_h, tf.float32)
                d_o = d_new_h * tanh_c
                d_new_c = m_t * dc + d_new_h * o * (1.0 - tanh_c * tanh_c)
                d_c_raw = d_new_c * _through_clip(c_raw, cell_clip)
                dz = tf.concat([d_c_raw * g * i * (1.0 - i),
                                d_c_raw * c_before * f * (1.0 - f),
                                d_c_raw * i * (1.0 - g * g),
                                d_o * o * (1.0 - o)], axis=-1)
                dh_prev = (1.0 - m_t) * dh + tf.cast(
                    tf.matmul(tf.cast(dz, u.dtype), u, transpose_b=True), tf.float32)
                dc_prev = (1.0 - m_t) * dc + d_c_raw * f
                return dh_prev, dc_prev, dz, d_h_raw, o * tanh_c

            zeros = (tf.zeros_like(h0), tf.zeros_like(c0), zeros_b, tf.zeros_like(h0),
                     tf.zeros_like(c0))
            dhs, dcs, dz, d_h_raw, m_pre = tf.scan(
                back, (d_hs, d_cs, gates, c_raws, h_raws, c_prev, m), initializer=zeros,
                reverse=not reverse)
            first = -1 if reverse else 0  # the carry after the step that ran first
            d_u = tf.cast(_batched(tf.cast(h_prev, u.dtype), tf.cast(dz, u.dtype)), u.dtype)
            if p is None:
                d_p = tf.zeros_like(p_or_dummy)
            else:
                d_p = tf.cast(_batched(tf.cast(m_pre, p_or_dummy.dtype),
                                       tf.cast(d_h_raw, p_or_dummy.dtype)), p_or_dummy.dtype)
            return dz, dhs[first], dcs[first], d_u, d_p

        return (hs, cs), grad

    return run(xw, h0, c0, u, tf.zeros((), u.dtype) if p is None else p)
