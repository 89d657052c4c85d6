"""Generation on TensorFlow: stateless Philox draws, while-loop shapes, `tf.function`."""

import tensorflow as tf


def categorical(logits, seed, step):
    """One draw per row from softmax(logits), seeded by (seed, step)."""
    seeds = tf.stack([tf.cast(seed, tf.int32), tf.cast(step, tf.int32)])
    return tf.random.stateless_categorical(logits, 1, seeds, dtype=tf.int32)[:, 0]


def keep_shapes(new, old):
    """`new` with each tensor given its loop-entry shape (a TF while-loop's invariant)."""
    for tensor, before in zip(tf.nest.flatten(new), tf.nest.flatten(old)):
        tensor.set_shape(before.shape)
    return new


def auto_jit_compile(rows, float32_weights):
    """XLA, except one row of float32 weights without an accelerator (a TF graph is
    faster there; `keras_ctx.generation.resolve_jit_compile`)."""
    if rows > 1 or any(d.device_type != "CPU" for d in tf.config.list_logical_devices()):
        return True
    return not float32_weights


def compile_function(backbone, function, jit_compile):
    """`function(*tensors)` as a TF graph, compiled by XLA when `jit_compile`."""
    return tf.function(function, jit_compile=jit_compile)
