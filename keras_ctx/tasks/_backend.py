"""The tasks' one backend switch: what the string-in tasks (`keras_ctx.tasks.text`) need.

They tokenize inside tf.data maps, where a Keras layer runs on the active
backend's tensors: on TensorFlow's backend that is the map's own graph; on
JAX the preprocessor would receive symbolic TensorFlow strings it cannot
convert. The token-id tasks (`keras_ctx.tasks.heads`) run on every backend.
"""

import keras

STRINGS_REFUSAL = None if keras.backend.backend() == "tensorflow" else (
    "String-in tasks run on KERAS_BACKEND=tensorflow; on "
    f"{keras.backend.backend()}, tokenize first and feed token ids to "
    "keras_ctx.tasks.SequenceClassifier, TokenClassifier or SpanQuestionAnswerer.")


def check_strings():
    """Raises (one line, the fix) where the string-in tasks cannot run."""
    if STRINGS_REFUSAL:
        raise RuntimeError(STRINGS_REFUSAL)
