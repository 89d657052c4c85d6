"""The cove family: backbone.py, family.py (docs/design.md, "A new family")."""

from keras_ctx.models.cove.backbone import (  # noqa: F401
    CoveBackbone,
    COVE_PRESETS,
    AttentionalDecoder,
    Cove,
)
