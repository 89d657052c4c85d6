"""BERT (Devlin et al. 2019): WordPiece, MLM + NSP, and its checkpoint formats."""

from keras_ctx.convert import bert as convert_bert
from keras_ctx.convert import kerashub
from keras_ctx.convert.heads import MaskedLMLayout
from keras_ctx.convert.tensorflow import (
    LAYER_HF_TO_TF,
    LAYER_TF_TO_HF,
    TFLayout,
    renaming_reader,
    renaming_writer,
)
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models import bert
from keras_ctx.pretraining import BertPretrainer
from keras_ctx.registry import Family, HuggingFace, KerasHub, register_family

# BertForMaskedLM / BertForPreTraining: cls.predictions, decoder tied to the word embeddings.
MASKED_LM = MaskedLMLayout(
    "BertForMaskedLM", "bert.", bias="cls.predictions.bias",
    decoder="cls.predictions.decoder.weight", dense="cls.predictions.transform.dense",
    norm="cls.predictions.transform.LayerNorm")

# BERT: static masks pay off over many epochs of a fixed corpus; short runs
# mask dynamically.
BERT = register_family(Family(
    "bert", bert.BertBackbone, bert.BERT_PRESETS, tokenizers.train_wordpiece, WORDPIECE_FRAMING,
    pooling=POOLED, dataset=pipeline(pipelines.bert_dataset, static_masking=False),
    # create_pretraining_data.py: masks drawn when written, dupe_factor 10 copies.
    prepared=layout(layouts.pairs_layout, kind="nsp", static_masking=True, duplicate=10),
    pretrainer=pretrainer(BertPretrainer),
    huggingface=(HuggingFace("bert", convert_bert.convert_bert, convert_bert.export_bert,
                             masked_lm=MASKED_LM, sequence_classifier=(None, "classifier"),
                             token_classifier=True),),
    keras_hub=(KerasHub("BertBackbone", kerashub.bert_from_keras_hub),),
    tf_checkpoint=TFLayout("bert", "bert_config.json", "bert/", renaming_reader("bert"),
                           renaming_writer("bert"), LAYER_TF_TO_HF, LAYER_HF_TO_TF,
                           checkpoint="bert_model.ckpt")))
