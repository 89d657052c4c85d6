"""The albert family: backbone.py, family.py, convert.py (docs/design.md, "A new family")."""

from keras_ctx.models.albert.backbone import (  # noqa: F401
    SHARING,
    AlbertEncoderStack,
    AlbertBackbone,
    ALBERT_PRESETS,
)
