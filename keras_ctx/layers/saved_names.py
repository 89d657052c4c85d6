"""The names keras_ctx's former Dense, EinsumDense, LayerNormalization and RMSNormalization
saved under, and what stands in for them now.

Until issue 51 these were Keras' layers subclassed for rewrites that ran only under
TensorFlow's XLA on a CPU, a path no default takes (benchmarks/RESULTS.md, "XLA:CPU
rewrites"); their configs and weights were Keras' own. `.keras` files and run
directories written then name them `keras_ctx>Dense` and so on: those names load as
Keras' layers, to the same outputs.
"""

import keras

FORMER_LAYERS = {
    "keras_ctx>Dense": keras.layers.Dense,
    "keras_ctx>EinsumDense": keras.layers.EinsumDense,
    "keras_ctx>LayerNormalization": keras.layers.LayerNormalization,
    "keras_ctx>RMSNormalization": keras.layers.RMSNormalization,
}

# Found by name when a file is loaded; Keras' own layers still save under their own names
# (get_custom_objects is the lookup table only, not the class -> name table).
keras.saving.get_custom_objects().update(FORMER_LAYERS)

# What code that named them, or the XLA:CPU device switch, uses now.
REMOVED = {
    **{name.split(">")[1]: f"use keras.layers.{name.split('>')[1]} (the same config and weights)"
       for name in FORMER_LAYERS},
    "compiled_for": "the XLA:CPU rewrites it switched are gone; drop the `with` block",
}
