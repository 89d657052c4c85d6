"""RoBERTa (Liu et al. 2019): byte-level BPE, dynamic MLM over packed text, no NSP."""

from keras_ctx import optimizers
from keras_ctx.convert import roberta as convert_roberta
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import FAIRSEQ_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models import bert
from keras_ctx.pretraining import RobertaPretrainer
from keras_ctx.registry import Family, register_family

ROBERTA = register_family(Family(
    "roberta", bert.RobertaBackbone, bert.ROBERTA_PRESETS, tokenizers.train_byte_level_bpe,
    FAIRSEQ_FRAMING, pooling=("sequence_output", "padding_mask", "first"),
    dataset=pipeline(pipelines.roberta_dataset), prepared=layout(layouts.packed_layout),
    pretrainer=pretrainer(RobertaPretrainer),
    huggingface=convert_roberta.HUGGINGFACE, keras_hub=convert_roberta.KERAS_HUB,
    optimizer=optimizers.roberta_recipe))
