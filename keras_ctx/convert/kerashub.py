"""Weight transfer from keras-hub backbones of the same family.

BERT, RoBERTa, ALBERT, ELECTRA, XLNet, GPT-2 and BART.

`from_keras_hub(backbone)` builds the matching keras_ctx backbone and copies
every keras-hub variable by its path (e.g.
`transformer_layer_0/self_attention_layer/query/kernel`); each path must be
used, so a keras-hub version with another layout fails loudly.
`from_keras_hub_preset(directory)` does the same for a saved keras-hub preset
directory (config.json + model.weights.h5, as `backbone.save_to_preset`
writes), with its tokenizer when the preset has one.

Differences carried over: keras-hub's BERT, ALBERT and ELECTRA use GELU's
tanh approximation (as the original code), its RoBERTa has no segment
embedding (ours gets one zero row) and no pooler (ours keeps its random
pooler), its ELECTRA has a pooler (skipped: the released discriminators have
none). Its GPT-2 uses the tanh GELU too, as GPTBackbone does.
"""

import os
import warnings

import numpy as np

from keras_ctx import registry
from keras_ctx.convert.base import CheckpointError, TensorReader
from keras_ctx.convert.huggingface import HF_ACTIVATIONS
from keras_ctx.convert.mapping import (
    Entry,
    Permute,
    Reshape,
    layer_by_name,
    load_weight_map,
)


def _attention_entries(attention, p):
    entries = []
    for ours, theirs in (("query_dense", "query"), ("key_dense", "key"),
                         ("value_dense", "value"), ("output_dense", "attention_output")):
        dense = getattr(attention, ours)
        entries += [Entry(dense.kernel, p + theirs + "/kernel"),
                    Entry(dense.bias, p + theirs + "/bias")]
    return entries


def _block_entries(block, prefix, attention_name="self_attention_layer"):
    """keras-hub TransformerEncoder/Decoder layer weights -> one of our blocks."""
    entries = _attention_entries(block.self_attention, f"{prefix}/{attention_name}/")
    norms = [(block.self_attention_norm, "self_attention_layer_norm"),
             (block.feedforward_norm, "feedforward_layer_norm")]
    if getattr(block, "use_cross_attention", False):
        entries += _attention_entries(block.cross_attention, f"{prefix}/cross_attention/")
        norms.append((block.cross_attention_norm, "cross_attention_layer_norm"))
    for norm, name in norms:
        entries += [Entry(norm.gamma, f"{prefix}/{name}/gamma"),
                    Entry(norm.beta, f"{prefix}/{name}/beta")]
    for dense, name in ((block.feedforward.intermediate_dense, "feedforward_intermediate_dense"),
                        (block.feedforward.output_dense, "feedforward_output_dense")):
        entries += [Entry(dense.kernel, f"{prefix}/{name}/kernel"),
                    Entry(dense.bias, f"{prefix}/{name}/bias")]
    return entries


def _embedding_entries(ours, token, position, segment=None):
    entries = [Entry(ours.token_embedding.embeddings, token),
               Entry(layer_by_name(ours, "position_embedding").position_embeddings, position)]
    if segment:
        entries.append(Entry(layer_by_name(ours, "segment_embedding").embeddings, segment))
    norm = layer_by_name(ours, "embeddings_norm")
    entries += [Entry(norm.gamma, "embeddings_layer_norm/gamma"),
                Entry(norm.beta, "embeddings_layer_norm/beta")]
    return entries


def bert_from_keras_hub(source, c):
    from keras_ctx.models.bert import BertBackbone

    ours = BertBackbone(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                        num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                        intermediate_size=c["intermediate_dim"], dropout=c["dropout"],
                        max_sequence_length=c["max_sequence_length"],
                        type_vocab_size=c["num_segments"], layer_norm_epsilon=1e-12,
                        activation=HF_ACTIVATIONS["gelu_new"])
    entries = _embedding_entries(ours, "token_embedding/embeddings",
                                 "position_embedding/embeddings", "segment_embedding/embeddings")
    for i, block in enumerate(layer_by_name(ours, "encoder").blocks):
        entries += _block_entries(block, f"transformer_layer_{i}")
    pooler = layer_by_name(ours, "pooler")
    entries += [Entry(pooler.kernel, "pooled_dense/kernel"),
                Entry(pooler.bias, "pooled_dense/bias")]
    return ours, entries


