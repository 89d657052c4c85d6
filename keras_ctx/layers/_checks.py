"""Argument checks shared by the layers: fail at construction, naming the argument.

The number and choice checks are keras_ctx.common.validation's (the one checks module; common
sits below the layers); the two below are the layers' own.
"""

from keras_ctx.common import validation
from keras_ctx.common.validation import (  # noqa: F401
    finite_number, non_negative_int, one_of, optional_positive_int, optional_positive_number,
    positive_int, positive_number, rate)


def activation(name, value):
    """`value` when `keras_ctx.layers.activations.get` takes it; else one line naming the
    argument and, for a misspelt name, the closest ("did you mean 'relu'?")."""
    import keras

    from keras_ctx.layers import activations

    try:
        activations.get(value)
    except (ValueError, TypeError):
        known = [*activations.ACTIVATIONS, *(n for n in dir(keras.activations) if not (
            n.startswith("_") or n in ("get", "serialize", "deserialize")))]
        hint = validation.closest(value, known) if isinstance(value, str) else ""
        validation.refuse(name, "the name of a Keras activation (e.g. 'relu')", value, hint)
    return value


def divisible(name, value, divisor_name, divisor):
    positive_int(divisor_name, divisor)
    if value % divisor:
        raise ValueError(
            f"`{name}` ({value}) must be divisible by `{divisor_name}` "
            f"({divisor}); pick sizes where {name} = {divisor_name} * head size."
        )

