"""RoBERTa (Liu et al. 2019): byte-level BPE, dynamic MLM over packed text, no NSP."""

from keras_ctx import optimizers
from keras_ctx.convert import kerashub
from keras_ctx.convert import roberta as convert_roberta
from keras_ctx.convert.heads import MaskedLMLayout
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import FAIRSEQ_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models import bert
from keras_ctx.pretraining import RobertaPretrainer
from keras_ctx.registry import Family, HuggingFace, KerasHub, register_family

# RobertaForMaskedLM's lm_head: dense + GELU + layer_norm, decoder tied.
MASKED_LM = MaskedLMLayout(
    "RobertaForMaskedLM", "roberta.", bias="lm_head.bias", decoder="lm_head.decoder.weight",
    dense="lm_head.dense", norm="lm_head.layer_norm", activation="gelu")

ROBERTA = register_family(Family(
    "roberta", bert.RobertaBackbone, bert.ROBERTA_PRESETS, tokenizers.train_byte_level_bpe,
    FAIRSEQ_FRAMING, pooling=("sequence_output", "padding_mask", "first"),
    dataset=pipeline(pipelines.roberta_dataset), prepared=layout(layouts.packed_layout),
    pretrainer=pretrainer(RobertaPretrainer),
    huggingface=(HuggingFace("roberta", convert_roberta.convert_roberta,
                             convert_roberta.export_roberta, masked_lm=MASKED_LM,
                             token_classifier=True),),
    keras_hub=(KerasHub("RobertaBackbone", kerashub.roberta_from_keras_hub),),
    optimizer=optimizers.roberta_recipe))
