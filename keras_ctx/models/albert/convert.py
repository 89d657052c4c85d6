"""Hugging Face ALBERT checkpoints (model_type "albert") <-> AlbertBackbone.

HF ALBERT keeps its shared layer under
`encoder.albert_layer_groups.0.albert_layers.0`; our AlbertBackbone with
sharing="all" has one block applied num_layers times. Checkpoints with
several groups or inner layers (num_hidden_groups, inner_group_num > 1) are
not ALBERT's published configurations and are refused.
"""

import functools
import re

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import check_class, required
from keras_ctx.convert.heads import HeadLayout, MaskedLMLayout
from keras_ctx.convert.huggingface import (
    HF_ACTIVATIONS,
    CheckpointError,
    activation_from_huggingface,
    activation_to_huggingface,
    mapped_converter,
)
from keras_ctx.convert.kerashub import keras_hub_block_entries
from keras_ctx.convert.mapping import (
    IDENTITY,
    LINEAR,
    Entry,
    block_entries,
    dense_entries,
    export_weight_map,
    layer_by_name,
    norm_entries,
)
from keras_ctx.convert.tensorflow import TFLayout, cls_heads
from keras_ctx.models.albert.backbone import AlbertBackbone
from keras_ctx.registry import HuggingFace, KerasHub

ALBERT_IGNORED = (r"embeddings\.position_ids", r"predictions\..+", r"sop_classifier\..+",
                  r"classifier\.(weight|bias)", r"qa_outputs\.(weight|bias)")


def albert_config_from_huggingface(config):
    required(config, "vocab_size", "num_hidden_layers", "num_attention_heads",
              "hidden_size", "intermediate_size")
    for key in ("num_hidden_groups", "inner_group_num"):
        if config.get(key, 1) != 1:
            raise CheckpointError(f"config.json {key}={config[key]}: only ALBERT's published "
                                  "layout (one shared layer, {key}=1) is supported.")
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        embedding_size=config.get("embedding_size", 128),
        sharing="all",
        dropout=config.get("hidden_dropout_prob", 0.0),
        max_sequence_length=config.get("max_position_embeddings", 512),
        type_vocab_size=config.get("type_vocab_size", 2),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        activation=activation_from_huggingface(config.get("hidden_act", "gelu_new")),
    )


def albert_weight_map(backbone, pooler_optional=False):
    """[Entry] of an AlbertBackbone (sharing="all") in HF names without "albert."; the
    pooler may be absent with `pooler_optional` (it keeps its initialisation, with a
    warning)."""
    if backbone.sharing != "all":
        raise CheckpointError(f"HF ALBERT checkpoints share every layer; this backbone has "
                              f"sharing={backbone.sharing!r}.")
    embedding = backbone.token_embedding
    entries = [
        Entry(embedding.token_embedding.embeddings, "embeddings.word_embeddings.weight"),
        Entry(layer_by_name(backbone, "position_embedding").position_embeddings,
              "embeddings.position_embeddings.weight"),
        Entry(layer_by_name(backbone, "segment_embedding").embeddings,
              "embeddings.token_type_embeddings.weight"),
    ]
    entries += norm_entries(layer_by_name(backbone, "embeddings_norm"), "embeddings.LayerNorm")
    entries += dense_entries(embedding.projection, "encoder.embedding_hidden_mapping_in")
    p = "encoder.albert_layer_groups.0.albert_layers.0"
    entries += block_entries(layer_by_name(backbone, "encoder").blocks[0], {
        "query": f"{p}.attention.query",
        "key": f"{p}.attention.key",
        "value": f"{p}.attention.value",
        "attention_output": f"{p}.attention.dense",
        "attention_norm": f"{p}.attention.LayerNorm",
        "intermediate": f"{p}.ffn",
        "output": f"{p}.ffn_output",
        "output_norm": f"{p}.full_layer_layer_norm",
    }, backbone.num_heads)
    entries += dense_entries(layer_by_name(backbone, "pooler"), "pooler",
                             optional=pooler_optional)
    return entries


# transformers' AlbertForMaskedLM builds its AlbertModel without a pooler
# (add_pooling_layer=False), so the checkpoints it saves have none (AlbertModel's and
# AlbertForPreTraining's do).
convert_albert = mapped_converter(
    AlbertBackbone, albert_config_from_huggingface,
    functools.partial(albert_weight_map, pooler_optional=True), config_fields.ALBERT,
    prefixes=("albert.", ""), ignore=ALBERT_IGNORED,
    shared_layers=True)  # one layer group, called num_hidden_layers times


def export_albert(backbone):
    check_class(backbone, "AlbertBackbone", "albert")
    config = {
        "model_type": "albert",
        "architectures": ["AlbertModel"],
        "vocab_size": backbone.vocabulary_size,
        "embedding_size": backbone.embedding_size,
        "hidden_size": backbone.hidden_size,
        "num_hidden_layers": backbone.num_layers,
        "num_hidden_groups": 1,
        "inner_group_num": 1,
        "num_attention_heads": backbone.num_heads,
        "intermediate_size": backbone.intermediate_size,
        "hidden_act": activation_to_huggingface(backbone.activation),
        "hidden_dropout_prob": backbone.dropout,
        "attention_probs_dropout_prob": backbone.dropout,
        "max_position_embeddings": backbone.max_sequence_length,
        "type_vocab_size": backbone.type_vocab_size,
        "layer_norm_eps": backbone.layer_norm_epsilon,
        "initializer_range": 0.02,
    }
    return config, export_weight_map(albert_weight_map(backbone))


