"""Argument checks the data builders share: fail before any work, naming the argument."""

import numpy as np


def positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return int(value)
