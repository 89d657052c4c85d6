"""Layer and RMS normalization whose gradients run at full speed on XLA:CPU.

Keras' layers, with `call` changed for the usual case (the last axis, learned
scale and offset): the row statistics are products with a ones vector and the
scale/offset gradients are `column_sum`s (see `keras_ctx.layers.dense`), where
XLA:CPU would emit slow strided reductions. Same weights and names; under
XLA:CPU the statistics are the same sums in another order (float32 round-off
only). Outside XLA, and under XLA for a GPU or TPU, Keras' own `call`.
"""

import keras
from keras import ops

from keras_ctx.backend import bias_add, cpu_rewrites, row_mean, scale


def _is_last_axis(axis, rank):
    axes = [axis] if isinstance(axis, int) else list(axis)
    return len(axes) == 1 and axes[0] in (-1, rank - 1)


@keras.saving.register_keras_serializable(package="keras_ctx")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` with faster gradients under XLA:CPU.

    Statistics and the normalization run in float32, as in Keras; the output
    is in the compute dtype. Other axes or options defer to Keras' `call`.

    Example:
    >>> norm = keras_ctx.layers.LayerNormalization(epsilon=1e-12)
    >>> y = norm(x)   # same shape as x
    """

    def call(self, inputs):
        if (not cpu_rewrites() or self.rms_scaling or not self.scale
                or not _is_last_axis(self.axis, len(inputs.shape))):
            return super().call(inputs)
        x = ops.cast(inputs, "float32")
        centred = x - row_mean(x)
        normalized = centred * ops.rsqrt(row_mean(centred * centred) + self.epsilon)
        outputs = scale(normalized, ops.cast(self.gamma, "float32"))
        if self.center:
            outputs = bias_add(outputs, ops.cast(self.beta, "float32"))
        return ops.cast(outputs, self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_ctx")
class RMSNormalization(keras.layers.RMSNormalization):
    """`keras.layers.RMSNormalization` (T5) with faster gradients under XLA:CPU.

    Example:
    >>> norm = keras_ctx.layers.RMSNormalization(epsilon=1e-6)
    >>> y = norm(x)   # same shape as x
    """

    def call(self, x):
        if not cpu_rewrites() or not _is_last_axis(self.axis, len(x.shape)):
            return super().call(x)
        x32 = ops.cast(x, "float32")
        normalized = x32 * ops.rsqrt(row_mean(x32 * x32) + self.epsilon)
        outputs = scale(normalized, ops.cast(self.scale, "float32"))
        return ops.cast(outputs, self.compute_dtype)
