"""What attention layers add to masked scores (shared by dense and banded attention)."""

# Added to masked scores; large enough to zero a softmax in float32, finite so
# that a fully masked row gives a uniform (not NaN) distribution.
MASK_VALUE = -1e9
