"""The layers' one backend switch, chosen once at import by `keras.backend.backend()`.

TensorFlow: `_tensorflow` (XLA:CPU rewrites, Philox dropout bits, the
IndexedSlices fix, checks inside graphs, the LSTM's hand-written backward
pass). Every other backend: `_generic`, keras.ops only. Both define the
names below (tests/layers/test_backend_switch.py holds them to it).
"""

import keras

NAMES = (
    "broadcast_over_batch", "bias_add", "check_at_most", "check_token_ids", "column_sum",
    "compiled_for", "cpu_rewrites", "cudnn_lstm", "dropout", "fused_attention",
    "gpu_available", "matmul",
    "recurrence", "reshape_like", "row_mean", "scale", "scan_states", "summed_rows",
    "take_rows",
    "update_positions",
)

if keras.backend.backend() == "tensorflow":
    from keras_ctx.layers import _tensorflow as _implementation
else:
    from keras_ctx.layers import _generic as _implementation

BACKEND_MODULE = _implementation.__name__
broadcast_over_batch = _implementation.broadcast_over_batch
bias_add = _implementation.bias_add
check_at_most = _implementation.check_at_most
check_token_ids = _implementation.check_token_ids
column_sum = _implementation.column_sum
compiled_for = _implementation.compiled_for
cpu_rewrites = _implementation.cpu_rewrites
cudnn_lstm = _implementation.cudnn_lstm
dropout = _implementation.dropout
fused_attention = _implementation.fused_attention
gpu_available = _implementation.gpu_available
matmul = _implementation.matmul
recurrence = _implementation.recurrence
reshape_like = _implementation.reshape_like
row_mean = _implementation.row_mean
scale = _implementation.scale
scan_states = _implementation.scan_states
summed_rows = _implementation.summed_rows
take_rows = _implementation.take_rows
update_positions = _implementation.update_positions
