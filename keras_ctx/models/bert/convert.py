"""Hugging Face BERT checkpoints (model_type "bert") <-> BertBackbone."""

import functools

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import check_class, required
from keras_ctx.convert.heads import HeadLayout, MaskedLMLayout
from keras_ctx.convert.huggingface import (
    HF_ACTIVATIONS,
    activation_from_huggingface,
    activation_to_huggingface,
    mapped_converter,
)
from keras_ctx.convert.kerashub import keras_hub_block_entries, keras_hub_embedding_entries
from keras_ctx.convert.mapping import (
    IDENTITY,
    LINEAR,
    DropRows,
    Entry,
    block_entries,
    dense_entries,
    export_weight_map,
    layer_by_name,
    norm_entries,
)
from keras_ctx.convert.tensorflow import LAYER_HF_TO_TF, LAYER_TF_TO_HF, TFLayout, cls_heads
from keras_ctx.models.bert.backbone import BertBackbone
from keras_ctx.registry import HuggingFace, KerasHub

# Tensors of BERT checkpoints that are not part of the backbone: the
# position_ids buffer and the heads of *ForPreTraining / *ForMaskedLM / ...
# Regular expressions matched against whole names (after the model prefix).
HEAD = r"\.(weight|bias)"
BERT_IGNORED = (r"embeddings\.position_ids", r"cls\..+", r"lm_head\..+",
                r"classifier(\.dense|\.out_proj)?" + HEAD, r"qa_outputs" + HEAD)


def bert_config_from_huggingface(config):
    required(config, "vocab_size", "num_hidden_layers", "num_attention_heads",
              "hidden_size", "intermediate_size")
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        dropout=config.get("hidden_dropout_prob", 0.1),
        max_sequence_length=config.get("max_position_embeddings", 512),
        type_vocab_size=config.get("type_vocab_size", 2),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        activation=activation_from_huggingface(config.get("hidden_act", "gelu")),
    )


def bert_config_to_huggingface(backbone, model_type="bert", architecture="BertModel",
                               position_offset=0):
    return {
        "model_type": model_type,
        "architectures": [architecture],
        "vocab_size": backbone.vocabulary_size,
        "num_hidden_layers": backbone.num_layers,
        "num_attention_heads": backbone.num_heads,
        "hidden_size": backbone.hidden_size,
        "intermediate_size": backbone.intermediate_size,
        "hidden_dropout_prob": backbone.dropout,
        "attention_probs_dropout_prob": backbone.dropout,
        "max_position_embeddings": backbone.max_sequence_length + position_offset,
        "type_vocab_size": backbone.type_vocab_size,
        "layer_norm_eps": backbone.layer_norm_epsilon,
        "hidden_act": activation_to_huggingface(backbone.activation),
        "position_embedding_type": "absolute",
        "initializer_range": 0.02,
    }


def bert_weight_map(backbone, position_offset=0, pooler_optional=False):
    """[Entry] of a BertBackbone in HF BERT names (without the "bert." prefix).

    `position_offset` rows at the top of the HF position table are not ours
    (RoBERTa: 2).
    """
    num_heads = backbone.num_heads
    entries = [
        Entry(backbone.token_embedding.embeddings, "embeddings.word_embeddings.weight"),
        Entry(layer_by_name(backbone, "position_embedding").position_embeddings,
              "embeddings.position_embeddings.weight", DropRows(position_offset)),
        Entry(layer_by_name(backbone, "segment_embedding").embeddings,
              "embeddings.token_type_embeddings.weight"),
    ]
    entries += norm_entries(layer_by_name(backbone, "embeddings_norm"), "embeddings.LayerNorm")
    for index, block in enumerate(layer_by_name(backbone, "encoder").blocks):
        p = f"encoder.layer.{index}"
        entries += block_entries(block, {
            "query": f"{p}.attention.self.query",
            "key": f"{p}.attention.self.key",
            "value": f"{p}.attention.self.value",
            "attention_output": f"{p}.attention.output.dense",
            "attention_norm": f"{p}.attention.output.LayerNorm",
            "intermediate": f"{p}.intermediate.dense",
            "output": f"{p}.output.dense",
            "output_norm": f"{p}.output.LayerNorm",
        }, num_heads)
    entries += dense_entries(layer_by_name(backbone, "pooler"), "pooler.dense",
                             optional=pooler_optional)
    return entries


# BertForMaskedLM checkpoints have no pooler (BertModel / ForPreTraining do).
convert_bert = mapped_converter(
    BertBackbone, bert_config_from_huggingface,
    functools.partial(bert_weight_map, pooler_optional=True), config_fields.BERT,
    prefixes=("bert.", ""), ignore=BERT_IGNORED)


def export_bert(backbone):
    check_class(backbone, "BertBackbone", "bert")
    return bert_config_to_huggingface(backbone), export_weight_map(bert_weight_map(backbone))


def bert_from_keras_hub(source, c):
    """keras-hub's BertBackbone -> ours (tanh GELU, as the original code)."""
    ours = BertBackbone(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                        num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                        intermediate_size=c["intermediate_dim"], dropout=c["dropout"],
                        max_sequence_length=c["max_sequence_length"],
                        type_vocab_size=c["num_segments"], layer_norm_epsilon=1e-12,
                        activation=HF_ACTIVATIONS["gelu_new"])
    entries = keras_hub_embedding_entries(ours, "token_embedding/embeddings",
                                 "position_embedding/embeddings", "segment_embedding/embeddings")
    for i, block in enumerate(layer_by_name(ours, "encoder").blocks):
        entries += keras_hub_block_entries(block, f"transformer_layer_{i}")
    pooler = layer_by_name(ours, "pooler")
    entries += [Entry(pooler.kernel, "pooled_dense/kernel"),
                Entry(pooler.bias, "pooled_dense/bias")]
    return ours, entries


bert_from_keras_hub.config_fields = config_fields.KERAS_HUB_BERT


# ---------------------------------------------------------------- the family's converter specs

# BertForMaskedLM / BertForPreTraining: cls.predictions, decoder tied to the word embeddings.
MASKED_LM = MaskedLMLayout(
    "BertForMaskedLM", "bert.", bias="cls.predictions.bias",
    decoder="cls.predictions.decoder.weight", dense="cls.predictions.transform.dense",
    norm="cls.predictions.transform.LayerNorm")

# BertForPreTraining's next sentence prediction: one Linear(H, 2) over the pooled [CLS].
NSP = HeadLayout("pair", (("cls.seq_relationship.weight", LINEAR),
                          ("cls.seq_relationship.bias", IDENTITY)))

# google-research/bert run_pretraining.py's heads (cls/...) by their Hugging Face names, as
# transformers' load_tf_weights_in_bert renames them; `output_weights` is already (out, in).
BERT_TF_HEADS = cls_heads(MASKED_LM, NSP)

HUGGINGFACE = (HuggingFace("bert", convert_bert, export_bert, masked_lm=MASKED_LM, heads=(NSP,),
                           sequence_classifier=(None, "classifier"), token_classifier=True),)
KERAS_HUB = (KerasHub("BertBackbone", bert_from_keras_hub),)
TF_CHECKPOINT = TFLayout("bert", "bert_config.json", "bert/", tf_to_hf=LAYER_TF_TO_HF,
                         hf_to_tf=LAYER_HF_TO_TF, checkpoint="bert_model.ckpt",
                         heads=BERT_TF_HEADS)
