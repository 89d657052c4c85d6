"""Argument checks shared by the layers: fail at construction, naming the argument."""


def positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return value


def optional_positive_int(name, value):
    return None if value is None else positive_int(name, value)


def rate(name, value):
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1), got {value!r}.")
    return float(value)


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