def albert_from_keras_hub(source, c):
    """keras-hub's AlbertBackbone (one shared layer) -> ours (tanh GELU, as the original code)."""
    for key in ("num_groups", "num_inner_repetitions"):
        if c.get(key, 1) != 1:
            raise CheckpointError(f"keras-hub AlbertBackbone with {key}={c[key]}: only one "
                                  "shared layer (ALBERT's published layout) is supported.")
    ours = AlbertBackbone(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                          num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                          intermediate_size=c["intermediate_dim"],
                          embedding_size=c["embedding_dim"], sharing="all",
                          dropout=c["dropout"], max_sequence_length=c["max_sequence_length"],
                          type_vocab_size=c["num_segments"], layer_norm_epsilon=1e-12,
                          activation=HF_ACTIVATIONS["gelu_new"])
    embedding = ours.token_embedding
    entries = [Entry(embedding.token_embedding.embeddings, "token_embedding/embeddings"),
               Entry(layer_by_name(ours, "position_embedding").position_embeddings,
                     "position_embedding/embeddings"),
               Entry(layer_by_name(ours, "segment_embedding").embeddings,
                     "segment_embedding/embeddings")]
    norm = layer_by_name(ours, "embeddings_norm")
    entries += [Entry(norm.gamma, "embeddings_layer_norm/gamma"),
                Entry(norm.beta, "embeddings_layer_norm/beta"),
                Entry(embedding.projection.kernel, "embedding_projection/kernel"),
                Entry(embedding.projection.bias, "embedding_projection/bias")]
    entries += keras_hub_block_entries(layer_by_name(ours, "encoder").blocks[0],
                                       "group_0_inner_layer_0")
    pooler = layer_by_name(ours, "pooler")
    entries += [Entry(pooler.kernel, "pooled_dense/kernel"),
                Entry(pooler.bias, "pooled_dense/bias")]
    return ours, entries


# Module paths: (TF regex, HF replacement), per layout; applied to the name
# without its last part (kernel, bias, gamma, beta) after dropping the root.
_ALBERT_LAYER = "encoder.albert_layer_groups.0.albert_layers.0"


ALBERT_TF_TO_HF = (
        (r"^encoder/transformer/group_0/inner_group_0/attention_1/self/(query|key|value)$",
         _ALBERT_LAYER + r".attention.\1"),
        (r"^encoder/transformer/group_0/inner_group_0/attention_1/output/dense$",
         _ALBERT_LAYER + ".attention.dense"),
        (r"^encoder/transformer/group_0/inner_group_0/LayerNorm$",
         _ALBERT_LAYER + ".attention.LayerNorm"),
        (r"^encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense$",
         _ALBERT_LAYER + ".ffn"),
        (r"^encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/output/dense$",
         _ALBERT_LAYER + ".ffn_output"),
        (r"^encoder/transformer/group_0/inner_group_0/LayerNorm_1$",
         _ALBERT_LAYER + ".full_layer_layer_norm"),
        (r"^pooler/dense$", "pooler"),
)


ALBERT_HF_TO_TF = (
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.attention\.(query|key|value)$",
         r"encoder/transformer/group_0/inner_group_0/attention_1/self/\1"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.attention\.dense$",
         "encoder/transformer/group_0/inner_group_0/attention_1/output/dense"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.attention\.LayerNorm$",
         "encoder/transformer/group_0/inner_group_0/LayerNorm"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.ffn$",
         "encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.ffn_output$",
         "encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/output/dense"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.full_layer_layer_norm$",
         "encoder/transformer/group_0/inner_group_0/LayerNorm_1"),
        (r"^pooler$", "pooler/dense"),
)


albert_from_keras_hub.config_fields = config_fields.KERAS_HUB_ALBERT


# ---------------------------------------------------------------- the family's converter specs

# AlbertForMaskedLM's predictions: dense (H -> E) + LayerNorm, decoder tied.
MASKED_LM = MaskedLMLayout(
    "AlbertForMaskedLM", "albert.", bias="predictions.bias",
    decoder="predictions.decoder.weight", dense="predictions.dense", norm="predictions.LayerNorm")

# AlbertForPreTraining's sentence order prediction: sop_classifier, a Linear(H, 2) over the
# pooled [CLS] (its dropout aside).
SOP = HeadLayout("pair", (("sop_classifier.classifier.weight", LINEAR),
                          ("sop_classifier.classifier.bias", IDENTITY)))

# google-research/albert run_pretraining.py's heads: BERT's cls/ scopes (its SOP classifier
# kept the name cls/seq_relationship), by the Hugging Face names transformers'
# load_tf_weights_in_albert gives them.
ALBERT_TF_HEADS = cls_heads(MASKED_LM, SOP)

# transformers' AlbertTokenizer defaults (tokenization_albert.py): uncased, accents stripped.
HUGGINGFACE = (HuggingFace("albert", convert_albert, export_albert, masked_lm=MASKED_LM,
                           heads=(SOP,),
                           sequence_classifier=(None, "classifier"), token_classifier=True,
                           text={"do_lower_case": True, "keep_accents": False}),)
KERAS_HUB = (KerasHub("AlbertBackbone", albert_from_keras_hub),)
TF_CHECKPOINT = TFLayout("albert", "albert_config.json", "bert/",
                         tf_to_hf=ALBERT_TF_TO_HF, hf_to_tf=ALBERT_HF_TO_TF,
                         heads=ALBERT_TF_HEADS)
