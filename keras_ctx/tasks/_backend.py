"""The tasks' one backend switch: their train step, and what the string-in tasks
(`keras_ctx.tasks.text`) need.

`Step`, the mixin `Task` takes its train step from: Keras' own on TensorFlow,
whose optimizer takes any subset of the weights it was built with; on JAX,
Keras' step with the optimizer applied to the weights trainable now (ULMFiT's
gradual unfreezing changes them between epochs).

They tokenize inside tf.data maps, where a Keras layer runs on the active
backend's tensors: on TensorFlow's backend that is the map's own graph; on
JAX the preprocessor would receive symbolic TensorFlow strings it cannot
convert. The token-id tasks (`keras_ctx.tasks.heads`) run on every backend.
"""

import keras

if keras.backend.backend() == "jax":
    from keras_ctx.tasks._jax import Step

    def check_unfreezing(model):
        """Raises (one line) unless `model`'s JAX step follows a changing trainable set."""
        from keras_ctx.pretraining import Pretrainer

        if not isinstance(model, (Step, Pretrainer)):
            raise ValueError(
                f"GradualUnfreezing on JAX needs a keras_ctx task or pretrainer: Keras' own "
                f"JAX step ({type(model).__name__}) updates only the weights its optimizer "
                "was built with. Subclass keras_ctx.tasks.Task, or fit on TensorFlow.")
else:
    class Step:
        """Keras' own train step (TensorFlow's optimizer applies to any trainable subset)."""

    def check_unfreezing(model):
        """Every model's step follows a changing trainable set here."""

STRINGS_REFUSAL = None if keras.backend.backend() == "tensorflow" else (
    "String-in tasks run on KERAS_BACKEND=tensorflow; on "
    f"{keras.backend.backend()}, tokenize first and feed token ids to "
    "keras_ctx.tasks.SequenceClassifier, TokenClassifier or SpanQuestionAnswerer.")


def check_strings():
    """Raises (one line, the fix) where the string-in tasks cannot run."""
    if STRINGS_REFUSAL:
        raise RuntimeError(STRINGS_REFUSAL)
