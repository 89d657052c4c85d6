"""The bart family: backbone.py, family.py, convert.py (docs/design.md, "A new family")."""

from keras_ctx.models.bart.backbone import (  # noqa: F401
    BartBackbone,
    BART_PRESETS,
)
