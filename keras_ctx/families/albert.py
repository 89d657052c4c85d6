"""ALBERT (Lan et al. 2020): factorized embeddings, one shared layer, SOP, n-gram masking."""

from keras_ctx import optimizers
from keras_ctx.convert import albert as convert_albert
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models import albert
from keras_ctx.pretraining import AlbertPretrainer
from keras_ctx.registry import Family, register_family

ALBERT = register_family(Family(
    "albert", albert.AlbertBackbone, albert.ALBERT_PRESETS, tokenizers.train_sentencepiece,
    WORDPIECE_FRAMING, pooling=POOLED, dataset=pipeline(pipelines.albert_dataset),
    pretrainer=pretrainer(AlbertPretrainer),
    prepared=layout(layouts.pairs_layout, kind="sop", whole_word_masking=True, max_ngram=3),
    huggingface=convert_albert.HUGGINGFACE, keras_hub=convert_albert.KERAS_HUB,
    tf_checkpoint=convert_albert.TF_CHECKPOINT,
    optimizer=optimizers.albert_recipe))
