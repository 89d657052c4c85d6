"""Argument checks shared by the layers: fail at construction, naming the argument.

The number checks are keras_ctx.common.validation's (the one checks module; common
sits below the layers); the two below are the layers' own.
"""

from keras_ctx.common.validation import (  # noqa: F401
    finite_number, non_negative_int, optional_positive_int, optional_positive_number,
    positive_int, positive_number, rate)


def one_of(name, value, choices):
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {sorted(choices)}, got {value!r}."
        )
    return value


def divisible(name, value, divisor_name, divisor):
    positive_int(divisor_name, divisor)
    if value % divisor:
        raise ValueError(
            f"`{name}` ({value}) must be divisible by `{divisor_name}` "
            f"({divisor}); pick sizes where {name} = {divisor_name} * head size."
        )

