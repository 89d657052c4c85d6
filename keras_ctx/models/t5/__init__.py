"""The t5 family: backbone.py, family.py, convert.py (docs/design.md, "A new family")."""

from keras_ctx.models.t5.backbone import (  # noqa: F401
    T5Backbone,
    T5_VOCABULARY,
    MT5_VOCABULARY,
    T5_PRESETS,
)
