"""Reading a few positions out of a sequence (masked LM, span boundaries, sparse last layer)."""

from keras import ops


def gather_positions(sequence, positions):
    """`sequence[b, positions[b, p]]`: (batch, time, ...), (batch, P) -> (batch, P, ...)."""
    positions = ops.cast(positions, "int32")
    extra_axes = len(sequence.shape) - 2
    index = ops.reshape(positions, tuple(positions.shape) + (1,) * extra_axes)
    return ops.take_along_axis(sequence, index, axis=1)
