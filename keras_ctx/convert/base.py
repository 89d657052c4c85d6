"""What every checkpoint converter shares: the error type and the tensor reader.

`TensorReader` hands out a checkpoint's tensors by name and insists, at the
end, that each was used; `assign` copies one into a variable after checking
its shape. Format modules (huggingface, tensorflow, kerashub, elmo) and the
declarative weight maps (mapping) build on these.
"""

import numpy as np


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be converted."""


class TensorReader:
    """Hands out checkpoint tensors by name and remembers which were used."""

    def __init__(self, tensors, prefixes=("",)):
        self.tensors = tensors
        self.used = set()
        # Checkpoints saved from a model with a head prefix their names
        # ("bert.encoder..."); find the prefix that the tensors carry.
        self.prefix = next(
            (p for p in prefixes if any(k.startswith(p) for k in tensors)), ""
        )

    def has(self, name):
        return self.prefix + name in self.tensors

    def __call__(self, name):
        key = self.prefix + name
        if key not in self.tensors:
            raise CheckpointError(f"The checkpoint has no tensor {key!r}; it does not "
                                  "match its config.json's model_type.")
        self.used.add(key)
        return np.asarray(self.tensors[key], dtype="float32")

    def check_all_used(self, ignore=()):
        unused = sorted(k for k in self.tensors if k not in self.used
                        and not any(pattern in k for pattern in ignore))
        if unused:
            raise CheckpointError(
                f"{len(unused)} checkpoint tensors have no place in the model (first: "
                f"{unused[:3]}); the checkpoint has parts this converter does not know."
            )


def assign(variable, value, name):
    if tuple(variable.shape) != tuple(value.shape):
        raise CheckpointError(f"{name}: checkpoint shape {value.shape} does not fit the "
                              f"variable {variable.path} of shape {tuple(variable.shape)}.")
    variable.assign(value)
