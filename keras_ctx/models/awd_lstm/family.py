"""AWD-LSTM (Merity et al. 2018), ULMFiT's language model."""

from keras_ctx.models.awd_lstm import backbone as awd_lstm
from keras_ctx.models.presets import Pretraining, register_pretraining
from keras_ctx.registry import Family, register_family

# `keras-ctx pretrain` has no recipe for this family (Family.no_pretraining).
AWD_LSTM_PRETRAINING = register_pretraining({
    name: Pretraining(source="no keras-ctx pretrain recipe") for name in awd_lstm.AWD_LSTM_PRESETS})

# ULMFiT classifies from concat pooling (Howard & Ruder 2018, Sec. 3.3).
AWD_LSTM = register_family(Family(
    "awd_lstm", awd_lstm.AwdLstmBackbone, awd_lstm.AWD_LSTM_PRESETS,
    pooling=("sequence_output", "padding_mask", "concat"),
    no_pretraining="AWD-LSTM trains in `keras-ctx ulmfit` "
                   "(keras_ctx.tasks.ulmfit: word vocabulary, AR/TAR, STLR).",
    tiny=dict(embedding_size=8, hidden_size=16, num_layers=2)))
