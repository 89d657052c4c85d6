"""ALBERT (Lan et al. 2020): factorized embeddings, one shared layer, SOP, n-gram masking."""

from keras_ctx import optimizers
from keras_ctx.convert import albert as convert_albert
from keras_ctx.convert import kerashub
from keras_ctx.convert.heads import MaskedLMLayout
from keras_ctx.convert.tensorflow import (
    ALBERT_HF_TO_TF,
    ALBERT_TF_TO_HF,
    TFLayout,
    renaming_reader,
    renaming_writer,
)
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models import albert
from keras_ctx.pretraining import AlbertPretrainer
from keras_ctx.registry import Family, HuggingFace, KerasHub, register_family

# AlbertForMaskedLM's predictions: dense (H -> E) + LayerNorm, decoder tied.
MASKED_LM = MaskedLMLayout(
    "AlbertForMaskedLM", "albert.", bias="predictions.bias",
    decoder="predictions.decoder.weight", dense="predictions.dense", norm="predictions.LayerNorm")

ALBERT = register_family(Family(
    "albert", albert.AlbertBackbone, albert.ALBERT_PRESETS, tokenizers.train_sentencepiece,
    WORDPIECE_FRAMING, pooling=POOLED, dataset=pipeline(pipelines.albert_dataset),
    pretrainer=pretrainer(AlbertPretrainer),
    prepared=layout(layouts.pairs_layout, kind="sop", whole_word_masking=True, max_ngram=3),
    huggingface=(HuggingFace("albert", convert_albert.convert_albert,
                             convert_albert.export_albert, masked_lm=MASKED_LM,
                             sequence_classifier=(None, "classifier"), token_classifier=True),),
    keras_hub=(KerasHub("AlbertBackbone", kerashub.albert_from_keras_hub),),
    tf_checkpoint=TFLayout("albert", "albert_config.json", "bert/", renaming_reader("albert"),
                           renaming_writer("albert"), ALBERT_TF_TO_HF, ALBERT_HF_TO_TF),
    optimizer=optimizers.albert_recipe))