def roberta_from_keras_hub(source, c):
    from keras_ctx.models.bert import RobertaBackbone

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
    entries = _embedding_entries(ours, "embeddings/token_embedding/embeddings",
                                 "embeddings/position_embedding/embeddings")
    for i, block in enumerate(layer_by_name(ours, "encoder").blocks):
        entries += _block_entries(block, f"transformer_layer_{i}")
    return ours, entries


def albert_from_keras_hub(source, c):
    from keras_ctx.models.albert import AlbertBackbone

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
    entries += _block_entries(layer_by_name(ours, "encoder").blocks[0], "group_0_inner_layer_0")
    pooler = layer_by_name(ours, "pooler")
    entries += [Entry(pooler.kernel, "pooled_dense/kernel"),
                Entry(pooler.bias, "pooled_dense/bias")]
    return ours, entries


def xlnet_from_keras_hub(source, c):
    from keras_ctx.models.xlnet import XLNetBackbone

    ours = XLNetBackbone(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                         num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                         intermediate_size=c["intermediate_dim"], dropout=c["dropout"],
                         attention_dropout=c["dropout"], activation=c.get("activation", "gelu"),
                         layer_norm_epsilon=1e-12,
                         initializer_range=c.get("kernel_initializer_range", 0.02))
    entries = [Entry(ours.token_embedding.embeddings,
                     "content_query_embedding/word_embedding/embeddings"),
               Entry(ours.mask_embedding.mask_emb, "encoder_block_attn_mask_layer/mask_emb",
                     Reshape((1, 1, c["hidden_dim"])))]
    for i, block in enumerate(ours.blocks):
        p, attention, ffn = f"xlnet_encoder_{i}/", block.attention, block.feed_forward
        entries += [
            Entry(attention.r_w_bias, p + "content_attention_bias"),
            Entry(attention.r_r_bias, p + "positional_attention_bias"),
            Entry(attention.r_s_bias, p + "segment_attention_bias"),
            Entry(attention.seg_embed, p + "segment_encoding"),
            Entry(attention.query_dense.kernel, p + "rel_attn/query/kernel"),
            Entry(attention.key_dense.kernel, p + "rel_attn/key/kernel"),
            Entry(attention.value_dense.kernel, p + "rel_attn/value/kernel"),
            Entry(attention.position_dense.kernel, p + "rel_attn/encoding/kernel"),
            Entry(attention.output_dense.kernel, p + "rel_attn/attention_output/kernel",
                  Permute((1, 2, 0))),
            Entry(block.attention_norm.gamma, p + "layer_norm_rel_attn/gamma"),
            Entry(block.attention_norm.beta, p + "layer_norm_rel_attn/beta"),
            Entry(block.feed_forward_norm.gamma, p + "layer_norm_ff/gamma"),
            Entry(block.feed_forward_norm.beta, p + "layer_norm_ff/beta"),
            Entry(ffn.intermediate_dense.kernel, p + "feedforward_intermediate_dense/kernel"),
            Entry(ffn.intermediate_dense.bias, p + "feedforward_intermediate_dense/bias"),
            Entry(ffn.output_dense.kernel, p + "feedforward_output_dense/kernel"),
            Entry(ffn.output_dense.bias, p + "feedforward_output_dense/bias"),
        ]
    return ours, entries


def electra_from_keras_hub(source, c):
    from keras_ctx.models.electra import ElectraBackbone

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
        entries += _block_entries(block, f"transformer_layer_{i}")
    # keras-hub adds a pooler; the released discriminators (and ours) have none.
    return ours, entries, (r"pooled_dense/(kernel|bias)",)


def gpt2_from_keras_hub(source, c):
    from keras_ctx.models.gpt import GPTBackbone

    settings = dict(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                    num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                    intermediate_size=c["intermediate_dim"],
                    max_sequence_length=c["max_sequence_length"], dropout=c["dropout"],
                    normalize_first=True, layer_norm_epsilon=1e-5,
                    activation="gelu_approximate")
    ours = GPTBackbone(**settings)
    entries = [Entry(ours.token_embedding.embeddings, "token_embedding/embeddings"),
               Entry(ours.position_embedding.position_embeddings,
                     "position_embedding/embeddings"),
               Entry(ours.final_norm.gamma, "layer_norm/gamma"),
               Entry(ours.final_norm.beta, "layer_norm/beta")]
    for i, block in enumerate(ours.blocks):
        entries += _block_entries(block, f"transformer_layer_{i}", "self_attention")
    return ours, entries


