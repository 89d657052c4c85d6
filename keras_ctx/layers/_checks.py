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


def renamed(config, old_to_new):
    """`config` with keys renamed from what older saved files called them.

    The one way layers and backbones read configs saved before an argument
    was renamed (DESIGN.md's vocabulary); a config with both names raises.
    """
    config = dict(config)
    for old, new in old_to_new.items():
        if old in config:
            if new in config:
                raise ValueError(f"The config has both {old!r} and its new name {new!r}: "
                                 f"keep {new!r}.")
            config[new] = config.pop(old)
    return config
