"""CoVe (McCann et al. 2017): the encoder of a translation model, over word vectors."""

from keras_ctx.models.cove import backbone as cove
from keras_ctx.models.presets import Pretraining, register_pretraining
from keras_ctx.registry import Family, register_family

# `keras-ctx pretrain` has no recipe for this family (Family.no_pretraining).
COVE_PRETRAINING = register_pretraining({
    name: Pretraining(source="no keras-ctx pretrain recipe") for name in cove.COVE_PRESETS})

COVE = register_family(Family(
    "cove", cove.CoveBackbone, cove.COVE_PRESETS, inputs="words",
    pooling=("sequence_output", "padding_mask", "mean"),
    no_pretraining="CoVe trains on a parallel corpus: see examples/cove_translate.py "
                   "and keras_ctx.pretraining.TranslationPretrainer.",
    tiny=dict(embedding_size=8, hidden_size=8, num_layers=1)))
