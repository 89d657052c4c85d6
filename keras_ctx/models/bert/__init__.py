"""The bert family: backbone.py, family.py, convert.py (docs/design.md, "A new family")."""

from keras_ctx.models.bert.backbone import (  # noqa: F401
    BertBackbone,
    RobertaBackbone,
    BERT_PRESETS,
    ROBERTA_PRESETS,
    SPANBERT_PRESETS,
    MBERT_PRESETS,
)
