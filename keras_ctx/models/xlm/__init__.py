"""The xlm family: backbone.py, family.py, convert.py (docs/design.md, "A new family")."""

from keras_ctx.models.xlm.backbone import (  # noqa: F401
    INPUTS,
    CausalMask,
    XLMBackbone,
    XLM_PRESETS,
)
