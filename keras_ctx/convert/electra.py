"""Hugging Face ELECTRA checkpoints (model_type "electra") <-> ElectraBackbone.

Discriminators (ElectraForPreTraining) and generators (ElectraForMaskedLM)
are both "electra" checkpoints: the same encoder at different sizes, with
BERT's layer names under "electra.", and `embeddings_project` (H, E) when
the embedding size E differs from the hidden size H. Their heads
(discriminator_predictions, generator_predictions, generator_lm_head) are
skipped. Loading a generator and a discriminator separately gives two
backbones with their own (equal, in the released checkpoints) embeddings;
`ElectraBackbone(shared_embeddings=...)` re-ties them for further training.
"""

from keras_ctx.convert.base import absolute_positions, check_class, required
from keras_ctx.convert.bert import BERT_IGNORED
from keras_ctx.convert.huggingface import (
    mapped_converter,
    activation_from_huggingface,
    activation_to_huggingface,
)
from keras_ctx.convert.mapping import (
    Entry,
    block_entries,
    dense_entries,
    export_weight_map,
    layer_by_name,
    norm_entries,
)
from keras_ctx.models.electra import ElectraBackbone

ELECTRA_IGNORED = BERT_IGNORED + (r"discriminator_predictions\..+",
                                  r"generator_predictions\..+", r"generator_lm_head\..+")


def electra_config_from_huggingface(config):
    required(config, "vocab_size", "num_hidden_layers", "num_attention_heads",
              "hidden_size", "intermediate_size")
    absolute_positions(config)
    return dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        embedding_size=config.get("embedding_size", config["hidden_size"]),
        dropout=config.get("hidden_dropout_prob", 0.1),
        max_sequence_length=config.get("max_position_embeddings", 512),
        type_vocab_size=config.get("type_vocab_size", 2),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
        activation=activation_from_huggingface(config.get("hidden_act", "gelu")),
    )


def electra_weight_map(backbone):
    layers = backbone.embedding_layers
    entries = [
        Entry(layers["token_embedding"].embeddings, "embeddings.word_embeddings.weight"),
        Entry(layers["position_embedding"].position_embeddings,
              "embeddings.position_embeddings.weight"),
        Entry(layers["segment_embedding"].embeddings, "embeddings.token_type_embeddings.weight"),
    ]
    entries += norm_entries(layers["embeddings_norm"], "embeddings.LayerNorm")
    if backbone.embedding_size != backbone.hidden_size:
        entries += dense_entries(layer_by_name(backbone, "embeddings_projection"),
                                 "embeddings_project")
    for index, block in enumerate(layer_by_name(backbone, "encoder").blocks):
        p = f"encoder.layer.{index}"
        entries += block_entries(block, {
            "query": f"{p}.attention.self.query", "key": f"{p}.attention.self.key",
            "value": f"{p}.attention.self.value",
            "attention_output": f"{p}.attention.output.dense",
            "attention_norm": f"{p}.attention.output.LayerNorm",
            "intermediate": f"{p}.intermediate.dense", "output": f"{p}.output.dense",
            "output_norm": f"{p}.output.LayerNorm",
        }, backbone.num_heads)
    return entries


convert_electra = mapped_converter(
    ElectraBackbone, electra_config_from_huggingface, electra_weight_map,
    prefixes=("electra.", ""), ignore=ELECTRA_IGNORED)


def export_electra(backbone):
    check_class(backbone, "ElectraBackbone", "electra")
    config = {
        "model_type": "electra", "architectures": ["ElectraModel"],
        "vocab_size": backbone.vocabulary_size, "embedding_size": backbone.embedding_size,
        "hidden_size": backbone.hidden_size, "num_hidden_layers": backbone.num_layers,
        "num_attention_heads": backbone.num_heads,
        "intermediate_size": backbone.intermediate_size,
        "hidden_act": activation_to_huggingface(backbone.activation),
        "hidden_dropout_prob": backbone.dropout,
        "attention_probs_dropout_prob": backbone.dropout,
        "max_position_embeddings": backbone.max_sequence_length,
        "type_vocab_size": backbone.type_vocab_size,
        "layer_norm_eps": backbone.layer_norm_epsilon,
    }
    return config, export_weight_map(electra_weight_map(backbone))
