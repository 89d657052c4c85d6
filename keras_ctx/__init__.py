"""keras_ctx: a Keras 3 (TensorFlow backend) zoo of contextual word representations."""

import os

# Keras 3 reads the backend once, at its first import: choose TensorFlow
# unless the user already chose (and then insist below).
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_ctx.startup import quiet_startup, use_caching_allocator  # noqa: E402  (stdlib only)

use_caching_allocator()  # the `keras-ctx` command only; before TensorFlow starts

with quiet_startup():
    import keras  # noqa: E402

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        "keras_ctx runs on Keras 3's TensorFlow backend, but KERAS_BACKEND is "
        f"{keras.backend.backend()!r}. Set KERAS_BACKEND=tensorflow before "
        "importing keras."
    )

with quiet_startup():
    from keras_ctx import layers, models, tasks  # noqa: E402,F401
    from keras_ctx import data, families, generation, pretraining  # noqa: E402,F401
    from keras_ctx import convert, export, optimizers  # noqa: E402,F401
    from keras_ctx import adapters, handles  # noqa: E402,F401  (they provide services models call)

__version__ = "0.1.0"
