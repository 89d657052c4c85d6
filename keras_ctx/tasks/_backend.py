"""The tasks' one backend switch, chosen once at import by `keras.backend.backend()`.

- `Step`, the mixin `Task` takes its train step from: Keras' own on TensorFlow,
  whose optimizer takes any subset of the weights it was built with; on JAX,
  Keras' step with the optimizer applied to the weights trainable now (ULMFiT's
  gradual unfreezing changes them between epochs). `check_unfreezing` refuses a
  model whose step cannot follow that.
- `decay_weights`: decoupled weight decay with per-variable learning-rate
  factors (tasks/transfer.py's layer-wise rates), through tf.distribute on
  TensorFlow, as Keras' own optimizer does elsewhere.
- `STRINGS_REFUSAL`: the string-in tasks (`keras_ctx.tasks.text`) tokenize
  inside tf.data maps, where a Keras layer runs on the active backend's
  tensors: on TensorFlow's backend that is the map's own graph; on JAX the
  preprocessor would receive symbolic TensorFlow strings it cannot convert.
  The token-id tasks (`keras_ctx.tasks.heads`) run on every backend.
"""

import keras

if keras.backend.backend() == "tensorflow":
    from keras_ctx.tasks._tensorflow import Step, check_unfreezing, decay_weights  # noqa: F401
else:
    from keras_ctx.tasks._jax import Step, check_unfreezing, decay_weights  # noqa: F401

STRINGS_REFUSAL = None if keras.backend.backend() == "tensorflow" else (
    "String-in tasks run on KERAS_BACKEND=tensorflow; on "
    f"{keras.backend.backend()}, tokenize first and feed token ids to "
    "keras_ctx.tasks.SequenceClassifier, TokenClassifier or SpanQuestionAnswerer.")


def check_strings():
    """Raises (one line, the fix) where the string-in tasks cannot run."""
    if STRINGS_REFUSAL:
        raise RuntimeError(STRINGS_REFUSAL)
