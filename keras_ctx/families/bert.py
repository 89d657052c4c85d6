"""BERT (Devlin et al. 2019): WordPiece, MLM + NSP, and its checkpoint formats."""

from keras_ctx.convert import bert as convert_bert
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models import bert
from keras_ctx.pretraining import BertPretrainer
from keras_ctx.registry import Family, register_family

# BERT: static masks pay off over many epochs of a fixed corpus; short runs
# mask dynamically.
BERT = register_family(Family(
    "bert", bert.BertBackbone, bert.BERT_PRESETS, tokenizers.train_wordpiece, WORDPIECE_FRAMING,
    pooling=POOLED, dataset=pipeline(pipelines.bert_dataset, static_masking=False),
    # create_pretraining_data.py: masks drawn when written, dupe_factor 10 copies.
    prepared=layout(layouts.pairs_layout, kind="nsp", static_masking=True, duplicate=10),
    pretrainer=pretrainer(BertPretrainer),
    huggingface=convert_bert.HUGGINGFACE, keras_hub=convert_bert.KERAS_HUB,
    tf_checkpoint=convert_bert.TF_CHECKPOINT))
