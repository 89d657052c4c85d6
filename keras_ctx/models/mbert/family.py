"""mBERT (Devlin et al., multilingual/README.md): BERT over a shared multilingual vocabulary.

BERT's network and objective (MLM + NSP) over a shared WordPiece vocabulary;
its cased release is the recommended one, so its tokenizer keeps case. Its
Hugging Face checkpoints are model_type "bert" (read as the bert family).
"""

import dataclasses
import functools

from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import (POOLED, WORDPIECE_FRAMING, layout, pipeline,
                                       pretrainer)
from keras_ctx.models.bert.family import BERT_RECIPE
from keras_ctx.models.bert import backbone as bert
from keras_ctx.models.presets import register_pretraining
from keras_ctx.pretraining import BertPretrainer
from keras_ctx.registry import Family, register_family

# multilingual.md @eedf571 names no setting of its own: BERT-base's recipe.
MBERT_PRETRAINING = register_pretraining({
    name: dataclasses.replace(BERT_RECIPE, source="google-research/bert multilingual.md "
                              "@eedf571 (BERT-base's recipe); Devlin et al. 2019, A.2")
    for name in bert.MBERT_PRESETS})

MBERT = register_family(Family(
    "mbert", bert.BertBackbone, bert.MBERT_PRESETS,
    functools.partial(tokenizers.train_wordpiece, lowercase=False), WORDPIECE_FRAMING,
    pooling=POOLED, dataset=pipeline(pipelines.bert_dataset, static_masking=False),
    prepared=layout(layouts.pairs_layout, kind="nsp", static_masking=True, duplicate=10),
    pretrainer=pretrainer(BertPretrainer),
    borrows_backbone=True, tiny=TINY_TRANSFORMER,
    objective=(BertPretrainer, ("next_sentence_labels",))))
