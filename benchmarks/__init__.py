"""Benchmark scripts. Importing the package (any `python -m benchmarks.x`) chooses
TensorFlow's caching CPU allocator before TensorFlow starts, as the `keras-ctx`
command does, unless TF_CPU_ALLOCATOR_USE_BFC is set (=false measures glibc's)."""

from keras_ctx.startup import CACHING_ALLOCATOR as _CACHING_ALLOCATOR  # stdlib only
import os as _os

_os.environ.setdefault(*_CACHING_ALLOCATOR)
