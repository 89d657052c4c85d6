"""The awd_lstm family: backbone.py, family.py (docs/design.md, "A new family")."""

from keras_ctx.models.awd_lstm.backbone import (  # noqa: F401
    ULMFIT_DROPOUTS,
    AwdLstmBackbone,
    AWD_LSTM_PRESETS,
)
