"""keras_ctx's one backend switch: what differs per Keras backend, chosen once at import.

`keras.backend.backend()` picks one module, `tensorflow`, `jax` or `torch`;
each defines every name in `NAMES` (tests/layers/test_backend_switch.py holds
them to it), and every package takes backend-specific code from here only.

- The layers (keras_ctx.layers): dropout bits, gathers and their gradients, id
  and length checks, cache writes, the LSTM recurrence. TensorFlow: `tf_ops`
  (Philox bits, checks inside graphs); JAX and torch: `keras_ops`, keras.ops only.
- The Pretrainer's step (`PretrainerStep`, pretraining/base.py) and its
  replica arithmetic for objectives that see one replica's rows (`num_replicas`,
  `replicas_mean`, `replica_rows`, `gathered_rows`): a tf.distribute step runs
  once per replica on its share of the batch; a JAX step is one program over
  the global batch (the distribution shards it); torch trains one device; on
  both the four are identities. `flat_cross_entropy`, the loss kernel of
  pretraining/losses.py; `make_strategy`, what `--strategy` names; `state_kept`,
  the model's variables intact after a refused or interrupted call.
- The tasks' step (`TaskStep`), `check_unfreezing` (GradualUnfreezing),
  `decay_weights` (layer-wise AdamW decay), `STRINGS_REFUSAL` (string-in tasks).
- Generation: `categorical`, `keep_shapes`, `auto_jit_compile`, `compile_function`.
- Export: `export_refusal`, `compiled_forward`, `served_forward`, `add_endpoint`,
  `preprocessed` (serve_text's strings through the preprocessor);
  ONNX: `ONNX_CONVERTER` (what writes the file: "tf2onnx" or Keras' "model.export"),
  `onnx_refusal`.
"""

import importlib

import keras

BACKEND = keras.backend.backend()
MODULES = {"tensorflow": "keras_ctx.backend.tensorflow", "jax": "keras_ctx.backend.jax",
           "torch": "keras_ctx.backend.torch"}
if BACKEND not in MODULES:
    raise ImportError(
        f"keras_ctx runs on Keras' TensorFlow, JAX or PyTorch backend, not {BACKEND!r}: set "
        "KERAS_BACKEND=tensorflow, jax or torch before importing keras.")

NAMES = (
    # the layers
    "check_at_most", "check_token_ids", "cudnn_lstm", "dropout", "fused_attention",
    "gpu_available", "recurrence", "scan_states", "summed_rows", "take_rows",
    "update_positions",
    # the Pretrainer
    "PretrainerStep", "flat_cross_entropy", "make_strategy", "num_replicas",
    "replicas_mean", "replica_rows", "gathered_rows", "state_kept",
    # the tasks
    "TaskStep", "check_unfreezing", "decay_weights", "STRINGS_REFUSAL",
    # generation
    "categorical", "keep_shapes", "auto_jit_compile", "compile_function",
    # export
    "export_refusal", "compiled_forward", "served_forward", "add_endpoint", "preprocessed",
    "ONNX_CONVERTER", "onnx_refusal",
)

implementation = importlib.import_module(MODULES[BACKEND])

# Every backend's: a model built from a tf.data input's spec by a symbolic call.
from keras_ctx.backend.keras_ops import build_from_spec  # noqa: E402,F401

check_at_most = implementation.check_at_most
check_token_ids = implementation.check_token_ids
cudnn_lstm = implementation.cudnn_lstm
dropout = implementation.dropout
fused_attention = implementation.fused_attention
gpu_available = implementation.gpu_available
recurrence = implementation.recurrence
scan_states = implementation.scan_states
summed_rows = implementation.summed_rows
take_rows = implementation.take_rows
update_positions = implementation.update_positions

PretrainerStep = implementation.PretrainerStep
flat_cross_entropy = implementation.flat_cross_entropy
make_strategy = implementation.make_strategy
num_replicas = implementation.num_replicas
replicas_mean = implementation.replicas_mean
replica_rows = implementation.replica_rows
gathered_rows = implementation.gathered_rows
state_kept = implementation.state_kept

TaskStep = implementation.TaskStep
check_unfreezing = implementation.check_unfreezing
decay_weights = implementation.decay_weights
STRINGS_REFUSAL = implementation.STRINGS_REFUSAL

categorical = implementation.categorical
keep_shapes = implementation.keep_shapes
auto_jit_compile = implementation.auto_jit_compile
compile_function = implementation.compile_function

export_refusal = implementation.export_refusal
compiled_forward = implementation.compiled_forward
served_forward = implementation.served_forward
add_endpoint = implementation.add_endpoint
preprocessed = implementation.preprocessed
ONNX_CONVERTER = implementation.ONNX_CONVERTER
onnx_refusal = implementation.onnx_refusal


def check_strings():
    """Raises (one line, the fix) where the string-in tasks cannot run."""
    if STRINGS_REFUSAL:
        raise RuntimeError(STRINGS_REFUSAL)
