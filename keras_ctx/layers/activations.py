"""Activations the zoo needs beyond Keras' own names."""

import keras


@keras.saving.register_keras_serializable(package="keras_ctx")
def gelu_approximate(x):
    """GELU's tanh approximation (Hendrycks & Gimpel 2016), as GPT, GPT-2 and ALBERT use.

    Hugging Face calls it "gelu_new" / "gelu_pytorch_tanh".
    """
    return keras.activations.gelu(x, approximate=True)


# Names FeedForward accepts besides Keras' activation names.
ACTIVATIONS = {"gelu_approximate": gelu_approximate}


def get(name):
    """An activation function by name: ours first, then Keras'."""
    if isinstance(name, str) and name in ACTIVATIONS:
        return ACTIVATIONS[name]
    return keras.activations.get(name)
