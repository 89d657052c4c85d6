"""SpanBERT (Joshi et al. 2020): span masking + the span-boundary objective, no NSP."""

from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models import bert
from keras_ctx.pretraining import SpanBertPretrainer
from keras_ctx.registry import Family, register_family

SPANBERT = register_family(Family(
    "spanbert", bert.BertBackbone, bert.SPANBERT_PRESETS, tokenizers.train_wordpiece,
    WORDPIECE_FRAMING, pooling=POOLED, dataset=pipeline(pipelines.spanbert_dataset),
    prepared=layout(layouts.packed_layout, spans=True),
    pretrainer=pretrainer(SpanBertPretrainer)))
