"""Hugging Face ERNIE checkpoints (model_type "ernie") <-> BertBackbone.

transformers' ERNIE (ErnieModel / ErnieForMaskedLM, e.g. the port of ERNIE
1.0, nghuyong/ernie-1.0-base-zh) is BERT's network under BERT's names with
the prefix "ernie.", positions from row 0 as BERT's, and its heads under
"cls.". ERNIE 1.0 (Sun et al. 2019) only changes the configuration:
hidden_act "relu", 513 position rows, vocab_size 18000, layer_norm_eps 1e-5
(keras_ctx.models.ernie.backbone). So the BERT mapping serves as it is.

When config.json's use_task_id is true (ERNIE 2.0 / 3.0 ports), HF adds
`embeddings.task_type_embeddings` row `task_type_ids` (default 0) to every
token. BertBackbone has no task-type input: an all-zero table adds nothing
and is dropped; any other is refused rather than folded in, since folding
row 0 into the segment rows would silently lose the other tasks' rows.
"""

import dataclasses
import functools

import numpy as np

from keras_ctx.convert import config_fields
from keras_ctx.models.bert import convert as bert
from keras_ctx.convert.base import CheckpointError, check_class
from keras_ctx.convert.huggingface import mapped_converter
from keras_ctx.convert.mapping import export_weight_map
from keras_ctx.models.bert.backbone import BertBackbone
from keras_ctx.registry import HuggingFace

TASK_TYPE_TABLE = "embeddings.task_type_embeddings.weight"


def _without_task_types(tensors, backbone):
    """Drops an all-zero task-type table; refuses one that changes the output."""
    kept = {}
    for name, value in tensors.items():
        if name not in (TASK_TYPE_TABLE, "ernie." + TASK_TYPE_TABLE):
            kept[name] = value
        elif np.any(np.asarray(value) != 0):
            raise CheckpointError(
                f"{name} is not zero (use_task_id: ERNIE 2.0/3.0 task embeddings), and "
                "BertBackbone has no task-type input; only checkpoints without it convert.")
    return kept


# ErnieForMaskedLM checkpoints have no pooler (ErnieModel ones do).
convert_ernie = mapped_converter(
    BertBackbone, bert.bert_config_from_huggingface,
    functools.partial(bert.bert_weight_map, pooler_optional=True), config_fields.ERNIE,
    prefixes=("ernie.", ""), ignore=bert.BERT_IGNORED, prepare=_without_task_types)


def export_ernie(backbone):
    check_class(backbone, "BertBackbone", "ernie")
    config = bert.bert_config_to_huggingface(backbone, "ernie", "ErnieModel")
    config.update(use_task_id=False, pad_token_id=0)
    return config, export_weight_map(bert.bert_weight_map(backbone))


# ---------------------------------------------------------------- the family's converter specs

# ErnieLMPredictionHead is BERT's, under the same names.
MASKED_LM = dataclasses.replace(bert.MASKED_LM, architecture="ErnieForMaskedLM",
                                prefix="ernie.")

# ErnieForPreTraining's NSP classifier is BERT's too (cls.seq_relationship).
HUGGINGFACE = (HuggingFace("ernie", convert_ernie, export_ernie, masked_lm=MASKED_LM,
                           heads=(bert.NSP,)),)
