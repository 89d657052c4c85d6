"""Moved: ONNX export is `keras_ctx.export.export_onnx` (module `keras_ctx.export.onnx`).

This alias stays for one release.
"""

from keras_ctx.export.onnx import *  # noqa: F401,F403
from keras_ctx.export.onnx import export_onnx  # noqa: F401
