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

import re

import numpy as np

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import CheckpointError, check_class, required
from keras_ctx.models.bert.convert import BERT_IGNORED
from keras_ctx.convert.heads import HeadLayout, MaskedLMLayout
from keras_ctx.convert.huggingface import (
    HF_ACTIVATIONS,
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
from keras_ctx.convert.tensorflow import (
    LAYER_HF_TO_TF,
    LAYER_TF_TO_HF,
    TFLayout,
    tf_name_to_hf,
)
from keras_ctx.models.electra.backbone import ElectraBackbone
from keras_ctx.registry import HuggingFace, KerasHub

ELECTRA_IGNORED = BERT_IGNORED + (r"discriminator_predictions\..+",
                                  r"generator_predictions\..+", r"generator_lm_head\..+")


def electra_config_from_huggingface(config):
    required(config, "vocab_size", "num_hidden_layers", "num_attention_heads",
              "hidden_size", "intermediate_size")
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
    ElectraBackbone, electra_config_from_huggingface, electra_weight_map, config_fields.ELECTRA,
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


def electra_from_keras_hub(source, c):
    """keras-hub's ElectraBackbone -> ours (tanh GELU); its pooler is skipped: the released
    discriminators have none."""
    ours = ElectraBackbone(vocabulary_size=c["vocab_size"], num_layers=c["num_layers"],
                           num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                           intermediate_size=c["intermediate_dim"],
                           embedding_size=c["embedding_dim"], dropout=c["dropout"],
                           max_sequence_length=c["max_sequence_length"],
                           type_vocab_size=c["num_segments"], layer_norm_epsilon=1e-12,
                           activation=HF_ACTIVATIONS["gelu_new"])
    if c["embedding_dim"] == c["hidden_dim"]:
        raise CheckpointError("keras-hub's ElectraBackbone projects embeddings even when "
                              "embedding_dim == hidden_dim; ElectraBackbone has no projection "
                              "then, so this backbone cannot be transferred exactly.")
    layers = ours.embedding_layers
    projection = layer_by_name(ours, "embeddings_projection")
    norm = layers["embeddings_norm"]
    entries = [Entry(layers["token_embedding"].embeddings, "token_embedding/embeddings"),
               Entry(layers["position_embedding"].position_embeddings,
                     "position_embedding/embeddings"),
               Entry(layers["segment_embedding"].embeddings, "segment_embedding/embeddings"),
               Entry(norm.gamma, "embeddings_layer_norm/gamma"),
               Entry(norm.beta, "embeddings_layer_norm/beta"),
               Entry(projection.kernel, "embeddings_projection/kernel"),
               Entry(projection.bias, "embeddings_projection/bias")]
    for i, block in enumerate(layer_by_name(ours, "encoder").blocks):
        entries += keras_hub_block_entries(block, f"transformer_layer_{i}")
    # keras-hub adds a pooler; the released discriminators (and ours) have none.
    return ours, entries, (r"pooled_dense/(kernel|bias)",)


def _electra_config(tensors):
    """An HF ELECTRA config inferred from the variables' shapes (ELECTRA ships none)."""
    try:
        vocabulary, embedding = tensors["embeddings.word_embeddings.weight"].shape
        hidden = tensors["encoder.layer.0.attention.output.dense.weight"].shape[0]
        intermediate = tensors["encoder.layer.0.intermediate.dense.weight"].shape[0]
        positions = tensors["embeddings.position_embeddings.weight"].shape[0]
        segments = tensors["embeddings.token_type_embeddings.weight"].shape[0]
    except KeyError as error:
        raise CheckpointError(f"The ELECTRA checkpoint has no variable for {error}; its sizes "
                              "cannot be read.") from None
    layers = 1 + max(int(m.group(1)) for m in
                     (re.match(r"encoder\.layer\.(\d+)\.", k) for k in tensors) if m)
    # google-research/electra configure_pretraining: heads = max(1, H // 64).
    return {"model_type": "electra", "vocab_size": vocabulary, "embedding_size": embedding,
            "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": max(1, hidden // 64), "intermediate_size": intermediate,
            "max_position_embeddings": positions, "type_vocab_size": segments,
            "hidden_act": "gelu", "layer_norm_eps": 1e-12}


def electra_read(variables, config, generator):
    tensors = _electra_tensors(variables, generator)
    return _electra_config(tensors), tensors


def _electra_tensors(variables, generator):
    """HF-named tensors of the discriminator (or generator) of an ELECTRA checkpoint."""
    own, other = ("generator/", "electra/") if generator else ("electra/", "generator/")
    tensors = {}
    for name, value in variables.items():
        if name.startswith("electra/embeddings/"):
            mapped = tf_name_to_hf(name, TF_CHECKPOINT)
        elif name.startswith(own):
            mapped = tf_name_to_hf(name, TF_CHECKPOINT, root=own)
        elif name.startswith(other):
            continue  # the other network
        else:
            mapped = tf_name_to_hf(name, TF_CHECKPOINT)
        if mapped is not None:
            hf_name, transpose = mapped
            tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    return tensors


electra_from_keras_hub.config_fields = config_fields.KERAS_HUB_ELECTRA


# ---------------------------------------------------------------- the family's converter specs

# ElectraForMaskedLM (a generator): generator_predictions + generator_lm_head, tied.
MASKED_LM = MaskedLMLayout(
    "ElectraForMaskedLM", "electra.", bias="generator_lm_head.bias",
    decoder="generator_lm_head.weight", dense="generator_predictions.dense",
    norm="generator_predictions.LayerNorm", activation="gelu")

# ElectraForPreTraining's discriminator head (ReplacedTokenHead's dense, then its
# one-logit classifier): logit_t = w^T act(W h_t + b) + c.
DISCRIMINATOR = HeadLayout("replaced_token", (
    ("discriminator_predictions.dense.weight", LINEAR),
    ("discriminator_predictions.dense.bias", IDENTITY),
    ("discriminator_predictions.dense_prediction.weight", LINEAR),
    ("discriminator_predictions.dense_prediction.bias", IDENTITY)))

# google-research/electra run_pretraining.py's discriminator head by its Hugging Face names
# (transformers' load_tf_weights_in_electra renames dense_1 to dense_prediction). The
# generator's MLM head (generator_predictions/) reads a generator: the discriminator a
# checkpoint converts to has none.
ELECTRA_TF_HEADS = (
    ("discriminator_predictions/dense/kernel", "discriminator_predictions.dense.weight"),
    ("discriminator_predictions/dense/bias", "discriminator_predictions.dense.bias"),
    ("discriminator_predictions/dense_1/kernel",
     "discriminator_predictions.dense_prediction.weight"),
    ("discriminator_predictions/dense_1/bias", "discriminator_predictions.dense_prediction.bias"))

HUGGINGFACE = (HuggingFace("electra", convert_electra, export_electra, masked_lm=MASKED_LM,
                           heads=(DISCRIMINATOR,), token_classifier=True),)
KERAS_HUB = (KerasHub("ElectraBackbone", electra_from_keras_hub),)
# ELECTRA ships no config: its sizes come from the variables, found by a signature.
TF_CHECKPOINT = TFLayout("electra", None, "electra/", tf_to_hf=LAYER_TF_TO_HF,
                         hf_to_tf=LAYER_HF_TO_TF, read=electra_read,
                         signature="electra/embeddings/word_embeddings", generator=True,
                         heads=ELECTRA_TF_HEADS)
