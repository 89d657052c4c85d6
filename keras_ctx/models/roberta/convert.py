"""Hugging Face RoBERTa checkpoints (model_type "roberta") <-> BertBackbone.

RoBERTa (Liu et al. 2019) is BERT's network with one segment row, LayerNorm
epsilon 1e-5 and fairseq's position table: positions start at
padding_idx + 1 = 2, so rows 0 and 1 are never read for real tokens. Our
BertBackbone starts positions at row 0, so the importer drops the first two
rows (max_sequence_length = max_position_embeddings - 2) and the exporter
puts two zero rows back. Only real (non-padding) positions are affected;
with right padding, HF's positions of real tokens are 2, 3, ..., as ours.
"""

import functools
import warnings

import numpy as np

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import check_class
from keras_ctx.models.bert.convert import (
    BERT_IGNORED,
    bert_config_from_huggingface,
    bert_config_to_huggingface,
    bert_weight_map,
)
from keras_ctx.convert.heads import MaskedLMLayout
from keras_ctx.convert.huggingface import (
    CheckpointError,
    mapped_converter,
)
from keras_ctx.convert.kerashub import keras_hub_block_entries, keras_hub_embedding_entries
from keras_ctx.convert.mapping import export_weight_map, layer_by_name
from keras_ctx.models.bert.backbone import RobertaBackbone
from keras_ctx.registry import HuggingFace, KerasHub


def _offset(config):
    # fairseq: positions = padding_idx + 1 + index (Liu et al. 2019 / fairseq).
    return int(config.get("pad_token_id", 1)) + 1


def roberta_config_from_huggingface(config):
    settings = bert_config_from_huggingface(config)
    offset = _offset(config)
    settings["max_sequence_length"] = config.get("max_position_embeddings", 514) - offset
    settings["type_vocab_size"] = config.get("type_vocab_size", 1)
    settings["layer_norm_epsilon"] = config.get("layer_norm_eps", 1e-5)
    if settings["max_sequence_length"] <= 0:
        raise CheckpointError(f"max_position_embeddings {config.get('max_position_embeddings')}"
                              f" leaves no positions after RoBERTa's offset of {offset}.")
    return settings


def convert_roberta(config, tensors, source="config.json"):
    # RobertaForMaskedLM checkpoints (roberta-base) have no pooler.
    weight_map = functools.partial(bert_weight_map, position_offset=_offset(config),
                                   pooler_optional=True)
    return mapped_converter(RobertaBackbone, roberta_config_from_huggingface, weight_map,
                            config_fields.ROBERTA, prefixes=("roberta.", ""),
                            ignore=BERT_IGNORED)(config, tensors, source)


convert_roberta.config_fields = config_fields.ROBERTA


def export_roberta(backbone):
    check_class(backbone, "BertBackbone", "roberta")
    config = bert_config_to_huggingface(backbone, "roberta", "RobertaModel",
                                        position_offset=2)
    config.update(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    return config, export_weight_map(bert_weight_map(backbone, 2))


def roberta_from_keras_hub(source, c):
    """keras-hub's RobertaBackbone -> ours: it has no segment embedding (ours gets one zero row)
    and no pooler (ours keeps its random one)."""
    ours = RobertaBackbone(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                        num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                        intermediate_size=c["intermediate_dim"], dropout=c["dropout"],
                        max_sequence_length=c["max_sequence_length"], type_vocab_size=1,
                        layer_norm_epsilon=1e-5, activation="gelu")
    # keras-hub's RoBERTa adds no segment embedding: ours is one zero row.
    layer_by_name(ours, "segment_embedding").embeddings.assign(
        np.zeros((1, c["hidden_dim"]), "float32"))
    warnings.warn("keras-hub's RobertaBackbone has no pooler: the converted backbone's "
                  "pooled_output uses a randomly initialised pooler.", stacklevel=3)
    entries = keras_hub_embedding_entries(ours, "embeddings/token_embedding/embeddings",
                                 "embeddings/position_embedding/embeddings")
    for i, block in enumerate(layer_by_name(ours, "encoder").blocks):
        entries += keras_hub_block_entries(block, f"transformer_layer_{i}")
    return ours, entries


roberta_from_keras_hub.config_fields = config_fields.KERAS_HUB_ROBERTA


# ---------------------------------------------------------------- the family's converter specs

# RobertaForMaskedLM's lm_head: dense + GELU + layer_norm, decoder tied.
MASKED_LM = MaskedLMLayout(
    "RobertaForMaskedLM", "roberta.", bias="lm_head.bias", decoder="lm_head.decoder.weight",
    dense="lm_head.dense", norm="lm_head.layer_norm", activation="gelu")

HUGGINGFACE = (HuggingFace("roberta", convert_roberta, export_roberta, masked_lm=MASKED_LM,
                           token_classifier=True),)
KERAS_HUB = (KerasHub("RobertaBackbone", roberta_from_keras_hub),)
