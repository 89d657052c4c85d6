"""Generation's one backend switch, chosen once at import by `keras.backend.backend()`.

What decoding needs from the backend beyond keras.ops: seeded categorical
draws (TensorFlow keeps its stateless Philox draws), the shapes a TF
while-loop must keep, what `jit_compile="auto"` means, and how the decode
loop is compiled (TensorFlow: `tf.function`, with XLA or as a graph; JAX:
`jax.jit` over the weights' values, as keras-hub's generate does, or the loop
as it is; other backends: eager).
"""

import keras

if keras.backend.backend() == "tensorflow":
    from keras_ctx.generation import _tensorflow as _implementation
elif keras.backend.backend() == "jax":
    from keras_ctx.generation import _jax as _implementation
else:
    from keras_ctx.generation import _eager as _implementation

auto_jit_compile = _implementation.auto_jit_compile
categorical = _implementation.categorical
compile_function = _implementation.compile_function
keep_shapes = _implementation.keep_shapes
