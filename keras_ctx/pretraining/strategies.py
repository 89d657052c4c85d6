"""`keras-ctx pretrain --strategy NAME`: the names, made on the backend Keras runs."""

from keras_ctx import backend

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


def make_strategy(name, batch_size=None):
    """An object whose `scope()` the model is built in: a tf.distribute strategy on
    TensorFlow; on JAX a keras.distribution, also set for the process, since `fit`
    reads the global one (backend/jax.py), which needs `batch_size` (global) to
    split evenly over its devices."""
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy {name!r}; choose one of {STRATEGIES}.")
    return backend.make_strategy(name, batch_size)
