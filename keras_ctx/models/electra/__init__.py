"""The electra family: backbone.py, family.py, convert.py (docs/design.md, "A new family")."""

from keras_ctx.models.electra.backbone import (  # noqa: F401
    EMBEDDING_LAYERS,
    ElectraBackbone,
    generator_config,
    electra_generator,
    ELECTRA_PRESETS,
    ELECTRA_GENERATOR_FRACTIONS,
)
