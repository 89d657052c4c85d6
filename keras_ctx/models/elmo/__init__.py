"""The elmo family: backbone.py, family.py, convert.py (docs/design.md, "A new family")."""

from keras_ctx.models.elmo.backbone import (  # noqa: F401
    ElmoBackbone,
    ELMO_PRESETS,
    Elmo,
)
