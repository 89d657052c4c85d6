"""Reading a few positions out of a sequence (masked LM, span boundaries, sparse last layer)."""

from keras import ops


def gather_positions(sequence, positions):
    """`sequence[b, positions[b, p]]`: (batch, time, ...), (batch, P) -> (batch, P, ...)."""
    index = ops.cast(positions, "int32")
    for _ in range(len(sequence.shape) - 2):  # broadcast over the trailing axes
        index = ops.expand_dims(index, -1)
    return ops.take_along_axis(sequence, index, axis=1)
