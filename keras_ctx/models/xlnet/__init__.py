"""The xlnet family: backbone.py, family.py, convert.py (docs/design.md, "A new family")."""

from keras_ctx.models.xlnet.backbone import (  # noqa: F401
    causal_attention_mask,
    xlnet_attention_inputs,
    xlnet_position_encoding,
    XLNetBackbone,
    XLNET_PRESETS,
)
