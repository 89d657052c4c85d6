"""The gpt family: backbone.py, family.py, convert_gpt2.py, convert_gpt_neo.py (docs/design.md, "A new family")."""

from keras_ctx.models.gpt.backbone import (  # noqa: F401
    ATTENTION_TYPES,
    attention_types,
    GPTBackbone,
    GPT_PRESETS,
    GPT2_PRESETS,
    GPT3_PRESETS,
    GPT_NEO_PRESETS,
)
