"""Exports for serving: SavedModel for TF Serving (`saved_model`), ONNX (`onnx`).

`export_saved_model(model, directory)` and `export_onnx(model, path)`; see
each module's docstring for the signatures they write.
"""

from keras_ctx.export.saved_model import (  # noqa: F401
    ExportError,
    Generation,
    check_export_target,
    export_saved_model,
    flat_outputs,
    forward_function,
    input_specs,
    named_inputs,
)
from keras_ctx.export.onnx import export_onnx  # noqa: F401
