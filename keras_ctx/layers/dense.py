"""Dense projections whose gradients run at full speed on XLA:CPU.

The weight gradient of `y = x W` is `dW = x^T dy`, a product over all
batch x time rows. XLA:CPU runs it at about half the speed of the forward
product when W has more rows than columns (a feed-forward output, 1024 -> 256:
109 vs 200 GFLOP/s on one core, 2048 rows), and folds any transpose we add
into the same slow product. Computing `(dy^T x)^T` instead, with an
optimization barrier so that XLA keeps the transpose, runs at full speed
(benchmarks/RESULTS.md, issue 23). Attention projections written as
`EinsumDense` ("btd,dnh->btnh") are also differentiated per batch row by
TensorFlow (a batched product, then a sum); here they are one 2-D product.

Bias gradients are sums over all rows. XLA:CPU emits such a column sum as a
strided loop (0.6 ms for 2048 x 256, 5.2 ms for 2048 x 1024 on one core) and
re-runs the gradient's producers inside it (a dropout mask's random-number
generator, say). `column_sum` is a product with ones instead (0.2 and 0.9
ms), which reads the gradient from the buffer the weight-gradient product
reads anyway: BERT-mini's training step, 334 -> 312 ms.

`Dense` and `EinsumDense` are Keras' layers with only `call` changed, and
only under TensorFlow's XLA for a CPU (`backend/xla.py`'s `cpu_rewrites`; the products are
in `backend/tf_ops.py`, behind the backend switch `keras_ctx.backend`): same
weights, names, LoRA and quantization (Keras' quantized path is untouched). Outside XLA they are
Keras' own: TensorFlow's kernels do not have these problems, and a custom
gradient's extra ops would slow one-token decoding in a TF graph (0.92x
keras-hub at batch 1). On GPU and TPU they are Keras' own too: XLA fuses
these reductions there, and a barrier would only block fusion.
"""

import keras
from keras import ops

from keras_ctx.backend import bias_add, column_sum, cpu_rewrites, matmul  # noqa: F401
from keras_ctx.backend import reshape_like


@keras.saving.register_keras_serializable(package="keras_ctx")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` with faster gradients under XLA:CPU (see the module docstring).

    Example:
    >>> layer = keras_ctx.layers.Dense(256)
    >>> y = layer(x)   # (..., 256)
    """

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras refuses subclasses; the weights and the quantized call are Keras' own.
        return super().quantize(mode, type_check=False, config=config)

    def call(self, inputs, training=None):
        if not cpu_rewrites():  # TensorFlow's kernels, XLA:GPU/TPU are fast here
            return super().call(inputs, training=training)
        x = matmul(inputs, self.kernel)
        if self.bias is not None:
            x = bias_add(x, ops.cast(self.bias, x.dtype))
        if self.activation is not None:
            x = self.activation(x)
        return x


# The two equations of multi-head attention: the input projection to heads and
# the output projection from them, each one 2-D product.
_SPLIT_HEADS = "btd,dnh->btnh"
_MERGE_HEADS = "btnh,nhd->btd"


@keras.saving.register_keras_serializable(package="keras_ctx")
class EinsumDense(keras.layers.EinsumDense):
    """`keras.layers.EinsumDense`; under XLA:CPU the attention equations are one 2-D product.

    "btd,dnh->btnh" (split into heads) and "btnh,nhd->btd" (merge heads) go
    through `matmul`; any other equation, and any call outside XLA:CPU, is Keras'.
    """

    def quantize(self, mode=None, type_check=True, config=None):
        return super().quantize(mode, type_check=False, config=config)

    def call(self, inputs, training=None):
        if not cpu_rewrites() or self.equation not in (_SPLIT_HEADS, _MERGE_HEADS):
            return super().call(inputs, training=training)
        kernel = self.kernel
        if self.equation == _SPLIT_HEADS:
            _, heads, size = kernel.shape
            x = matmul(inputs, ops.reshape(kernel, (kernel.shape[0], heads * size)))
            x = reshape_like(x, inputs, [heads, size], drop=1)
        else:
            heads, size, output = kernel.shape
            flat = reshape_like(inputs, inputs, [heads * size], drop=2)
            x = matmul(flat, ops.reshape(kernel, (heads * size, output)))
        if self.bias is not None:
            x = bias_add(x, ops.cast(self.bias, x.dtype))
        if self.activation is not None:
            x = self.activation(x)
        return x
