"""The ernie family: backbone.py, family.py, convert.py (docs/design.md, "A new family")."""

from keras_ctx.models.ernie.backbone import (  # noqa: F401
    ERNIE_VOCABULARY_SIZE,
    ERNIE_ACTIVATION,
    ERNIE_POSITIONS,
    ERNIE_PRESETS,
)