def bart_from_keras_hub(source, c):
    from keras_ctx.models.bart import BartBackbone

    ours = BartBackbone(vocabulary_size=c["vocabulary_size"], num_layers=c["num_layers"],
                        num_heads=c["num_heads"], hidden_size=c["hidden_dim"],
                        intermediate_size=c["intermediate_dim"],
                        max_sequence_length=c["max_sequence_length"], dropout=c["dropout"],
                        layer_norm_epsilon=1e-5)
    entries = [Entry(ours.token_embedding.embeddings, "token_embedding/embeddings")]
    for stack, positions, norm, blocks, attention in (
            ("encoder", ours.encoder_positions, ours.encoder_embedding_norm,
             ours.encoder_blocks, "self_attention_layer"),
            ("decoder", ours.decoder_positions, ours.decoder_embedding_norm,
             ours.decoder_blocks, "self_attention")):
        entries += [Entry(positions.position_embeddings, f"{stack}_position_embedding/embeddings"),
                    Entry(norm.gamma, f"{stack}_embeddings_layer_norm/gamma"),
                    Entry(norm.beta, f"{stack}_embeddings_layer_norm/beta")]
        for i, block in enumerate(blocks):
            entries += _block_entries(block, f"transformer_{stack}_layer_{i}", attention)
    return ours, entries


# Each family's registry entry names its keras-hub classes and the function above
# that builds ours and its weight map (`keras_ctx.registry.KerasHub`).


def from_keras_hub(backbone):
    """A keras_ctx backbone with the weights of a keras-hub backbone of the same family.

    Args:
        backbone: a keras-hub backbone of a class a family's registry entry names.

    Returns:
        Our backbone, its `family` set.
    """
    name = type(backbone).__name__
    module = type(backbone).__module__
    found = registry.keras_hub(name)
    if found is None or not module.startswith("keras_hub"):
        supported = sorted(spec.class_name for family in map(registry.get, registry.names())
                           for spec in family.keras_hub)
        raise CheckpointError(f"{module}.{name} is not a supported keras-hub backbone; "
                              f"supported: keras_hub.models.{', '.join(supported)}.")
    family, spec = found
    ours, entries, *ignored = spec.convert(backbone, backbone.get_config())
    tensors = {w.path: np.asarray(w.numpy(), "float32") for w in backbone.weights}
    if len(tensors) != len(backbone.weights):
        raise CheckpointError(f"{name} has variables with duplicate paths; cannot map them.")
    read = TensorReader(tensors)
    load_weight_map(entries, read)
    read.check_all_used(ignore=ignored[0] if ignored else ())
    ours.family = family.name
    return ours


def from_keras_hub_preset(directory):
    """A keras_ctx backbone (+ `.tokenizer`) from a saved keras-hub preset directory."""
    import keras_hub

    directory = os.fspath(directory)
    if not os.path.isfile(os.path.join(directory, "config.json")):
        raise CheckpointError(f"{directory} has no config.json: not a keras-hub preset.")
    from keras_ctx.convert.base import read_json_object

    read_json_object(os.path.join(directory, "config.json"), "keras-hub preset config.json")
    try:
        source = keras_hub.models.Backbone.from_preset(directory)
    except (ValueError, OSError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{directory} is not a loadable keras-hub preset "
                              f"({type(error).__name__}: {error}).") from None
    ours = from_keras_hub(source)
    ours.tokenizer = None
    if os.path.isfile(os.path.join(directory, "tokenizer.json")):
        ours.tokenizer = keras_hub.tokenizers.Tokenizer.from_preset(directory)
    return ours


def is_keras_hub_preset(directory):
    import json

    path = os.path.join(os.fspath(directory), "config.json")
    if not os.path.isfile(path) or not os.path.isfile(
            os.path.join(os.fspath(directory), "metadata.json")):
        return False
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (json.JSONDecodeError, OSError):
        return False
    return str(config.get("registered_name", "")).startswith("keras_hub")

