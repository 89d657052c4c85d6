"""Benchmark scripts. Importing the package (any `python -m benchmarks.x`) chooses
TensorFlow's caching CPU allocator before TensorFlow starts, as the `keras-ctx`
command does (keras_ctx/common/startup.py; importing keras_ctx here would start
TensorFlow first), unless TF_CPU_ALLOCATOR_USE_BFC is set (=false measures glibc's)."""

import os as _os

_os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
