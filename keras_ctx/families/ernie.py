"""ERNIE 1.0 (Sun et al. 2019): BERT's network and NSP, knowledge masking in stages.

`keras-ctx pretrain` has no chunker / NER: its phrases are the corpus'
collocations and it has no entity stage (entity lexicons go through
`keras_ctx.data.pipelines.ernie_dataset`).
"""

from keras_ctx.convert import ernie as convert_ernie
from keras_ctx.data import pipelines, tokenizers
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, pipeline, pretrainer
from keras_ctx.models import bert, ernie
from keras_ctx.pretraining import BertPretrainer
from keras_ctx.registry import Family, register_family

ERNIE = register_family(Family(
    "ernie", bert.BertBackbone, ernie.ERNIE_PRESETS, tokenizers.train_wordpiece,
    WORDPIECE_FRAMING, pooling=POOLED,
    dataset=pipeline(pipelines.ernie_dataset, phrases="collocations"),
    pretrainer=pretrainer(BertPretrainer),
    huggingface=convert_ernie.HUGGINGFACE))
